"""The reports' pass over the events, in Python: the reference the C pass
(``frametrace._tracer._report_pass``, which frametrace.reports runs) is
compared with, on the same events: real, mutated, shuffled, anything.
``Functions`` (per function, and per caller -> callee pair: the summary
and pstats) and ``Paths`` (per call path: the collapsed stacks and the
flame graph) give the same numbers as the C pass's columns (``columns``
lines them up), or raise the same TypeError or ValueError."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from frametrace.reports._pass import _frame, _Names, _shared_idents, _thread_label


def thread_key(serial: Any, tid: Any) -> Any:
    """How the reports tell threads apart: thread_serial, or thread_id for an
    event with none (0)."""
    return serial if serial else tid


class _WrongType(TypeError):
    """An event whose name or filename is not a str (the reports take them
    apart as strings: checked once per distinct function), or whose times
    are not ints, found in the one pass."""


def _not_str(i: int, ev: Any) -> TypeError:
    return _WrongType(f"event {i} {ev!r}: its name and filename must be str")


def _not_int(i: int, ev: Any) -> TypeError:
    # A float time (inf, nan) would reach the flame graph's pixel arithmetic.
    return _WrongType(f"event {i} {ev!r}: its start_ns and end_ns must be int")


class _BadEvents(ValueError):
    """Events that are not a getEvents() list (a ValueError)."""


def _bad_event(i: int, ev: Any, why: str) -> ValueError:
    return _BadEvents(f"event {i} {ev!r}: {why} (events must be tracer.getEvents()'s list: "
                      f"each thread's events in call order, parent the index of an earlier "
                      f"event of the same thread, or -1)")


def _unpack_error(events: Sequence[Any], exc: Exception) -> Exception:
    for i, ev in enumerate(events):
        try:
            if len(ev) != 14:
                raise ValueError
        except (TypeError, ValueError):
            return TypeError(f"event {i} {ev!r} is not a frametrace.Event (14 fields: name, "
                             f"filename, lineno, kind, thread_id, native_thread_id, start_ns, "
                             f"end_ns, depth, parent, open_at_start, open_at_stop, "
                             f"thread_serial, open_at_loss)")
    return exc


class Functions:
    """Per (function, thread) numbers, from one pass over the events.  With
    edges, also per (caller, callee) pair, cProfile-style."""

    def __init__(self, events: Sequence[Any], edges: bool = False):
        ids: dict[tuple[Any, ...], int] = {}
        keys: list[tuple[Any, ...]] = []  # fid -> (name, filename, lineno, kind, thread_id)
        calls: list[int] = []
        prim: list[int] = []
        selfs: list[int] = []
        totals: list[int] = []
        capped: list[bool] = []
        active: list[int] = []  # activations of fid on its thread's stack now
        roots: dict[Any, int] = {}  # thread key -> sum of root durations
        stacks: dict[Any, list[int]] = {}
        idents: dict[Any, Any] = {}  # thread key -> thread_id
        ev_fid: list[int] = []
        # Edges: eid of (caller fid, callee fid).
        eids: dict[tuple[int, int], int] = {}
        ekeys: list[tuple[int, int]] = []
        enc: list[int] = []
        epc: list[int] = []
        ett: list[int] = []
        ect: list[int] = []
        eactive: list[int] = []
        ev_edge: list[int] = []

        try:
            for i, (name, filename, lineno, kind, ident, _ntid, start, end, _depth, parent,
                    _oas, oast, serial, _oal) in enumerate(events):
                tid = thread_key(serial, ident)
                if tid not in idents:
                    idents[tid] = ident
                key = (name, filename, lineno, kind, tid)
                fid = ids.get(key)
                if fid is None:
                    if type(name) is not str or type(filename) is not str:
                        raise _not_str(i, events[i])
                    fid = ids[key] = len(keys)
                    keys.append(key)
                    calls.append(0)
                    prim.append(0)
                    selfs.append(0)
                    totals.append(0)
                    capped.append(False)
                    active.append(0)
                d = end - start
                if type(d) is not int:
                    raise _not_int(i, events[i])
                stack = stacks.get(tid)
                if stack is None:
                    stack = stacks[tid] = []
                if parent < 0:
                    if parent != -1:
                        raise _bad_event(i, events[i], f"parent {parent}")
                    while stack:
                        j = stack.pop()
                        active[ev_fid[j]] -= 1
                        if edges and ev_edge[j] >= 0:
                            eactive[ev_edge[j]] -= 1
                    roots[tid] = roots.get(tid, 0) + d
                    if edges:
                        ev_edge.append(-1)
                else:
                    while stack and stack[-1] != parent:
                        j = stack.pop()
                        active[ev_fid[j]] -= 1
                        if edges and ev_edge[j] >= 0:
                            eactive[ev_edge[j]] -= 1
                    if not stack:
                        self._restack(events, i, parent, tid, stack, ev_fid, keys, active,
                                      ev_edge if edges else None, eactive)
                    pfid = ev_fid[parent]
                    selfs[pfid] -= d
                    if edges:
                        pe = ev_edge[parent]
                        if pe >= 0:
                            ett[pe] -= d
                        ekey = (pfid, fid)
                        eid = eids.get(ekey)
                        if eid is None:
                            eid = eids[ekey] = len(ekeys)
                            ekeys.append(ekey)
                            enc.append(0)
                            epc.append(0)
                            ett.append(0)
                            ect.append(0)
                            eactive.append(0)
                        enc[eid] += 1
                        if not eactive[eid]:
                            epc[eid] += 1
                            ect[eid] += d
                        eactive[eid] += 1
                        ett[eid] += d
                        ev_edge.append(eid)
                calls[fid] += 1
                if not active[fid]:
                    prim[fid] += 1
                    totals[fid] += d
                active[fid] += 1
                selfs[fid] += d
                if oast:
                    capped[fid] = True
                ev_fid.append(fid)
                stack.append(i)
        except (_BadEvents, _WrongType):
            raise
        except (TypeError, ValueError) as exc:
            raise _unpack_error(events, exc) from None
        self.keys = keys
        self.calls = calls
        self.prim = prim
        self.selfs = selfs
        self.totals = totals
        self.capped = capped
        self.roots = roots
        self.ecallers = [caller for caller, _ in ekeys]
        self.ecallees = [callee for _, callee in ekeys]
        self.enc = enc
        self.epc = epc
        self.ett = ett
        self.ect = ect
        self.threads = list(stacks)  # in order of first event
        self.idents = idents

    @staticmethod
    def _restack(events: Sequence[Any], i: int, parent: int, tid: Any, stack: list[int],
                 ev_fid: list[int], keys: list[tuple[Any, ...]], active: list[int],
                 ev_edge: Optional[list[int]], eactive: list[int]) -> None:
        """The parent is not on the thread's stack: events out of call order.
        Rebuild the stack from the parent links (parents come first)."""
        if not 0 <= parent < i:
            raise _bad_event(i, events[i], f"parent {parent} is not an earlier event")
        chain = []
        j = parent
        while j >= 0:
            if keys[ev_fid[j]][4] != tid:
                raise _bad_event(i, events[i], f"ancestor {j} is on another thread")
            chain.append(j)
            j = events[j][9]
        chain.reverse()
        for j in chain:
            active[ev_fid[j]] += 1
            if ev_edge is not None and ev_edge[j] >= 0:
                eactive[ev_edge[j]] += 1
        stack[:] = chain


class Paths:
    """Events merged by identical call path (per thread): one node per
    distinct path, with its total, self time, calls and capped flag."""

    def __init__(self, events: Sequence[Any]):
        ids: dict[tuple[Any, ...], int] = {}
        parents: list[int] = []
        info: list[tuple[Any, ...]] = []  # (name, filename, lineno, kind, thread_id)
        totals: list[int] = []
        selfs: list[int] = []
        calls: list[int] = []
        capped: list[bool] = []
        ev_path: list[int] = []
        threads: dict[Any, int] = {}  # thread key -> sum of root durations, first-seen order
        idents: dict[Any, Any] = {}  # thread key -> thread_id
        try:
            for i, (name, filename, lineno, kind, ident, _ntid, start, end, _depth, parent,
                    _oas, oast, serial, _oal) in enumerate(events):
                tid = thread_key(serial, ident)
                if tid not in idents:
                    idents[tid] = ident
                d = end - start
                if type(d) is not int:
                    raise _not_int(i, events[i])
                if parent < 0:
                    if parent != -1:
                        raise _bad_event(i, events[i], f"parent {parent}")
                    key: tuple[Any, ...] = (-1, name, filename, lineno, kind, tid)
                    threads[tid] = threads.get(tid, 0) + d
                    pp = -1
                else:
                    if parent >= i:
                        raise _bad_event(i, events[i], f"parent {parent} is not an earlier event")
                    pp = ev_path[parent]
                    if info[pp][4] != tid:
                        raise _bad_event(i, events[i], f"parent {parent} is on another thread")
                    key = (pp, name, filename, lineno, kind)
                    selfs[pp] -= d
                p = ids.get(key)
                if p is None:
                    if type(name) is not str or type(filename) is not str:
                        raise _not_str(i, events[i])
                    p = ids[key] = len(parents)
                    parents.append(pp)
                    info.append((name, filename, lineno, kind, tid))
                    totals.append(0)
                    selfs.append(0)
                    calls.append(0)
                    capped.append(False)
                totals[p] += d
                selfs[p] += d
                calls[p] += 1
                if oast:
                    capped[p] = True
                ev_path.append(p)
        except (_BadEvents, _WrongType):
            raise
        except (TypeError, ValueError) as exc:
            raise _unpack_error(events, exc) from None
        self.parents = parents
        self.info = info
        self.totals = totals
        self.selfs = selfs
        self.calls = calls
        self.capped = capped
        self.threads = threads
        self.idents = idents
        # The tree: each path's first child and next sibling (-1: none),
        # children in the order they were first called.
        first = [-1] * len(parents)
        after = [-1] * len(parents)
        for p in range(len(parents) - 1, -1, -1):
            pp = parents[p]
            if pp >= 0:
                after[p] = first[pp]
                first[pp] = p
        self.first_child = first
        self.next_sibling = after



def columns(events: Sequence[Any], mode: int) -> tuple[Any, ...]:
    """What ``_tracer._report_pass(events, mode)`` gives, as plain lists:
    mode 0 the call paths (without the functions' columns, which only the
    C pass has), 1 the functions, 2 with the pairs."""
    if mode == 0:
        p = Paths(events)
        return (p.parents, p.info, p.totals, p.selfs, p.calls, p.capped, list(p.idents),
                list(p.idents.values()), p.threads, p.first_child, p.next_sibling)
    f = Functions(events, edges=mode == 2)
    return (f.keys, f.calls, f.prim, f.selfs, f.totals, f.capped, f.threads,
            [f.idents[t] for t in f.threads], f.roots, f.ecallers, f.ecallees, f.enc, f.epc,
            f.ett, f.ect)


def collapsed_lines(events: Sequence[Any], weight: str = "self", threads: bool = True) -> list[str]:
    """collapsed_stacks(events, weight=..., threads=...) of a list of events
    (no thread names), from Paths: a label is (parent label, frame), merged
    where alike."""
    paths = Paths(events)
    shared = _shared_idents(paths.idents)
    names = _Names({})
    values = paths.selfs if weight == "self" else paths.calls
    label_ids: dict[tuple[int, str], int] = {}
    label_up: list[int] = []
    label_frame: list[str] = []
    label_value: list[int] = []
    path_label: list[int] = []

    def label(up: int, frame: str) -> int:
        lid = label_ids.get((up, frame))
        if lid is None:
            lid = label_ids[(up, frame)] = len(label_up)
            label_up.append(up)
            label_frame.append(frame)
            label_value.append(0)
        return lid

    for p, pp in enumerate(paths.parents):
        info = paths.info[p]
        frame = _frame(info)
        if pp >= 0:
            lid = label(path_label[pp], frame)
        elif threads:
            top = _frame((_thread_label(info[4], paths.idents, shared, names), "", 0, "c"))
            lid = label(label(-1, top), frame)
        else:
            lid = label(-1, frame)
        path_label.append(lid)
        label_value[lid] += values[p]
    lines = []
    for lid, value in enumerate(label_value):
        if weight == "self":
            value = (max(value, 0) + 500) // 1000
        if value <= 0:
            continue
        parts = []
        up = lid
        while up >= 0:
            parts.append(label_frame[up])
            up = label_up[up]
        lines.append(f"{';'.join(reversed(parts))} {value}")
    return lines
