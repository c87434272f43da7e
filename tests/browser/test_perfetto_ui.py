"""Every kind of file frametrace writes, opened in the real Perfetto UI
(headless Chromium, the UI's own trace processor): the Python/C slices of
each thread are frametrace's events of that thread (count, names, depth,
times), threads and processes carry their names, steps and ranges are all
shown, and the importer's stats report no error and no data loss.

Tests of what issue 18 says is broken today assert the correct behaviour
and are marked xfail(strict=True): once fixed they fail, and the mark goes.
"""
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from ui_compare import Expected, Mismatch, compare, expected_of, snapshot
from support import child_env

pytestmark = pytest.mark.browser

HERE = os.path.dirname(os.path.abspath(__file__))


def known_broken(reason):
    """Issue 18's known faults: the test asserts the right result and fails
    today by a Mismatch only (a UI that does not load still fails it)."""
    return pytest.mark.xfail(strict=True, raises=Mismatch, reason=reason)


def produce(mode, out, *args):
    """Runs produce.py MODE in a process of its own; what it recorded."""
    os.makedirs(out, exist_ok=True)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "produce.py"), mode, str(out), *args],
                          capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "recorded.pickle"), "rb") as f:
        return pickle.load(f)


def check(ui, report, title, path, expected):
    """Opens path in the UI and compares; the table goes to the report."""
    with ui.open(path) as loaded:
        seen = snapshot(loaded)
        wasm = any("built-in WASM engine" in line for line in loaded.console())
    rows, problems = compare(expected, seen)
    report.append("")
    report.append(f"== {title}: {os.path.basename(path)} ({os.path.getsize(path)} bytes)"
                  + ("" if wasm else " [not the UI's WASM trace processor]"))
    report.extend("   " + r for r in rows)
    report.extend("   PROBLEM: " + p for p in problems)
    assert wasm, "the UI did not load the trace into its own WASM trace processor"
    if problems:
        raise Mismatch(f"{title}: the Perfetto UI shows {path} otherwise than recorded:\n"
                       + "\n".join(rows + problems))
    return seen


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain")
    return out, produce("plain", out)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    out = tmp_path_factory.mktemp("session")
    return out, produce("session", out)


@pytest.mark.parametrize("ext", [".json", ".json.gz", ".pftrace", ".pftrace.gz"])
def test_plain_tracer_files(perfetto_ui, report, plain, ext):
    out, recorded = plain
    writer = "write_chrome" if ".json" in ext else "write_perfetto"
    check(perfetto_ui, report, f"plain tracer, {writer}", out / ("plain" + ext),
          expected_of(recorded))


SESSION_FILES = {
    "to_chrome": pytest.param("session.json", marks=known_broken((
        "issue 18 part 2: steps on tid 0 land on the main thread's track (renamed 'steps'), "
        "and a range open when the window opens partly overlaps the frames there: "
        "slice_drop_overlapping_complete_event"))),
    "to_perfetto": "session.pftrace",
    "frametrace.save": pytest.param(None, marks=known_broken((
        "issue 18 part 1: frametrace.save() writes the portable format, which the UI "
        "opens as an empty trace"))),
}


@pytest.mark.parametrize("name", list(SESSION_FILES.values()), ids=list(SESSION_FILES))
def test_session_files(perfetto_ui, report, session, name):
    out, recorded = session
    if name is None:
        name = f"frametrace.{recorded['pid']}.0.json"
    check(perfetto_ui, report, "session (schedule, steps, ranges)", out / name,
          expected_of(recorded))


@known_broken((
    "issue 18 part 2: a range spanning the whole window (entered before it opens, left "
    "after it closes) is missing from trace.ranges, so from every file"))
def test_window_spanning_range_is_shown(perfetto_ui, report, session):
    out, recorded = session
    # The epoch range holds the whole loop, so the whole window: the UI must
    # show it once, whatever trace.ranges holds.
    expected = expected_of(recorded)
    if "epoch" not in expected.ranges:
        expected.ranges.append("epoch")
    check(perfetto_ui, report, "session, every range", out / "session.pftrace", expected)


@pytest.mark.parametrize("kind", [
    "plain",
    pytest.param("session", marks=known_broken((
        "issue 18 part 2: merge keeps each rank's steps on tid 0, which the UI puts on the "
        "rank's main thread track (renamed 'steps'), beside a range that partly overlaps "
        "frames there: slice_drop_overlapping_complete_event"))),
])
def test_merged_ranks(perfetto_ui, report, tmp_path, kind):
    expected = Expected()
    inputs = []
    for rank in range(2):
        out = tmp_path / f"rank{rank}"
        expected_of(produce(f"rank-{kind}", out, f"rank {rank}"), into=expected)
        inputs.append(str(out / "rank.json"))
    merged = tmp_path / "merged.json"
    proc = subprocess.run([sys.executable, "-m", "frametrace", "merge", *inputs, "-o", str(merged)],
                          capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr
    check(perfetto_ui, report, f"frametrace merge of two ranks ({kind})", merged, expected)


FAILING_TEST = """
    import os
    import pickle
    import threading

    import pytest


    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)


    @pytest.fixture
    def recorded(frametrace_tracer):
        yield
        # The plugin stopped the tracer when the body returned: these are
        # the events the failure trace holds.
        with open(os.environ["RECORDED"], "wb") as f:
            pickle.dump({{"pid": os.getpid(), "process_name": "pytest " + {nodeid!r},
                         "events": frametrace_tracer.getEvents(),
                         "threads": [tuple(t) for t in frametrace_tracer.threads],
                         "ranges": [("test body: " + {nodeid!r}, threading.get_ident())]}}, f)


    def test_loss_goes_down(recorded):
        helper = threading.Thread(target=fib, args=(6,), name="helper")
        helper.start()
        helper.join()
        assert fib(7) == 0
"""


@known_broken((
    "issue 18 part 2: the test-body range starts inside the traced time.monotonic_ns() call "
    "that reads its start (and ends inside the one that reads its end), on the frames' "
    "track: slice_drop_overlapping_complete_event"))
def test_pytest_failure_trace(perfetto_ui, report, tmp_path):
    nodeid = "test_failing.py::test_loss_goes_down"
    (tmp_path / "test_failing.py").write_text(textwrap.dedent(FAILING_TEST.format(nodeid=nodeid)))
    traces, pickled = tmp_path / "traces", tmp_path / "recorded.pickle"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--frametrace-failures={traces}", "test_failing.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=child_env(RECORDED=str(pickled)))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = traces.iterdir()
    with open(pickled, "rb") as f:
        recorded = pickle.load(f)
    check(perfetto_ui, report, "pytest --frametrace-failures", path, expected_of(recorded))
