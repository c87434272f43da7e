"""Child processes traced with profile(trace_children=True) and
frametrace run --follow-children: fork, spawn and forkserver children
(a Process, a Pool's workers, a Process killed by SIGTERM) each write
their own trace, named with their pid, with the exact call trees of what
they ran, and frametrace merge puts them under the parent's times."""
import json
import multiprocessing
import os
import shlex
import signal
import subprocess
import sys

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import TESTS_DIR, child_env, run_stderr_gone

METHODS = [m for m in ("fork", "spawn", "forkserver") if m in multiprocessing.get_all_start_methods()]
PACKAGE_ROOT = os.path.dirname(os.path.dirname(frametrace.__file__))
pytestmark = pytest.mark.usefixtures("clock")


def python(*args, cwd):
    env = child_env(PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, TESTS_DIR]), PYTHONFAULTHANDLER="1")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)


def raw_other(path):
    with open(path) as fh:
        return json.load(fh)["otherData"]["frametrace"]


def subtree(events, i):
    """The (name, depth below i) of event i's descendants, in order."""
    out = []
    depth = events[i].depth
    for e in events[i + 1:]:
        if e.depth <= depth:
            break
        out.append((e.name, e.depth - depth))
    return out


@pytest.mark.parametrize("method", METHODS)
def test_profile_trace_children(tmp_path, method):
    program = os.path.join(TESTS_DIR, "targets", "children.py")
    proc = python(program, method, str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["results"] == [2, 4, 6, 8]
    assert report["waiting_exitcode"] == -signal.SIGTERM
    parent = report["parent"]
    children = [report["process"], *report["workers"], report["waiting"]]
    files = sorted(os.listdir(tmp_path / "out"))
    assert files == sorted(f"frametrace.{pid}.0.json" for pid in [parent, *children])

    def child(pid):
        path = tmp_path / "out" / f"frametrace.{pid}.0.json"
        trace = frametrace.load(str(path))
        assert trace.pid == pid
        assert raw_other(path)["metadata"]["parent_pid"] == parent
        assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
        return trace

    # The Process: work(3) once, exactly work -> leaf.
    events = child(report["process"]).events
    works = [i for i, e in enumerate(events) if e.name == "work"]
    assert len(works) == 1
    assert subtree(events, works[0]) == [("leaf", 1)]
    assert not any(e.open_at_stop for e in events if e.name in ("work", "leaf"))
    # The pool's workers did the four calls between them, each exactly so.
    calls = 0
    for pid in report["workers"]:
        events = child(pid).events
        for i, e in enumerate(events):
            if e.name == "work":
                calls += 1
                assert subtree(events, i) == [("leaf", 1)]
    assert calls == 4
    # Killed by SIGTERM while waiting: written first, the wait cut at the stop.
    events = child(report["waiting"]).events
    waits = [e for e in events if e.name == "wait_forever"]
    assert len(waits) == 1 and waits[0].open_at_stop
    # The parent's trace has none of the children's work.
    assert "leaf" not in {e.name for e in frametrace.load(
        str(tmp_path / "out" / f"frametrace.{parent}.0.json")).events}

    merged = tmp_path / "merged.json"
    result = python("-m", "frametrace", "merge", *sorted(str(p) for p in (tmp_path / "out").iterdir()),
                    "-o", str(merged), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trace = frametrace.load(str(merged))
    by_pid = {p["pid"]: p for p in trace.processes}
    assert sorted(by_pid) == sorted([parent, *children])
    for pid in children:
        assert by_pid[pid]["process_name"].startswith(f"child {pid} (")
        assert by_pid[pid]["process_name"].endswith(f") of {parent}")
        # On the parent's timeline: within its traced time.
        assert by_pid[parent]["tracer_start_ns"] < by_pid[pid]["tracer_start_ns"]
        assert by_pid[pid]["tracer_stop_ns"] < by_pid[parent]["tracer_stop_ns"]
    assert {e.name for e in trace.events if e.name == "work"} == {"work"}


FOLLOW = '''\
import multiprocessing, os, sys

def leaf(x):
    return x + 1

def work(x):
    return leaf(x) * 2

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    p = ctx.Process(target=work, args=(1,))
    p.start()
    p.join()
    pid = os.fork()
    if pid == 0:
        work(2)
        sys.exit(0)  # back into the command
    os.waitpid(pid, 0)
    print(p.pid, pid)
'''


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("output", ["trace.json", "trace.pftrace"])
def test_run_follow_children(tmp_path, method, output):
    (tmp_path / "prog.py").write_text(FOLLOW)
    proc = python("-m", "frametrace", "run", "--follow-children", "-o", output, "prog.py", method,
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    mp_child, forked = map(int, proc.stdout.split())
    stem, ext = output.split(".")
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["prog.py", output, f"{stem}.{mp_child}.{ext}", f"{stem}.{forked}.{ext}"])
    for pid in (mp_child, forked):
        assert f"of child process {pid} written to" in proc.stderr
    # The closing hint names the children's files and the merge that shows
    # all of them; run as printed, by a shell, it merges the three.
    (hint,) = [line for line in proc.stderr.splitlines() if "the children's traces" in line]
    command = hint.split("on one timeline: ", 1)[1]
    assert command == f"frametrace merge {output} {stem}.*.{ext} -o merged.json", hint
    merged = python("-c", "import sys; from frametrace.cli import main; sys.exit(main())",
                    *shlex.split(subprocess.run(["sh", "-c", f"echo {command[len('frametrace '):]}"],
                                                cwd=tmp_path, capture_output=True, text=True,
                                                check=True).stdout), cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert len(frametrace.load(str(tmp_path / "merged.json")).processes) == 3
    os.unlink(tmp_path / "merged.json")
    if ext != "json":
        return
    for pid, x in ((mp_child, 1), (forked, 2)):
        trace = frametrace.load(str(tmp_path / f"trace.{pid}.json"))
        events = trace.events
        works = [i for i, e in enumerate(events) if e.name == "work"]
        assert len(works) == 1 and subtree(events, works[0]) == [("leaf", 1)]
        # The command's own code after the program is not the child's trace.
        assert not {"_report_error", "_run"} & {e.name.rsplit(".", 1)[-1] for e in events}
    assert "leaf" not in {e.name for e in frametrace.load(str(tmp_path / "trace.json")).events}


# A Pool's exit terminates its workers (SIGTERM) once they are idle,
# after the reader of stderr has gone (`... 2>&1 | head -1`): each worker
# writes its trace, cannot say so, and dies of SIGTERM as untraced (or
# exits, having taken the Pool's "no more tasks" first).  (A
# worker that did not die would wait for the queue's lock, which the
# exiting Pool holds: a hang.)
POOL_NO_READER = '''\
import multiprocessing, os, sys, time

def ready(barrier):
    barrier.wait(60)  # each worker is started (and traced)

def task(x):
    return x + 1

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    barrier = ctx.Barrier(3)
    with ctx.Pool(2, initializer=ready, initargs=(barrier,)) as pool:
        workers = list(pool._pool)
        barrier.wait(60)
        assert pool.map(task, range(4), chunksize=1) == [1, 2, 3, 4]
        while True:  # until the reader of stderr has gone; the workers wait for tasks
            try:
                print("waiting", file=sys.stderr, flush=True)
            except BrokenPipeError:
                break
            time.sleep(0.01)
    for w in workers:
        w.join()
    print(sorted(w.pid for w in workers), [w.exitcode for w in workers], flush=True)
'''


@pytest.mark.parametrize("method", METHODS)
def test_run_follow_children_pool_exit_with_stderr_gone(tmp_path, method):
    """Nothing frametrace prints changes how a process ends: no hang, the
    workers end as the Pool ends them, the command exits as the program."""
    (tmp_path / "prog.py").write_text(POOL_NO_READER)
    env = child_env(PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, TESTS_DIR]), PYTHONFAULTHANDLER="1")

    def without_reader(*command):
        return run_stderr_gone([sys.executable, *command, "prog.py", method], tmp_path, env,
                               first_line="waiting\n")

    # Untraced: 0, or 120 where Python's exit fails to flush the program's
    # "waiting" left in stderr's buffer (3.14).
    untraced, _ = without_reader()
    status, out = without_reader("-m", "frametrace", "run", "--follow-children", "-o",
                                 "trace.json")
    assert status == untraced, out
    pids, exitcodes = out.split("] [")
    # An idle worker may take the Pool's "no more tasks" and exit before its
    # SIGTERM comes, untraced too.
    assert set(json.loads("[" + exitcodes)) <= {0, -signal.SIGTERM}, out
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["prog.py", "trace.json"] + [f"trace.{pid}.json" for pid in json.loads(pids + "]")])


# A child whose main thread blocks in C for ever, the GIL released (a
# second lock of a mutex it holds: no signal interrupts it, as a sem_wait
# entered just after SIGTERM came), is terminated: Python never runs its
# SIGTERM handler, yet it writes its trace and dies of SIGTERM.
BLOCKED_CHILD = '''\
import ctypes, multiprocessing, sys

def blocked(ready):
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeros: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    ready.set()
    libc.pthread_mutex_lock(mutex)

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    ready = ctx.Event()
    p = ctx.Process(target=blocked, args=(ready,))
    p.start()
    assert ready.wait(60)
    p.terminate()
    p.join(60)
    print(p.pid, p.exitcode, flush=True)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs glibc's pthread_mutex_t")
@pytest.mark.parametrize("method", METHODS)
def test_run_follow_children_sigterm_to_a_child_blocked_in_c(tmp_path, method):
    (tmp_path / "prog.py").write_text(BLOCKED_CHILD)
    env = child_env(PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, TESTS_DIR]), PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, "-m", "frametrace", "run", "--follow-children", "-o",
                             "trace.json", "prog.py", method], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"still running after 60 s (the child survived SIGTERM):\n{err}")
    assert proc.returncode == 0, err
    pid, exitcode = map(int, out.split())
    assert exitcode == -signal.SIGTERM, err
    assert f"of child process {pid} written to" in err, err
    trace = frametrace.load(str(tmp_path / f"trace.{pid}.json"))
    assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
    blocked = [e for e in trace.events if e.name == "blocked"]
    assert len(blocked) == 1 and blocked[0].open_at_stop  # cut at the signal


def test_trace_children_needs_a_handler():
    with pytest.raises(ValueError, match="trace_children=True needs on_trace_ready"):
        frametrace.profile(trace_children=True)
    with pytest.raises(TypeError, match="trace_children must be True or False"):
        frametrace.profile(trace_children=1, on_trace_ready=print)


UNPICKLABLE = '''\
import multiprocessing, warnings, frametrace

def work():
    pass

if __name__ == "__main__":
    traces = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with frametrace.profile(on_trace_ready=lambda t: traces.append(t), trace_children=True):
            p = multiprocessing.get_context("spawn").Process(target=work)
            p.start()
            p.join()
    print(p.exitcode, [str(w.message) for w in caught])
'''


def test_spawn_child_with_a_handler_that_does_not_pickle(tmp_path):
    (tmp_path / "prog.py").write_text(UNPICKLABLE)
    proc = python("prog.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("0 [")
    assert "children started with spawn or forkserver are not traced" in proc.stdout


STEPPING = '''\
import json, multiprocessing, os, sys, frametrace

def work(i):
    return i

def loop():
    for i in range(6):
        work(i)
        frametrace.step()

if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    sched = frametrace.schedule(wait=1, warmup=0, active=2, repeat=1)
    with frametrace.profile(schedule=sched, on_trace_ready=frametrace.trace_handler("out"),
                            trace_children=True) as prof:
        p = ctx.Process(target=loop)
        p.start()
        p.join()
        for i in range(4):
            work(i)
            prof.step()
    print(json.dumps([os.getpid(), p.pid]))
'''


@pytest.mark.parametrize("method", METHODS)
def test_child_that_steps_follows_the_schedule(tmp_path, method):
    (tmp_path / "prog.py").write_text(STEPPING)
    proc = python("prog.py", method, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    parent, child = json.loads(proc.stdout)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        [f"frametrace.{parent}.0.json", f"frametrace.{child}.0.json"])
    trace = frametrace.load(str(tmp_path / "out" / f"frametrace.{child}.0.json"))
    # Its own loop's steps 1 and 2 (wait=1: step 0 waits), as the parent's.
    assert [s.step for s in trace.steps] == [1, 2]
    assert [e.name for e in trace.events].count("work") == 2
    assert "loop" in {e.name for e in trace.events}
    assert raw_other(tmp_path / "out" / f"frametrace.{child}.0.json")["metadata"]["parent_pid"] == parent
    mine = frametrace.load(str(tmp_path / "out" / f"frametrace.{parent}.0.json"))
    assert [s.step for s in mine.steps] == [1, 2]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_run_follow_children_with_steps(tmp_path):
    (tmp_path / "prog.py").write_text(STEPPING.replace(
        'with frametrace.profile(schedule=sched, on_trace_ready=frametrace.trace_handler("out"),\n'
        '                            trace_children=True) as prof:', 'if True:').replace(
        "prof.step()", "frametrace.step()"))
    proc = python("-m", "frametrace", "run", "--follow-children", "--steps",
                  "wait=1,active=2,repeat=1", "-o", "t.json", "prog.py", "fork", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    parent, child = json.loads(proc.stdout.splitlines()[-1])
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("t.")) == sorted(
        ["t.0.json", f"t.{child}.0.json"])
    trace = frametrace.load(str(tmp_path / f"t.{child}.0.json"))
    assert [s.step for s in trace.steps] == [1, 2]
    assert [e.name for e in trace.events].count("work") == 2


def test_enable_nests():
    """A session's plan inside run --follow-children's: the inner one while
    it runs, the outer one again after."""
    from frametrace import _children
    outer = _children.Plan(frametrace.Options(), print)
    inner = _children.Plan(frametrace.Options(), print)
    _children.enable(outer)
    try:
        _children.enable(inner)
        assert _children._plan is inner
        _children.disable(inner)
        assert _children._plan is outer
        import multiprocessing.spawn as spawn
        assert spawn.get_preparation_data is _children._preparation_data
    finally:
        _children.disable(outer)
    assert _children._plan is None
    assert spawn.get_preparation_data is not _children._preparation_data
