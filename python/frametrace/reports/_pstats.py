"""pstats files, as cProfile's ``dump_stats`` writes them."""
from __future__ import annotations

import marshal
import os
import sys
import types
from typing import Any

from .._output import open_output
from ._pass import PathLike, _Functions, _source


_c_labels: dict[str, str] = {}


def pstats_label(name: str, filename: str, lineno: int, kind: str, *,
                 qualnames: bool = False) -> tuple[str, int, str]:
    """The pstats key of a function, as cProfile makes it.

    Python functions: ``(filename, lineno, co_name)``; frametrace's name is
    the qualified name on 3.11+, so its last dotted part is used (the whole
    qualified name with qualnames=True).

    C functions: ``("~", 0, description)``, cProfile's description of the
    builtin (pstats shows it in braces):

    - ``len`` (a builtins function): ``<built-in method builtins.len>``;
    - ``math.sqrt`` (a function of a module): ``<built-in method math.sqrt>``,
      when ``math`` is a module of this process whose ``sqrt`` is a builtin;
    - ``list.append`` (anything else, a method of a type):
      ``<method 'append' of 'list' objects>``.  cProfile names the type by
      its ``tp_name`` (``collections.OrderedDict``), frametrace by its
      qualified name (``OrderedDict``), and cProfile describes class methods
      of builtin types (``dict.fromkeys``) as ``<built-in method fromkeys>``:
      those keys differ from cProfile's.
    """
    if not isinstance(name, str) or not isinstance(filename, str):
        raise TypeError(f"name and filename must be str, not {type(name).__name__} "
                        f"and {type(filename).__name__}")
    if kind != "c":
        return (filename, lineno, name if qualnames else name.rsplit(".", 1)[-1])
    label = _c_labels.get(name)
    if label is None:
        owner, dot, attr = name.rpartition(".")
        if not dot:
            label = f"<built-in method builtins.{name}>"
        else:
            module = sys.modules.get(owner)
            if (isinstance(module, types.ModuleType)
                    and isinstance(getattr(module, attr, None), types.BuiltinFunctionType)):
                label = f"<built-in method {name}>"
            else:
                label = f"<method '{attr}' of '{owner}' objects>"
        _c_labels[name] = label
    return ("~", 0, label)


def write_pstats(trace: Any, path: PathLike, *, qualnames: bool = False) -> str:
    """Writes the trace as a pstats file (``pstats.Stats(path)``, snakeviz,
    gprof2dot); returns the path.

    The file is what ``cProfile.Profile.dump_stats`` writes: the marshal of
    ``{func: (primitive_calls, calls, tottime, cumtime, callers)}``, func a
    ``pstats_label`` key (cProfile's naming of Python and C functions),
    callers ``{caller: (calls, primitive_calls, tottime, cumtime)}`` per
    caller -> callee edge, in cProfile's order (pstats reads that tuple as
    nc, cc, tt, ct).  Times in seconds: tottime is self time, cumtime the
    total time of outermost activations.  Primitive calls are calls of a
    function not already on the thread's stack; an edge's are the calls from
    that caller not within another call of the same edge, and its cumtime
    counts only those, as cProfile does.  The threads are merged (pstats
    has no threads); root events have no callers.
    """
    _trace, evs, _names = _source(trace)
    fs = _Functions(evs, edges=True)
    labels = [pstats_label(*key[:4], qualnames=qualnames) for key in fs.keys]
    # Sums in lists, added to in place: a function's threads (and
    # functions that label alike) are one pstats entry.
    stats: dict[tuple[str, int, str], list[Any]] = {}
    for fid, label in enumerate(labels):
        row = stats.get(label)
        if row is None:
            stats[label] = [fs.prim[fid], fs.calls[fid], fs.selfs[fid], fs.totals[fid], {}]
        else:
            row[0] += fs.prim[fid]
            row[1] += fs.calls[fid]
            row[2] += fs.selfs[fid]
            row[3] += fs.totals[fid]
    callers_of = [stats[label][4] for label in labels]
    enc, epc, ett, ect = fs.enc, fs.epc, fs.ett, fs.ect
    for eid, (pfid, fid) in enumerate(zip(fs.ecallers, fs.ecallees)):
        callers = callers_of[fid]
        caller = labels[pfid]
        edge = callers.get(caller)
        if edge is None:
            callers[caller] = [enc[eid], epc[eid], ett[eid], ect[eid]]
        else:
            edge[0] += enc[eid]
            edge[1] += epc[eid]
            edge[2] += ett[eid]
            edge[3] += ect[eid]
    out = {}
    for label, (pc, nc, tt, ct, callers) in stats.items():
        out[label] = (pc, nc, tt / 1e9, ct / 1e9,
                      {k: (v[0], v[1], v[2] / 1e9, v[3] / 1e9) for k, v in callers.items()})
    path = os.fspath(path)
    with open_output(path, "wb") as fh:
        marshal.dump(out, fh)
    return path
