"""A window's close: frametrace.torch's join of torch's ops with the
Python frames runs in C, and gives what the Python reference gives
(tests/join_oracle.py), in the trace and in the file; the replay and the
sweep leave the GIL to the training loop."""
import json
import sys

import pytest

from torch_support import torch, train, training  # skips the module without torch

import frametrace
import frametrace.torch
import join_oracle
from frametrace.export import SLICE_TRACKS_TID_BASE


class _Annotated(torch.nn.Module):
    """The model's forward inside record_function: an annotation that
    begins in one C call and ends in another (it crosses the frames)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        with torch.profiler.record_function("forward"):
            return self.model(x)


def joined_window(monkeypatch, tmp_path, record_shapes):
    """One window of the real loop: (trace, what join_torch was given), the
    trace written to tmp_path/t.json."""
    calls = []
    real = frametrace.torch.join_torch

    def spy(trace, activities, **kw):
        activities = list(activities)
        joined = real(trace, activities, **kw)
        # What the join made, before the ProfilerStep marks are added.
        calls.append((activities, kw.get("args_of"),
                      [(name, list(items)) for name, items in trace.slice_tracks]))
        return joined

    monkeypatch.setattr(frametrace.torch, "join_torch", spy)
    traces = []
    model, opt, loader = training(5)
    with frametrace.torch.profile(schedule=frametrace.schedule(wait=1, warmup=1, active=2),
                                  record_shapes=record_shapes,
                                  on_trace_ready=traces.append) as prof:
        train(prof, _Annotated(model), opt, loader)
    assert len(traces) == 1 and len(calls) == 1
    traces[0].save(tmp_path / "t.json")
    return traces[0], calls[0]


def oracle(trace, activities, args_of):
    anchor = trace.clock_anchor
    return join_oracle.join_slices(
        trace, join_oracle.read_activities(activities, args_of),
        offset_ns=anchor["wall_ns"] - anchor["monotonic_ns"], pid=trace.pid,
        tolerance_ns=frametrace.torch._TOLERANCE_NS + int(anchor.get("width_ns") or 0))


def us(ns):
    return float(f"{'-' if ns < 0 else ''}{abs(ns) // 1000}.{abs(ns) % 1000:03d}")


@pytest.mark.parametrize("record_shapes", [False, True], ids=["plain", "record_shapes"])
def test_the_join_and_the_file_are_the_references(monkeypatch, tmp_path, record_shapes):
    trace, (activities, args_of, joined_tracks) = joined_window(monkeypatch, tmp_path,
                                                                record_shapes)
    slices, tracks = oracle(trace, activities, args_of)
    nested = sum(len(v) for v in slices.values())
    crossing = sum(len(v) for _, v in tracks)
    assert nested > 100 and crossing >= 2, (nested, tracks)  # both kinds are there
    assert any(x.name == "forward" for _, v in tracks for x in v)
    if record_shapes:
        assert any(x.args and "Input Dims" in x.args for v in slices.values() for x in v)
    assert trace.slices == slices
    assert joined_tracks == tracks

    # The file holds each of them as the Python writer wrote it.
    with open(tmp_path / "t.json") as fh:
        doc = json.load(fh)
    origin = doc["otherData"]["frametrace"]["origin_ns"]
    tid_of = dict(zip([t.serial for t in trace.tracer.threads], trace.tracer._export_tids))
    expected = []
    for serial, items in slices.items():
        expected += [(tid_of[serial], x) for x in items]
    for k, (_, items) in enumerate(trace.slice_tracks):  # the join's and the steps'
        expected += [(SLICE_TRACKS_TID_BASE + k, x) for x in items]
    expected = sorted((x.name, x.category, tid, us(x.start_ns - origin),
                       us(x.end_ns - x.start_ns), json.dumps(x.args or None, sort_keys=True))
                      for tid, x in expected)
    written = sorted((e["name"], e["cat"], e["tid"], e["ts"], e["dur"],
                      json.dumps(e.get("args"), sort_keys=True))
                     for e in doc["traceEvents"]
                     if e.get("ph") == "X" and e.get("cat") not in ("python", "c", "step", "range"))
    assert written == expected


def test_the_join_lets_another_thread_run(monkeypatch, tmp_path):
    """Another thread runs while the join replays and nests: it can only
    when the join lets the GIL go, as the switch interval never forces it
    here; the spinner lets the GIL go after each count."""
    import threading
    import time

    trace, (activities, _, _) = joined_window(monkeypatch, tmp_path, False)
    # More ops, for a longer sweep: each of the window's ops ten times.
    ops = join_oracle.read_activities(activities) * 10
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)  # lets the GIL go; takes it back when free

    old = sys.getswitchinterval()
    spinner = threading.Thread(target=spin)
    spinner.start()
    ran = []
    try:
        sys.setswitchinterval(1000.0)
        for _ in range(200):
            before = count[0]
            frametrace.torch.join_torch(trace, ops)
            ran.append(count[0] - before)
            if ran[-1]:
                break
            time.sleep(0.001)
    finally:
        sys.setswitchinterval(old)
        stop.set()
        spinner.join()
    assert any(ran), f"the spinner never ran during {len(ran)} joins"
