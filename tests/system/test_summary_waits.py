"""The summary marks the C calls that block as waits: a program where two
threads wait on a lock another thread holds, one through lock.acquire(),
one through ``with lock:`` (before CPython 3.14 no call is reported for
``__enter__``: the wait is its caller's self time, unmarked)."""
import sys

import frametrace
from frametrace import reports
from test_cli import frametrace_cmd

PROGRAM = '''\
import threading
import time

lock = threading.Lock()
held = threading.Event()

def holder():
    with lock:
        held.set()
        time.sleep(0.3)

def acquire_waiter():
    lock.acquire()
    lock.release()

def with_waiter():
    with lock:
        pass

h = threading.Thread(target=holder)
h.start()
held.wait()
waiters = [threading.Thread(target=f) for f in (acquire_waiter, with_waiter)]
for t in waiters:
    t.start()
for t in waiters + [h]:
    t.join()
'''


def test_summary_marks_blocking_c_calls_as_waits(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    frametrace_cmd("run", "-o", "t.json", "prog.py", cwd=tmp_path, check=0)
    rows = {r.name: r for r in reports.summary(frametrace.load(str(tmp_path / "t.json")),
                                               limit=None)}
    # Both waiters waited for the holder's 0.3 s sleep.
    assert rows["lock.acquire"].wait and rows["lock.acquire"].self_ns >= 200_000_000
    assert rows["time.sleep"].wait
    assert not rows["with_waiter"].wait and not rows["holder"].wait
    if sys.version_info >= (3, 14):  # lock.__enter__ is a C call the tracer sees
        assert rows["lock.__enter__"].wait and rows["lock.__enter__"].self_ns >= 200_000_000
        assert rows["with_waiter"].self_ns < 100_000_000
    else:
        assert rows["with_waiter"].self_ns >= 200_000_000

    out = frametrace_cmd("summary", "t.json", "--limit", "0", cwd=tmp_path, check=0).stdout
    lines = out.splitlines()
    assert [line for line in lines if line.endswith("  lock.acquire [wait]")], out
    assert [line for line in lines if line.endswith("  time.sleep [wait]")], out
    with_line = [line for line in lines if " with_waiter (" in line]
    assert len(with_line) == 1 and not with_line[0].endswith("[wait]"), out
    assert any(line.startswith("[wait]: ") for line in lines), out
