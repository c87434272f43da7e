"""Days, not minutes: a flight recorder over 20,000 steps
that each make and run a new function (as exec, dataclasses or
torch.compile do), with dumps along the way, keeps its memory flat: the
function table is swept, the code objects no record names are let go, and
every dump names its functions right."""
import json
import os
import subprocess
import sys

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import UNDER_ASAN, child_env

pytestmark = pytest.mark.usefixtures("clock")

STEPS = 20_000

PROGRAM = r"""
import gc, json, os, sys, weakref
import frametrace

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def made(i):
    ns = {}
    exec(compile(f"def f_{i}(x):\n    return len(x) + {i}\n", f"<gen-{i}>", "exec"), ns)
    return ns[f"f_{i}"]

steps, traced = int(sys.argv[2]), sys.argv[3] == "traced"
codes, rss_at, held = weakref.WeakSet(), {}, 0  # the code objects alive
with frametrace.flight_recorder(sys.argv[1], steps=3, slow_factor=None, slow_ms=600_000,
                                watchdog=False, min_interval=0, max_dumps=10,
                                buffer_size=1 << 15, max_memory=16 << 20) as rec:
    if not traced:
        rec.tracer.stop()  # the same program, its memory without tracing
    for i in range(steps):
        f = made(i)
        f("abc")
        codes.add(f.__code__)
        del f
        if traced:
            frametrace.step()
            if i % 2000 == 1999:
                rec.dump("requested")
        held = max(held, rec.tracer.functions_held) if traced else 0
        if i in (steps // 2, steps - 1):
            gc.collect()
            rss_at[i] = rss()
    freed = rec.tracer.functions_freed
    # The last dump written (its snapshot holds its names), and no
    # collection under way in the writer (gc.collect() returns at once then).
    import time
    while traced and len(rec.dumps) + len(rec.errors) < 10:
        time.sleep(0.01)
    for _ in range(3):
        gc.collect()
    alive = len(codes)
print(json.dumps({"dumps": rec.dumps, "errors": [repr(e) for e in rec.errors],
                  "rss": [rss_at[steps // 2], rss_at[steps - 1]], "held": held, "freed": freed,
                  "alive": alive}))
"""


def run(tmp_path, how):
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path / how), str(STEPS), how],
                         capture_output=True, text=True, timeout=600, env=child_env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_twenty_thousand_steps_making_functions_stay_flat(tmp_path):
    result = run(tmp_path, "traced")
    untraced = run(tmp_path, "untraced")
    assert result["errors"] == []
    # Two code objects a step (the exec'd module's and f_<i>'s): all but
    # what the sweeps keep are gone.  The ring (32K records) names some
    # 2,600 of them: a sweep waits for twice that, and frees what the one
    # before released, so the table holds a few thousand, not 20,000.
    assert result["freed"] > 2 * STEPS - 4 * 2048
    assert result["held"] < 4 * 2048
    assert result["alive"] < 2 * 2048
    # Over the second half of the run (10,000 steps, 5 dumps) the RSS grows
    # as the untraced program's does (CPython keeps the new names), give or
    # take what the table holds between two sweeps (up to some 5,000 code
    # objects) and the writer thread's allocator after its dumps: 0-5 MB
    # here.  Kept, the code objects grew it by 2 KB a step, 20 MB (measured
    # before the sweep was built).
    # (ASan holds freed memory in quarantine: RSS tells nothing there.)
    before, after = result["rss"]
    plain_before, plain_after = untraced["rss"]
    assert UNDER_ASAN or after - before < plain_after - plain_before + 7 * 2**20, (result["rss"],
                                                                     untraced["rss"])
    assert len(result["dumps"]) == 10
    for n, path in enumerate(result["dumps"]):
        trace = frametrace.load(path)
        assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
        with open(path) as f:
            info = json.load(f)["otherData"]["frametrace"]["metadata"]["dump"]
        assert info["reason"] == "requested"
        made = [ev for ev in trace.events if ev.name.startswith("f_")]
        numbers = [int(ev.name[2:]) for ev in made]
        # The last three steps: the two before and the one just begun
        # (nothing made in it yet), each naming its own code.
        assert numbers == [2000 * n + 1998, 2000 * n + 1999]
        assert [ev.filename for ev in made] == [f"<gen-{i}>" for i in numbers]
