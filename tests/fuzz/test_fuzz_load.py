"""Fuzzing frametrace.load, merge and read_other_data with mutated files."""
from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import math
import os

import pytest

# First: without hypothesis, the harness skips the module.
from fuzzing import (
    EDGE_INTS,
    EDGE_STRS,
    PYTESTMARK,
    PathSpec,
    RAW_NUMBERS,
    _RAW,
    _chrome_text,
    _dumps,
    attempt,
    cached_trace,
    fuzz,
    guarded,
    loader_bases,
    maybe,
    names,
    nasty,
    path_specs,
    scratch,
    stopped_tracer,
    texty,
)
from hypothesis import given
from hypothesis import strategies as st

import frametrace
from frametrace import Event, export, loader, reports
from frametrace._trace import RangeRecord, StepRecord, Trace

pytestmark = PYTESTMARK


# ---- loader.load, loader.merge, read_other_data ------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTS[:-1]), st.integers(-5, 5),
              st.sampled_from([1.5, -1.5, 1e-7, math.nan, math.inf, 1e300]), st.sampled_from(EDGE_STRS[:-1] + ("x" * 5000,)),
              texty, st.sampled_from(RAW_NUMBERS).map(lambda s: _RAW + s),
              st.sampled_from(["python", "c", "range", "step", "X", "M", "B", "x.py:1", "<built-in>:0",
                               "thread_name", "process_name", "frametrace"]),
              st.just("deep")),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.sampled_from(
        ["ph", "cat", "pid", "tid", "ts", "dur", "name", "args", "file", "x", "format", "version"]), kids, max_size=3)),
    max_leaves=5)


def _walk_and_replace(data, doc):
    """doc with one node replaced, deleted, or a key added, the node chosen
    by a random walk."""
    path = []
    node = doc
    while isinstance(node, (dict, list)) and node and data.draw(st.integers(0, 3), label="deeper") > 0:
        key = data.draw(st.sampled_from(sorted(node, key=repr) if isinstance(node, dict) else range(len(node))),
                        label="key")
        path.append(key)
        node = node[key]
    if not path:
        return data.draw(json_values, label="document")
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    what = data.draw(st.sampled_from(["replace", "replace", "delete", "add"]), label="edit")
    if what == "replace":
        parent[path[-1]] = data.draw(json_values, label="value")
    elif what == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.sampled_from(["ph", "ts", "dur", "pid", "tid", "x", "merged", "inputs"]), label="new key")] = \
            data.draw(json_values, label="value")
    else:
        parent.insert(path[-1], data.draw(json_values, label="value"))
    return doc


def mutated_file(data, d, name="input.json"):
    base = data.draw(st.sampled_from(sorted(loader_bases())), label="base")
    text = loader_bases()[base]
    for _ in range(data.draw(st.integers(0, 2), label="structural edits")):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            break  # already not JSON (or too deep for json here)
        doc = _walk_and_replace(data, doc)
        text = _chrome_text(doc) if isinstance(doc, dict) and "traceEvents" in doc else _dumps(doc)
    for _ in range(data.draw(st.integers(0, 2), label="text edits")):
        pos = data.draw(st.integers(0, len(text)), label="at")
        edit = data.draw(st.sampled_from(["cut", "delete", "insert", "replace"]), label="text edit")
        chunk = data.draw(st.text(alphabet='{}[],:"\\0123456789.eE-+ntrufals \n\x00\ud800é', max_size=4),
                          label="chunk")
        if edit == "cut":
            text = text[:pos]
        elif edit == "delete":
            text = text[:pos] + text[pos + data.draw(st.integers(1, 40), label="n"):]
        elif edit == "insert":
            text = text[:pos] + chunk + text[pos:]
        else:
            text = text[:pos] + chunk + text[pos + len(chunk):]
    raw = text.encode("utf-8", "surrogatepass")
    if data.draw(st.booleans(), label="gzip"):
        raw = gzip.compress(raw, compresslevel=1)
        if data.draw(st.booleans(), label="corrupt gzip"):
            cut = data.draw(st.integers(0, len(raw)), label="gzip at")
            raw = raw[:cut] + data.draw(st.binary(max_size=3), label="gzip bytes")
    if data.draw(st.booleans(), label="latin-1"):
        raw = raw.replace(b"\xc3\xa9", b"\xe9")  # not UTF-8 any more
    path = os.path.join(d, name)
    with open(path, "wb") as fh:
        fh.write(raw)
    return path


def _check_loaded(trace):
    assert isinstance(trace, Trace)
    assert all(isinstance(e, Event) for e in trace.events)
    for r in trace.ranges:
        assert isinstance(r, RangeRecord)
    for s in trace.steps:
        assert isinstance(s, StepRecord)
    # A loaded trace works with the reports.
    attempt(reports.summary, trace, allowed=(TypeError, ValueError))


@fuzz(200)
@given(data=st.data())
@guarded
def test_fuzz_load(data):
    with scratch() as d:
        if data.draw(st.integers(0, 9), label="path or file") == 0:
            path, _ = data.draw(path_specs, label="path").make(d, readable=True)
        else:
            path = mutated_file(data, d)
        reader = data.draw(st.sampled_from(["load", "loader.load", "read_other_data"]), label="reader")
        progress = data.draw(st.one_of(st.none(), st.just("record"), nasty), label="progress")
        seen = []
        kwargs = {} if reader == "read_other_data" else {
            "progress": (lambda done, total: seen.append((done, total))) if progress == "record" else progress}
        fn = {"load": frametrace.load, "loader.load": loader.load,
              "read_other_data": loader.read_other_data}[reader]
        out = attempt(fn, path, allowed=(ValueError, OSError, TypeError), **kwargs)
        if not out.ok:
            if isinstance(out.exc, TypeError) and not out.user:
                # A TypeError only for a bad argument: the path or the callback.
                assert not isinstance(path, str) or progress not in (None, "record"), out
            return
        if reader == "read_other_data":
            assert isinstance(out.value, dict)
        else:
            _check_loaded(out.value)
            assert all(0 <= done <= total for done, total in seen)


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None,
                    reason="pyarrow is not installed (frametrace[data])")
@fuzz(100)
@given(data=st.data())
@guarded
def test_fuzz_convert(data):
    """frametrace convert's C line parser: a mutated file converts to the
    tables its load gives, or raises the ValueError load raises."""
    import pyarrow.dataset as pads

    from frametrace._convert_stream import convert_file
    from frametrace._dataset import write_dataset

    with scratch() as d:
        path = mutated_file(data, d)
        chunk = data.draw(st.sampled_from([1, 3, 64, 1 << 20]), label="chunk")
        want = attempt(lambda: write_dataset(loader.load(path), os.path.join(d, "w.parquet")),
                       allowed=(ValueError, OSError))
        got = attempt(convert_file, path, os.path.join(d, "c.parquet"), chunk=chunk,
                      allowed=(ValueError, OSError))
        if not want.ok:
            assert not got.ok and type(got.exc) is type(want.exc), (got, want)
            if isinstance(want.exc, ValueError) and "merged" not in str(got.exc):
                assert str(got.exc) == str(want.exc)
            return
        if not got.ok:  # a merge, which convert refuses
            assert "merged trace" in str(got.exc), got
            return
        assert got.value == want.value

        def rows(root):
            table = pads.dataset(os.path.join(d, root, "events"), format="parquet",
                                 partitioning="hive").to_table()
            return sorted((r for r in table.to_pylist()), key=lambda r: r["id"])
        whole, chunked = rows("w.parquet"), rows("c.parquet")
        for row in chunked:
            if whole and "outermost" not in whole[0]:
                row.pop("outermost", None)
        assert chunked == whole


@functools.lru_cache(maxsize=None)
def pftrace_bases():
    """Bytes of .pftrace files frametrace wrote: a session's (ranges,
    steps), a tracer's of several threads."""
    out = {}
    with scratch() as d:
        cached_trace().to_perfetto(os.path.join(d, "session.pftrace"))
        export.write_perfetto(stopped_tracer(threads=True), os.path.join(d, "plain.pftrace"))
        for name in ("session", "plain"):
            with open(os.path.join(d, name + ".pftrace"), "rb") as fh:
                out[name] = fh.read()
    return out


@fuzz(200)
@given(data=st.data())
@guarded
def test_fuzz_load_pftrace(data):
    """A .pftrace frametrace wrote, its bytes cut, deleted, inserted,
    replaced or flipped (maybe gzip-compressed, maybe the gzip data cut):
    load() gives a Trace the reports take or a ValueError, never a crash,
    a hang or another exception."""
    raw = bytearray(pftrace_bases()[data.draw(st.sampled_from(["session", "plain"]), label="base")])
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        pos = data.draw(st.integers(0, len(raw)), label="at")
        edit = data.draw(st.sampled_from(["cut", "delete", "insert", "replace", "flip"]), label="edit")
        chunk = data.draw(st.one_of(st.binary(min_size=1, max_size=4),
                                    st.sampled_from([b"\xff" * 10, b"\x80" * 11, b"\x0b", b"\x0c",
                                                     b"\x0a\x7f", b"\x00"])), label="bytes")
        if edit == "cut":
            del raw[pos:]
        elif edit == "delete":
            del raw[pos:pos + data.draw(st.integers(1, 40), label="n")]
        elif edit == "insert":
            raw[pos:pos] = chunk
        elif edit == "replace":
            raw[pos:pos + len(chunk)] = chunk
        elif pos < len(raw):
            raw[pos] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    raw = bytes(raw)
    if data.draw(st.booleans(), label="gzip"):
        raw = gzip.compress(raw, compresslevel=1)
        if data.draw(st.booleans(), label="cut gzip"):
            raw = raw[:data.draw(st.integers(0, len(raw)), label="gzip at")]
    with scratch() as d:
        path = os.path.join(d, "input.pftrace")
        with open(path, "wb") as fh:
            fh.write(raw)
        out = attempt(loader.load, path, allowed=(ValueError,))
        if out.ok:
            _check_loaded(out.value)
        else:
            assert str(out.exc).startswith(f"{path}: "), out


@fuzz(100)
@given(data=st.data())
@guarded
def test_fuzz_merge(data):
    with scratch() as d:
        inputs = []
        for i in range(data.draw(st.integers(0, 3), label="inputs")):
            kind = data.draw(st.sampled_from(["mutated", "mutated", "base", "path"]), label="input kind")
            if kind == "path":
                inputs.append(data.draw(path_specs, label="input path").make(d, readable=True)[0])
            elif kind == "base":
                name = data.draw(st.sampled_from(["session", "plain", "merged"]), label="base input")
                path = os.path.join(d, f"base{i}.json")
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(loader_bases()[name])
                inputs.append(path)
            else:
                inputs.append(mutated_file(data, d, f"in{i}.json"))
        form = data.draw(st.sampled_from(["list", "list", "tuple", "generator", "nasty"]), label="inputs form")
        arg = {"list": list, "tuple": tuple, "generator": iter}.get(form, lambda x: x)(inputs)
        if form == "nasty":
            arg = data.draw(nasty, label="inputs")
        spec = data.draw(maybe(path_specs, st.builds(lambda n, s: PathSpec("file", n, s, "str"), names,
                                                     st.sampled_from([".json", ".json.gz"]))), label="output")
        if spec.kind == "devfull":
            spec = PathSpec("dir")  # merge replaces its output: never a device
        output, expect = spec.make(d)
        if spec.kind in ("loop", "dangling"):
            expect = "any"  # merge renames its file over the link: fine
        out = attempt(loader.merge, arg, output, allowed=(ValueError, OSError, TypeError))
        if expect == "fail":
            assert not out.ok, f"merge wrote to {output!r}"
        if not out.ok:
            return
        assert isinstance(out.value, dict) and out.value.get("merged") is True
        loaded = attempt(frametrace.load, output, allowed=(ValueError, OSError, TypeError))
        assert loaded.ok, f"merge wrote {output!r}, which load() rejects: {loaded.exc!r}"
        assert isinstance(loaded.value, frametrace.MergedTrace)
        _check_loaded(loaded.value)
        where = os.fsdecode(os.fspath(output))
        prefix = "." + os.path.basename(where) + "."  # frametrace._output's temporaries
        assert not [name for name in os.listdir(os.path.dirname(where) or ".")
                    if name.startswith(prefix) and name.endswith(".tmp")], \
            "merge left its temporary file"
