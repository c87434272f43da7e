"""What an export costs besides time: its peak memory, and how long it
holds the GIL.

    python benchmarks/export_memory.py [--events N] [--threads T]

In a child process per writer (so that each peak is its own): records N
Python events (plus as many C calls) spread over T threads, then resets
the process's peak RSS (``/proc/self/clear_refs``) and writes the trace
with write_chrome() (.json), write_chrome() (.json.gz) and write_perfetto()
(.pftrace).  Reports the rings' size, the peak RSS the write added above
the RSS before it (VmHWM after - VmRSS before: the rings are resident
already; glibc's mmap threshold fixed, so that freed blocks leave), and
events/s.  Then, in the same child, the write again while
another thread ticks (a loop of ``time.perf_counter()`` calls): the longest
gap between two ticks is the longest the write kept the GIL from that
thread (against the longest seen with the thread alone, for as long: this
shared machine's own pauses), and its pace during the write against its
pace alone says how much of the write let the GIL go.  A report,
never a test.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def leaf(i):
    return i


def work(n):
    for i in range(n):
        leaf(abs(i))


def status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def child(writer_name, suffix, events, nthreads):
    import frametrace
    from frametrace import export

    writer = getattr(export, writer_name)
    per_thread = events // nthreads // 2  # a leaf and an abs() per iteration
    buffer_size = 1 << max(10, (4 * per_thread).bit_length())
    with frametrace.Tracer(buffer_size=buffer_size) as tracer:
        threads = [threading.Thread(target=work, args=(per_thread,)) for _ in range(nthreads - 1)]
        for t in threads:
            t.start()
        work(per_thread)
        for t in threads:
            t.join()
    ring_bytes = sum(8 * min(buffer_size, 2 * (2 * per_thread + 8)) for _ in range(nthreads))
    tmp = tempfile.mkdtemp(prefix="frametrace-export-memory-")
    path = os.path.join(tmp, "trace" + suffix)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current RSS
    before = status("VmRSS")
    t0 = time.perf_counter()
    written = writer(tracer, path)
    dt = time.perf_counter() - t0
    peak = status("VmHWM") - before

    # The same write beside a thread that ticks, and that thread alone
    # for as long: the share of its own pace it kept during the write
    # says how much of the write let the GIL go (1.0: all of it, on a
    # machine with a core to spare); the longest gap, against the one
    # seen alone, how long the write held the GIL at once.
    ticks, gaps, running = [0], [0.0], [True]

    def ticker():
        last = time.perf_counter()
        while running[0]:
            now = time.perf_counter()
            gaps[0] = max(gaps[0], now - last)
            last = now
            ticks[0] += 1

    sys.setswitchinterval(0.001)
    th = threading.Thread(target=ticker)
    th.start()
    time.sleep(0.05)
    gaps[0], ticks[0] = 0.0, 0
    t0 = time.perf_counter()
    time.sleep(dt)
    alone = (ticks[0] / (time.perf_counter() - t0), gaps[0])
    gaps[0], ticks[0] = 0.0, 0
    t0 = time.perf_counter()
    writer(tracer, path)
    beside = (ticks[0] / (time.perf_counter() - t0), gaps[0])
    running[0] = False
    th.join()
    os.unlink(path)
    os.rmdir(tmp)
    return {"events": written, "seconds": dt, "peak": peak, "rings": ring_bytes,
            "share": beside[0] / alone[0], "max_gap": beside[1], "max_gap_alone": alone[1]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.events, args.threads)))
        return
    print(f"{args.events:,} events over {args.threads} threads\n")
    print("| writer | events | records MiB | export peak MiB | events/s | other thread's pace kept | "
          "longest gap ms (alone) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for writer, suffix in (("write_chrome", ".json"), ("write_chrome", ".json.gz"),
                           ("write_perfetto", ".pftrace")):
        # A fixed mmap threshold: glibc otherwise raises it after a large
        # free and keeps later large blocks resident once freed, which
        # would hide (or inflate) what the write itself allocates.
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
        out = subprocess.run([sys.executable, __file__, "--events", str(args.events),
                              "--threads", str(args.threads), "--child", writer, suffix],
                             check=True, capture_output=True, text=True, env=env).stdout
        r = json.loads(out)
        print(f"| {writer} {suffix} | {r['events']:,} | {r['rings'] / 2**20:.1f} | "
              f"{r['peak'] / 2**20:.1f} | {r['events'] / r['seconds']:,.0f} | "
              f"{r['share']:.2f} | {1000 * r['max_gap']:.1f} ({1000 * r['max_gap_alone']:.1f}) |")


if __name__ == "__main__":
    main()
