"""The pause Tracer.snapshot() costs the traced threads: it copies every
thread's retained records with the GIL held (issue 20's target: <= 5 ms for
8 MiB of records).  Reports, never asserts.

    python benchmarks/snapshot.py [--rounds N]

For each layout (one thread holding 8 MiB of records, 8 threads of 1 MiB,
64 threads of 128 KiB), rings filled by a call loop, then snapshot() timed
round after round while the tracer records: the first (it also counts,
once, the frames each ended thread left open: a replay of its ring, kept
for the later snapshots and the stop), then the median and max of the
others; for scale, what stop() of the same tracer then costs and
getEvents() of the last snapshot."""
import argparse
import statistics
import sys
import threading
import time

import frametrace

LAYOUTS = [(1, 1 << 20, "1 x 8 MiB"), (8, 1 << 17, "8 x 1 MiB"), (64, 1 << 14, "64 x 128 KiB")]


def leaf():
    pass


def fill(records):
    for _ in range(records // 2):  # a call and a return each
        leaf()


def measure(threads, records, rounds, backend):
    tracer = frametrace.Tracer(buffer_size=records, backend=backend, c_calls=False)
    pauses = []
    with tracer:
        if threads == 1:
            fill(records - 64)
        else:
            workers = [threading.Thread(target=fill, args=(records - 64,))
                       for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        snap = None
        for _ in range(rounds):
            snap = None  # the previous copy freed outside the timing
            t0 = time.perf_counter()
            snap = tracer.snapshot()
            pauses.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
    stop = time.perf_counter() - t0
    t0 = time.perf_counter()
    events = len(snap.getEvents())
    get = time.perf_counter() - t0
    return pauses[0] * 1e3, statistics.median(pauses[1:]) * 1e3, max(pauses[1:]) * 1e3, \
        stop * 1e3, get * 1e3, events


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    backends = ["setprofile"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
    print(f"Python {sys.version.split()[0]}, {args.rounds} snapshots each")
    print(f"{'backend':<11} {'layout':<13} {'first':>9} {'then median':>12} {'max':>9} "
          f"{'stop':>9} {'getEvents(snap)':>15} {'events':>9}")
    for backend in backends:
        for threads, records, name in LAYOUTS:
            first, med, top, stop, get, events = measure(threads, records, args.rounds, backend)
            print(f"{backend:<11} {name:<13} {first:>6.2f} ms {med:>9.2f} ms {top:>6.2f} ms "
                  f"{stop:>6.2f} ms {get:>12.1f} ms {events:>9}")


if __name__ == "__main__":
    main()
