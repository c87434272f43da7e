"""Every test here runs a real tracer, in each setup of the "clock" fixture
(tests/conftest.py): both clocks on the setprofile backend, and the
monitoring backend on 3.12+."""
import gc

import pytest


@pytest.fixture(autouse=True)
def _each_setup(clock):
    return clock


@pytest.fixture(autouse=True)
def _no_gc_callbacks():
    """Exact call trees are this layer's subject: a garbage collection inside
    a traced program must not add calls.  Hypothesis (tests/unit, tests/fuzz)
    leaves a gc callback of its own installed for the rest of the process
    (gc_cumulative_time's, which calls time.perf_counter): set aside here."""
    saved = gc.callbacks[:]
    gc.callbacks.clear()
    yield
    gc.callbacks[:] = saved
