"""Collapsed ("folded") stacks, for flamegraph.pl and speedscope."""
from __future__ import annotations

import os
from typing import Any, Iterator, Mapping, Optional

from .. import _tracer
from .._output import open_output
from ._pass import (PathLike, _check_choice, _frame, _Paths, _shared_idents, _source,
                    _thread_label, _thread_names)

_WEIGHTS = ("self", "calls")


def collapsed_stacks(trace: Any, *, weight: str = "self", threads: bool = True,
                     thread_names: Optional[Mapping[Any, str]] = None) -> list[str]:
    """The trace in the collapsed ("folded") stack format of flamegraph.pl
    and speedscope: one line per distinct call path, ``"frame;frame;frame
    weight"``, root first.

    A frame is ``name (file:line)`` for Python functions and ``name`` for C
    functions, with ';' replaced by ':' and line breaks by spaces.  With
    threads=True (the default) each line starts with a frame for its thread,
    ``thread <thread_id>`` (``<name> (thread <thread_id>)`` when the thread's
    name is known: thread_names, or a Trace's), so the threads make separate
    towers; with threads=False identical paths of different threads merge.

    weight="self": the path's self time (the time of its leaf frame minus its
    children's, over every call through that path) in whole microseconds,
    rounded to nearest; paths weighing 0 are left out.  weight="calls": the
    number of calls through that path.  Lines come in the order the paths
    first occur in the trace.
    """
    return list(_collapsed_lines(trace, weight, threads, thread_names))


def _collapsed_lines(trace: Any, weight: str, threads: bool,
                     thread_names: Optional[Mapping[Any, str]]) -> Iterator[str]:
    """collapsed_stacks()'s lines one by one.  Memory linear in the number
    of paths (not in the length of their labels): a label is a frame and
    the id of its parent's label, spelt out only when its line is made."""
    weight = _check_choice("weight", weight, _WEIGHTS)
    _trace, evs, default_names = _source(trace)
    names = _thread_names(default_names, thread_names)
    paths = _Paths(evs)
    shared = _shared_idents(paths.idents)
    values = paths.selfs if weight == "self" else paths.calls
    # Only what the labels need is kept from here: the paths' other columns
    # go before the labels are made.
    parents, path_funcs, funcs, idents = paths.parents, paths.path_funcs, paths.funcs, paths.idents
    del paths
    texts: list[str] = []
    text_ids: dict[str, int] = {}

    def frame_id(text: str) -> int:
        fid = text_ids.get(text)
        if fid is None:
            fid = text_ids[text] = len(texts)
            texts.append(text)
        return fid

    # Identical labels (paths of different threads with threads=False, or
    # frames that display alike) are one line: a label is (parent label, frame).
    frame_of_func = [frame_id(_frame(key)) for key in funcs]
    top_of_func = [frame_id(_frame((_thread_label(key[4], idents, shared, names), "", 0,
                                    "c"))) if threads else -1
                   for key in funcs]
    label_up, label_frame, label_value = _tracer._collapse_labels(
        parents, path_funcs, frame_of_func, top_of_func, values)
    n = len(label_up)

    def lines() -> Iterator[str]:
        start = 0
        while start < n:
            batch, start = _tracer._collapsed_batch(label_up, label_frame, label_value, texts,
                                                    weight == "self", start, 4096)
            yield from batch

    return lines()


def write_collapsed(trace: Any, path: PathLike, *, weight: str = "self", threads: bool = True,
                    thread_names: Optional[Mapping[Any, str]] = None) -> str:
    """Writes ``collapsed_stacks(trace, ...)`` to path, one line each
    (UTF-8); returns the path.  ``flamegraph.pl path > out.svg``, or open it
    in speedscope."""
    lines = _collapsed_lines(trace, weight, threads, thread_names)
    path = os.fspath(path)
    with open_output(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
        for line in lines:
            fh.write(line + "\n")
    return path
