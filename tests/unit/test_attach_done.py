"""What the attacher takes of the target's "done" message: the target runs
as its own user, who can make it say anything."""
import pytest

from frametrace.remote._attacher import checked_done

GOOD = {"path": "t.json", "events": 10, "threads": 2, "dropped": 1, "dropped_records": 3,
        "start_ns": 5, "stop_ns": 9, "reason": "duration", "steps": 0}


def test_a_sound_account_is_taken():
    assert checked_done(dict(GOOD)) == GOOD


@pytest.mark.parametrize("change", [
    {"events": "10"}, {"threads": None}, {"dropped": -1}, {"dropped_records": 1.5},
    {"start_ns": 1 << 63}, {"stop_ns": 4}, {"reason": "because"}, {"steps": True},
    {"reason": ["duration"]},
])
def test_an_account_that_makes_no_sense_is_refused(change):
    assert checked_done({**GOOD, **change}) is None


@pytest.mark.parametrize("done", [None, [], "done", 7, {}])
def test_no_account_at_all_is_refused(done):
    assert checked_done(done) is None


def test_a_missing_count_is_refused():
    for key in ("events", "threads", "dropped", "dropped_records", "start_ns", "stop_ns",
                "steps"):
        done = dict(GOOD)
        del done[key]
        assert checked_done(done) is None, key
