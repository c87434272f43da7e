"""Two builds of frametrace side by side: the added ns per profile event of
each, against the do-nothing C profile function (the floor), on one
workload, in alternating child processes.  For deciding whether a change to
the hot path is kept.

    python benchmarks/ab.py --a /tmp/old/python --b python [--workload fib]
        [--reps 11] [--quick] [--backend setprofile|monitoring] [--buffer-size N]

--a and --b are directories holding a built frametrace package (a checkout's
python/ after `setup.py build_ext --inplace`); each child puts its one first
on sys.path.  The floor and the untraced runs use --a's build.  A report,
never a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import BY_NAME, count_callbacks  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
import frametrace
from workloads import BY_NAME
mode, name, arg, backend, size = sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6], int(sys.argv[7])
fn = BY_NAME[name].fn
fn(arg // 10)  # warm up, untraced
if mode == "frametrace":
    tracer = frametrace.Tracer(buffer_size=size, backend=backend)
    tracer.start()
    t0 = time.process_time_ns(); fn(arg); t1 = time.process_time_ns()
    tracer.stop()
elif mode == "floor":
    from frametrace import _testing  # --a's build: --b may predate it
    _testing.set_noop_profile(True)
    t0 = time.process_time_ns(); fn(arg); t1 = time.process_time_ns()
    _testing.set_noop_profile(False)
else:
    t0 = time.process_time_ns(); fn(arg); t1 = time.process_time_ns()
print(json.dumps({"ns": t1 - t0, "file": frametrace.__file__}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="directory of build A")
    parser.add_argument("--b", required=True, help="directory of build B")
    parser.add_argument("--workload", default="fib", choices=sorted(BY_NAME))
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backend", default="setprofile")
    parser.add_argument("--buffer-size", type=int, default=1 << 20)
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    work = BY_NAME[args.workload]
    arg = work.quick if args.quick else work.full
    events = count_callbacks(work.fn, arg)
    here = os.path.dirname(os.path.abspath(__file__))
    configs = [("untraced", args.a), ("floor", args.a), ("A", args.a), ("B", args.b)]
    times: dict[str, list[int]] = {name: [] for name, _ in configs}
    files = {}
    for rep in range(args.reps):
        # Rotated, so no configuration always runs after the same one.
        for name, path in configs[rep % 4:] + configs[:rep % 4]:
            mode = "frametrace" if name in ("A", "B") else name
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, os.path.abspath(path), here, mode,
                 args.workload, str(arg), args.backend, str(args.buffer_size)],
                capture_output=True, text=True, check=True)
            out = json.loads(proc.stdout)
            times[name].append(out["ns"])
            files[name] = out["file"]
    base = statistics.median(times["untraced"])
    floor = (statistics.median(times["floor"]) - base) / events
    print(f"CPython {sys.version.split()[0]}, {args.workload}({arg:,}): {events:,} events, "
          f"{args.reps} reps, process CPU time, backend {args.backend}")
    for name in ("A", "B"):
        print(f"  {name}: {files[name]}")
    print("\n| config | added ns/event (median) | x floor | added ns/event (fastest runs) |")
    print("|---|---:|---:|---:|")
    for name in ("floor", "A", "B"):
        added = (statistics.median(times[name]) - base) / events
        fastest = (min(times[name]) - min(times["untraced"])) / events
        ratio = f"{added / floor:.2f}x" if floor > 0 else "n/a"
        print(f"| {name} | {added:.1f} | {ratio} | {fastest:.1f} |")


if __name__ == "__main__":
    main()
