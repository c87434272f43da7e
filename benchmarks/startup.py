"""Start-up of a profiling session: what the first active step pays, and the
step after the Python tracer stops, with and without arming during warm-up.

    python benchmarks/startup.py [--rounds 10] [--funcs 3000] [--starts 30]

A "training loop" in a child process: each step calls every one of --funcs
distinct small Python functions a few times (each code object is one that
CPython 3.12+ instruments on its first run after events are enabled, and
again after they are disabled), under ``frametrace.profile(schedule(wait=2,
warmup=1, active=7, repeat=1, skip_first=3), python_steps=4)``.  Times
are the thread's CPU time (time.thread_time_ns: on this shared VM a step of
a millisecond or two is often preempted for several, which wall time would
count), of the loop's work in a step and of each prof.step() call apart:

- untraced: the work of a step before the session does anything;
- arm:      the prof.step() that begins warm-up (armed: the tracer is made
            and armed there);
- warmup:   the work of the warm-up step (armed, on 3.12+: CPython
            instruments the code there);
- start:    the prof.step() that begins the first active step (cold: the
            tracer is made, armed and started there; armed: started);
- first:    the work of the first active step;
- others:   the work of the next three Python-traced steps;
- stop:     the prof.step() that ends Python tracing (the tracer's stop());
- after:    the work of the first active step after python_steps (on 3.12+
            CPython takes the instrumentation out again);
- plain:    the work of the remaining active steps (no Python tracing).

The first active step as the trace records it is about start + first.

"armed" is the session as it is: the tracer armed at the start of warm-up.
"cold" replaces the session's _prepare() with a no-op, so that the tracer
is made, armed and started inside the first active step (the behaviour
before arming).  Each round runs every (backend, mode) once, each in a
fresh child process, in an order rotated from round to round; medians over
the rounds.

Then Tracer.start() alone, in this process: a new tracer (conflict checks,
thread names, ring, hook) against an armed one (clock and threads only),
--starts times each, alternating.

A report, never a test: nothing is asserted.  Do not run it beside another
benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
import frametrace
import frametrace.session as session

nfuncs, backend, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "cold":
    session.Profile._prepare = lambda self: None
src = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(nfuncs))
ns = {}
exec(compile(src, "<workload>", "exec"), ns)
funcs = [ns[f"f{i}"] for i in range(nfuncs)]

def train_step():
    total = 0
    for _ in range(3):
        for f in funcs:
            total = f(total)
    return total

sched = frametrace.schedule(wait=2, warmup=1, active=7, repeat=1, skip_first=3)
clock = time.thread_time_ns  # CPU time: this shared VM preempts wall time
work, calls = [], []
with frametrace.profile(schedule=sched, python_steps=4, backend=backend) as prof:
    for step in range(13):
        t0 = clock()
        train_step()
        t1 = clock()
        prof.step()
        t2 = clock()
        work.append(t1 - t0)
        calls.append(t2 - t1)
print(json.dumps({"work": work, "calls": calls}))
"""

# Steps 0-2 are skipped, 3-4 wait, 5 warm-up, 6-12 active, Python traced in
# 6-9.  prof.step() number 4 begins warm-up (armed: arms the tracer), number
# 5 begins the first active step (starts the tracer), number 9 ends the
# Python tracing (stops it).  A step as the trace records it runs from the
# middle of one prof.step() to the middle of the next.


def run_child(nfuncs: int, backend: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(nfuncs), backend, mode],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def step_figures(res: dict) -> dict:
    work, calls = res["work"], res["calls"]
    return {
        "untraced": statistics.median(work[0:5]),
        "arm": calls[4],
        "warmup": work[5],
        "start": calls[5],
        "first": work[6],
        "others": statistics.median(work[7:10]),
        "stop": calls[9],
        "after": work[10],
        "plain": statistics.median(work[11:13]),
    }


def start_times(starts: int) -> dict:
    import frametrace

    backends = ["setprofile"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
    res: dict = {}
    for backend in backends:
        cold, warm = [], []
        for _ in range(starts):
            t = frametrace.Tracer(backend=backend)
            t0 = time.thread_time_ns()
            t.start()
            cold.append(time.thread_time_ns() - t0)
            t.stop()
            t.clear()
            t = frametrace.Tracer(backend=backend)
            t.arm()
            t0 = time.thread_time_ns()
            t.start()
            warm.append(time.thread_time_ns() - t0)
            t.stop()
            t.clear()
        res[backend] = {"new": statistics.median(cold), "armed": statistics.median(warm)}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--funcs", type=int, default=3000)
    ap.add_argument("--starts", type=int, default=30)
    args = ap.parse_args()
    backends = ["setprofile"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
    configs = [(b, m) for b in backends for m in ("armed", "cold")]
    results: dict = {c: [] for c in configs}
    for r in range(args.rounds):
        k = r % len(configs)
        for config in configs[k:] + configs[:k]:
            results[config].append(step_figures(run_child(args.funcs, *config)))
    print(f"Python {sys.version.split()[0]}, {args.funcs} functions x3 a step, "
          f"{args.rounds} rounds; medians of CPU ms")
    print(f"{'backend':<11} {'mode':<6} {'untraced':>8} {'arm':>6} {'warmup':>6} {'start':>6} "
          f"{'first':>6} {'others':>6} {'stop':>6} {'after':>6} {'plain':>6}")
    for backend, mode in configs:
        rows = results[(backend, mode)]
        med = {key: statistics.median(row[key] for row in rows) / 1e6 for key in rows[0]}
        print(f"{backend:<11} {mode:<6} {med['untraced']:8.2f} {med['arm']:6.2f} "
              f"{med['warmup']:6.2f} "
              f"{med['start']:6.2f} {med['first']:6.2f} {med['others']:6.2f} "
              f"{med['stop']:6.2f} {med['after']:6.2f} {med['plain']:6.2f}")
    print(f"\nTracer.start(), default buffer, median of {args.starts}, CPU ms")
    for backend, figs in start_times(args.starts).items():
        print(f"{backend:<11} new {figs['new'] / 1e6:6.3f}   armed {figs['armed'] / 1e6:6.3f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
