"""frametrace.torch.flight_recorder: a flight recorder
with torch.profiler beside it in rolling cycles, on the real training loop
of torch_support.  Each dump is read back: torch's ops of the dumped steps
nested in the Python frames that ran them, nothing after the snapshot
time, metadata.dump.torch saying what it holds."""
import gc
import json
import subprocess
import sys
import threading
import time

import pytest

from support import child_env
from torch_support import torch, training  # skips the module without torch

import frametrace
import frametrace.torch
from frametrace.testing import assert_valid_trace

pytestmark = pytest.mark.usefixtures("clock")

# MLP: two Linear in its encoder, one head: three aten::linear a forward.
LINEARS = 3
# Where no step is to be slow (a busy machine's can be 3x the median).
NEVER_SLOW = dict(slow_factor=None, slow_ms=600_000)


def loop(rec, model, opt, loader, slow_at=-1, slow_s=0.0, raise_at=-1, check=None):
    for i, (x, y) in enumerate(loader):
        out = model(x)
        if i == raise_at:
            raise KeyError("in the step")
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if i == slow_at:
            time.sleep(slow_s)
        if check is not None:
            check(i)
        rec.step()


def warmed(steps):
    """training(steps), its first forward and backward run once untraced:
    the first step's lazy set-up would pass a slow step's bound on a busy
    machine."""
    model, opt, loader = training(steps)
    torch.nn.functional.cross_entropy(model(torch.randn(16, 32)),
                                      torch.randint(0, 4, (16,))).backward()
    opt.zero_grad()
    return model, opt, loader


def ns(us):
    """A ts/dur the writers write (three decimals) as ns."""
    whole, _, frac = str(us).partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def read(path):
    """(trace, dump metadata, {tid: [(start, end, cat, name)]} on the
    monotonic clock) of a dump, its invariants checked."""
    trace = frametrace.load(path)
    with open(path) as f:
        doc = json.load(f)
    ft = doc["otherData"]["frametrace"]
    info = ft["metadata"]["dump"]
    assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
    assert (trace.tracer_start_ns, trace.tracer_stop_ns) == (info["window_start_ns"],
                                                             info["snapshot_ns"])
    spans = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            start = ns(e["ts"]) + ft["origin_ns"]
            spans.setdefault(e["tid"], []).append((start, start + ns(e["dur"]), e["cat"],
                                                   e["name"]))
    # Nothing in the dump, Python or torch, outside its window.
    for track in spans.values():
        for s in track:
            if s[2] != "step":
                assert info["window_start_ns"] <= s[0] and s[1] <= info["snapshot_ns"], s
    return trace, info, spans


def mine_tid(trace):
    return next(t for t in trace.threads if t.name == "MainThread").native_thread_id


def main_spans(trace, spans):
    return spans[mine_tid(trace)]


def assert_nested(spans):
    """Every two slices of a track nest or are disjoint: what Perfetto needs
    (it drops a slice that partly overlaps another of its track)."""
    stack = []
    for s in sorted(spans, key=lambda s: (s[0], -s[1])):
        while stack and stack[-1][1] <= s[0] and not (stack[-1][1] == s[0] == s[1]):
            stack.pop()
        assert not stack or s[1] <= stack[-1][1], f"{s} crosses {stack[-1]}"
        stack.append(s)


def in_frames(ops, frames):
    """Each op lies inside some frame (a Python or C call) of its thread."""
    return all(any(f[0] <= o[0] and o[1] <= f[1] for f in frames) for o in ops)


@pytest.mark.parametrize("watchdog", [True, False])
def test_slow_step_gives_one_dump_with_its_torch_ops(tmp_path, watchdog):
    model, opt, loader = warmed(20)
    # slow_ms, not slow_factor: a cycle's first step is several times
    # slower (kineto's new session); min_interval: the writer's join takes
    # the GIL beside the loop and may slow a later step.  The watchdog's
    # hang bound (10 x 500 ms) is not reached: not dumped as hung.
    with frametrace.torch.flight_recorder(tmp_path, steps=3, cycle_steps=5, watchdog=watchdog,
                                          signal=None, min_interval=60, slow_factor=None,
                                          slow_ms=500) as rec:
        written = []
        # Step 11's cycle (10-14) ends in step 14's step(): the dump waits.
        loop(rec, model, opt, loader, slow_at=11, slow_s=0.9,
             check=lambda i: written.append(len(rec.dumps)) if i == 14 else None)
    assert written == [0]
    assert rec.errors == []
    (path,) = rec.dumps
    trace, info, spans = read(path)
    assert info["reason"] == "slow step 11" and info["steps"] == [9, 11]
    assert info["torch"] == "included"
    assert [s.step for s in trace.steps] == [9, 10, 11]
    mine = main_spans(trace, spans)
    frames = [s for s in mine if s[2] in ("python", "c")]
    ops = [s for s in mine if s[2] == "cpu_op"]
    # Steps 9 (of the cycle before) and 10, 11 (of the one the dump waited
    # for): three forwards.
    linears = [s for s in ops if s[3] == "aten::linear"]
    elsewhere = {tid: [s[:2] for s in track if s[3] == "aten::linear"]
                 for tid, track in spans.items() if track is not spans.get(mine_tid(trace))}
    assert len(linears) == 3 * LINEARS, (info, linears, elsewhere, [(s.step, s.start_ns, s.end_ns) for s in trace.steps])
    assert {step.step: sum(step.start_ns <= s[0] < step.end_ns for s in linears)
            for step in trace.steps} == {9: LINEARS, 10: LINEARS, 11: LINEARS}
    addmms = [s for s in ops if s[3] == "aten::addmm"]
    assert len(addmms) == 3 * LINEARS
    assert in_frames(linears + addmms, frames)
    # Each linear inside the C call torch.nn.functional.linear is.
    c_linear = [s for s in frames if s[2] == "c" and s[3].endswith("linear")]
    assert len(c_linear) == 3 * LINEARS and in_frames(linears, c_linear)
    assert info["torch_ops"] == sum(len(v) for v in spans.values()) - len(trace.events) - 3
    for track in spans.values():
        assert_nested(track)


def test_pftrace_dump_holds_the_ops_in_the_thread_track(tmp_path):
    pftrace = pytest.importorskip("pftrace")
    model, opt, loader = training(6)
    with frametrace.torch.flight_recorder(tmp_path, steps=2, cycle_steps=2, watchdog=False,
                                          signal=None, format="pftrace", **NEVER_SLOW) as rec:
        loop(rec, model, opt, loader, check=lambda i: rec.dump() if i == 4 else None)
    (path,) = rec.dumps
    assert path.endswith(".pftrace") and rec.errors == []
    decoded = pftrace.decode(path)
    uuid, _ = pftrace.thread_tracks(decoded)[threading.get_native_id()]
    slices = decoded.slices[uuid]
    # Steps 3 and 4 (the dump cut before step 4's step()): two forwards.
    assert sum(s.name == "aten::linear" for s in slices) == 2 * LINEARS
    assert any(s.category == "cpu_op" and s.depth > 0 for s in slices)


def test_exception_dump_has_the_failing_steps_ops(tmp_path):
    model, opt, loader = training(12)
    rec = frametrace.torch.flight_recorder(tmp_path, steps=3, cycle_steps=4, watchdog=False,
                                           signal=None, **NEVER_SLOW)
    with pytest.raises(KeyError):
        with rec:
            loop(rec, model, opt, loader, raise_at=6)
    (path,) = rec.dumps
    trace, info, spans = read(path)
    assert info["reason"] == "exception KeyError" and info["steps"] == [4, 6]
    # The exit ended step 6's cycle (4-7): its ops are there, to the raise.
    assert info["torch"] == "included"
    linears = [s for s in main_spans(trace, spans) if s[3] == "aten::linear"]
    assert len(linears) == 3 * LINEARS  # steps 4 and 5, and step 6's forward
    # No backward in step 6: it raised after the forward.
    step6 = trace.steps[-1]
    assert not [s for s in main_spans(trace, spans)
                if s[2] == "cpu_op" and "Backward" in s[3] and s[0] >= step6.start_ns]


def test_hung_step_dump_is_python_only_from_its_cycle_on_then_its_ops_follow(tmp_path):
    model, opt, loader = warmed(9)
    with frametrace.torch.flight_recorder(tmp_path, steps=3, cycle_steps=3, slow_ms=500,
                                          slow_factor=None, hang_ms=500, signal=None,
                                          min_interval=60) as rec:
        loop(rec, model, opt, loader, slow_at=6, slow_s=1.5)
    assert rec.errors == []
    # The watchdog's while step 6 ran, then step 6's as it ended.
    path, after = rec.dumps
    trace, info, spans = read(path)
    assert info["reason"] == "hung step 6" and info["steps"] == [4, 6]
    assert info["torch"] == ("python only from step 6 on: its torch.profiler cycle was still "
                             "recording (a hung step's dump does not wait for it)")
    step6 = trace.steps[-1]
    # Cycle 6-8 began in the step() that ended step 5.
    assert trace.steps[-2].start_ns < info["torch_until_ns"] <= step6.start_ns
    linears = [s for s in main_spans(trace, spans) if s[3] == "aten::linear"]
    assert len(linears) == 2 * LINEARS  # steps 4 and 5 only
    assert all(s[1] <= info["torch_until_ns"] for s in linears)
    # Step 6's Python is there, hung in the sleep.
    assert [e.name for e in trace.events if e.open_at_stop and e.name == "time.sleep"] == [
        "time.sleep"]
    # The second dump: step 6 whole, its torch ops nested in its frames
    # (its cycle, 6-8, ended at the exit).
    trace, info, spans = read(after)
    assert info["reason"] == "slow step 6" and info["after_hang"] == path
    assert info["steps"] == [4, 6] and info["torch"] == "included"
    (sleep,) = [e for e in trace.events if e.name == "time.sleep"
                and e.end_ns - e.start_ns >= 1_500_000_000]  # not the watchdog's
    assert not sleep.open_at_stop
    mine = main_spans(trace, spans)
    frames = [s for s in mine if s[2] in ("python", "c")]
    linears = [s for s in mine if s[3] == "aten::linear"]
    assert {step.step: sum(step.start_ns <= s[0] < step.end_ns for s in linears)
            for step in trace.steps} == {4: LINEARS, 5: LINEARS, 6: LINEARS}
    step6 = trace.steps[-1]
    backward = [s for s in mine if s[2] == "cpu_op" and "Backward" in s[3]
                and s[0] >= step6.start_ns]
    assert backward and in_frames(linears + backward, frames)
    for track in spans.values():
        assert_nested(track)


def test_a_hang_lets_a_waiting_dump_go_python_only(tmp_path):
    model, opt, loader = warmed(8)
    seen = []
    with frametrace.torch.flight_recorder(tmp_path, steps=2, cycle_steps=5, slow_ms=500,
                                          slow_factor=None, hang_ms=500, signal=None,
                                          min_interval=0) as rec:
        def check(i):
            if i == 6:  # the hang is over: both dumps were written during it
                seen.append([loaded for loaded in rec.dumps])
        # A dump in step 5 (it waits for cycle 5-9), then step 6 hangs.
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if i == 5:
                rec.dump("look")
            if i == 6:
                time.sleep(2.5)
            check(i)
            rec.step()
    assert rec.errors == []
    (written,) = seen
    infos = {read(p)[1]["reason"]: read(p)[1] for p in written}
    assert sorted(infos) == ["hung step 6", "look"]
    assert infos["look"]["torch"] == ("python only from step 5 on: its torch.profiler "
                                      "cycle was still recording when a step hung")
    assert infos["hung step 6"]["torch"].startswith("python only from step 5 on: its "
                                                    "torch.profiler cycle was still recording")
    # Steps 4-5: step 4's ops (cycle 0-4), step 5 Python only; steps 5-6:
    # Python only, the whole window.
    look, hung = infos["look"], infos["hung step 6"]
    assert look["steps"] == [4, 5] and hung["steps"] == [5, 6]
    assert look["torch_ops"] > 0 and look["torch_until_ns"] > look["window_start_ns"]
    assert hung["torch_ops"] == 0 and hung["torch_until_ns"] == hung["window_start_ns"]


def test_request_dump_does_not_wait_for_the_cycle(tmp_path):
    model, opt, loader = warmed(10)
    answers = []
    answered = threading.Event()

    def done(path, error):
        answers.append((path, error))
        answered.set()

    with frametrace.torch.flight_recorder(tmp_path, steps=2, cycle_steps=10, watchdog=False,
                                          signal=None, **NEVER_SLOW) as rec:
        def check(i):
            if i == 3:  # as attach --dump asks: answered in the middle of the cycle
                rec.request_dump("asked", done)
                assert answered.wait(60)
        loop(rec, model, opt, loader, check=check)
    ((path, error),) = answers
    assert error is None and rec.dumps[0] == path
    trace, info, spans = read(path)
    assert info["reason"] == "asked" and info["steps"] == [2, 3]
    assert info["torch"] == ("python only from step 0 on: its torch.profiler cycle was still "
                             "recording (request_dump()'s (attach --dump's) dump does not wait "
                             "for it)")
    assert info["torch_ops"] == 0 and info["torch_until_ns"] == info["window_start_ns"]


def test_record_shapes_gives_ops_their_input_dims(tmp_path):
    model, opt, loader = training(4)
    with frametrace.torch.flight_recorder(tmp_path, steps=2, cycle_steps=2, watchdog=False,
                                          signal=None, record_shapes=True, **NEVER_SLOW) as rec:
        loop(rec, model, opt, loader, check=lambda i: rec.dump() if i == 3 else None)
    (path,) = rec.dumps
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    addmm = [e for e in events if e.get("name") == "aten::addmm"]
    assert len(addmm) == 2 * LINEARS
    assert all(e["args"]["Input Dims"][1] in ([16, 32], [16, 64]) for e in addmm)


def test_python_only_recorder_has_no_torch_ops(tmp_path):
    model, opt, loader = warmed(12)
    with frametrace.flight_recorder(tmp_path, steps=3, watchdog=False, signal=None,
                                    min_interval=60, slow_factor=None, slow_ms=500) as rec:
        loop(rec, model, opt, loader, slow_at=8, slow_s=0.9)
    (path,) = rec.dumps
    trace, info, spans = read(path)
    assert info["reason"] == "slow step 8" and "torch" not in info
    cats = {s[2] for track in spans.values() for s in track}
    assert cats == {"python", "c", "step"}


def test_python_only_recorder_does_not_import_torch(tmp_path):
    code = f"""if True:
        import sys, frametrace
        with frametrace.flight_recorder({str(tmp_path)!r}, watchdog=False, signal=None) as rec:
            frametrace.step()
            rec.dump()
        print(len(rec.dumps), "torch" in sys.modules)
    """
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "False"]


def live_torch_profiles():
    gc.collect()
    return sum(type(o).__name__ == "profile" and type(o).__module__ == "torch.autograd.profiler"
               for o in gc.get_objects())


# What is kept is torch's, whatever clock or backend traces Python (each
# step's count walks every object: seconds a step with torch loaded).
@pytest.mark.one_setup
def test_kept_cycles_are_bounded(tmp_path):
    model, opt, loader = training(16)
    before = live_torch_profiles()
    counts = []
    with frametrace.torch.flight_recorder(tmp_path, steps=2, cycle_steps=3, watchdog=False,
                                          signal=None, **NEVER_SLOW) as rec:
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            rec.step()
            counts.append(live_torch_profiles() - before)
    # Each cycle's results (a torch.autograd.profiler.profile holding
    # kineto's) are dropped when the next one ends: the last ended cycle
    # and the one recording, never more.
    assert counts[:2] == [1, 1] and set(counts[3:]) == {2}
    # The last: step 15's, ended by the exit.
    assert rec._last is not None and rec._last.first_step == 15
    del rec
    assert live_torch_profiles() - before == 0


def test_bad_options(tmp_path):
    with pytest.raises(ValueError, match=r"cycle_steps must be >= steps \(4\), got 3"):
        frametrace.torch.flight_recorder(tmp_path, steps=4, cycle_steps=3)
    with pytest.raises(TypeError, match="cycle_steps must be an int, not str"):
        frametrace.torch.flight_recorder(tmp_path, cycle_steps="5")
    with pytest.raises(TypeError, match="record_shapes must be a bool"):
        frametrace.torch.flight_recorder(tmp_path, record_shapes=1)
    assert frametrace.torch.flight_recorder(tmp_path).cycle_steps == 10
    assert frametrace.torch.flight_recorder(tmp_path, steps=12).cycle_steps == 12
