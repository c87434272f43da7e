"""frametrace.torch's join of other tools' slices with a thread's frames,
on hand-made frames and ops (no torch needed): what nests stays, what
crosses a frame's edge by a little is moved (and says so), what crosses by
more goes to a track of its own, unchanged."""
from frametrace import _testing
from frametrace.export import Slice


def _nest(frames, ops, tolerance_ns):
    """The C sweep frametrace.torch joins with, on Slices: (nested, as
    placed, moved ones saying so in their args; crossing, unchanged)."""
    placed, crossing = _testing.nest(frames, [(x.start_ns, x.end_ns) for x in ops], tolerance_ns)
    nested = []
    for start, end, i in placed:
        x = ops[i]
        args = dict(x.args or {})
        if start != x.start_ns:
            args["frametrace_moved_start_ns"] = start - x.start_ns
        if end != x.end_ns:
            args["frametrace_moved_end_ns"] = end - x.end_ns
        nested.append(x._replace(start_ns=start, end_ns=end, args=args or x.args))
    return nested, [ops[i] for i in crossing]


def op(name, start, end):
    return Slice(name, "cpu_op", start, end)


# (start, end, parent index) in call order: a root 0-1000 with two C calls.
FRAMES = [(0, 1000, -1), (100, 400, 0), (500, 900, 0)]


def test_ops_inside_frames_stay_as_they_are():
    ops = [op("a", 150, 300), op("a.child", 160, 200), op("b", 600, 800)]
    nested, crossing = _nest(FRAMES, ops, tolerance_ns=50)
    assert nested == ops and crossing == []


def test_an_op_starting_just_before_its_call_is_moved_into_it():
    ops = [op("early", 80, 300), op("early.child", 90, 120)]
    nested, crossing = _nest(FRAMES, ops, tolerance_ns=50)
    assert crossing == []
    assert [(x.name, x.start_ns, x.end_ns) for x in nested] == [("early", 100, 300),
                                                                ("early.child", 100, 120)]
    assert nested[0].args == {"frametrace_moved_start_ns": 20}
    assert nested[1].args == {"frametrace_moved_start_ns": 10}


def test_an_op_ending_just_after_its_call_is_moved_into_it():
    nested, crossing = _nest(FRAMES, [op("late", 520, 930)], tolerance_ns=50)
    assert crossing == []
    assert (nested[0].start_ns, nested[0].end_ns) == (520, 900)
    assert nested[0].args == {"frametrace_moved_end_ns": -30}


def test_an_op_spanning_two_calls_goes_to_its_own_track_unchanged():
    ops = [op("annotation", 300, 700), op("inside", 150, 200)]
    ops.sort(key=lambda x: (x.start_ns, -x.end_ns))
    nested, crossing = _nest(FRAMES, ops, tolerance_ns=50)
    assert crossing == [op("annotation", 300, 700)]
    assert nested == [op("inside", 150, 200)]


def test_ops_between_frames_and_after_them_stay():
    ops = [op("gap", 420, 480), op("after", 1100, 1200)]
    nested, crossing = _nest(FRAMES, ops, tolerance_ns=50)
    assert nested == ops and crossing == []


def test_an_op_around_a_frame_contains_it():
    # A Python frame run inside an op (a custom autograd Function).
    frames = [(0, 1000, -1), (300, 400, 0)]
    ops = [op("outer", 200, 600)]
    nested, crossing = _nest(frames, ops, tolerance_ns=50)
    assert nested == ops and crossing == []
