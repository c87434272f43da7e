"""Every test here runs a real tracer, in each setup of the "clock" fixture
(tests/conftest.py): both clocks on the setprofile backend, and the
monitoring backend on 3.12+."""
import pytest


@pytest.fixture(autouse=True)
def _each_setup(clock):
    return clock
