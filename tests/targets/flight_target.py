"""A long-running program under a flight recorder, for
tests/system/test_attach_dump.py to ask for dumps from outside.

    python flight_target.py MODE DUMPDIR STOPFILE

It prints "ready" once its loop runs, goes on until the file STOPFILE
exists, then prints the dumps its recorder wrote, one a line, and exits
with status 0.  MODE: "busy" (the main thread loops, a step an iteration),
"sleep" (the main thread blocked in C: it reads its stdin, and looks for
STOPFILE when a byte comes), "nosignal" (sleep, the recorder with
signal=None),
"full" (busy, max_dumps=0), "none" (busy, frametrace imported but no
recorder).  The recorder's steps are never slow to it (slow_ms: an
hour): the only dumps are the ones asked for."""
import contextlib
import os
import sys

import frametrace


def leaf(i):
    return i * 3 + 1


def crunch(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def train_step():
    return crunch(300)


def main(mode, dump_dir, stop_file):
    options = {"slow_factor": None, "slow_ms": 3_600_000.0, "min_interval": 0.0}
    if mode == "nosignal":
        options["signal"] = None
    if mode == "full":
        options["max_dumps"] = 0
    recorder = (contextlib.nullcontext() if mode == "none"
                else frametrace.flight_recorder(dump_dir, **options))
    with recorder:
        print("ready", flush=True)
        while not os.path.exists(stop_file):
            if mode in ("sleep", "nosignal"):
                os.read(0, 1)  # a signal's handler runs, and the read goes on
            else:
                train_step()
                frametrace.step()
    for path in getattr(recorder, "dumps", []):
        print(path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
