"""pytest plugin: a traced test body, and the traces of failing tests.

The fixture ``frametrace_tracer`` is a started :class:`frametrace.Tracer`
around the test body::

    def test_step(frametrace_tracer):
        train_step()
        frametrace_tracer.stop()
        assert_called(frametrace_tracer.getEvents(), "train_step", times=1)

With ``--frametrace-failures=DIR`` the trace of every failing test that used
the fixture is written to ``DIR/<nodeid made filesystem-safe>-<hash>.json``
as Chrome trace JSON (open it in https://ui.perfetto.dev, or read it back
with ``frametrace.load``), and the path is shown in the failure report
(section "frametrace") and in the terminal summary.  The test body is a
range named ``test body: <nodeid>``; ``otherData.frametrace.metadata``
holds the node id, the failing phase and its message.

Loaded by the ``pytest11`` entry point
``frametrace = "frametrace.pytest_plugin:entry_point"``, or explicitly with
``-p frametrace.pytest_plugin`` (or ``pytest_plugins``); any of these
together load it once.

(PYTEST_DONT_REWRITE: the plugin holds no test asserts, and pytest would
warn when it is asked to rewrite it after the entry point imported it.)
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Generator, Iterator

import pytest

from . import __version__, _running
from .export import write_chrome
from ._trace import RangeRecord, as_trace
from .tracer import Tracer

__all__ = ["entry_point", "frametrace_tracer", "trace_filename"]

OPTION = "--frametrace-failures"
RUN_SKIP = "frametrace run already traces this process"
# The user property (and junitxml property) naming a written trace.
TRACE_PROPERTY = "frametrace_trace"

# The pytest11 entry point should name this stand-in, not this module:
# pluggy refuses one module object registered under two names (the entry
# point's "frametrace" and "frametrace.pytest_plugin" from -p or
# pytest_plugins).  The stand-in has no hooks; its pytest_plugins makes
# pytest load this module under its own name, which it does only once
# however many ways it is asked.
entry_point = types.ModuleType(
    f"{__name__}.entry_point", "Entry point stand-in that loads frametrace.pytest_plugin."
)
entry_point.pytest_plugins = [__name__]  # type: ignore[attr-defined]


@dataclass
class _TestTrace:
    """The fixture's tracer of one test, and what the plugin saw of it."""

    tracer: Tracer
    thread_id: int
    body_start_ns: int | None = None
    body_end_ns: int | None = None
    written: bool = False


_TEST_TRACE = pytest.StashKey[_TestTrace]()
_FAILURES_DIR = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("frametrace", "frametrace function tracing")
    group.addoption(
        OPTION,
        dest="frametrace_failures",
        metavar="DIR",
        default=None,
        help="write the trace of each failing test that uses the frametrace_tracer"
        " fixture to DIR (created if missing), one .json file per test",
    )


def pytest_configure(config: pytest.Config) -> None:
    value = config.getoption("frametrace_failures", None)
    if value is None:
        return
    if not value.strip():
        raise pytest.UsageError(f"{OPTION} needs a directory")
    # Relative to where pytest was invoked, as the user typed it, not to
    # the rootdir or to wherever a test chdir()s.
    path = os.path.abspath(os.path.join(config.invocation_params.dir, os.path.expanduser(value)))
    if os.path.exists(path) and not os.path.isdir(path):
        raise pytest.UsageError(f"{OPTION}={value}: {path} exists and is not a directory")
    config.stash[_FAILURES_DIR] = path


@pytest.fixture
def frametrace_tracer(request: pytest.FixtureRequest) -> Iterator[Tracer]:
    """A started frametrace.Tracer (default options) tracing every thread
    around the test body.

    The test may stop it and read its events (``stop()``, ``getEvents()``).
    It is stopped when the body returns (a later stop is a no-op: the first
    one latches ``stop_ns``), so fixtures that use it can read its events in
    their teardown, and at the latest at this fixture's teardown.  Under
    ``frametrace run``, which traces the whole process already, the test is
    skipped.  Otherwise starting fails, and the test errors, when another
    tracer or profiler is active.
    """
    if _running.program_running:
        pytest.skip(RUN_SKIP)
    tracer = Tracer()
    refused: str | None = None
    try:
        tracer.start()
    except RuntimeError as exc:
        refused = str(exc)
    if refused is not None:
        # Failed outside the except block: the report is this one message,
        # not a chain through the tracer's RuntimeError.
        pytest.fail(f"frametrace_tracer: cannot start tracing: {refused}", pytrace=False)
    request.node.stash[_TEST_TRACE] = _TestTrace(tracer, threading.get_ident())
    try:
        yield tracer
    finally:
        tracer.stop()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, None]:
    outcome = yield
    state = item.stash.get(_TEST_TRACE, None)
    if state is not None and outcome.excinfo is not None:
        # Setup failed after the fixture started: the trace ends with the
        # failure, not with pytest's reporting of it.
        state.tracer.stop()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    # trylast: the innermost wrapper, so the body's bounds are tight.
    state = item.stash.get(_TEST_TRACE, None)
    if state is not None:
        state.body_start_ns = time.monotonic_ns()  # the clock of the events
    yield
    if state is not None:
        state.body_end_ns = time.monotonic_ns()
        state.tracer.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    state = item.stash.get(_TEST_TRACE, None)
    if state is None:
        return
    if call.when == "teardown":
        # Items live for the whole session: let the tracer (and its rings)
        # go with the test.
        del item.stash[_TEST_TRACE]
    directory = item.config.stash.get(_FAILURES_DIR, None)
    if directory is None or state.written or outcome.excinfo is not None:
        return
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    # One trace per test: the first phase that fails (setup after the
    # fixture started, the body, or teardown) writes it.
    state.written = True
    try:
        path = _write_trace(item, state, report, directory)
    except (OSError, RuntimeError, ValueError) as exc:
        message = f"could not write the trace to {directory}: {exc}"
    else:
        message = f"trace written to {path}"
        report.user_properties.append((TRACE_PROPERTY, path))
    report.sections.append(("frametrace", message))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Reports, not plugin state: under xdist only the reports reach here.
    paths = [
        value
        for key in ("failed", "error")
        for report in terminalreporter.stats.get(key, [])
        for name, value in getattr(report, "user_properties", ())
        if name == TRACE_PROPERTY
    ]
    if paths:
        terminalreporter.write_sep("-", "frametrace")
        for path in paths:
            terminalreporter.write_line(f"trace of a failing test written to {path}")


def trace_filename(nodeid: str) -> str:
    """The file name of the trace of the test ``nodeid``: the node id with
    every run of characters other than letters, digits, ``.``, ``_`` and
    ``-`` replaced by ``_``, cut to a safe length, and a hash of the whole
    id, which keeps names unique (also on case-insensitive file systems)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("._") or "test"
    digest = hashlib.sha1(nodeid.encode("utf-8")).hexdigest()[:8]
    return f"{safe[:150]}-{digest}.json"


def _write_trace(item: pytest.Item, state: _TestTrace, report: pytest.TestReport, directory: str) -> str:
    tracer = state.tracer
    tracer.stop()  # still running if setup failed after the fixture started
    crash = getattr(report.longrepr, "reprcrash", None)
    failure = crash.message if crash is not None else report.longreprtext.strip().rsplit("\n", 1)[-1]
    # start_ns, stop_ns, dropped and the pid are in otherData.frametrace already.
    metadata = {
        "nodeid": item.nodeid,
        "when": report.when,
        "failure": failure,
        "thread_id": state.thread_id,
        "body_start_ns": state.body_start_ns,
        "body_end_ns": state.body_end_ns,
        "buffer_size": tracer.buffer_size,
        "c_calls": tracer.c_calls,
        "python": platform.python_version(),
        "frametrace": __version__,
    }
    # The trace also holds pytest's own calls between the fixture's setup
    # and the body; the range marks the body itself.
    ranges = []
    if state.body_start_ns is not None:
        end = state.body_end_ns if state.body_end_ns is not None else tracer.stop_ns
        assert end is not None  # the tracer is stopped
        ranges.append(RangeRecord(f"test body: {item.nodeid}", state.thread_id,
                                  state.body_start_ns, end))
    path = os.path.join(directory, trace_filename(item.nodeid))
    trace = as_trace(tracer)
    trace.process_name, trace.ranges, trace.extra_metadata = f"pytest {item.nodeid}", ranges, metadata
    write_chrome(trace, path)
    return path
