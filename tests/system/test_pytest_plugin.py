"""frametrace.pytest_plugin, run on generated test files with pytester."""
from __future__ import annotations

import importlib.metadata
import json
import os
import re

import pytest

import frametrace
from frametrace.loader import load, read_other_data
from frametrace.pytest_plugin import trace_filename
from frametrace.testing import assert_no_events_after_stop, assert_well_nested

pytest_plugins = ["pytester"]


def plugin_args() -> list[str]:
    """The -p option that loads the plugin: by its entry point's name when
    frametrace is installed with one (under an entry point of another name
    that points at the module itself, -p frametrace.pytest_plugin would
    register the module twice), else by module name."""
    for ep in importlib.metadata.entry_points().select(group="pytest11"):
        if ep.value.split(":")[0].strip() == "frametrace.pytest_plugin":
            return ["-p", ep.name]
    return ["-p", "frametrace.pytest_plugin"]


@pytest.fixture(autouse=True)
def only_named_plugins(monkeypatch):
    # The inner runs load this plugin by name and no other installed one:
    # hermetic, and much faster where heavy plugins are installed.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # In process: the outer test is not traced, so the inner tests can be.
    return pytester.runpytest_inprocess(*plugin_args(), *args)


def traces(directory) -> list[str]:
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def read_trace(path) -> tuple[frametrace.Trace, dict, dict]:
    """The trace a failure wrote, its otherData.frametrace and the plugin's
    metadata there."""
    other = read_other_data(path)
    return load(path), other, other["metadata"]


def test_passing_and_failing_tests_use_the_fixture(pytester):
    pytester.makepyfile(
        """
        def work():
            return sum(range(10))

        def test_passes(frametrace_tracer):
            assert frametrace_tracer.active
            assert work() == 45

        def test_fails(frametrace_tracer):
            assert work() == 46
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*def test_fails(frametrace_tracer):*", "E  * assert 45 == 46"])
    # Without the option nothing is written, and there is no report section.
    assert "- frametrace -" not in result.stdout.str()
    assert not [p for p in pytester.path.rglob("*.json")]


def test_fixture_tracer_usable_inside_the_test(pytester):
    pytester.makepyfile(
        """
        import pytest
        import frametrace
        from frametrace.testing import (
            assert_called, assert_no_events_after_stop, assert_well_nested, find_events)

        seen = []

        def known_call(n):
            return [n] * n

        def after_stop():
            pass

        def test_stop_and_read(frametrace_tracer):
            tracer = frametrace_tracer
            seen.append(tracer)
            assert isinstance(tracer, frametrace.Tracer) and tracer.active
            known_call(3)
            tracer.stop()
            stop_ns = tracer.stop_ns
            after_stop()
            tracer.stop()  # latched: no-op
            assert tracer.stop_ns == stop_ns and not tracer.active
            events = tracer.getEvents()
            assert_well_nested(events)
            assert_no_events_after_stop(events, stop_ns)
            (call,) = assert_called(events, "known_call", times=1)
            assert call.lineno == known_call.__code__.co_firstlineno and call.filename == __file__
            body = events[call.parent]
            assert body.name == "test_stop_and_read" and body.open_at_stop
            assert_called(events, "after_stop", times=0)

        def test_previous_tracer_stopped():
            (tracer,) = seen
            assert not tracer.active and tracer.stop_ns is not None

        @pytest.fixture
        def checked(frametrace_tracer):
            yield
            # The body is over: its tracer is stopped and readable here.
            assert not frametrace_tracer.active
            assert_called(frametrace_tracer.getEvents(), "known_call", times=2)

        def test_read_in_fixture_teardown(checked):
            known_call(1)
            known_call(2)

        def test_tracers_released(request):
            # Items live all session; their tracers (and rings) must not.
            import frametrace.pytest_plugin as plugin
            assert not [i for i in request.session.items if plugin._TEST_TRACE in i.stash]
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=4)


def test_fixture_errors_when_another_profiler_is_active(pytester):
    pytester.makepyfile(
        """
        import cProfile
        import pytest

        @pytest.fixture
        def profiling():
            profile = cProfile.Profile()
            profile.enable()
            yield
            profile.disable()

        def test_conflict(profiling, frametrace_tracer):
            pass

        def test_after(frametrace_tracer):
            assert frametrace_tracer.active
        """
    )
    result = run(pytester, "--frametrace-failures=traces")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_conflict*",
        "frametrace_tracer: cannot start tracing: another profiler *; stop it before starting frametrace",
    ])
    # Just the message: not a chain through the tracer's RuntimeError.
    assert "During handling of the above exception" not in result.stdout.str()
    assert traces(pytester.path / "traces") == []  # never started: no trace


def test_helper_failure_messages_in_the_report(pytester):
    pytester.makepyfile(
        """
        import frametrace
        from frametrace.testing import assert_called, assert_well_nested

        def known_call():
            pass

        def test_typo(frametrace_tracer):
            known_call()
            frametrace_tracer.stop()
            assert_called(frametrace_tracer.getEvents(), "known_cal")

        def test_count(frametrace_tracer):
            known_call()
            frametrace_tracer.stop()
            assert_called(frametrace_tracer.getEvents(), "known_call", times=2)

        def test_nesting():
            events = [
                frametrace.Event(("outer", "/src/m.py", 3, "py", 7, 8, 0, 100, 0, -1, False, False)),
                frametrace.Event(("inner", "/src/m.py", 12, "py", 7, 8, 50, 150, 1, 0, False, False)),
            ]
            assert_well_nested(events)
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "E * AssertionError: 'known_cal' was never called (* events recorded):",
        "E *   did you mean: 'known_call' (1x)*",
        "E *   most called: *",
    ])
    call_line = r"E +  event \d+ 'known_call' \(py\) on thread \d+ \(native \d+\), start_ns=\d+ end_ns=\d+, depth=\d+ parent=\d+, at .*test_helper_failure_messages_in_the_report\.py:4$"
    assert re.search(r"E +AssertionError: 'known_call' was called 1 time, expected 2:$", out, re.M), out
    assert re.search(call_line, out, re.M), out
    result.stdout.fnmatch_lines([
        "E * events are not well nested (1 problem):",
        "E *   event 1 'inner' (py) on thread 7 (native 8), start_ns=50 end_ns=150, depth=1 parent=0, at /src/m.py:12: is not within its parent",
        "E *     event 0 'outer' (py) on thread 7 (native 8), start_ns=0 end_ns=100, depth=0 parent=-1, at /src/m.py:3",
    ])
    # __tracebackhide__: the tracebacks end in the test, not in the helpers.
    assert "frametrace/testing.py" not in out


FAILING_AND_PASSING = """
    import pytest

    def known_function_xyz(n):
        return [i * i for i in range(n)]

    def test_passes(frametrace_tracer):
        known_function_xyz(3)

    def test_fails(frametrace_tracer):
        known_function_xyz(4)
        assert len(known_function_xyz(2)) == 3

    def test_fails_untraced():
        known_function_xyz(5)
        assert False

    @pytest.mark.xfail(reason="expected")
    def test_xfails(frametrace_tracer):
        assert False
"""


def test_failures_option_writes_the_failing_test_trace(pytester):
    pytester.makepyfile(test_module=FAILING_AND_PASSING)
    directory = pytester.path / "traces" / "nested"  # created on demand
    result = run(pytester, "--frametrace-failures=traces/nested")
    result.assert_outcomes(passed=1, failed=2, xfailed=1)

    # Exactly one file: the failing test that used the fixture.
    nodeid = "test_module.py::test_fails"
    assert traces(directory) == [trace_filename(nodeid)]
    path = directory / trace_filename(nodeid)

    # The path is in the test's failure report, and in the summary.
    result.stdout.fnmatch_lines([
        "*_ test_fails _*",
        "*assert 2 == 3*",
        "*- frametrace -*",
        f"trace written to {path}",
        "*_ test_fails_untraced _*",
    ])
    result.stdout.fnmatch_lines(["*- frametrace -*", f"trace of a failing test written to {path}"])
    assert result.stdout.str().count(str(path)) == 2

    # Chrome trace JSON, as Perfetto opens it.
    with open(path, encoding="utf-8") as fh:
        chrome = json.load(fh)
    assert {"ph", "ts", "dur", "pid", "tid", "name", "cat"} <= set(chrome["traceEvents"][-1])
    trace, other, meta = read_trace(path)
    assert meta["nodeid"] == nodeid and meta["when"] == "call"
    assert other["pid"] == trace.pid == os.getpid()  # in process: this process
    assert meta["failure"].startswith("assert 2 == 3")
    assert isinstance(other["start_ns"], int) and other["start_ns"] <= other["stop_ns"]
    assert trace.stats.dropped == 0
    events = trace.events
    assert_well_nested(events)
    assert_no_events_after_stop(events, trace.tracer_stop_ns)
    assert min(e.start_ns for e in events) >= trace.tracer_start_ns

    # The failing test's own calls, inside the range that marks its body.
    names = [e.name for e in events]
    assert names.count("test_fails") == 1 and names.count("known_function_xyz") == 2
    assert "test_passes" not in names and "test_fails_untraced" not in names
    (body,) = trace.ranges
    assert body.name == f"test body: {nodeid}" and body.thread_id == meta["thread_id"]
    assert (body.start_ns, body.end_ns) == (meta["body_start_ns"], meta["body_end_ns"])
    assert trace.tracer_start_ns <= body.start_ns <= body.end_ns <= trace.tracer_stop_ns
    test_event = events[names.index("test_fails")]
    assert body.start_ns <= test_event.start_ns <= test_event.end_ns <= body.end_ns
    for e in events:
        if e.name == "known_function_xyz":
            assert events[e.parent].name == "test_fails"


def test_failures_option_writes_nothing_when_all_pass(pytester):
    pytester.makepyfile(
        """
        def test_one(frametrace_tracer):
            pass

        def test_two(frametrace_tracer):
            frametrace_tracer.stop()
        """
    )
    result = run(pytester, "--frametrace-failures=traces")
    result.assert_outcomes(passed=2)
    assert not (pytester.path / "traces").exists()
    assert "trace written" not in result.stdout.str()


def test_failures_option_setup_and_teardown_failures(pytester):
    pytester.makepyfile(
        test_phases="""
        import pytest

        def setup_work():
            pass

        @pytest.fixture
        def broken_before():
            raise RuntimeError("broken before the tracer started")

        @pytest.fixture
        def broken_after(frametrace_tracer):
            setup_work()
            raise RuntimeError("broken after the tracer started")

        @pytest.fixture
        def broken_teardown(frametrace_tracer):
            yield
            raise RuntimeError("broken in teardown")

        def test_setup_error_untraced(broken_before, frametrace_tracer):
            pass

        def test_setup_error_traced(broken_after):
            pass

        def test_teardown_error(broken_teardown):
            setup_work()

        def test_fails_twice(broken_teardown):
            assert False
        """
    )
    result = run(pytester, "--frametrace-failures", "out")
    result.assert_outcomes(passed=1, failed=1, errors=4)
    directory = pytester.path / "out"
    expected = {
        trace_filename(f"test_phases.py::{name}"): when
        for name, when in [("test_setup_error_traced", "setup"), ("test_teardown_error", "teardown"),
                           ("test_fails_twice", "call")]
    }
    assert traces(directory) == sorted(expected)  # one per test, even failing twice
    for name, when in expected.items():
        trace, _other, meta = read_trace(directory / name)
        assert meta["when"] == when
        events = trace.events
        assert_well_nested(events)
        assert_no_events_after_stop(events, trace.tracer_stop_ns)
        if when == "setup":
            # The body never ran; the trace ends with the failing fixture.
            assert trace.ranges == [] and meta["body_start_ns"] is None
            assert [e.name for e in events].count("setup_work") == 1
            assert "broken after the tracer started" in meta["failure"]
        else:
            assert len(trace.ranges) == 1
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_setup_error_traced*",
        "*- frametrace -*",
        f"trace written to {directory / trace_filename('test_phases.py::test_setup_error_traced')}",
    ])


def test_failures_option_reports_an_unwritable_directory(pytester):
    pytester.makepyfile("def test_fails(frametrace_tracer):\n    assert False\n")
    pytester.path.joinpath("afile").write_text("")
    result = run(pytester, "--frametrace-failures=afile/sub")
    result.assert_outcomes(failed=1)  # the test's own failure, no internal error
    result.stdout.fnmatch_lines(["*- frametrace -*", "could not write the trace to *afile/sub: *"])


@pytest.mark.parametrize("value, message", [
    ("afile", "--frametrace-failures=afile: * exists and is not a directory"),
    ("", "--frametrace-failures needs a directory"),
])
def test_failures_option_checked(pytester, value, message):
    pytester.path.joinpath("afile").write_text("")
    pytester.makepyfile("def test_ok(): pass\n")
    result = run(pytester, f"--frametrace-failures={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_trace_filename():
    names = {
        trace_filename(nodeid)
        for nodeid in ["t.py::test[a/b]", "t.py::test[a_b]", "t.py::Test::test_A", "t.py::Test::test_a"]
    }
    assert len(names) == 4  # distinct after sanitizing, also ignoring case
    assert len({n.lower() for n in names}) == 4
    for name in names | {trace_filename("../x/" + "y" * 500 + "::t[\u00e9 \0]")}:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*-[0-9a-f]{8}\.json", name), name
        assert len(name) <= 170
    assert trace_filename("tests/test_x.py::TestA::test_b[1-x]").startswith("tests_test_x.py_TestA_test_b_1-x-")
    assert trace_filename("t.py::a") == trace_filename("t.py::a")


REGISTERED_ONCE = """
    import frametrace.pytest_plugin as plugin

    def test_registered_once(request, frametrace_tracer):
        assert frametrace_tracer.active
        manager = request.config.pluginmanager
        assert manager.get_plugin("frametrace") is plugin.entry_point
        assert [name for name, p in manager.list_name_plugin() if p is plugin] == [plugin.__name__]
"""


@pytest.mark.parametrize("args, conftest", [
    (["-p", "frametrace"], False),  # the entry point alone
    (["-p", "frametrace.pytest_plugin", "-p", "frametrace"], True),  # and the module, twice more
])
def test_loaded_once_by_entry_point_and_by_name(pytester, args, conftest):
    # A distribution whose pytest11 entry point is the stand-in, as
    # pyproject.toml declares it; -p <entry point name> loads it even with
    # autoloading off.
    info = pytester.mkdir("frametrace_entry_test-0.dist-info")
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: frametrace-entry-test\nVersion: 0\n")
    info.joinpath("entry_points.txt").write_text(
        "[pytest11]\nframetrace = frametrace.pytest_plugin:entry_point\n"
    )
    if conftest:
        pytester.makeconftest('pytest_plugins = ["frametrace.pytest_plugin"]\n')
    pytester.makepyfile(REGISTERED_ONCE)
    pytester.syspathinsert()  # where importlib.metadata finds the distribution
    # (Not -W error: in this process -p frametrace meets the frametrace
    # package already imported, and pytest warns it cannot rewrite it.)
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=1)


def test_loaded_once_when_autoloaded(pytester, monkeypatch):
    # The real thing: a fresh interpreter autoloading the entry point after
    # -p named the module, and a conftest naming it again.
    info = pytester.mkdir("frametrace_entry_test-0.dist-info")
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: frametrace-entry-test\nVersion: 0\n")
    info.joinpath("entry_points.txt").write_text(
        "[pytest11]\nframetrace = frametrace.pytest_plugin:entry_point\n"
    )
    pytester.makeconftest('pytest_plugins = ["frametrace.pytest_plugin"]\n')
    pytester.makepyfile(REGISTERED_ONCE)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    # The working directory, holding the distribution, is on the
    # subprocess's PYTHONPATH.
    result = pytester.runpytest_subprocess("-p", "frametrace.pytest_plugin", "-W", "error::pytest.PytestWarning")
    result.assert_outcomes(passed=1)
