"""torch.profiler's Python tracer (with_stack=True) and frametrace.  On 3.10/3.11 it installs its own profile function on every thread
with PyEval_SetProfile(), and removes it from every thread at its end.

Started after frametrace, it displaces frametrace on every thread: stop()
must flag them (Tracer.displaced, a RuntimeWarning each) and end their
open frames at their last record.  Started first, it makes frametrace's
start() refuse, and a session must say that.

Each case runs in a child interpreter (importing torch takes seconds and
starts threads of its own).  Skipped where torch is not importable
(torch_support), and on 3.12+."""
import json
import subprocess
import sys
import textwrap

import pytest

from support import child_env
from torch_support import torch  # noqa: F401 - skips the module without torch

pytestmark = [
    pytest.mark.skipif(sys.version_info >= (3, 12),
                       reason="torch's tracer on 3.12+ is not what this tests (3.10/3.11's "
                              "PyEval_SetProfile one), and no torch wheel here is for 3.12+"),
]


def run_child(source):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_torch_profiler_started_after_frametrace_displaces_every_thread():
    result = run_child("""
        import json, threading, warnings
        import torch
        from torch.profiler import profile, ProfilerActivity
        import frametrace
        from frametrace.testing import assert_valid_trace

        def step():
            return torch.ones(8).sum()

        def profiled_loop():
            with profile(activities=[ProfilerActivity.CPU], with_stack=True):
                for _ in range(3):
                    step()
            after_torch()

        def after_torch():
            return sum(range(100))

        ready, release = threading.Event(), threading.Event()
        def waiter():
            ready.set()
            release.wait()
        worker = threading.Thread(target=waiter, name="waiter")
        worker.start()
        ready.wait()
        # Starting torch's profiler makes millions of calls: room for all.
        tracer = frametrace.Tracer(backend="setprofile", buffer_size=1 << 24)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with tracer:
                profiled_loop()
        release.set()
        worker.join()
        events = tracer.getEvents()
        assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
        print(json.dumps({
            "displaced": [list(d) for d in tracer.displaced],
            "main": threading.main_thread().ident, "worker": worker.ident,
            "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning],
            "loop": [[e.open_at_loss, e.open_at_stop, e.end_ns < tracer.stop_ns]
                     for e in events if e.name == "profiled_loop"],
            "after": sum(e.name == "after_torch" for e in events),
            "open_at_stop": sum(e.open_at_stop for e in events),
            "dropped": tracer.stats.dropped,
        }))
    """)
    displaced = {d[1]: d for d in result["displaced"]}
    assert result["main"] in displaced and result["worker"] in displaced
    assert displaced[result["worker"]][3] == "waiter"
    assert len(result["warnings"]) == len(result["displaced"])
    assert all("replaced frametrace's hook" in w for w in result["warnings"])
    # The loop ends at the main thread's last record, not at the stop.
    assert result["loop"] == [[True, False, True]]
    assert result["after"] == 0 and result["open_at_stop"] == 0 and result["dropped"] == 0


def test_torch_profiler_started_first_refuses_a_session():
    result = run_child("""
        import json
        import torch
        from torch.profiler import profile, ProfilerActivity
        import frametrace

        errors = []
        with profile(activities=[ProfilerActivity.CPU], with_stack=True):
            for schedule in (None, frametrace.schedule(wait=1, warmup=0, active=1)):
                try:
                    with frametrace.profile(schedule=schedule) as prof:
                        for _ in range(3):
                            torch.ones(4).sum()
                            prof.step()
                except RuntimeError as exc:
                    errors.append([str(exc), exc.__context__ is None])
        print(json.dumps(errors))
    """)
    assert len(result) == 2
    for message, alone in result:
        assert message.startswith("another profiler is installed on thread ")
        assert "torch.profiler with with_stack=True" in message
        assert "stop it before starting frametrace" in message
        assert alone  # not replaced by an error from closing the session
