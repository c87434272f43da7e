"""A program whose child processes do known work, for tests/system/test_children.py:
    python children.py METHOD OUTDIR
profiles itself with trace_children=True (frametrace.trace_handler(OUTDIR)); its
children are a Process running work(3), a Pool(2) mapping work over
range(4) (closed and joined: each worker ends normally), and a Process
terminated (SIGTERM) while it waits.  Prints a JSON report: the parent's pid
and the children's."""
import json
import multiprocessing
import os
import sys
import time

import frametrace


def leaf(x):
    return x + 1


def work(x):
    return leaf(x) * 2


def pid_of(_):
    return os.getpid()


def wait_forever(ready):
    ready.set()
    while True:
        time.sleep(0.01)


def main(method, outdir):
    ctx = multiprocessing.get_context(method)
    with frametrace.profile(on_trace_ready=frametrace.trace_handler(outdir), trace_children=True):
        proc = ctx.Process(target=work, args=(3,))
        proc.start()
        proc.join()
        pool = ctx.Pool(2)
        squares = pool.map(work, range(4))
        pool.close()
        pool.join()
        workers = [p.pid for p in pool._pool]
        ready = ctx.Event()
        waiting = ctx.Process(target=wait_forever, args=(ready,))
        waiting.start()
        ready.wait(60)
        waiting.terminate()
        waiting.join()
    print(json.dumps({"parent": os.getpid(), "process": proc.pid, "workers": workers,
                      "waiting": waiting.pid, "waiting_exitcode": waiting.exitcode,
                      "results": squares}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
