"""Shared by every layer: tests/ on sys.path (targets/, pbwire.py,
reference_tracer.py, support.py) and the "clock" fixture.

The layers: unit/ (no tracer starts), tracer/ (a real tracer, in every
setup), system/ (processes, the CLI, the pytest plugin, stress), fuzz/
(hypothesis).  See tests/README.md."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest

# A tracer runs with both clocks (the CPU cycle counter where this machine
# allows it, and CLOCK_MONOTONIC read directly) on the PyEval_SetProfile
# backend, and on 3.12+ once more on the sys.monitoring backend.
# FRAMETRACE_TEST_SETUPS=cycles (a comma-separated list) runs only those.
SETUPS = ["cycles", "monotonic"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
if os.environ.get("FRAMETRACE_TEST_SETUPS"):
    SETUPS = [s for s in SETUPS if s in os.environ["FRAMETRACE_TEST_SETUPS"].split(",")]


@pytest.fixture(params=SETUPS)
def clock(request, monkeypatch):
    """The setup a test runs in: "cycles", "monotonic" (both with
    backend="setprofile") or "monitoring" (the cycle counter, with
    backend="monitoring"), as the default of every Tracer (and of a child
    process's, through the environment).  Autouse in tests/tracer; a system
    test that runs a tracer asks for it (pytest.mark.usefixtures("clock"))."""
    if request.param == "monotonic":
        monkeypatch.setenv("FRAMETRACE_CLOCK", "monotonic")
    else:
        monkeypatch.delenv("FRAMETRACE_CLOCK", raising=False)
    monkeypatch.setenv("FRAMETRACE_BACKEND",
                       "monitoring" if request.param == "monitoring" else "setprofile")
    return request.param
