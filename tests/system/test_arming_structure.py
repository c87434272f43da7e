"""A session arms its tracer at the start of warm-up: no ring is allocated,
no profile function set and no sys.monitoring event armed inside an active
step, from the prof.step() that begins the first one to the one that ends
the last.  Counted, not timed: frametrace._testing.lifecycle_counts() and
the audit events of installing ("sys.setprofile") and of taking the tool id
("sys.monitoring.register_callback"), in a child process (audit hooks
cannot be removed)."""
import pytest

from support import run_json

pytestmark = [pytest.mark.usefixtures("clock"), pytest.mark.every_setup]

# Steps: 0 wait, 1 warm-up, 2-4 active (Python traced in 2 and 3), 5 none.
PROGRAM = """
    import json, sys
    import frametrace
    import frametrace.session
    from frametrace import _testing

    if COLD:  # the session as before arming: made and started in step 2
        frametrace.session.Profile._prepare = lambda self: None
    where = ["enter"]
    audits = []

    def audit(event, args):
        if event == "sys.setprofile" or event.startswith("sys.monitoring."):
            audits.append([where[0], event])

    sys.addaudithook(audit)
    probe = frametrace.Tracer()  # only to reach the counters
    counts = {}

    def model(x):
        return x + 1

    sched = frametrace.schedule(wait=1, warmup=1, active=3, repeat=1)
    with frametrace.profile(schedule=sched, python_steps=2) as prof:
        for step in range(6):
            where[0] = f"work {step}"
            model(step)
            counts[f"before step() {step}"] = _testing.lifecycle_counts(probe)
            where[0] = f"step() {step}"
            prof.step()
            counts[f"after step() {step}"] = _testing.lifecycle_counts(probe)
        backend = prof.last_trace.tracer.backend if prof.last_trace else None
    where[0] = "exit"
    print(json.dumps({"audits": audits, "counts": counts, "backend": backend,
                      "events": len(prof.last_trace.events)}))
"""

# From the prof.step() that begins step 2 (ends step 1) to the one that
# ends step 4.
ACTIVE = ["step() 1", "work 2", "step() 2", "work 3", "step() 3", "work 4", "step() 4"]


def run(cold):
    return run_json(PROGRAM.replace("COLD", str(cold)))


def test_nothing_is_allocated_installed_or_armed_inside_an_active_step():
    res = run(cold=False)
    assert res["events"] > 0
    counts = res["counts"]
    assert counts["before step() 1"] == counts["after step() 4"]
    # Armed at the start of warm-up: inside the prof.step() ending step 0.
    assert counts["before step() 0"] != counts["after step() 0"]
    inside = [event for where, event in res["audits"] if where in ACTIVE]
    if res["backend"] == "monitoring":
        # Only the tool id's release at the stop (callbacks set to None).
        at_stop = [e for w, e in res["audits"] if w == "step() 3"]
        assert inside == at_stop
        assert "sys.setprofile" not in inside
    else:
        # One audit: the hook's removal at the stop, ending step 3.
        assert inside == ["sys.setprofile"]
        assert [w for w, e in res["audits"] if w in ACTIVE] == ["step() 3"]


def test_without_arming_the_same_counts_see_the_start_inside_the_first_active_step():
    # The check above can fail: the session's start-up before arming.
    res = run(cold=True)
    counts = res["counts"]
    assert counts["before step() 1"] != counts["after step() 1"]
    inside = [event for where, event in res["audits"] if where == "step() 1"]
    assert inside  # installed (setprofile) or the tool id taken (monitoring)
