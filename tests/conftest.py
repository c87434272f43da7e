import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest

# Every test runs with both clocks (the CPU cycle counter where this machine
# allows it, and CLOCK_MONOTONIC read directly) on the PyEval_SetProfile
# backend, and on 3.12+ once more on the sys.monitoring backend.
SETUPS = ["cycles", "monotonic"] + (["monitoring"] if sys.version_info >= (3, 12) else [])


@pytest.fixture(autouse=True, params=SETUPS)
def clock(request, monkeypatch):
    """The setup a test runs in: "cycles", "monotonic" (both with
    backend="setprofile") or "monitoring" (the cycle counter, with
    backend="monitoring"), as the default of every Tracer."""
    if request.param == "monotonic":
        monkeypatch.setenv("FRAMETRACE_CLOCK", "monotonic")
    else:
        monkeypatch.delenv("FRAMETRACE_CLOCK", raising=False)
    monkeypatch.setenv("FRAMETRACE_BACKEND",
                       "monitoring" if request.param == "monitoring" else "setprofile")
    return request.param
