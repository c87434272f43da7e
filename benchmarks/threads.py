"""Thread churn and start-up: what recording costs a program that starts many
threads.  A report, never a test.

    python benchmarks/threads.py [--threads N] [--calls N] [--rounds N]

Each measurement runs in a child process of its own, so that one's memory is
not another's:
- RSS above untraced: N threads started one after the other, each making
  `--calls` Python calls, traced with default options; VmHWM (peak RSS) and
  VmRSS after the threads ended (tracer still active, then stopped), minus
  the same program untraced.
- per-thread start cost: the time of `Thread(target=f).start(); join()` for
  a thread whose body makes the calls, traced and untraced (medians).
- the stdlib's test_queue (many short threads): peak RSS untraced and
  traced (recording only; the bound: 2x untraced + 100 MB);
- packing: a thread records 128K, 250K or 1M records and ends; its ring's
  bytes before and after 300 more threads start (their sweeps pack rings of
  up to 256K records; a larger one waits for the memory bound), and the
  longest start+join of those threads (the pause packing costs the thread
  that does it) against their median;
- Tracer.start() at the default buffer and at 16M records (median of
  fresh tracers, each started and stopped in turn).
Both backends on 3.12+.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, os, statistics, sys, threading, time
import frametrace

cfg = json.loads(sys.argv[1])

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0

def leaf(i):
    return i + 1

def body(calls):
    for i in range(calls):
        leaf(i)

def churn(n, calls):
    times = []
    cpu0 = time.process_time_ns()
    for _ in range(n):
        t0 = time.perf_counter_ns()
        t = threading.Thread(target=body, args=(calls,))
        t.start()
        t.join()
        times.append(time.perf_counter_ns() - t0)
    out["cpu_us"] = (time.process_time_ns() - cpu0) / n / 1e3
    return times

mode = cfg["mode"]
out = {}
if mode == "churn":
    # Warm the thread machinery up before the baseline.
    churn(10, cfg["calls"])
    out.clear()
    base = status("VmRSS")
    tracer = None
    if cfg["traced"]:
        tracer = frametrace.Tracer(backend=cfg["backend"])
        tracer.start()
    times = churn(cfg["threads"], cfg["calls"])
    out["rss_live"] = status("VmRSS") - base
    if tracer is not None:
        tracer.stop()
        out["rss_stopped"] = status("VmRSS") - base
    out["hwm"] = status("VmHWM") - base
    out["start_us"] = statistics.median(times) / 1e3
elif mode == "start":
    times = []
    for _ in range(cfg["rounds"]):
        tracer = frametrace.Tracer(buffer_size=cfg["buffer_size"],
                                   backend=cfg["backend"])
        t0 = time.perf_counter_ns()
        tracer.start()
        t1 = time.perf_counter_ns()
        tracer.stop()
        tracer.clear()
        times.append(t1 - t0)
    out["start_ms"] = statistics.median(times) / 1e6
    out["start_min_ms"] = min(times) / 1e6
elif mode == "pack":
    # A thread records `records` and ends; the threads started after it pay
    # for packing its ring (a million records per sweep at most): the
    # longest start+join against the median.
    tracer = frametrace.Tracer(backend=cfg["backend"])
    tracer.start()
    big = threading.Thread(target=body, args=(cfg["records"] // 2,))
    big.start()
    big.join()
    before = tracer.ring_bytes
    times = churn(300, 1)
    out["ring_before"] = before
    out["ring_after"] = tracer.ring_bytes
    tracer.stop()
    out["max_us"] = max(times) / 1e3
    out["median_us"] = statistics.median(times) / 1e3
    out["events"] = len(tracer.getEvents())
elif mode == "queue":
    # The stdlib's test_queue: many short threads; peak RSS while recording.
    import io, unittest
    import test.test_queue as tq
    tracer = None
    if cfg["traced"]:
        tracer = frametrace.Tracer(backend=cfg["backend"])
        tracer.start()
    suite = unittest.defaultTestLoader.loadTestsFromModule(tq)
    unittest.TextTestRunner(stream=io.StringIO()).run(suite)
    if tracer is not None:
        out["ring_bytes"] = tracer.ring_bytes  # the records kept, before stop trims
        tracer.stop()
        out["threads"] = len(tracer.threads)
        out["dropped"] = tracer.stats.dropped
    out["hwm"] = status("VmHWM")
    if tracer is not None:
        out["records"] = len(tracer.getEvents())  # after the peak is read
print(json.dumps(out))
"""


def child(cfg):
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=3000)
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    backends = ["setprofile"]
    if sys.version_info >= (3, 12):
        backends.append("monitoring")
    mib = 1 << 20
    print(f"Python {sys.version.split()[0]}, {args.threads} threads x "
          f"{args.calls} calls")
    base = child({"mode": "churn", "traced": False, "threads": args.threads,
                  "calls": args.calls})
    print(f"untraced: peak +{base['hwm'] / mib:.1f} MiB, thread start+join "
          f"{base['start_us']:.1f} us wall, {base['cpu_us']:.1f} us CPU")
    print("| backend | RSS live (MiB above untraced) | after stop | peak | "
          "thread start+join traced (us, wall median) | untraced | "
          "CPU per thread traced (us, all threads) | untraced |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for backend in backends:
        r = child({"mode": "churn", "traced": True, "backend": backend,
                   "threads": args.threads, "calls": args.calls})
        print(f"| {backend} | {(r['rss_live'] - base['rss_live']) / mib:.1f} "
              f"| {(r['rss_stopped'] - base['rss_live']) / mib:.1f} "
              f"| {(r['hwm'] - base['hwm']) / mib:.1f} "
              f"| {r['start_us']:.1f} | {base['start_us']:.1f} "
              f"| {r['cpu_us']:.1f} | {base['cpu_us']:.1f} |")
    print()
    q = child({"mode": "queue", "traced": False})
    print(f"test_queue untraced: peak RSS {q['hwm'] / mib:.1f} MiB")
    print("| backend | test_queue traced peak RSS (MiB) | threads | events | rings before stop (MiB) "
          "| bound 2x+100 MB (MiB) |")
    print("|---|---:|---:|---:|---:|---:|")
    for backend in backends:
        r = child({"mode": "queue", "traced": True, "backend": backend})
        print(f"| {backend} | {r['hwm'] / mib:.1f} | {r['threads']} | {r['records']:,} | "
              f"{r['ring_bytes'] / mib:.1f} | {(2 * q['hwm'] + 100e6) / mib:.0f} |")
    print()
    print("| backend | a thread's records, ended | its ring before packing (MiB) | after, with "
          "300 more threads (MiB) | longest start+join of those (ms) | median (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for backend in backends:
        # Up to 256K records a ring is packed after a sweep; a larger one
        # waits for the memory bound (the last row: nothing packed).
        for records in (1 << 17, 250_000, 1 << 20):
            r = child({"mode": "pack", "backend": backend, "records": records})
            print(f"| {backend} | {records:,} | {r['ring_before'] / mib:.1f} | "
                  f"{r['ring_after'] / mib:.1f} | {r['max_us'] / 1e3:.2f} | "
                  f"{r['median_us'] / 1e3:.3f} |")
    print()
    print("| backend | Tracer.start() default buffer (ms, median/min) | "
          "16M records |")
    print("|---|---:|---:|")
    for backend in backends:
        row = []
        for size in (None, 16 << 20):
            cfg = {"mode": "start", "backend": backend, "rounds": args.rounds,
                   "buffer_size": size or __import__("frametrace").Tracer().buffer_size}
            r = child(cfg)
            row.append(f"{r['start_ms']:.3f} / {r['start_min_ms']:.3f}")
        print(f"| {backend} | {row[0]} | {row[1]} |")


if __name__ == "__main__":
    main()
