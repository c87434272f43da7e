"""Differential test: frametrace against a pure-Python sys.setprofile tracer
(tests/reference_tracer.py) on random programs.

Hypothesis writes a program as Python source (every function a real `def`),
exec'd under a fixed filename; it is run once under the reference and once
under frametrace, and the call tree under the program's entry function and
under each thread's entry function must be the same in both: names, kinds,
first lines, order, nesting and flags.  The setprofile backend sees the
reference's very events, so any difference is a bug in one of them; the
monitoring backend is held to the same trees (README: both backends record
the same events), except for the constructs in MONITORING_DIFFERS.

FRAMETRACE_HYPOTHESIS_EXAMPLES=N runs N examples per setup (default 150).
"""
from __future__ import annotations

import contextlib
import gc
import os
import re
import sys
import threading
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import frametrace
from frametrace.testing import assert_valid_trace
from reference_tracer import ReferenceTracer, walk

FILENAME = "<frametrace-differential>"
EXAMPLES = int(os.environ.get("FRAMETRACE_HYPOTHESIS_EXAMPLES", "150"))
MAX_COST = 150  # rough bound on the calls of one function's execution
# Rings of the default 8 MiB take milliseconds to fault in, per thread; the
# programs record far fewer events (no drops is checked).
BUFFER = 1 << 16

# CPython issue 122029: 3.12.0-3.12.4 report a C return with no call for a
# types.MethodType wrapping a C function, 3.13.0 a call made through one
# with f(*args) with no return.  The generator keeps those constructs (`_bl`)
# and the reference resolves them with frametrace's documented rules; they
# are the only unpaired streams allowed.
UNPAIRED_C_EVENTS = ((3, 12, 0) <= sys.version_info[:3] <= (3, 12, 4)
                     or sys.version_info[:3] == (3, 13, 0))

PRELUDE = """\
import collections
import math
import types

_bl = types.MethodType(len, (1, 2))


class _L(list):
    pass


class _D(dict):
    pass


class _S:  # Python code run by C slots
    def __len__(self):
        return 1

    @property
    def p(self):
        return 2

    def __eq__(self, other):
        return False


class _CM:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

"""

# On 3.10 sys.setprofile's trampoline snapshots the frame's locals into
# f_locals (PyFrame_FastToLocals) at every event, so a generator whose local
# is rebound lives on in the snapshot until the next event of that frame,
# and is then closed inside the Python callback, where no events are seen:
# the reference would miss its close, which frametrace (a C hook) sees.  So
# on 3.10 each generator gets a local of its own and dies with its frame
# (or as a temporary); 3.11+ snapshot only if f_locals was read.
REBIND_LOCALS = sys.version_info >= (3, 11)

# CPython 3.11 reports no call, only the return, for the slice of a
# generator resumed inside throw() when the `yield from` subgenerator it was
# suspended in finished (the resumption _gen_throw makes itself, jumping back
# to SEND).  The replay makes it an open_at_start event inside the open frame
# (test_throw_into_yield_from_on_311); the random programs on 3.11 keep
# throw() to generators with no `yield from`, so that their streams stay
# paired.
THROW_INTO_YIELD_FROM = sys.version_info[:2] != (3, 11)

# The monitoring backend (3.12+) filters CALL events to builtin functions
# and method descriptors; the profile hook's stream (CPython's legacy layer)
# differs from that filter for two constructs, tagged below and left out of
# the random programs on that backend (see the tests at the end):
#   "bound_c": a types.MethodType wrapping a C function.  CPython's legacy
#     layer unwraps it (since 3.12.5/3.13.0, the fix of issue 122029), the
#     filter does not: `_bl()` gets a C return with no call (`len` flagged
#     open_at_start), `_bl(*())` on 3.13.0 no `len` at all.  On 3.12.0-3.12.4
#     both streams lack the same call, and the construct stays.
#   "no_self": a method descriptor called with no argument (TypeError): the
#     profile hook reports nothing, the monitoring backend an extra call (and
#     counts `dropped` for one it has not named yet).
# csrc/monitor.c unwraps a bound method around a builtin on 3.13 only, as
# 3.13's profile layer does; 3.12.5+ (not installed here to check) may too.
# On 3.14+ neither stream has a call for `_bl(*())`: the CALL instruction
# unwraps the method itself (`_bl()` is a plain `len` call), and the one
# CALL event naming the bound method (CALL_FUNCTION_EX) gets no C_RETURN, so
# the profile layer ignores it, and so does the monitoring backend
# (test_bound_c_function_called_with_star_args).
MONITORING_DIFFERS = {"bound_c"} if (3, 12, 5) <= sys.version_info[:3] < (3, 13) else set()

# C calls: (source, raises, tag).  Statements use the local `d` (an int >= 0).
BUILTINS = [
    ("len((1, 2))", False, None),
    ("isinstance(d, int)", False, None),
    ("sorted((3, 1, 2))", False, None),
    ("{}.get(d)", False, None),
    ("math.sqrt(4.0)", False, None),
    ("','.join(('a', 'b'))", False, None),
    ("[].append(d)", False, None),
    ("str.join(',', ('a',))", False, None),      # a method descriptor called unbound
    ("list.append([], d)", False, None),
    ("len(*((1,),))", False, None),              # CALL_FUNCTION_EX
    ("sorted((2, 1), **{'reverse': True})", False, None),
    ("max(d, 1)", False, None),
    ("abs(-d)", False, None),
    ("repr(d)", False, None),
    ("getattr(_k, 'missing', None)", False, None),
    ("dict.fromkeys('ab')", False, None),        # C classmethod: self is the type
    ("_D.fromkeys('ab')", False, None),          # ... a subclass: named dict.fromkeys
    ("int.mro()", False, None),                  # metaclass method: named type.mro
    ("str.mro()", False, None),
    ("int.from_bytes(b'\\x01', 'little')", False, None),
    ("_L().append(d)", False, None),             # inherited: named list.append
    ("collections.OrderedDict().get(d)", False, None),  # inherited from dict
    ("_bl()", False, "bound_c"),                 # issue 122029, see above
    ("_bl(*())", False, "bound_c"),
    ("math.sqrt(-1.0)", True, None),             # c_exception
    ("[].pop()", True, None),
    ("next(iter(()))", True, None),
    ("min(())", True, None),
    ("{}.pop(d)", True, None),
    ("str.join()", True, "no_self"),             # TypeError: no self
    ("len(_S())", False, None),                  # len calls _S.__len__
    ("_S().p", False, None),                     # a property: Python, no C call
    ("_S() == d", False, None),
]

# C methods called on two types each: named after their defining class
# (dict.fromkeys, type.mro) whatever they are called on.
TYPE_BOUND = ["_D.fromkeys('ab')", "dict.fromkeys('ab')", "int.mro()", "str.mro()"]

CATCH = ["Exception", "ValueError", "KeyError", "(KeyError, StopIteration)"]
RAISE = ["ValueError", "KeyError", "RuntimeError"]


@dataclass
class Func:
    name: str
    gen: bool
    method: bool
    lines: list
    cost: int

    def call(self, arg="d"):
        return f"{'_k.' if self.method else ''}{self.name}({arg})"


@dataclass
class Program:
    source: str
    depth: int
    threads: int

    def __repr__(self):  # Hypothesis prints the falsifying program as source
        return f"Program(depth={self.depth}, source=\n{self.source})"


def indent(lines, n=1):
    return ["    " * n + line for line in lines]


def draw_statement(draw, me, targets, depth, room, excluded):
    """Source lines and cost of one statement in function `me` (None: the
    program), which may call the functions in `targets`; no builtin tagged
    in `excluded`."""
    plain = [f for f in targets if not f.gen and 2 * f.cost + 1 <= room]
    gens = [f for f in targets if f.gen and f.cost + 2 <= room]
    # Repeats weight the choice: calls make the trees deep.
    kinds = ["builtin"] * 3 + ["raise", "genexpr"]
    if plain:
        kinds += ["call"] * 3 + ["try_call"] * 2 + [
            "finally_call", "with_call", "callback", "lambda", "listcomp"]
    if gens:
        kinds += ["gen_use"] * 4
    if me is not None and me.gen:
        kinds += ["yield", "yield_in_try", "yield_catch"]
    kind = draw(st.sampled_from(kinds))

    if kind == "builtin":
        src, raises, _ = draw(st.sampled_from(
            [b for b in BUILTINS if b[2] not in excluded]))
        if raises and draw(st.booleans()):
            return ["try:", "    " + src, f"except {draw(st.sampled_from(CATCH))}:",
                    "    pass"], 1
        return [src], 1
    if kind == "raise":
        exc = draw(st.sampled_from(RAISE))
        at = draw(st.sampled_from([None] + list(range(depth + 1)) * 2))
        if at is None:
            return [f"raise {exc}(d)"], 1
        return [f"if d == {at}:", f"    raise {exc}(d)"], 1
    if kind == "genexpr":
        return ["sum(_x for _x in range(2))"], 4
    if kind == "yield":
        return ["yield d"], 1
    if kind == "yield_in_try":  # closing the generator runs the finally
        return ["try:", "    yield d", "finally:", "    len(())"], 2
    if kind == "yield_catch":  # throw(ValueError) is caught inside
        return ["try:", "    yield d", "except ValueError:", "    repr(d)"], 2
    if kind == "gen_use":
        g = draw(st.sampled_from(gens))
        modes = ["full", "sum", "next_drop", "close", "send", "any"]
        if THROW_INTO_YIELD_FROM or not any("yield from" in l for l in g.lines):
            modes.append("throw")
        if me is not None and me.gen:
            modes.append("yield_from")
        mode = draw(st.sampled_from(modes))
        c = g.call()
        lines = {
            "full": [f"for _x in {c}:", "    pass"],
            "sum": [f"sum({c})"],
            "next_drop": [f"next({c}, None)"],  # closed when dropped
            "close": [f"_g = {c}", "next(_g, None)", "_g.close()"],
            "send": [f"_g = {c}", "try:", "    next(_g, None)", "    _g.send(None)",
                     "except Exception:", "    pass"],
            "throw": [f"_g = {c}", "try:", "    next(_g, None)",
                      "    _g.throw(ValueError(d))", "except Exception:", "    pass"],
            "any": [f"any(_x is None for _x in {c})"],
            "yield_from": [f"yield from {c}"],
        }[mode]
        return lines, g.cost + 2
    f = draw(st.sampled_from(plain))
    c = f.call()
    if kind == "call":
        return [c], f.cost + 1
    if kind == "try_call":
        return ["try:", "    " + c, f"except {draw(st.sampled_from(CATCH))}:",
                "    pass"], f.cost + 1
    if kind == "finally_call":
        return ["try:", "    " + c, "finally:", "    abs(d)"], f.cost + 2
    if kind == "with_call":  # __exit__ sees the exception, if any
        return ["with _CM():", "    " + c], f.cost + 3
    if kind == "callback":  # a C function calling Python
        return [f"sorted(range(2), key=lambda _x: {c})"], 2 * f.cost + 3
    if kind == "lambda":
        return [f"(lambda: {c})()"], f.cost + 2
    assert kind == "listcomp"  # a frame of its own before 3.12
    return [f"[{c} for _x in range(2)]"], 2 * f.cost + 2


def draw_body(draw, me, targets, depth, budget, excluded):
    """[statement lines, ...] and their cost."""
    stmts, cost = [], 1
    for i in range(draw(st.integers(1 if me else 2, 6))):
        stmt, c = draw_statement(draw, me, targets, depth, budget - cost, excluded)
        if not REBIND_LOCALS:
            stmt = [re.sub(r"\b_g\b", f"_g{i}", line) for line in stmt]
        stmts.append(stmt)
        cost += c
    return stmts, cost


@st.composite
def programs(draw, excluded=frozenset()):
    depth = draw(st.integers(0, 3))
    nfuncs = draw(st.integers(0, 6))
    funcs = []  # built callees first: f<i> calls only f<j>, j > i
    for i in reversed(range(1, nfuncs + 1)):
        me = Func(f"f{i}", gen=draw(st.booleans()), method=draw(st.booleans()),
                  lines=[], cost=0)
        recursive = draw(st.booleans())
        budget = MAX_COST // (depth + 1) if recursive else MAX_COST
        stmts, cost = draw_body(draw, me, funcs, depth, budget, excluded)
        if recursive:
            myself = f"{'self.' if me.method else ''}{me.name}(d - 1)"
            call = f"yield from {myself}" if me.gen else myself
            rec = ["if d > 0:", "    " + call]
            if draw(st.booleans()):
                rec = ["try:"] + indent(rec) + [
                    f"except {draw(st.sampled_from(CATCH))}:", "    pass"]
            stmts.insert(draw(st.integers(0, len(stmts))), rec)
            cost *= depth + 1
        lines = [line for stmt in stmts for line in stmt]
        if me.gen and not any("yield" in line for line in lines):
            lines.append("yield d")
        if not me.gen:
            lines.append("return d")
        me.lines, me.cost = lines, cost
        funcs.insert(0, me)

    stmts, _ = draw_body(draw, None, funcs, depth, MAX_COST, excluded)
    body = [line for stmt in stmts for line in stmt]
    nthreads = draw(st.sampled_from([0, 0, 1, 2, 3]))
    thread_bodies = []
    for _ in range(nthreads):
        if funcs:
            f = draw(st.sampled_from(funcs))
            call = f"list({f.call(depth)})" if f.gen else f.call(depth)
        else:
            call = "len(())"
        thread_bodies.append(call)

    src = [PRELUDE]
    methods = [f for f in funcs if f.method]
    src.append("class K:")
    src.append("    pass" if not methods else "")
    for f in methods:
        src += indent([f"def {f.name}(self, d):"] + indent(f.lines))
        src.append("")
    src += ["", "_k = K()", ""]
    for f in funcs:
        if not f.method:
            src += [f"def {f.name}(d):"] + indent(f.lines) + [""]
    for k, call in enumerate(thread_bodies):
        src += [f"def thread_{k}():", "    try:", f"        {call}",
                "    except Exception:", "        pass", ""]
    src.append("def program(d):")
    if nthreads:
        names = ", ".join(f"thread_{k}" for k in range(nthreads))
        src += [f"    _ts = _spawn({names})", "    try:"] + indent(body, 2) + [
            "    finally:", "        _join(_ts)"]
    else:
        src += indent(body)
    src.append("")
    return Program("\n".join(src), depth, nthreads)


# ---- running a program ----------------------------------------------------

def _spawn(*targets):
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    return threads


def _join(threads):
    for t in threads:
        t.join()


# Thread start-up and joining block and wake nondeterministically: their
# subtrees are not compared (the nodes themselves are).
PRUNED = {(_spawn.__code__.co_filename, "_spawn"),
          (_join.__code__.co_filename, "_join")}


def _run(ns, depth):
    try:
        ns["program"](depth)
    except Exception:
        pass


def _namespace(source):
    # A fresh compile per run: no state (or specialized bytecode) is shared
    # between the reference's run and frametrace's.
    ns = {"__name__": "differential", "_spawn": _spawn, "_join": _join}
    exec(compile(source, FILENAME, "exec"), ns)
    return ns


@contextlib.contextmanager
def _no_gc():
    # Generators are closed by refcounting, at the same point in both runs;
    # the cyclic GC could finalize something (a generator of Hypothesis',
    # say) inside the traced program at any allocation.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def entries(nthreads):
    return ["program"] + [f"thread_{k}" for k in range(nthreads)]


def reference_trees(prog, c_calls):
    ns = _namespace(prog.source)
    with _no_gc():
        with ReferenceTracer() as ref:
            _run(ns, prog.depth)
    found = {}
    for ident, root in ref.forest(c_calls):
        for node in walk(root):
            if node.kind == "py" and node.filename == FILENAME:
                found.setdefault(node.name, []).append((ident, node))
    trees, anomalies, threads = {}, [], {}
    for name in entries(prog.threads):
        assert len(found.get(name, ())) == 1, \
            f"reference: {len(found.get(name, ()))} frames of {name}"
        ident, node = found[name][0]
        threads[name] = ident

        def shape(n):
            pruned = n.kind == "py" and (n.filename, n.name) in PRUNED
            if n.anomaly and not pruned:
                anomalies.append((n.name, n.anomaly))
            kids = () if pruned else tuple(shape(c) for c in n.children)
            return (n.name, n.kind, n.filename, n.lineno, n.open_at_start,
                    False, kids)

        trees[name] = shape(node)
    return trees, anomalies, threads


def frametrace_trees(prog, c_calls):
    ns = _namespace(prog.source)
    with _no_gc():
        with frametrace.trace(c_calls=c_calls, buffer_size=BUFFER) as tracer:
            _run(ns, prog.depth)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert tracer.stats.dropped == 0
    kids = {}
    for i, ev in enumerate(events):
        kids.setdefault(ev.parent, []).append(i)

    def shape(i):
        ev = events[i]
        pruned = ev.kind == "py" and (ev.filename, ev.name) in PRUNED
        sub = () if pruned else tuple(shape(k) for k in kids.get(i, ()))
        return (ev.name, ev.kind, ev.filename, ev.lineno,
                bool(ev.open_at_start), bool(ev.open_at_stop), sub)

    trees, threads = {}, {}
    for name in entries(prog.threads):
        idx = [i for i, ev in enumerate(events)
               if ev.kind == "py" and ev.filename == FILENAME and ev.name == name]
        assert len(idx) == 1, \
            f"frametrace: {len(idx)} events of {name}: {[events[i] for i in idx]}"
        trees[name] = shape(idx[0])
        threads[name] = events[idx[0]].thread_id
    return trees, threads


def render(tree, depth=0):
    """Indented lines, so that pytest shows a readable diff."""
    name, kind, filename, lineno, oas, oas_stop, kids = tree
    flags = (" open_at_start" if oas else "") + (" open_at_stop" if oas_stop else "")
    where = f"{filename}:{lineno}" if kind == "py" else "<built-in>"
    lines = [f"{'  ' * depth}{name} [{kind}] {where}{flags}"]
    for kid in kids:
        lines += render(kid, depth + 1)
    return lines


def check_program(prog, c_calls=True, allowed=()):
    """Trees equal; `allowed`: (name, anomaly) the stream may also have."""
    ref, anomalies, ref_threads = reference_trees(prog, c_calls)
    ft, ft_threads = frametrace_trees(prog, c_calls)
    for name in entries(prog.threads):
        assert render(ft[name]) == render(ref[name]), name
    # Each thread entry ran on a thread of its own, in both.
    for threads in (ref_threads, ft_threads):
        assert all(threads[n] != threads["program"] for n in threads if n != "program")
    # The stream was cleanly paired except where CPython is known not to pair
    # it; there the reference applied frametrace's documented rules.
    anomalies = [a for a in anomalies if a not in allowed]
    if anomalies:
        assert UNPAIRED_C_EVENTS and "_bl(" in prog.source, anomalies
        assert all(name == "len" for name, _ in anomalies), anomalies


def backend():
    """The backend of a default Tracer in this test (conftest sets it)."""
    return frametrace.Tracer().backend


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data(), c_calls=st.booleans())
def test_call_trees_match_reference(data, c_calls):
    excluded = MONITORING_DIFFERS if backend() == "monitoring" else set()
    prog = data.draw(programs(frozenset(excluded)), label="program")
    check_program(prog, c_calls)


def check_or_expect_monitoring_bug(tag, prog, reason):
    """Where the monitoring backend differs on this construct the check must
    fail (if it passes, the bug is fixed: drop `tag` from
    MONITORING_DIFFERS), and the test is reported as xfail."""
    if backend() == "monitoring" and tag in MONITORING_DIFFERS:
        with pytest.raises(AssertionError):
            check_program(prog)
        pytest.xfail(reason)
    check_program(prog)


def test_bound_c_function():
    """The issue 122029 constructs: on the affected versions the reference
    needs the documented rules, and the trees still match."""
    body = ["_bl()", "_bl(*())", "f1(d)", "len(())", "_bl(*())", "[].append(d)"]
    source = PRELUDE + "_k = None\n\ndef f1(d):\n    return abs(d)\n\n" + \
        "def program(d):\n" + "\n".join(indent(body)) + "\n"
    prog = Program(source, 0, 0)
    _, anomalies, _ = reference_trees(prog, True)
    assert bool(anomalies) == UNPAIRED_C_EVENTS
    check_or_expect_monitoring_bug("bound_c", prog, "frametrace bug, monitoring "
        "backend: a types.MethodType wrapping a C function is filtered out of "
        "CALL (csrc/monitor.c c_function_key), which CPython's legacy layer "
        "unwraps: `len` has no call (open_at_start), or is missing")


@pytest.mark.skipif(sys.version_info < (3, 14), reason="3.14+: see MONITORING_DIFFERS")
def test_bound_c_function_called_with_star_args():
    """`_bl(*())` has a CALL event but no C_RETURN on 3.14+: recorded, its
    `len` would enclose everything up to program's return (f1 below)."""
    source = PRELUDE + "def f1(d):\n    return abs(d)\n\n" + \
        "def program(d):\n    _bl(*())\n    f1(d)\n    _bl()\n"
    namespace = {}
    exec(compile(source, "<bound-c>", "exec"), namespace)
    with frametrace.trace() as tracer:
        namespace["program"](1)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    program = next(i for i, ev in enumerate(events) if ev.name == "program")
    assert [(ev.name, ev.parent) for ev in events[program + 1:]] == [
        ("f1", program), ("abs", program + 1), ("len", program)]


def test_method_descriptor_without_self():
    body = ["','.join(('a',))", "try:", "    str.join()", "except TypeError:",
            "    pass", "try:", "    list.append()", "except TypeError:", "    pass"]
    source = PRELUDE + "_k = None\n\ndef program(d):\n" + "\n".join(indent(body)) + "\n"
    check_or_expect_monitoring_bug("no_self", Program(source, 0, 0), "frametrace bug, "
        "monitoring backend: str.join() (a method descriptor, no self) is "
        "recorded, which the profile hook never reports, and list.append() "
        "counts 2 dropped events (csrc/monitor.c record_c)")


def test_c_method_of_a_type_is_named_after_its_defining_class():
    """A classmethod called on a subclass and on its class, a metaclass
    method called on two classes: each named after the class defining it,
    the same for every call (C functions are keyed by their definition)."""
    body = TYPE_BOUND
    source = PRELUDE + "_k = None\n\ndef program(d):\n" + "\n".join(indent(body)) + "\n"
    check_program(Program(source, 0, 0))


# Minimal: throw() into a generator suspended in `yield from`, whose
# subgenerator catches the exception and finishes.
YIELD_FROM_THROW = PRELUDE + """\
_k = None

def inner(d):
    try:
        yield d
    except ValueError:
        pass

def outer(d):
    yield from inner(d)
    yield d

def program(d):
    g = outer(d)
    next(g)
    g.throw(ValueError)
    len(())
"""


def test_throw_into_yield_from_on_311():
    """CPython 3.11 reports no call for outer's slice resumed by throw(): the
    replay makes it an open_at_start event inside generator.throw."""
    prog = Program(YIELD_FROM_THROW, 0, 0)
    _, anomalies, _ = reference_trees(prog, True)
    # The stream is unpaired exactly there, and only on 3.11.
    missing = ("outer", "Python return with no call")
    assert anomalies == ([missing] if sys.version_info[:2] == (3, 11) else [])
    check_program(prog, allowed=[missing])
