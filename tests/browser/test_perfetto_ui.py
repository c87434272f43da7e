"""Every kind of file frametrace writes, opened in the real Perfetto UI
(headless Chromium, the UI's own trace processor): the Python/C slices of
each thread are frametrace's events of that thread (count, names, depth,
times), threads and processes carry their names, steps and ranges are all
shown, and the importer's stats report no error and no data loss.

A fault the UI shows is a Mismatch: a test of a known fault can be marked
xfail(strict=True, raises=Mismatch), which a UI that fails to load still
fails.  Before the tracks were fixed, the session's Chrome JSON,
merged session ranks, the pytest failure trace, frametrace.trace_handler()'s file
and the window-spanning range were such xfails.
"""
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from ui_compare import Expected, Mismatch, bad_stats, compare, expected_of, snapshot
from support import child_env

pytestmark = pytest.mark.browser

HERE = os.path.dirname(os.path.abspath(__file__))


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


def test_the_check_sees_a_slice_the_ui_drops(perfetto_ui, report, plain, tmp_path):
    # The check is not blind: one more slice, partly overlapping the main
    # thread's root, is dropped by the UI's importer and reported.
    out, recorded = plain
    with open(out / "plain.json") as f:
        doc = json.load(f)
    pid = recorded["pid"]
    root = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e["tid"] == pid)
    doc["traceEvents"].append({"ph": "X", "name": "intruder", "cat": "python", "pid": pid,
                               "tid": pid, "ts": root["ts"] + root["dur"] / 2,
                               "dur": root["dur"]})
    with open(tmp_path / "overlap.json", "w") as f:
        json.dump(doc, f)
    with pytest.raises(Mismatch, match="slice_drop_overlapping_complete_event"):
        check(perfetto_ui, report, "self-check: one overlapping slice more (must fail)",
              tmp_path / "overlap.json", expected_of(recorded))


# The session has steps, a range open when the window opens (each
# iteration's holds prof.step(), so it starts before the frames around it)
# and one spanning the window: what Perfetto dropped before the tracks were fixed.
SESSION_FILES = {
    "to_chrome": "session.json",
    "to_perfetto": "session.pftrace",
    "frametrace.trace_handler": None,  # the quick start's handler: frametrace.<pid>.0.json
    "load.save": "loaded.json",  # frametrace.load(session.json).save(): from its events
}


@pytest.mark.parametrize("name", list(SESSION_FILES.values()), ids=list(SESSION_FILES))
def test_session_files(perfetto_ui, report, session, name):
    out, recorded = session
    if name is None:
        name = f"frametrace.{recorded['pid']}.0.json"
    check(perfetto_ui, report, "session (schedule, steps, ranges)", out / name,
          expected_of(recorded))


def test_window_spanning_range_is_shown(perfetto_ui, report, session):
    out, recorded = session
    # The epoch range holds the whole loop, so the whole window: the UI must
    # show it once, whatever trace.ranges holds.
    expected = expected_of(recorded)
    if "epoch" not in expected.ranges:
        expected.ranges.append("epoch")
    check(perfetto_ui, report, "session, every range", out / "session.pftrace", expected)


@pytest.mark.parametrize("kind", ["plain", "session"])
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


NOT_UTF8 = """\
import sys
import frametrace
from frametrace.export import write_chrome, write_perfetto

namespace = {}
exec(compile("def f():\\n    return len('x')\\n", "/nowhere/caf\\udce9.py", "exec"), namespace)
f = namespace["f"]
f.__code__ = f.__code__.replace(co_name="bad\\udcffname", co_qualname="bad\\udcffname")

def g():
    f()
    f()

with frametrace.trace() as tracer:
    g()
write_chrome(tracer, sys.argv[1] + ".json")
write_perfetto(tracer, sys.argv[1] + ".pftrace")
print(sum(e.name == "bad\\udcffname" for e in tracer.getEvents()))
"""


@pytest.mark.parametrize("ext", [".json", ".pftrace"])
def test_names_that_are_not_utf8(perfetto_ui, report, tmp_path, ext):
    """A function named from bytes that are not UTF-8 (a lone surrogate):
    the file loads whole; JSON shows the name's escape, .pftrace U+FFFD."""
    (tmp_path / "odd.py").write_text(NOT_UTF8)
    proc = subprocess.run([sys.executable, "odd.py", "odd"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "2\n"
    with perfetto_ui.open(tmp_path / ("odd" + ext)) as loaded:
        seen = snapshot(loaded)
    shown = "bad\\udcffname" if ext == ".json" else "bad\ufffdname"
    names = [s["name"] for s in seen["slices"]]
    report.append(f"== names not UTF-8, {ext}: {names}")
    assert names.count(shown) == 2, names
    assert {"g", "len"} <= set(names)
    assert not bad_stats(seen), seen["stats"]
