"""Shared by every layer: tests/ on sys.path (targets/, pftrace.py, pbwire.py,
reference_tracer.py, support.py) and the "clock" fixture.

The layers: unit/ (no tracer starts), tracer/ (a real tracer, in every
setup), system/ (processes, the CLI, the pytest plugin, stress), fuzz/
(hypothesis).  See tests/README.md."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest

# A tracer runs with both clocks (the CPU cycle counter where this machine
# allows it, and CLOCK_MONOTONIC read directly) and on both backends.
# Before 3.12 both clocks on the PyEval_SetProfile backend; on 3.12+ each
# backend once and each clock once: setprofile with CLOCK_MONOTONIC, and
# sys.monitoring (the default backend there) with the cycle counter (the
# default clock).  The clock read is the same code on every backend.
# FRAMETRACE_TEST_SETUPS: a comma-separated list of "cycles" (setprofile
# with the cycle counter), "monotonic", "monitoring"; or "all".
ALL_SETUPS = ["cycles", "monotonic"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
SETUPS = ["monotonic", "monitoring"] if sys.version_info >= (3, 12) else ["cycles", "monotonic"]
if os.environ.get("FRAMETRACE_TEST_SETUPS") == "all":
    SETUPS = ALL_SETUPS
elif os.environ.get("FRAMETRACE_TEST_SETUPS"):
    SETUPS = [s for s in ALL_SETUPS if s in os.environ["FRAMETRACE_TEST_SETUPS"].split(",")]


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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "one_setup: the test does not depend on the clock or backend "
        "(a writer's file handling, a loader's parsing): it runs in the first setup only")
    config.addinivalue_line(
        "markers", "every_setup: a system test of the hook under stress (threads, signals, "
        "fork): it runs in each setup before 3.12 too")


# Before 3.12 the setups are one backend with two clock reads (the
# monotonic one takes the hook's general path for every event): a system
# test (processes, the CLI) runs in the first, as if one_setup, but for the
# hook under stress (every_setup); the tracer layer runs each clock.
SYSTEM_ONE_SETUP = sys.version_info < (3, 12) and not os.environ.get("FRAMETRACE_TEST_SETUPS")


def _one_setup(item):
    return item.get_closest_marker("one_setup") or (
        SYSTEM_ONE_SETUP and item.path.parent.name == "system"
        and not item.get_closest_marker("every_setup"))


def pytest_collection_modifyitems(config, items):
    # Deselected rather than skipped: nothing is left out, the same test has
    # run in the first setup.
    repeats = [item for item in items if _one_setup(item)
               and getattr(item, "callspec", None) is not None
               and item.callspec.params.get("clock", SETUPS[0]) != SETUPS[0]]
    if repeats:
        config.hook.pytest_deselected(items=repeats)
        dropped = set(map(id, repeats))
        items[:] = [item for item in items if id(item) not in dropped]


OTHER_USER = "frametrace-other"


@pytest.fixture(scope="session")
def other_user():
    """A second, unprivileged local user, for what frametrace promises about
    other users (attach as root, view's server): a (name, uid, gid) triple.
    Made here when the tests run as root and it does not exist yet (CI runs
    as root); skipped, saying why, where no second user can be had."""
    import pwd
    import shutil
    import subprocess
    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        if os.geteuid() != 0:
            pytest.skip(f"needs root, or a user {OTHER_USER!r}, to act as a second user")
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        made = subprocess.run([useradd, "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", OTHER_USER], capture_output=True, text=True)
        if made.returncode not in (0, 9):  # 9: made meanwhile by another run
            pytest.skip(f"cannot make a second user with useradd: {made.stderr.strip()}")
        entry = pwd.getpwnam(OTHER_USER)
    return entry.pw_name, entry.pw_uid, entry.pw_gid
