"""The pause a training loop sees when a session's active window closes, and
a session's memory over many cycles.  A report, never a test.

    python benchmarks/window_close.py pause [--events N] [--rounds R]
                                            [--handler chrome|perfetto|save|none]
    python benchmarks/window_close.py memory [--cycles N] [--cli]

pause: each round is a window of one active step that records about N
events (a recursive function, --events, default 1M); the figure is how long
the prof.step() that closes the window takes, the time the training thread
is held before its next step starts; then how much longer the next step's
fixed work takes than alone (a write holding the GIL slows it); and, apart,
how long the handler took to finish after the close (the write).  Between rounds the loop waits for
the previous write, outside what is measured.

memory: a session with repeat=0 and one active step per cycle, each writing
its trace with to_chrome() over the previous one; RSS (/proc/self/statm)
and Python's own allocations (tracemalloc) after 10, 100, ... cycles.
--cli: the same under ``frametrace run --steps``, in a child process.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import frametrace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import fib, fib_arg_for  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pause(args: argparse.Namespace) -> None:
    n = fib_arg_for(args.events)
    tmp = tempfile.mkdtemp(prefix="frametrace-close-")
    done = threading.Event()
    written: list = []

    def handler(trace):
        t0 = time.perf_counter()
        path = os.path.join(tmp, f"t{trace.cycle % 2}")
        if args.handler == "chrome":
            trace.to_chrome(path + ".json")
        elif args.handler == "perfetto":
            trace.to_perfetto(path + ".pftrace")
        elif args.handler == "save":
            trace.save(path + ".frametrace.json")
        written.append((trace.cycle, time.perf_counter() - t0))
        done.set()

    pauses = []
    nexts = []

    def next_step_work():
        t0 = time.perf_counter()
        for _ in range(100):  # ~30 ms, in many calls: the GIL can change hands
            fib(18)
        return time.perf_counter() - t0

    alone = statistics.median(next_step_work() for _ in range(5))
    sched = frametrace.schedule(wait=1, warmup=0, active=1, repeat=args.rounds)
    with frametrace.profile(schedule=sched, buffer_size=1 << 23,
                            on_trace_ready=None if args.handler == "none" else handler) as prof:
        for step in range(2 * args.rounds):
            if step % 2:  # the active step
                fib(n)
                t0 = time.perf_counter()
                prof.step()  # closes the window
                pauses.append(time.perf_counter() - t0)
            else:
                if step:
                    # The step after the close: how much longer than alone
                    # (a write holding the GIL slows it down).
                    nexts.append(next_step_work() - alone)
                if args.handler != "none" and step:
                    done.wait()  # the previous write: outside what is measured
                    done.clear()
                prof.step()
    trace = prof.last_trace
    count = len(trace.events)
    print(f"handler {args.handler}: {count:,} events a window (fib({n})), {args.rounds} rounds, "
          f"{trace.dropped} dropped")
    ms = sorted(p * 1e3 for p in pauses)
    print(f"  pause at window close: median {statistics.median(ms):.2f} ms, "
          f"min {ms[0]:.2f}, max {ms[-1]:.2f}")
    if nexts:
        ns = sorted(x * 1e3 for x in nexts)
        print(f"  next step's fixed work (100 x fib(18), {alone * 1e3:.1f} ms alone): "
              f"{statistics.median(ns):+.1f} ms median, {ns[-1]:+.1f} ms max")
    if written:
        ws = sorted(w for _, w in written)
        print(f"  handler (the write): median {statistics.median(ws) * 1e3:.0f} ms")


MEMORY_PROGRAM = """
import os, sys, tracemalloc, gc
import frametrace

def fib(n):
    return n if n < 2 else fib(n - 1) + abs(fib(n - 2))

def rss_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

checkpoints = {CHECKPOINTS}
tracemalloc.start()
for step in range(max(checkpoints) + 1):
    fib(12)
    if step in checkpoints:
        gc.collect()
        print(f"{{step}} {{rss_mib():.1f}} {{tracemalloc.get_traced_memory()[0] / 2**20:.2f}}",
              file=sys.stderr, flush=True)
    frametrace.step()
"""


def memory(args: argparse.Namespace) -> None:
    checkpoints = [c for c in (10, 100, 1000, 10000) if c <= args.cycles]
    tmp = tempfile.mkdtemp(prefix="frametrace-cycles-")
    script = os.path.join(tmp, "loop.py")
    with open(script, "w") as fh:
        fh.write(textwrap.dedent(MEMORY_PROGRAM.format(CHECKPOINTS=checkpoints)))
    if args.cli:
        # run --steps writes one file per cycle: a small one (fib(12)).
        cmd = [sys.executable, "-m", "frametrace", "run", "-o", os.path.join(tmp, "t.json"),
               "--buffer-size", "65536", "--steps", "wait=0,warmup=0,active=1,repeat=0", script]
        what = "frametrace run --steps (repeat=0)"
    else:
        session = textwrap.dedent("""
            import frametrace, runpy, sys, os
            out = sys.argv[1]
            with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1),
                                    buffer_size=65536,
                                    on_trace_ready=lambda t: t.to_chrome(out)):
                runpy.run_path(sys.argv[2], run_name="__main__")
        """)
        cmd = [sys.executable, "-c", session, os.path.join(tmp, "t.json"), script]
        what = "profile(repeat=0), to_chrome handler"
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(f"{what}: cycles, RSS MiB, tracemalloc MiB")
    for line in proc.stderr.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            print(f"  {parts[0]:>6} {parts[1]:>8} {parts[2]:>8}")
    if proc.returncode:
        print(proc.stderr[-2000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("pause")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--handler", choices=("chrome", "perfetto", "save", "none"), default="chrome")
    m = sub.add_parser("memory")
    m.add_argument("--cycles", type=int, default=1000)
    m.add_argument("--cli", action="store_true")
    args = parser.parse_args()
    gc.collect()
    (pause if args.what == "pause" else memory)(args)


if __name__ == "__main__":
    main()
