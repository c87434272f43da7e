"""frametrace.torch on a real training loop (an MLP, a DataLoader, SGD):
torch.profiler's ops joined into frametrace's trace, one file, the ops
nested under the Python C calls that ran them, and
nn.Module calls as ranges (part 3)."""
import json

import pytest

from torch_support import torch, train, training  # skips the module without torch

import frametrace
import frametrace.torch
from frametrace.testing import assert_valid_trace


def run(steps, **options):
    traces = []
    model, opt, loader = training(steps)
    with frametrace.torch.profile(on_trace_ready=traces.append, **options) as prof:
        losses = train(prof, model, opt, loader)
    return traces, losses, model


def chrome(path):
    with open(path) as fh:
        doc = json.load(fh)
    ft = doc["otherData"]["frametrace"]
    return doc["traceEvents"], ft


def ns(us):
    """A ts/dur the writers write (three decimals) as ns."""
    whole, _, frac = str(us).partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3]) * (-1 if str(us).startswith("-") else 1)


def spans_by_tid(events, cats):
    out = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in cats:
            start = ns(e["ts"])
            out.setdefault(e["tid"], []).append((start, start + ns(e["dur"]), e["cat"], e["name"]))
    return out


def assert_nested(spans):
    """Every two slices of a track nest or are disjoint: what Perfetto needs
    (it drops a slice that partly overlaps another of its track)."""
    spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    stack = []
    for s in spans:
        while stack and stack[-1][1] <= s[0] and not (stack[-1][1] == s[0] == s[1]):
            stack.pop()
        assert not stack or s[1] <= stack[-1][1], f"{s} crosses {stack[-1]}"
        stack.append(s)


@pytest.fixture(scope="module")
def one_window(tmp_path_factory):
    """Four steps, one window (wait=1, warmup=1, active=2), written both ways."""
    d = tmp_path_factory.mktemp("torch")
    traces, losses, _ = run(6, schedule=frametrace.schedule(wait=1, warmup=1, active=2, repeat=1))
    assert len(traces) == 1
    trace = traces[0]
    trace.save(d / "t.json")
    trace.save(d / "t.pftrace")
    return trace, d / "t.json", d / "t.pftrace"


def test_aten_ops_nest_in_the_c_calls_that_ran_them(one_window):
    trace, path, _ = one_window
    events, ft = chrome(path)
    main = next(t for t in trace.threads if t.name == "MainThread").native_thread_id
    by_tid = spans_by_tid(events, {"python", "c", "cpu_op"})
    spans = by_tid[main]
    c_calls = [s for s in spans if s[2] == "c"]
    ops = [s for s in spans if s[2] == "cpu_op"]
    assert len(ops) > 200
    # The C call that ran an op: the innermost C call its span meets.
    called, nested = 0, 0
    for op in ops:
        meeting = [c for c in c_calls if c[0] < op[1] and op[0] < c[1]]
        if not meeting:
            continue  # no recorded C call ran it (a subscript, say)
        called += 1
        caller = max(meeting, key=lambda c: c[0])
        nested += caller[0] <= op[0] and op[1] <= caller[1]
    assert called > 100
    assert nested >= 0.99 * called, f"{nested} of {called} ops nest in their C call"
    for tid, track in by_tid.items():
        assert_nested(track)
    # The anchor: the tightest bracket, its width in the file.
    assert 0 < ft["clock_anchor"]["width_ns"] <= 1000
    assert trace.clock_anchor == ft["clock_anchor"]


def test_forward_and_backward_ops_under_their_frames(one_window):
    trace, path, _ = one_window
    events, _ = chrome(path)
    main = next(t for t in trace.threads if t.name == "MainThread").native_thread_id
    spans = spans_by_tid(events, {"python", "c", "cpu_op"})[main]

    def inside(op_name, frame_kind):
        ops = [s for s in spans if s[3] == op_name]
        frames = [s for s in spans if s[2] == frame_kind]
        assert ops, op_name
        return [any(f[0] <= o[0] and o[1] <= f[1] and f[3] != o[3] for f in frames) for o in ops]

    # Linear's aten ops inside a C call, and the backward's inside run_backward.
    assert all(inside("aten::addmm", "c"))
    run_backward = [s for s in spans if s[2] == "c" and s[3].endswith("run_backward")]
    assert len(run_backward) == 2  # one per active step
    backward_ops = [s for s in spans if s[2] == "cpu_op" and "Backward" in s[3]]
    assert backward_ops and all(any(r[0] <= o[0] and o[1] <= r[1] for r in run_backward)
                                for o in backward_ops)


def test_pftrace_holds_the_same_ops_nested_in_the_same_frames(one_window):
    pftrace = pytest.importorskip("pftrace")
    trace, json_path, path = one_window
    events, ft = chrome(json_path)
    origin = ft["origin_ns"]
    main = next(t for t in trace.threads if t.name == "MainThread").native_thread_id
    decoded = pftrace.decode(path)
    uuid, _ = pftrace.thread_tracks(decoded)[main]
    slices = decoded.slices[uuid]
    got = sorted((s.name, s.start, s.end) for s in slices if s.category == "cpu_op")
    want = sorted((n, a + origin, b + origin) for a, b, c, n in
                  spans_by_tid(events, {"cpu_op"})[main])
    assert got == want
    # Each slice lies within the one it is nested in (its parent).
    stack = []
    for s in slices:
        del stack[s.depth:]
        if stack:
            assert stack[-1].start <= s.start and s.end <= stack[-1].end, (stack[-1], s)
        stack.append(s)
    # Ops deeper than frames: some op sits inside a C call.
    assert any(s.category == "cpu_op" and s.depth > 0 for s in slices)
    frames = [s for s in slices if s.category != "cpu_op"]
    assert len(frames) == sum(1 for e in trace.events if e.thread_serial == 1
                              and e.native_thread_id == main)


def test_schedule_drives_both_profilers():
    traces, _, _ = run(10, schedule=frametrace.schedule(wait=1, warmup=1, active=2, repeat=2))
    assert [t.cycle for t in traces] == [0, 1]
    assert [[s.name for s in t.steps] for t in traces] == [["step#2", "step#3"],
                                                           ["step#6", "step#7"]]
    for t in traces:
        ops = [x for xs in t.slices.values() for x in xs if x.category == "cpu_op"]
        assert len(ops) > 100
        # torch recorded the same steps: its ops lie within the window.
        assert min(x.start_ns for x in ops) >= t.steps[0].start_ns
        assert max(x.end_ns for x in ops) <= t.session_end_ns
        assert_valid_trace(t.events, t.tracer_start_ns, t.tracer_stop_ns)


def test_python_stops_after_python_steps_while_torch_goes_on(tmp_path):
    traces, _, _ = run(5, schedule=frametrace.schedule(wait=0, warmup=1, active=3, repeat=1),
                       python_steps=1)
    trace = traces[0]
    assert trace.tracer_stop_ns < trace.session_end_ns
    for ext in ("json", "pftrace"):
        trace.save(tmp_path / f"t.{ext}")
    events, ft = chrome(tmp_path / "t.json")
    stop = ft["stop_ns"] - ft["origin_ns"]
    spans = [s for track in spans_by_tid(events, {"python", "c", "cpu_op"}).values() for s in track]
    frames = [s for s in spans if s[2] in ("python", "c")]
    assert frames and max(s[1] for s in frames) <= stop
    later_ops = [s for s in spans if s[2] == "cpu_op" and s[0] > stop]
    assert len(later_ops) > 100  # the two steps after the stop
    pftrace = pytest.importorskip("pftrace")
    decoded = pftrace.decode(tmp_path / "t.pftrace")
    stop_ns = ft["stop_ns"]
    for track in decoded.slices.values():
        for s in track:
            if s.category in (None, "c"):  # Python frames and C calls
                assert s.end <= stop_ns, s
    assert sum(s.start > stop_ns for tr in decoded.slices.values() for s in tr
               if s.category == "cpu_op") == len(later_ops)


def test_module_names_are_ranges_of_the_model_paths():
    model, opt, loader = training(3)
    outside = torch.nn.Linear(4, 4)
    traces = []
    with frametrace.torch.profile(module_names=model, on_trace_ready=traces.append) as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(outside(model(x)), y)
            loss.backward()
            prof.step()
    names = [r.name for r in traces[0].ranges]
    assert sorted(set(names)) == ["Linear_0", "MLP", "encoder", "encoder.0", "encoder.1",
                                  "encoder.2", "encoder.3", "head"]
    assert all(names.count(n) == 3 for n in set(names))  # once a step
    assert not any(r.open_at_start or r.open_at_end for r in traces[0].ranges)
    by_name = {r.name: r for r in traces[0].ranges}
    assert by_name["MLP"].start_ns <= by_name["encoder"].start_ns
    assert by_name["encoder.3"].end_ns <= by_name["MLP"].end_ns
    from torch.nn.modules import module as nn_module
    assert not nn_module._global_forward_pre_hooks and not nn_module._global_forward_hooks


def test_a_forward_that_raises_still_ends_its_range():
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Boom())
    traces = []
    with frametrace.torch.profile(module_names=model, on_trace_ready=traces.append):
        with pytest.raises(ValueError):
            model(torch.ones(1, 2))
        torch.ones(3).sum()
    ranges = {r.name: r for r in traces[0].ranges}
    assert set(ranges) == {"Sequential", "0", "1"}
    assert not any(r.open_at_end for r in ranges.values())


def test_import_frametrace_does_not_import_torch():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys, frametrace, frametrace.torch, "
                          "frametrace.merge; print('torch' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_losses_are_those_of_the_untraced_loop():
    _, traced, _ = run(4, schedule=frametrace.schedule(wait=0, warmup=1, active=2, repeat=1),
                       module_names=None)

    class Nothing:
        def step(self):
            pass

    model, opt, loader = training(4)
    assert traced == train(Nothing(), model, opt, loader)


def test_a_window_without_python_keeps_torchs_ops(tmp_path):
    traces, _, _ = run(3, python_steps=0)
    trace = traces[0]
    assert trace.tracer is None and trace.events == [] and trace.slices == {}
    names = [name for name, _ in trace.slice_tracks]
    assert names == [f"torch: thread {__import__('threading').get_native_id()}"]
    trace.save(tmp_path / "t.json")
    events, _ = chrome(tmp_path / "t.json")
    assert sum(e.get("cat") == "cpu_op" for e in events) == len(trace.slice_tracks[0][1]) - sum(
        x.category != "cpu_op" for x in trace.slice_tracks[0][1])
    # .pftrace too, written from the trace's Events (none) and its slices.
    trace.save(tmp_path / "t.pftrace")
    loaded = frametrace.load(tmp_path / "t.pftrace")
    assert loaded.events == []
    assert sum(len(items) for _, items in loaded.slice_tracks) == len(trace.slice_tracks[0][1])


def test_record_shapes_puts_the_input_dims_in_the_ops_args():
    traces, _, _ = run(2, record_shapes=True)
    ops = [x for xs in traces[0].slices.values() for x in xs if x.name == "aten::addmm"]
    assert ops and all(x.args and x.args.get("Input Dims") for x in ops)
    assert [len(d) for d in ops[0].args["Input Dims"]][:3] == [1, 2, 2]  # bias, input, weight.t


def test_plumbing_ignored_with_the_ops_still_joined(tmp_path):
    """ignore=frametrace.torch.PLUMBING: nn.Module's call machinery is not
    recorded, the layers' forward calls are, and torch's ops still nest in
    the Python frames left (the file is checked as Perfetto needs it)."""
    traces, _, _ = run(6, schedule=frametrace.schedule(wait=1, warmup=1, active=2, repeat=1),
                       ignore=frametrace.torch.PLUMBING)
    (trace,) = traces
    names = {ev.name for ev in trace.events}
    assert not [n for n in names if n.endswith(("._call_impl", "._wrapped_call_impl"))]
    assert [n for n in names if n.endswith("Linear.forward")]
    assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
    trace.save(tmp_path / "t.json")
    events, _ = chrome(tmp_path / "t.json")
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") not in ("python", "c")]
    assert ops
    for spans in spans_by_tid(events, {"python", "c", "cpu_op"}).values():
        assert_nested(spans)
