"""Threads that C code starts keep their records: a thread made with
pthread_create() that calls a Python callback through ctypes gets a new
thread state for each call (PyGILState_Ensure()), and has none between
calls, as the callbacks of cffi and pybind11 (torch's autograd and data
threads) do.  While Python threads start and end beside it, every call it
made is recorded, all on one thread, nothing dropped (sys.monitoring); the
setprofile backend, which cannot hook such thread states, says so."""
import ctypes
import os
import shutil
import subprocess
import sys
import threading
import warnings

import pytest

import frametrace
from frametrace.export import write_chrome
from frametrace.testing import assert_valid_trace

N = 3000

C_SOURCE = r"""
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*callback)(int);
struct job { callback cb; int n; long tid; pthread_t thread; };

static void *run(void *arg)
{
    struct job *job = arg;
    job->tid = (long)syscall(SYS_gettid);
    for (int i = 0; i < job->n; i++) {
        job->cb(i);
    }
    return NULL;
}

void *ct_start(callback cb, int n)
{
    struct job *job = calloc(1, sizeof(*job));
    if (job == NULL) {
        return NULL;
    }
    job->cb = cb;
    job->n = n;
    if (pthread_create(&job->thread, NULL, run, job) != 0) {
        free(job);
        return NULL;
    }
    return job;
}

long ct_join(void *p)
{
    struct job *job = p;
    pthread_join(job->thread, NULL);
    long tid = job->tid;
    free(job);
    return tid;
}
"""

CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int)


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the library that starts a C thread")
    build = tmp_path_factory.mktemp("cthread")
    (build / "cthread.c").write_text(C_SOURCE)
    target = build / "libcthread.so"
    # The compiler is no sanitized program: the sanitizer runtime that a
    # sanitized interpreter's environment preloads is not for it.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LD_PRELOAD", "ASAN_", "UBSAN_", "LSAN_"))}
    subprocess.run([cc, "-O1", "-shared", "-fPIC", str(build / "cthread.c"),
                    "-o", str(target), "-lpthread"], check=True, env=env)
    lib = ctypes.CDLL(str(target))
    lib.ct_start.restype = ctypes.c_void_p
    lib.ct_start.argtypes = [CALLBACK, ctypes.c_int]
    lib.ct_join.restype = ctypes.c_long
    lib.ct_join.argtypes = [ctypes.c_void_p]
    return lib


ROUNDS = 30
PER_ROUND = 70  # more new rings than make the tracer look for ended threads
GATE = threading.Semaphore(0)


def leaf(i):
    return i


def callback(i):
    leaf(i)
    if i % (N // ROUNDS) == N // ROUNDS // 2:
        GATE.acquire()  # until Python threads have started and ended


def churn():
    """Python threads that start and end, each with a new ring, PER_ROUND at
    a time: the tracer looks for threads that ended meanwhile, while the C
    thread is inside a call, then goes on calling."""
    for _ in range(ROUNDS):
        for _ in range(PER_ROUND):
            t = threading.Thread(target=leaf, args=(0,))
            t.start()
            t.join()
        GATE.release()


def run_c_thread(clib):
    """The C thread's N calls, Python threads starting and ending meanwhile,
    traced: the stopped tracer and the C thread's native id."""
    cb = CALLBACK(callback)
    with frametrace.trace() as tracer:
        churner = threading.Thread(target=churn)
        churner.start()
        job = clib.ct_start(cb, N)
        assert job
        tid = clib.ct_join(job)
        churner.join()
    return tracer, tid


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_every_call_of_a_c_thread_is_recorded_on_one_thread(clib, clock, tmp_path):
    if clock != "monitoring":
        pytest.skip("the setprofile backend warns instead (the next test)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracer, tid = run_c_thread(clib)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)

    calls = [e for e in events if e.name == "callback"]
    assert len(calls) == N, f"{N - len(calls)} of {N} calls of the C thread lost"
    assert {e.native_thread_id for e in calls} == {tid}
    assert len({(e.thread_serial, e.thread_id) for e in calls}) == 1
    leaves = [e for e in events if e.name == "leaf" and e.native_thread_id == tid]
    assert len(leaves) == N
    assert all(events[e.parent].name == "callback" for e in leaves)
    assert not any(e.open_at_start or e.open_at_stop for e in calls)
    # One thread for the OS thread, nothing lost.
    assert [t.native_thread_id for t in tracer.threads].count(tid) == 1
    assert tracer.stats.dropped == 0
    assert sum(t.dropped for t in tracer.threads) == 0

    # One track in the file.
    path = tmp_path / "t.json"
    write_chrome(tracer, path)
    loaded = frametrace.load(path)
    on_file = [e for e in loaded.events if e.name == "callback"]
    assert len(on_file) == N
    assert len({(e.thread_serial, e.thread_id) for e in on_file}) == 1


def test_setprofile_backend_warns_of_a_c_thread_it_cannot_record(clib, clock):
    """The setprofile backend has no way to put its hook on a thread state
    C code makes for each call: it says so, once."""
    if clock == "monitoring":
        pytest.skip("the monitoring backend records them (the test above)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracer, tid = run_c_thread(clib)
    said = [w for w in caught if "could not record" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert said[0].category is RuntimeWarning
    assert "backend=\"monitoring\"" in str(said[0].message)
    # What it did record is not put on the C thread.
    assert not [e for e in tracer.getEvents() if e.native_thread_id == tid]
