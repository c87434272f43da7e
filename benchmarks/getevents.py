"""getEvents() throughput and memory, for one build of frametrace or two
side by side, in alternating child processes (each traces the workload,
then times its first getEvents() call).  A report, never a test.

    python benchmarks/getevents.py --build python [--build /tmp/old/python]
        [--fib 33] [--reps 3] [--backend setprofile|monitoring]

--build: a directory holding a built frametrace package (a checkout's
python/ after `setup.py build_ext --inplace`); give it twice to compare two
builds.  fib(33) records 11.4M events; the ring is sized to keep them all.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import frametrace
n, backend = int(sys.argv[2]), sys.argv[3]
def fib(k):
    return k if k < 2 else fib(k - 1) + fib(k - 2)
calls_before, calls = 1, 1  # fib(k) makes fib_calls(k-1) + fib_calls(k-2) + 1 calls
for _ in range(n - 1):
    calls_before, calls = calls, calls + calls_before + 1
# Two profile events per call; a power of two that keeps them all.
tracer = frametrace.Tracer(buffer_size=min(frametrace.MAX_BUFFER_SIZE, 1 << (2 * calls).bit_length()),
                           backend=backend)
with tracer:
    fib(n)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
events = tracer.getEvents()
t1 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"events": len(events), "dropped": tracer.stats.dropped, "s": t1 - t0,
                  "peak_mib": peak / 1024, "rise_mib": (peak - before) / 1024,
                  "file": frametrace.__file__}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="append", required=True,
                        help="directory of a built frametrace package (once or twice)")
    parser.add_argument("--fib", type=int, default=33)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backend", default="setprofile")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {b: [] for b in args.build}
    for _ in range(args.reps):
        for build in args.build:
            out = subprocess.run([sys.executable, "-c", CHILD, build, str(args.fib), args.backend],
                                 check=True, capture_output=True, text=True).stdout
            results[build].append(json.loads(out.strip().splitlines()[-1]))
    print(f"CPython {sys.version.split()[0]}, fib({args.fib}), backend {args.backend}, "
          f"{args.reps} reps, first getEvents() call per process\n")
    print("| build | events | dropped | median s | min-max s | events/s (median) | "
          "peak RSS MiB | RSS rise in getEvents MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for build, runs in results.items():
        secs = [r["s"] for r in runs]
        med = statistics.median(secs)
        print(f"| {build} | {runs[0]['events']:,} | {runs[0]['dropped']} | {med:.2f} | "
              f"{min(secs):.2f}-{max(secs):.2f} | {runs[0]['events'] / med / 1e6:.2f}M | "
              f"{statistics.median(r['peak_mib'] for r in runs):,.0f} | "
              f"{statistics.median(r['rise_mib'] for r in runs):,.0f} |")


if __name__ == "__main__":
    main()
