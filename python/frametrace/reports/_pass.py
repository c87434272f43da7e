"""The reports' shared glue: the trace's events and threads' names, the
one pass over the events in C and its columns, and the checks of the
options the reports share."""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from .. import _tracer

PathLike = Union[str, "os.PathLike[str]"]


# ---- input ------------------------------------------------------------------


class _Names:
    """The threads' names of a report: a Trace's own per thread (by
    thread_serial, Trace.threads) and the caller's (by thread_id).  A name
    by thread_id names a thread only where no other thread of the events
    had that id (CPython reuses idents)."""

    def __init__(self, serial: dict[int, str]) -> None:
        self.serial = serial
        self.given: dict[Any, str] = {}

    def of(self, key: Any, tid: Any, shared: bool) -> Optional[str]:
        if not shared and tid in self.given:
            return self.given[tid]
        return self.serial.get(key)


def _thread_key(serial: Any, tid: Any) -> Any:
    """How the reports tell threads apart: thread_serial, or thread_id for an
    event with none (0)."""
    return serial if serial else tid


def _source(trace: Any) -> tuple[Any, Sequence[Any], _Names]:
    """(the Trace, as_trace(trace); its events; its threads' names)."""
    from .._trace import as_trace

    trace = as_trace(trace)
    names = _Names({})
    for t in getattr(trace, "threads", None) or ():
        try:
            serial, name = t[0], t[3]
        except (TypeError, IndexError, KeyError):
            continue
        if type(serial) is int and serial > 0 and isinstance(name, str):
            names.serial[serial] = name
    events = trace.events
    if isinstance(events, (str, bytes)) or not isinstance(events, Iterable):
        raise TypeError(f"Trace.events must be a list of frametrace.Event (tracer.getEvents()), "
                        f"not {type(events).__name__}")
    if type(events) not in (list, tuple):
        events = list(events)
    return trace, events, names


def _thread_names(default: _Names, given: Optional[Mapping[Any, str]]) -> _Names:
    if given is None:
        return default
    if not isinstance(given, Mapping):
        raise TypeError(f"thread_names must be a mapping {{thread_id: name}}, not {type(given).__name__}")
    default.given = dict(given)
    return default


def _shared_idents(idents: Mapping[Any, Any]) -> set:
    """The thread_ids that several threads (thread keys) of the events had."""
    seen: set = set()
    shared: set = set()
    for tid in idents.values():
        (shared if tid in seen else seen).add(tid)
    return shared


def _pass(events: Sequence[Any], mode: int) -> tuple[Any, ...]:
    """The one pass over the events, in C (mode 0: by call path, 1: by
    function, 2: and by caller -> callee pair): its columns.  Its numbers
    are memoryviews of packed int64 or int32 (a few bytes a value, not an
    int object each); a sums column where a sum passed int64 is a list of
    ints.  TypeError or ValueError naming the event for events that are
    not getEvents()'s."""
    return _tracer._report_pass(events, mode)


def _display(name: str, filename: str, lineno: int, kind: str) -> str:
    """"name (file:line)" for Python functions, "name" for C functions."""
    return name if kind == "c" else f"{name} ({filename}:{lineno})"


# ---- the function pass --------------------------------------------------------


class _Functions:
    """Per (function, thread) numbers, from one pass over the events.  With
    edges, also per (caller, callee) pair, cProfile-style."""

    def __init__(self, events: Sequence[Any], edges: bool = False):
        (self.keys, self.calls, self.prim, self.selfs, self.totals, self.capped,
         self.threads, thread_ids, self.roots, self.ecallers, self.ecallees, self.enc,
         self.epc, self.ett, self.ect) = _pass(events, 2 if edges else 1)
        self.idents = dict(zip(self.threads, thread_ids))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _check_limit(limit: Any) -> Optional[int]:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int >= 0 or None, not {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    return limit


def _check_choice(what: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


class _Paths:
    """Events merged by identical call path (per thread): one node per
    distinct path, with its total, self time, calls and capped flag."""

    def __init__(self, events: Sequence[Any]):
        (self.parents, self.info, self.totals, self.selfs, self.calls, self.capped,
         thread_keys, thread_ids, self.threads, self.first_child, self.next_sibling,
         self.funcs, self.path_funcs) = _pass(events, 0)
        self.idents = dict(zip(thread_keys, thread_ids))


_UNSAFE = re.compile(r"[;\r\n]")


def _frame(info: tuple[Any, ...]) -> str:
    return _UNSAFE.sub(lambda m: ":" if m.group() == ";" else " ", _display(*info[:4]))


def _thread_label(key: Any, idents: Mapping[Any, Any], shared: set, names: _Names) -> str:
    """"name (thread <thread_id>)"; where several threads had that id, its
    serial too: "name (thread <thread_id> #<serial>)"."""
    tid = idents.get(key, key)
    name = names.of(key, tid, tid in shared)
    which = f"thread {tid} #{key}" if tid in shared else f"thread {tid}"
    return f"{name} ({which})" if name else which
