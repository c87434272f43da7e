"""Instructions added per profile event, counted by valgrind's callgrind:
repeatable run to run, unlike wall-clock time on a shared machine.

    python benchmarks/instructions.py            # needs valgrind on PATH

For each workload, the same script runs once per configuration (untraced,
the do-nothing C profile function, the same reading the clock into a ring,
on 3.12+ their sys.monitoring twins, cProfile, frametrace with each backend)
under callgrind; each run does the interpreter's start-up, one warm-up call
and one measured call, so the difference to the untraced run is the
measured call's added cost.  Cache misses, page faults and what an
instruction costs are not counted: reading the time-stamp counter is one
instruction here and ~10 ns on this machine's CPU (overhead.py is the
benchmark that sees that).  A report, never a test.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r'''
import sys, cProfile, frametrace
from frametrace import _testing

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def builtins_loop(n):
    d, t = {1: 2}, 0
    for i in range(n):
        t += len("ab") + d.get(1) + isinstance(i, int)
    return t

def pipeline(n):
    evens = (x for x in range(n) if x % 2 == 0)
    squares = (x * x for x in evens)
    return sum(squares)

WORK = {"fib": lambda: fib(22), "builtins": lambda: builtins_loop(30000),
        "generators": lambda: pipeline(60000)}
work, mode = WORK[sys.argv[1]], sys.argv[2]
work()
if mode == "untraced":
    work()
elif mode == "floor":
    _testing.set_noop_profile(True); work(); _testing.set_noop_profile(False)
elif mode == "floor+clock":
    _testing.set_noop_profile(True, clock=True); work(); _testing.set_noop_profile(False)
elif mode == "mon-floor":
    _testing.set_noop_monitoring(True); work(); _testing.set_noop_monitoring(False)
elif mode == "mon-floor+clock":
    _testing.set_noop_monitoring(True, clock=True); work(); _testing.set_noop_monitoring(False)
elif mode == "cProfile":
    p = cProfile.Profile(); p.enable(); work(); p.disable()
elif mode == "frametrace":
    t = frametrace.Tracer(buffer_size=1 << 20, backend="setprofile"); t.start(); work(); t.stop()
elif mode == "monitoring":
    t = frametrace.Tracer(buffer_size=1 << 20, backend="monitoring"); t.start(); work(); t.stop()
elif mode == "count":
    t = frametrace.Tracer(buffer_size=1 << 22, backend="setprofile"); t.start(); work(); t.stop()
    print(2 * len(t.getEvents()))
'''
MONITORING = sys.version_info >= (3, 12)
CONFIGS = ("untraced", "floor", "floor+clock") + (
    ("mon-floor", "mon-floor+clock") if MONITORING else ()) + ("cProfile", "frametrace") + (
    ("monitoring",) if MONITORING else ())
# Each frametrace configuration against the least a tracer on its hook does.
CLOCK_REFERENCE = {"frametrace": "floor+clock", "monitoring": "mon-floor+clock"}
LABELS = {"frametrace": "frametrace setprofile", "monitoring": "frametrace monitoring"}


def instructions(script: str, workload: str, mode: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
             sys.executable, script, workload, mode],
            capture_output=True, text=True, check=True)
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if not match:
        raise RuntimeError(f"no instruction count from callgrind:\n{proc.stderr[-2000:]}")
    return int(match.group(1))


def main() -> None:
    if shutil.which("valgrind") is None:
        print("valgrind not found: skipped")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(CHILD)
        script = fh.name
    try:
        print(f"CPython {sys.version.split()[0]}, instructions added per profile event\n")
        print("| workload | config | events | instructions/event | x floor | above its clock reference |")
        print("|---|---|---:|---:|---:|---:|")
        for workload in ("fib", "builtins", "generators"):
            events = int(subprocess.run([sys.executable, script, workload, "count"],
                                        capture_output=True, text=True, check=True).stdout)
            ir = {mode: instructions(script, workload, mode) for mode in CONFIGS}
            added = {mode: (ir[mode] - ir["untraced"]) / events for mode in CONFIGS[1:]}
            for mode in CONFIGS[1:]:
                ref = CLOCK_REFERENCE.get(mode)
                above = f"{added[mode] - added[ref]:+.0f} ({ref})" if ref else ""
                print(f"| {workload} | {LABELS.get(mode, mode)} | {events:,} | {added[mode]:.0f} | "
                      f"{added[mode] / added['floor']:.2f}x | {above} |")
    finally:
        os.unlink(script)


if __name__ == "__main__":
    main()
