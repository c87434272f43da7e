"""A long-running program for tests/system/test_attach.py to attach to.

    python attach_target.py MODE STOPFILE

It prints "ready" once its loop runs, goes on until the file STOPFILE
exists, then prints its result and exits with status 3.  The result
depends on no timing: a traced run prints what an untraced one does.
MODE: "busy" (the main thread loops), "threads" (three worker threads
too), "steps" (each iteration ends with frametrace.step()), "sleep" (the
main thread sleeps in time.sleep, looking for STOPFILE every 2 s; no
signal wakes it: a signal handler that raises while sys.remote_exec's
script starts has its exception reported by CPython as the script's),
"stdin" (the main thread blocked in C, reading its stdin: it looks for
STOPFILE when a byte comes), "tracer" (the loop runs under a frametrace
tracer of its own)."""
import os
import sys
import threading
import time


def leaf(i):
    return i * 3 + 1


def crunch(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def train_step():
    return crunch(300)


def worker(stop, results):
    while True:
        results.add(crunch(100))
        if stop.is_set():
            return


def loop(mode, stop_file):
    results = set()
    if mode == "steps":
        import frametrace
    print("ready", flush=True)
    while True:  # at least once: an untraced run may find STOPFILE at once
        results.add(train_step())
        if mode == "steps":
            frametrace.step()
        if os.path.exists(stop_file):
            return results


def main(mode, stop_file):
    stop = threading.Event()
    worker_results = set()
    workers = []
    if mode == "threads":
        workers = [threading.Thread(target=worker, args=(stop, worker_results),
                                    name=f"worker-{i}") for i in range(3)]
        for t in workers:
            t.start()
    if mode == "sleep":
        print("ready", flush=True)
        while not os.path.exists(stop_file):
            time.sleep(2.0)
        results = {train_step()}
    elif mode == "stdin":
        print("ready", flush=True)
        while not os.path.exists(stop_file):
            os.read(0, 1)
        results = {train_step()}
    elif mode == "tracer":
        import frametrace

        with frametrace.trace():
            results = loop(mode, stop_file)
    else:
        results = loop(mode, stop_file)
    stop.set()
    for t in workers:
        t.join()
    print("result", sorted(results), sorted(worker_results), flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
