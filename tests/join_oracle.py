"""The join's reference, in Python: what frametrace.torch's C join
(``_tracer._join_ops``) must give, op for op, on the same trace and
activities.  The sweep is the .pftrace writer's; frames come from
trace.events."""
from __future__ import annotations

import os
from typing import Any, Iterable, Optional

from frametrace.export import Slice


def _nest(frames: list, ops: list, tolerance_ns: int) -> tuple[list, list]:
    """ops (Slices sorted by start, longest first) split into those that
    nest with frames ((start, end, parent index) of one thread's events,
    in call order) and those that cross a frame's boundary or another op's
    (annotations such as record_function's, which begin in one call and
    end in another): these go on a track of their own, unchanged, where
    Perfetto neither drops nor misnests them.  An op that crosses a
    frame's edge by at most tolerance_ns (the clocks' join is that close)
    is moved onto the side of the edge where the rest of it lies, and says
    so in its args (``frametrace_moved_start_ns``/``_end_ns``).  The sweep
    is the .pftrace writer's: an op goes before the frame it starts before
    (or at, and outlasts)."""
    work = [(x, i) for i, x in enumerate(ops)]  # (Slice as placed, index in ops)
    crossing: set = set()
    for _ in range(10000):
        moved, found = _crossing_pass(frames, work, crossing, tolerance_ns)
        if not moved and not found:
            break
        crossing |= found
        for k, x in moved.items():
            work[k] = (x, work[k][1])
        if moved:
            work.sort(key=lambda w: (w[0].start_ns, -w[0].end_ns))
    nested = []
    for x, i in work:
        if i in crossing:
            continue
        orig = ops[i]
        if (x.start_ns, x.end_ns) != (orig.start_ns, orig.end_ns):
            args = dict(orig.args or {})
            if x.start_ns != orig.start_ns:
                args["frametrace_moved_start_ns"] = x.start_ns - orig.start_ns
            if x.end_ns != orig.end_ns:
                args["frametrace_moved_end_ns"] = x.end_ns - orig.end_ns
            x = x._replace(args=args)
        nested.append(x)
    return nested, [ops[i] for i in sorted(crossing)]


def _crossing_pass(frames: list, work: list, skip: set, tol: int) -> tuple[dict, set]:
    """One sweep: {position in work: the op moved} for ops that cross a
    frame's edge by at most tol, and (only when none moved) the indices (in
    ops) of ops that cross more.  Passes repeat until none moves: as many
    as moves cascade (an op's children after it), not one per move."""
    found: set = set()
    moved: dict = {}
    stack: list = []  # (start, end, is_op, index: frame's, or op's position in work)
    i = x = 0
    nf, nx = len(frames), len(work)
    while i < nf or x < nx:
        while x < nx and work[x][1] in skip:
            x += 1
        f = frames[i] if i < nf else None
        op = work[x][0] if x < nx else None
        if op is not None and (f is None or op.start_ns < f[0]
                               or (op.start_ns == f[0] and op.end_ns > f[1])):
            take_op, start, end = True, op.start_ns, op.end_ns
        elif f is not None:
            take_op, start, end = False, f[0], f[1]
        else:
            break
        while stack:
            t_start, t_end, t_op, t_idx = stack[-1]
            keep = ((t_start <= start and end <= t_end) if (t_op or take_op)
                    else t_idx == f[2])  # type: ignore[index]
            if keep:
                break
            stack.pop()
            if t_end <= start or (t_op and take_op):
                # Ended before; or two ops: torch's own nesting, kept.
                if t_op and take_op and t_end > start and work[x][1] not in found:
                    found.add(work[x][1])
                continue
            # They cross: t began before what begins now and ends after.
            if t_op and t_idx not in moved:  # an op, then a frame
                t = work[t_idx][0]
                if start - t_start <= tol and t_end <= end:
                    moved[t_idx] = t._replace(start_ns=start)  # into the frame
                elif t_end - start <= tol:
                    moved[t_idx] = t._replace(end_ns=start)  # before it
                else:
                    found.add(work[t_idx][1])
            elif take_op and op is not None and x not in moved:  # a frame, then an op
                if end - t_end <= tol and t_start <= start:
                    moved[x] = op._replace(end_ns=t_end)  # into the frame
                elif t_end - start <= tol:
                    moved[x] = op._replace(start_ns=t_end)  # after it
                else:
                    found.add(work[x][1])
        if take_op:
            if work[x][1] not in found:
                stack.append((start, end, True, x))
            x += 1
        else:
            stack.append((start, end, False, i))
            i += 1
    # After a move the order may change: what this sweep found crossing is
    # decided again by the next one.
    return moved, (set() if moved else found)


def join_slices(trace: Any, activities: Iterable[Any], *, offset_ns: int,
                pid: Optional[int] = None, tolerance_ns: int = 250) -> tuple[dict, list]:
    """({thread serial: [Slice]}, [(track name, [Slice])]) of activities
    (objects with name, category, start, end, device, resource, args)."""
    pid = os.getpid() if pid is None else pid
    serial_of: dict[int, int] = {}
    names: dict[int, str] = {}
    for t in trace.threads:  # the latest thread that had a native id
        if t.native_thread_id:
            serial_of[t.native_thread_id] = t.serial
            names[t.serial] = t.name or f"thread {t.thread_id}"
    per_serial: dict[int, list] = {}
    own: dict[str, list] = {}
    for a in activities:
        s = Slice(a.name, a.category, a.start - offset_ns, a.end - offset_ns, a.args)
        if a.device == pid or a.device < 0:
            serial = serial_of.get(a.resource)
            if serial is not None:
                per_serial.setdefault(serial, []).append(s)
            else:
                own.setdefault(f"torch: thread {a.resource}", []).append(s)
        else:
            own.setdefault(f"torch: device {a.device} stream {a.resource}", []).append(s)
    frames_of: dict[int, list] = {}
    if per_serial:
        for e in trace.events:
            if e.thread_serial in per_serial:
                frames_of.setdefault(e.thread_serial, []).append(e)
    slices: dict[int, list] = {}
    for serial, items in per_serial.items():
        items.sort(key=lambda s: (s.start_ns, -s.end_ns))
        events = frames_of.get(serial, [])
        index = {id(e): k for k, e in enumerate(events)}
        frames = [(e.start_ns, e.end_ns, -1) for e in events]
        all_events = trace.events
        for k, e in enumerate(events):
            if e.parent >= 0:
                frames[k] = (e.start_ns, e.end_ns, index.get(id(all_events[e.parent]), -1))
        nested, crossing = _nest(frames, items, tolerance_ns)
        if nested:
            slices[serial] = nested
        if crossing:
            own.setdefault(f"torch: {names.get(serial, serial)} (not nested in its frames)",
                           []).extend(crossing)
    return slices, sorted(own.items())


class Activity:
    """One torch activity as the reference reads it: times in wall-clock ns."""

    def __init__(self, name, category, start, end, device, resource, args=None):
        self.name, self.category, self.start, self.end = name, category, start, end
        self.device, self.resource, self.args = device, resource, args


def read_activities(raw: Iterable[Any], args_of: Any = None) -> list:
    """torch's own activities (trace_activities()) read in Python (others,
    with the reference's attributes, as they are)."""
    out = []
    for a in raw:
        if not hasattr(a, "timestamp"):
            out.append(a)
            continue
        start = a.timestamp()
        args = args_of(a.metadata_json()) if args_of is not None else None
        out.append(Activity(a.name(), a.type(), start, start + max(a.duration(), 0),
                            a.device_id(), abs(a.resource_id()), args))
    return out
