"""What tracing a child process costs it: the time from Process.start() to
join() of a child that does a fixed amount of work, untraced and under
profile(trace_children=True) (its own tracer from its first moment, its
trace written to a temporary directory as it ends), per start method.
Rounds alternate the two, medians printed.

    python benchmarks/children.py [--rounds N] [--calls N]
"""
import argparse
import multiprocessing
import os
import statistics
import tempfile
import time

import frametrace


def leaf(x):
    return x + 1


def work(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def one(ctx, calls, traced, directory):
    p = ctx.Process(target=work, args=(calls,))
    if traced:
        with frametrace.profile(on_trace_ready=frametrace.trace_handler(directory), trace_children=True):
            t0 = time.perf_counter()
            p.start()
            p.join()
            elapsed = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        p.start()
        p.join()
        elapsed = time.perf_counter() - t0
    assert p.exitcode == 0
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    print(f"child: {args.calls:,} Python calls; start() to join(), median of {args.rounds} rounds")
    for method in ("fork", "spawn", "forkserver"):
        if method not in multiprocessing.get_all_start_methods():
            continue
        ctx = multiprocessing.get_context(method)
        times = {False: [], True: []}
        with tempfile.TemporaryDirectory() as directory:
            one(ctx, 10, False, directory)  # a forkserver starts once
            for _ in range(args.rounds):
                for traced in (False, True):
                    times[traced].append(one(ctx, args.calls, traced, directory))
            events = [len(frametrace.load(os.path.join(directory, f)).events)
                      for f in sorted(os.listdir(directory))]
        plain, traced = (statistics.median(times[k]) for k in (False, True))
        print(f"{method:10s}  untraced {plain * 1e3:7.1f} ms   traced {traced * 1e3:7.1f} ms   "
              f"(+{(traced - plain) * 1e3:.1f} ms, the trace written included); "
              f"{len(events)} traces, events per trace {min(events):,}-{max(events):,}")


if __name__ == "__main__":
    main()
