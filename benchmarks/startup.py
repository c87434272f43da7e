"""Start-up of a profiling session: what the first active step pays, and the
step after the Python tracer stops, with and without arming during warm-up.

    python benchmarks/startup.py [--rounds 10] [--funcs 3000] [--starts 30]

A "training loop" in a child process: each step calls every one of --funcs
distinct small Python functions a few times (each code object is one that
CPython 3.12+ instruments on its first run after events are enabled, and
again after they are disabled), under ``frametrace.profile(schedule(wait=2,
warmup=1, active=7, repeat=1, skip_first=3), python_steps=4)``.  Active
steps are timed as the trace's step records say; the others by the loop
(perf_counter_ns around each step).  Reported:

- untraced: the median of the loop's first steps (no session work);
- arming: the step whose prof.step() begins warm-up (armed: the tracer is
  armed there);

- first:  the first active step (the tracer starts at its beginning);
- others: the median of the next two Python-traced steps (the steady
  state of tracing);
- stop:   the last Python-traced step, which ends with the tracer's stop();
- after:  the first active step after python_steps (the tracer stopped at
  its beginning: on 3.12+ CPython takes the instrumentation out again);
- plain:  the median of the remaining active steps (no Python tracing).

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
traces = []
times = []
with frametrace.profile(schedule=sched, python_steps=4, backend=backend,
                        on_trace_ready=traces.append) as prof:
    for step in range(13):
        t0 = time.perf_counter_ns()
        train_step()
        prof.step()
        times.append(time.perf_counter_ns() - t0)
steps = {s.step: s.end_ns - s.start_ns for s in traces[0].steps}
print(json.dumps({"loop": times, "steps": [steps[n] for n in sorted(steps)]}))
"""

# Steps 0-2 are skipped, 3-4 wait, 5 warm-up (the session arms the tracer
# inside step 4's prof.step(), which begins step 5), 6-12 active, Python
# traced in 6-9.  Active steps are timed as the trace records them (a step
# begins when the prof.step() ending the one before takes the time, so
# step 6 includes the tracer's start() and step 9 its stop()); the others
# by the loop.


def run_child(nfuncs: int, backend: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(nfuncs), backend, mode],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def step_figures(res: dict) -> dict:
    loop, steps = res["loop"], res["steps"]  # steps: 6..12
    return {
        "untraced": statistics.median(loop[0:4]),
        "arming": loop[4],
        "first": steps[0],
        "others": statistics.median(steps[1:3]),
        "stop": steps[3],
        "after": steps[4],
        "plain": statistics.median(steps[5:7]),
    }


def start_times(starts: int) -> dict:
    import frametrace

    backends = ["setprofile"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
    res: dict = {}
    for backend in backends:
        cold, warm = [], []
        for _ in range(starts):
            t = frametrace.Tracer(backend=backend)
            t0 = time.perf_counter_ns()
            t.start()
            cold.append(time.perf_counter_ns() - t0)
            t.stop()
            t.clear()
            t = frametrace.Tracer(backend=backend)
            t.arm()
            t0 = time.perf_counter_ns()
            t.start()
            warm.append(time.perf_counter_ns() - t0)
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
          f"{args.rounds} rounds; medians, ms")
    print(f"{'backend':<11} {'mode':<6} {'untraced':>8} {'arming':>7} {'first':>7} "
          f"{'others':>7} {'stop':>7} {'after':>7} {'plain':>7}")
    for backend, mode in configs:
        rows = results[(backend, mode)]
        med = {key: statistics.median(row[key] for row in rows) / 1e6 for key in rows[0]}
        print(f"{backend:<11} {mode:<6} {med['untraced']:8.2f} {med['arming']:7.2f} "
              f"{med['first']:7.2f} "
              f"{med['others']:7.2f} {med['stop']:7.2f} {med['after']:7.2f} {med['plain']:7.2f}")
    print(f"\nTracer.start(), default buffer, median of {args.starts}, ms")
    for backend, figs in start_times(args.starts).items():
        print(f"{backend:<11} new {figs['new'] / 1e6:6.3f}   armed {figs['armed'] / 1e6:6.3f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
