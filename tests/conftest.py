import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest


@pytest.fixture(autouse=True, params=["cycles", "monotonic"])
def clock(request, monkeypatch):
    """Every test runs with both clocks: the CPU cycle counter (where this
    machine allows it) and CLOCK_MONOTONIC read directly."""
    if request.param == "monotonic":
        monkeypatch.setenv("FRAMETRACE_CLOCK", "monotonic")
    else:
        monkeypatch.delenv("FRAMETRACE_CLOCK", raising=False)
    return request.param
