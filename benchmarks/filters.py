"""Cost of an ignored call (ignore=), against the untraced run, the
do-nothing callbacks of each backend, and the same calls recorded.

    python benchmarks/filters.py [--rounds 30] [--calls 200000]

Workloads, each a loop making --calls calls of:

- py: a tiny Python function, ignored (``__main__.ignored_py``);
- c: a builtin, ignored (``builtins.len``);
- wrapper: an ignored Python function calling a recorded one, as
  nn.Module's ``_call_impl`` calls ``forward``: the cost of the wrapper's
  layer, what ``TORCH_PLUMBING`` saves per module call.

Configurations: untraced; floor / mon-floor (3.12+): do-nothing C callbacks
on PyEval_SetProfile / on the monitoring backend's sys.monitoring events
(``frametrace._testing``, as in overhead.py); frametrace on each backend
recording everything, and with ``ignore=``; on monitoring also with
``c_calls=False`` (no CALL event at every call site: what DISABLE leaves of
an ignored Python call).  Rounds as in overhead.py:
each configuration once per round, order rotated, compared with the same
round's untraced run.  ``sys.monitoring.restart_events()`` runs before each
mon-floor run (untimed): otherwise the DISABLE a filtered tracer returned
would spare the floor's callbacks too.  A filtered monitoring tracer after
an unfiltered one pays its first events again (DISABLE per code location),
in the timed run: amortized over --calls calls.  A report, never a test.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import frametrace
from frametrace import _testing
import overhead
from overhead import measure, quartiles, run_reference, run_untraced
from workloads import markdown_table as table

clock_ns = time.perf_counter_ns
HAVE_MONITORING = hasattr(_testing, "set_noop_monitoring")


def ignored_py(i):
    return i


def recorded(i):
    return i


def wrapper(i):
    return recorded(i)


def work_py(n):
    f = ignored_py
    for i in range(n):
        f(i)


def work_c(n):
    f = len
    s = "ab"
    for _ in range(n):
        f(s)


def work_wrapper(n):
    f = wrapper
    for i in range(n):
        f(i)


WORKLOADS = {"py": work_py, "c": work_c, "wrapper": work_wrapper}
IGNORE = [f"{__name__}.ignored_py", f"{__name__}.wrapper", "builtins.len"]


def run_frametrace(backend, ignore, c_calls=True):
    return overhead.run_frametrace(backend, ignore=ignore, c_calls=c_calls)


def mon_floor(enable):
    if enable:
        sys.monitoring.restart_events()
    _testing.set_noop_monitoring(enable)


def configurations():
    configs = [
        ("untraced", run_untraced, None),
        ("floor", run_reference(_testing.set_noop_profile), None),
        ("setprofile, recorded", run_frametrace("setprofile", None), "floor"),
        ("setprofile, ignored", run_frametrace("setprofile", IGNORE), "floor"),
    ]
    if HAVE_MONITORING:
        configs += [
            ("mon-floor", run_reference(mon_floor), None),
            ("monitoring, recorded", run_frametrace("monitoring", None), "mon-floor"),
            ("monitoring, ignored", run_frametrace("monitoring", IGNORE), "mon-floor"),
            # Without C calls the CALL event is off: what DISABLE leaves of
            # an ignored Python call.
            ("monitoring no C, recorded", run_frametrace("monitoring", None, False),
             "mon-floor"),
            ("monitoring no C, ignored", run_frametrace("monitoring", IGNORE, False),
             "mon-floor"),
        ]
    return configs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds per workload (default 30)")
    parser.add_argument("--calls", type=int, default=200_000,
                        help="calls per run (default 200000)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    began = time.perf_counter()
    configs = configurations()
    rows = []
    for wname, fn in WORKLOADS.items():
        times = measure(fn, args.calls, args.rounds, configs)
        base = times["untraced"]
        added = {name: [(t - b) / args.calls for t, b in zip(times[name], base)]
                 for name in times}
        for name, _, floor in configs:
            if name == "untraced":
                continue
            row = [wname, name, f"{statistics.median(added[name]):.1f}"]
            if floor is not None:
                ratios = [a / f for a, f in zip(added[name], added[floor]) if f > 0]
                lo, hi = quartiles(ratios)
                row += [f"{statistics.median(ratios):.2f}x ({floor})", f"{lo:.2f}-{hi:.2f}"]
                if name.endswith("ignored"):
                    rec = name.replace("ignored", "recorded")
                    share = [a / r for a, r in zip(added[name], added[rec]) if r > 0]
                    row.append(f"{statistics.median(share):.0%}")
                else:
                    row.append("")
            else:
                row += ["", "", ""]
            rows.append(row)
    print(f"## Cost of ignored calls: CPython {platform.python_version()} "
          f"({platform.machine()}, {os.cpu_count()} CPUs)")
    print()
    print(f"`python benchmarks/filters.py --rounds {args.rounds} --calls {args.calls}`: "
          f"frametrace {frametrace.__version__}; ns added per call of the loop "
          "(median over rounds of (run - same round's untraced) / calls); x floor: median "
          "per-round ratio to the same round's do-nothing callbacks of that backend, with its "
          "interquartile range; of recorded: the ignored run's added cost over the same "
          "calls recorded.")
    print()
    print(table(["workload", "config", "added ns/call", "x floor", "IQR", "of recorded"],
                rows, left=2))
    print()
    print(f"Total run time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
