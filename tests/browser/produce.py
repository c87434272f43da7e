"""The programs whose traces the browser check opens, each run as its own
process: ``python produce.py MODE OUTDIR [NAME]`` writes the files of MODE
into OUTDIR and what frametrace recorded (getEvents(), the threads, the
session's steps and ranges) to ``OUTDIR/recorded.pickle``.

Modes: ``plain`` (a tracer: ``.json``, ``.json.gz``, ``.pftrace``,
``.pftrace.gz``), ``session`` (a profiling session with a schedule, steps and
ranges: ``Trace.to_chrome``, ``Trace.to_perfetto``, ``frametrace.trace_handler``, and
``load()`` of the JSON saved again),
``rank-plain`` and ``rank-session`` (one rank of a job, as a ``.json`` for
``frametrace merge``; NAME is the process name).

The workloads are small (a few hundred events) and shallow (at most about 50
levels: Perfetto shows no slice deeper than 512).
"""
import os
import pickle
import sys
import threading

import frametrace
from frametrace.export import write_chrome, write_perfetto


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def squares(n):
    for i in range(n):
        yield i * i


def chain(n):
    # The deepest stack of the workloads: n frames, then a C call.
    return chain(n - 1) if n else sorted([3, 1, 2])


def work():
    fib(6)
    sum(squares(5))
    chain(40)


def threaded():
    """The main thread and two named workers."""
    workers = [threading.Thread(target=work, name=f"worker-{i}") for i in range(2)]
    for w in workers:
        w.start()
    work()
    for w in workers:
        w.join()


def load():
    with frametrace.range("load"):
        sum(squares(20))


def training(prof, steps):
    """A training loop as scripts write it: an epoch range around the loop;
    each iteration a range that holds prof.step() too (so one is open when a
    window opens); a data-loading thread with a range of its own."""
    with frametrace.range("epoch"):
        for _ in range(steps):
            with frametrace.range("iteration"):
                loader = threading.Thread(target=load, name="loader")
                loader.start()
                with frametrace.range("forward"):
                    fib(6)
                with frametrace.range("backward"):
                    chain(20)
                loader.join()
                prof.step()


# Steps 0-4: wait, warm-up, two active steps (Python traced in the first
# only), one more; one window.
SCHEDULE = frametrace.schedule(wait=1, warmup=1, active=2, repeat=1)


def session(handler):
    traces = []

    def ready(trace):
        handler(trace)
        traces.append(trace)

    with frametrace.profile(schedule=SCHEDULE, python_steps=1, on_trace_ready=ready) as prof:
        training(prof, 5)
    (trace,) = traces
    return trace


def main():
    mode, out = sys.argv[1], sys.argv[2]
    name = sys.argv[3] if len(sys.argv) > 3 else None
    recorded = {"pid": os.getpid(), "process_name": name or f"python {os.getpid()}",
                "steps": [], "ranges": []}
    if mode in ("plain", "rank-plain"):
        with frametrace.trace() as tracer:
            threaded()
        if mode == "plain":
            for ext in (".json", ".json.gz"):
                write_chrome(tracer, os.path.join(out, "plain" + ext))
            for ext in (".pftrace", ".pftrace.gz"):
                write_perfetto(tracer, os.path.join(out, "plain" + ext))
        else:
            trace = frametrace.as_trace(tracer)
            trace.process_name = name
            write_chrome(trace, os.path.join(out, "rank.json"))
        events, threads = tracer.getEvents(), tracer.threads
    elif mode in ("session", "rank-session"):
        def handler(trace):
            if mode == "session":
                trace.to_chrome(os.path.join(out, "session.json"))
                trace.to_perfetto(os.path.join(out, "session.pftrace"))
                frametrace.trace_handler(out)(trace)  # frametrace.<pid>.0.json, the quick start's
            else:
                trace.process_name = name
                trace.to_chrome(os.path.join(out, "rank.json"))

        trace = session(handler)
        if mode == "session":
            # A loaded trace has no tracer records: save() writes it from
            # its events, another writer than the tracer's.
            frametrace.load(os.path.join(out, "session.json")).save(os.path.join(out, "loaded.json"))
        events, threads = trace.events, trace.threads
        recorded["steps"] = [s.name for s in trace.steps]
        recorded["ranges"] = [(r.name, r.thread_id) for r in trace.ranges]
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    recorded["events"] = list(events)
    recorded["threads"] = [tuple(t) for t in threads]
    with open(os.path.join(out, "recorded.pickle"), "wb") as f:
        pickle.dump(recorded, f)


if __name__ == "__main__":
    main()
