"""merge's reference, in plain Python: what each event of a merged file
must be, from the events of its inputs (single-process frametrace files)
and the merged otherData.frametrace.inputs (the pid each input got and
its shift).  merge writes the lines of functions it already met in C
(``_tracer._merge_chrome_lines``) and the others with json.dumps; the
tests compare the file it wrote, event by event, with these."""
from __future__ import annotations

import decimal
import gzip
import json
import os
from typing import Any


def _document(path: Any) -> dict:
    opener = gzip.open if os.fspath(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=decimal.Decimal)


def _ns(us: Any) -> int:
    ns = decimal.Decimal(us) * 1000
    assert ns == ns.to_integral_value(), us
    return int(ns)


def _exact(ev: dict) -> dict:
    """ts and dur in whole nanoseconds (as merge reads them)."""
    ev = dict(ev)
    for f in ("ts", "dur"):
        if f in ev:
            ev[f] = _ns(ev[f])
    return ev


def merged_events(path: Any) -> list[dict]:
    """The events of the merged file, times in ns."""
    return [_exact(ev) for ev in _document(path)["traceEvents"]]


def expected_events(inputs: list, merged: Any) -> list[dict]:
    """What merge must have written: each input's events in order, their
    pid the one the input got, ts moved by its offset (the shift less the
    clocks' origins), a renamed process's name saying whose pid it was."""
    ft = _document(merged)["otherData"]["frametrace"]
    expect = []
    assert len(ft["inputs"]) == len(inputs)
    for path, described in zip(inputs, ft["inputs"]):
        own = _document(path)["otherData"]["frametrace"]
        offset = described["shift_ns"] - ft["origin_ns"] + own["origin_ns"]
        renamed = described["pid"] != described["original_pid"]
        for ev in _document(path)["traceEvents"]:
            ev = _exact(ev)
            if "pid" in ev:
                ev["pid"] = described["pid"]
            if "ts" in ev:
                ev["ts"] += offset
            if renamed and ev.get("ph") == "M" and ev.get("name") == "process_name":
                ev["args"] = dict(ev["args"], name=ev["args"]["name"] + (
                    f" (pid {described['original_pid']} of {os.path.basename(path)})"))
            expect.append(ev)
    return expect
