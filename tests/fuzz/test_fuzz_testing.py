"""Fuzzing the frametrace.testing helpers with mutated and arbitrary events."""
# First: without hypothesis, the harness skips the module.
from fuzzing import (
    PYTESTMARK,
    _judge_testing_helpers,
    events_arg,
    fuzz,
    guarded,
)
from hypothesis import given
from hypothesis import strategies as st

pytestmark = PYTESTMARK


@fuzz(200)
@given(data=st.data())
@guarded
def test_fuzz_testing_helpers(data):
    events, kind = events_arg(data)
    _judge_testing_helpers(events, kind, data)
