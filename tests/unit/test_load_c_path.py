"""frametrace.loader's and frametrace.merge's C path
(``_tracer._load_chrome_calls``, ``_tracer._merge_chrome_lines``): the
lines laid out as the C writer lays them out, of functions and threads (or
pids) already met, parsed in C; everything else, and whatever the C path
does not take, goes through the Python path (``json.JSONDecoder.raw_decode``).
Both give the same Trace, event for event, the same merged events, and the
same errors."""
from __future__ import annotations

import contextlib
import gzip
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import frametrace
from frametrace import loader
from frametrace import merge as merge_module
from merge_oracle import expected_events, merged_events

ORIGIN = 1_000_000_000
PID = 4242

# Names and locations: plain, needing escapes, Latin-1 (a one-byte buffer
# still), beyond Latin-1 (a buffer the C path leaves to Python whole).
NAMES = ["f", "mod.g", "Cls.method", 'q"uote', "back\\slash", "tab\there", "caf\u00e9",
         "\u4e2d\u6587", "<lambda>"]
FILES = ["/src/a.py:10", "/src/b c.py:0", "<built-in>:0", "/src/\u00e9.py:7", "C:\\x\\y.py:3"]


def us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def raw(text: str) -> str:
    """A JSON string as the C writer writes it: escapes only where needed."""
    return json.dumps(text, ensure_ascii=False)


def compact(ev: dict) -> str:
    """An event as export_chrome.c writes it."""
    flags = "".join(f',"{f}":true' for f in ("open_at_start", "open_at_stop", "open_at_loss")
                    if ev.get(f))
    return (f'{{"ph":"X","cat":"{ev["cat"]}","pid":{ev["pid"]},"tid":{ev["tid"]},'
            f'"ts":{us(ev["ts"])},"dur":{us(ev["dur"])},'
            f'"name":{raw(ev["name"])},"args":{{"file":{raw(ev["file"])}{flags}}}}}')


def other_layout(ev: dict, how: str) -> str:
    """The same event as another writer (or a hand) lays it out: each one a
    line the C path does not take."""
    if how == "escaped":  # \\u escapes where the C writer writes the characters
        return compact(ev).replace(raw(ev["name"]),
                                   json.dumps(ev["name"], ensure_ascii=True).replace("a", "\\u0061"))
    args = {"file": ev["file"]}
    for f in ("open_at_start", "open_at_stop", "open_at_loss"):
        if ev.get(f):
            args[f] = True
    doc = {"ph": "X", "cat": ev["cat"], "pid": ev["pid"], "tid": ev["tid"], "ts": "TS",
           "dur": "DUR", "name": ev["name"], "args": args}
    if how == "spaced":
        text = json.dumps(doc)
    elif how == "reordered":
        text = json.dumps(dict(reversed(list(doc.items()))), separators=(",", ":"))
    else:  # "integer": whole microseconds written as integers
        text = compact(ev)
        if ev["ts"] % 1000 == 0:
            text = text.replace(f'"ts":{us(ev["ts"])}', f'"ts":{ev["ts"] // 1000}')
        return text
    return text.replace('"TS"', us(ev["ts"])).replace('"DUR"', us(ev["dur"]))


def document(lines: list[str], stop_ns: int, tids: list[int], origin: int = ORIGIN,
             wall: int = 1_700_000_000_000_000_000, other_first: bool = False) -> str:
    """other_first: otherData before traceEvents (where write_chrome puts it
    since the tracks were made), else after them (where it put it before)."""
    head = ['{"ph":"M","name":"process_name","cat":"__metadata","pid":%d,"tid":0,'
            '"args":{"name":"python x.py"}}' % PID]
    for serial, tid in enumerate(tids, 1):
        head.append('{"ph":"M","name":"thread_name","cat":"__metadata","pid":%d,"tid":%d,'
                    '"args":{"name":"T%d","thread_id":%d,"native_thread_id":%d,'
                    '"thread_serial":%d}}' % (PID, tid, serial, tid + 7, tid, serial))
    ft = {"format": "frametrace", "version": 1, "origin_ns": origin, "start_ns": origin,
          "stop_ns": stop_ns, "pid": PID, "dropped": 0,
          "thread_ids": {str(t): t + 7 for t in tids},
          "clock_anchor": {"monotonic_ns": origin, "wall_ns": wall}}
    other = '"otherData":' + json.dumps({"frametrace": ft})
    events = '"traceEvents":[' + ",\n".join(head + lines) + ']'
    if other_first:
        return "{" + other + "," + events + ',"displayTimeUnit":"ns"}'
    return "{" + events + ',"displayTimeUnit":"ns",' + other + "}"


@st.composite
def threads_events(draw):
    """Each thread's calls, parents first as the writer writes them (a child
    within its parent), with open flags, on up to three threads."""
    tids = draw(st.lists(st.integers(1, 2**40), min_size=1, max_size=3, unique=True))
    events = []
    for tid in tids:
        t = 0
        for _ in range(draw(st.integers(0, 6))):
            def tree(start: int, depth: int) -> int:
                idx = len(events)
                events.append(None)
                now = start + draw(st.integers(0, 2000))
                for _ in range(draw(st.integers(0, 3)) if depth < 4 else 0):
                    now = tree(now, depth + 1) + draw(st.integers(0, 1500))
                end = now + draw(st.integers(0, 2000))
                events[idx] = {
                    "cat": draw(st.sampled_from(["python", "c"])), "pid": PID, "tid": tid,
                    "ts": start, "dur": end - start, "name": draw(st.sampled_from(NAMES)),
                    "file": draw(st.sampled_from(FILES)),
                    "open_at_start": draw(st.booleans()) if depth == 0 else draw(
                        st.sampled_from([False, False, False, True])),
                    "open_at_stop": draw(st.sampled_from([False, False, True])),
                    "open_at_loss": draw(st.sampled_from([False, False, False, True])),
                    "layout": draw(st.sampled_from(["compact"] * 6 + ["spaced", "reordered",
                                                                     "integer", "escaped"])),
                }
                return end
            t = tree(t + draw(st.integers(0, 3000)), 0)
    return tids, events


def write(tmp_path, text: str, gz: bool):
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def load_both(path, monkeypatch):
    """load(path) with the C path, counting the events it took, and without."""
    taken = []
    real = loader._load_chrome_calls

    def counting(buf, pos, stop, calls, *rest):
        before = len(calls)
        try:
            return real(buf, pos, stop, calls, *rest)
        finally:
            taken.append(len(calls) - before)
    with monkeypatch.context() as m:
        m.setattr(loader, "_load_chrome_calls", counting)
        with_c = loader.load(path)
    with loader.python_reader():
        without = loader.load(path)
    return with_c, without, sum(taken)


def assert_same_trace(a, b):
    assert len(a.events) == len(b.events)
    for i, (x, y) in enumerate(zip(a.events, b.events)):
        assert type(x) is frametrace.Event
        assert tuple(x) == tuple(y), (i, x, y)
        for f in frametrace.Event.__match_args__:
            assert type(getattr(x, f)) is type(getattr(y, f)), (i, f)
    for f in ("ranges", "steps", "threads", "stats", "pid",
              "tracer_start_ns", "tracer_stop_ns", "session_start_ns", "session_end_ns"):
        assert getattr(a, f) == getattr(b, f), f


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(threads_events(), st.booleans(), st.booleans())
def test_c_and_python_paths_give_the_same_trace(tmp_path, monkeypatch, te, gz, other_first):
    tids, events = te
    lines = [compact(e) if e["layout"] == "compact" else other_layout(e, e["layout"])
             for e in events]
    stop = ORIGIN + max((e["ts"] + e["dur"] for e in events), default=0) + 1
    path = write(tmp_path, document(lines, stop, tids, other_first=other_first), gz)
    # Found without reading the events, at either end.
    assert loader._tail_other(str(path)) is not None
    with_c, without, _taken = load_both(path, monkeypatch)
    assert_same_trace(with_c, without)
    assert [(e.name, e.start_ns - ORIGIN) for e in with_c.events] == [
        (e["name"], e["ts"]) for e in events]


def chain(n: int, tid: int = 5, names=("f", "g", "h")) -> list[dict]:
    """n calls of a few functions, each within the previous one."""
    return [{"cat": "python", "pid": PID, "tid": tid, "ts": 10 * i, "dur": 10 * (2 * n - 2 * i),
             "name": names[i % len(names)], "file": "/src/a.py:1"} for i in range(n)]


def test_the_c_path_takes_the_lines_of_functions_already_met(tmp_path, monkeypatch):
    events = chain(3000)
    stop = ORIGIN + 10 * 2 * 3000
    path = write(tmp_path, document([compact(e) for e in events], stop, [5]), False)
    with_c, without, taken = load_both(path, monkeypatch)
    assert_same_trace(with_c, without)
    assert [e.depth for e in with_c.events] == list(range(3000))
    # All but each function's first line and the last one (no ",\n" after it).
    assert taken == 3000 - 3 - 1


REJECTED = {
    # Each: the chain's line 1500 rewritten; the C path stops there, the
    # Python path takes that line, and the C path goes on after it.
    "spaces": lambda t: t.replace(",", ", "),
    "key order": lambda t: t.replace('"ph":"X","cat":"python"', '"cat":"python","ph":"X"'),
    "19 digits": lambda t: t.replace('"pid":4242', '"pid":1000000000000000000', 1),
    "2 decimals": lambda t: t.replace('0,"dur"', ',"dur"', 1),
    "4 decimals": lambda t: t.replace('0,"dur"', '00,"dur"', 1),
    "exponent": lambda t: re.sub(r'"dur":([0-9]+)[.]([0-9]{3})', r'"dur":\1\2e-3', t),
    "unknown flag": lambda t: t.replace('"}}', '","extra":1}}'),
    "false flag": lambda t: t.replace('"}}', '","open_at_stop":false}}'),
    "flags out of order": lambda t: t.replace('"}}', '","open_at_loss":true,"open_at_start":true}}'),
    "new name": lambda t: t.replace('"name":"', '"name":"new_'),
    "unicode escape": lambda t: t.replace('"name":"f"', '"name":"\\u0066"'),
    "new file": lambda t: t.replace('a.py:1', 'b.py:2'),
    "new thread": lambda t: t.replace('"tid":5,', '"tid":6,'),
    "kind c": lambda t: t.replace('"cat":"python"', '"cat":"c"'),
}


@pytest.mark.parametrize("other_first", [False, True])
@pytest.mark.parametrize("case", sorted(REJECTED))
def test_lines_the_c_path_does_not_take_fall_back(tmp_path, monkeypatch, case, other_first):
    events = chain(3000)
    lines = [compact(e) for e in events]
    lines[1500] = REJECTED[case](lines[1500])
    stop = ORIGIN + 10 * 2 * 3000
    path = write(tmp_path, document(lines, stop, [5, 6], other_first=other_first), False)
    with_c, without, taken = load_both(path, monkeypatch)
    assert_same_trace(with_c, without)
    assert len(with_c.events) == 3000
    assert 2900 < taken < 3000


@pytest.mark.parametrize("other_first", [False, True])
@pytest.mark.parametrize("place", [10, 2999])
def test_an_event_ending_after_the_stop_is_named_either_way(tmp_path, monkeypatch, place,
                                                           other_first):
    events = chain(3000)
    stop = ORIGIN + 10 * 2 * 3000
    events[place]["dur"] = stop - ORIGIN - events[place]["ts"] + 1000
    path = write(tmp_path, document([compact(e) for e in events], stop, [5],
                                    other_first=other_first), False)
    messages = []
    for reader in (contextlib.nullcontext, loader.python_reader):
        with reader():
            with pytest.raises(ValueError) as info:
                loader.load(path)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert f"traceEvents[{place + 2}]: ends 1000 ns after" in messages[0]  # after 2 "M" events
    assert "after the tracer's stop" in messages[0]


def test_times_beyond_int64_take_the_python_path(tmp_path, monkeypatch):
    origin = 2**63 - 15_000
    events = chain(1000)
    stop = origin + 10 * 2 * 1000
    path = write(tmp_path, document([compact(e) for e in events], stop, [5], origin=origin), False)
    with_c, without, taken = load_both(path, monkeypatch)
    assert_same_trace(with_c, without)
    assert max(e.end_ns for e in with_c.events) > 2**63 - 1
    assert 0 < taken < 1000 - 4


def test_gzip_and_a_non_latin1_buffer(tmp_path, monkeypatch):
    events = chain(3000, names=("f", "\u4e2d", "g"))
    stop = ORIGIN + 10 * 2 * 3000
    path = write(tmp_path, document([compact(e) for e in events], stop, [5]), True)
    with_c, without, taken = load_both(path, monkeypatch)
    assert_same_trace(with_c, without)
    assert taken == 0  # a buffer of two bytes per character: Python's


# ---- merge --------------------------------------------------------------------------------


def merge_both(inputs, tmp_path, monkeypatch):
    """The merged file's text, the lines the C path took, and the file
    checked event by event against the reference (merge_oracle)."""
    taken = []
    real = merge_module._merge_chrome_lines

    def counting(*args):
        result = real(*args)
        taken.append(result[2])
        return result
    out = tmp_path / "with-c.json"
    with monkeypatch.context() as m:
        m.setattr(merge_module, "_merge_chrome_lines", counting)
        merge_module.merge(inputs, out)
    assert merged_events(out) == expected_events(inputs, out)
    return out.read_text(encoding="utf-8"), sum(taken)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(threads_events(), st.booleans(), st.integers(0, 10**12))
def test_merge_writes_the_same_file_either_way(tmp_path, monkeypatch, te, gz, later_ns):
    tids, events = te
    lines = [compact(e) if e["layout"] == "compact" else other_layout(e, e["layout"])
             for e in events]
    stop = ORIGIN + max((e["ts"] + e["dur"] for e in events), default=0) + 1
    first = write(tmp_path, document(lines, stop, tids), gz)
    second = tmp_path / "second.json"
    second.write_text(document([compact(e) for e in chain(50)], ORIGIN + 1000, [5],
                               wall=1_700_000_000_000_000_000 - later_ns), encoding="utf-8")
    merge_both([first, second], tmp_path, monkeypatch)
    with_c = loader.load(tmp_path / "with-c.json")
    assert len(with_c.events) == len(events) + 50


def test_merge_takes_known_lines_in_c_and_the_others_in_python(tmp_path, monkeypatch):
    lines = [compact(e) for e in chain(3000)]
    for i, case in enumerate(sorted(REJECTED)):
        lines[100 + 150 * i] = REJECTED[case](lines[100 + 150 * i])
    a = tmp_path / "a.json"
    a.write_text(document(lines, ORIGIN + 60_000, [5, 6]), encoding="utf-8")
    b = tmp_path / "b.json"  # earlier on the wall clock: a's times move
    b.write_text(document([compact(e) for e in chain(3000)], ORIGIN + 60_000, [5],
                          wall=1_700_000_000_000_000_000 - 123_456_789), encoding="utf-8")
    _text, taken = merge_both([a, b], tmp_path, monkeypatch)
    assert 6000 - 2 * 20 < taken < 6000
    merged = loader.load(tmp_path / "with-c.json")
    assert len(merged.events) == 6000
    assert merged.processes[0]["shift_ns"] == 123_456_789
