"""A pure-Python reference tracer for differential tests of frametrace.

It records the raw sys.setprofile events of every thread (threading.setprofile
for threads started while it runs) and builds call trees from them.  Written
for clarity, not speed.  Names follow frametrace's rules (csrc/compat.h
ft_code_name, csrc/cnames.c describe_c_function), computed at each event.
"""
from __future__ import annotations

import sys
import threading
import types
from dataclasses import dataclass, field

QUALNAMES = sys.version_info >= (3, 11)
C_EVENTS = ("c_call", "c_return", "c_exception")


def py_name(code) -> str:
    return code.co_qualname if QUALNAMES else code.co_name


def _defining_type(self, func) -> tuple[type, bool]:
    """The class whose own C method table holds func's method definition,
    whatever func was called on: an inherited C method, a classmethod called
    on a subclass, a metaclass method such as type.mro called on int are all
    named after the class that defines them (frametrace keys C functions by
    their definition).  Else type(self), or self for a class.  A descriptor
    whose __objclass__ is the class itself came from that class's table;
    binding it to self gives a builtin equal to func (same self, same C
    function) only if it is func's definition.  Also whether self is an
    instance of that class (not a static or class method)."""
    def search(cls):
        for base in cls.__mro__:
            d = vars(base).get(func.__name__)
            if isinstance(d, staticmethod):
                bound = d.__func__
            elif isinstance(d, types.ClassMethodDescriptorType) and isinstance(self, type):
                bound = d.__get__(None, self) if d.__objclass__ is base else None
            elif isinstance(d, types.MethodDescriptorType) and d.__objclass__ is base:
                bound = d.__get__(self, type(self))
            else:
                continue
            if bound == func:
                return base
        return None

    on_instance = search(type(self))
    if on_instance is not None:
        return on_instance, True
    found = search(self) if isinstance(self, type) else None
    return found or (self if isinstance(self, type) else type(self)), False


def c_name(func) -> str:
    """frametrace's name for the C function a c_call/c_return reports."""
    if not isinstance(func, types.BuiltinFunctionType):
        return type(func).__qualname__
    # __self__ is None both for no self and for self None; calls on None
    # are not generated, so None means "no self" here.
    self = func.__self__
    name = func.__name__ or "<unnamed>"
    if self is None or isinstance(self, types.ModuleType):
        if self is None:
            modname = func.__module__
        else:
            modname = vars(self).get("__name__")
        if not isinstance(modname, str) or modname == "builtins":
            return name
        return f"{modname}.{name}"
    owner, is_instance = _defining_type(self, func)
    if not is_instance and isinstance(func.__module__, str):
        # A binding's function record, or a static method given a module.
        modname = func.__module__
        return name if modname == "builtins" else f"{modname}.{name}"
    # type.__qualname__ is ht_qualname for heap types and tp_name after its
    # last dot for static ones: what frametrace's type_qualname reads.
    return f"{owner.__qualname__}.{name}"


@dataclass
class Node:
    name: str
    kind: str  # "py" or "c"
    filename: str
    lineno: int
    open_at_start: bool = False
    children: list = field(default_factory=list)
    # Why the event stream was not cleanly paired here (None: it was).
    anomaly: str | None = None
    key: object = None  # code object (py) or name (c): what returns match


class ReferenceTracer:
    """with ReferenceTracer() as ref: run(); then ref.forest()."""

    def __init__(self):
        self._local = threading.local()
        self.logs = []  # [(thread ident, [event, ...])], one per thread

    def _hook(self, frame, event, arg):
        log = getattr(self._local, "log", None)
        if log is None:
            log = self._local.log = []
            self.logs.append((threading.get_ident(), log))
        if event in C_EVENTS:
            # Only the name is kept: holding arg (a bound method) would keep
            # its self alive, and with it perhaps a generator whose close
            # would then run at another time.
            log.append((event, None, c_name(arg), "c", "<built-in>", 0))
        else:
            code = frame.f_code
            log.append((event, code, py_name(code), "py", code.co_filename,
                        code.co_firstlineno))

    def __enter__(self):
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        threading.setprofile(None)
        return False

    def forest(self, c_calls=True):
        """[(thread ident, root Node)] for every thread that had events."""
        return [(ident, build_tree(log, c_calls)) for ident, log in self.logs]


def build_tree(log, c_calls=True) -> Node:
    """The call tree of one thread's events under a synthetic root.

    A cleanly paired stream is plain push on call and pop on return.  An
    unpaired one (CPython 3.12.0-3.12.4 and 3.13.0, issue 122029, or events
    around setprofile itself) is resolved by frametrace's documented rules
    (README "Guarantees", csrc/replay.c), and every place where a rule was
    needed is marked in Node.anomaly so that tests can tell:
      - a C call on top of an open C frame, or an unmatched C return, closes
        the open C frame(s) first: C functions only call C functions
        through Python frames, so those lost their return;
      - a C return with no open call is a leaf in the current frame, flagged
        open_at_start;
      - a return closes every frame above its own (innermost open frame of
        the same code object / C function);
      - a Python return with no open frame is from a frame open before the
        trace if nothing recorded is open (ignored: trees hold only
        recorded frames), else a slice whose call CPython did not report
        (3.11: a generator resumed by throw() after its `yield from`
        subgenerator finished): a leaf flagged open_at_start.  frametrace
        differs there (it closes every open frame), see
        test_differential.py.
    """
    root = Node("<root>", "py", "", 0)
    stack = [root]

    def close_dangling_c():
        while len(stack) > 1 and stack[-1].kind == "c":
            stack.pop().anomaly = "its C return never came"

    def pop_to(kind, key):
        """Closes the innermost open frame of kind running key, and every
        frame above it; False if there is none."""
        for pos in range(len(stack) - 1, 0, -1):
            k = stack[pos].key
            # Code objects by identity (equal code can be distinct
            # functions); C functions by name.
            if stack[pos].kind == kind and (k is key if kind == "py" else k == key):
                for lost in stack[pos + 1:]:
                    lost.anomaly = "closed by an outer frame's return"
                del stack[pos:]
                return True
        return False

    for what, code, name, kind, filename, lineno in log:
        if kind == "c" and not c_calls:
            continue
        if what == "call":
            node = Node(name, kind, filename, lineno, key=code)
            stack[-1].children.append(node)
            stack.append(node)
        elif what == "return":
            if not pop_to("py", code) and len(stack) > 1:
                # Not a frame from before the trace (that one would enclose
                # every open frame, and they would have returned first):
                # CPython did not report this slice's call.  A leaf in the
                # current frame, like a C return with no call.
                stack[-1].children.append(Node(
                    name, kind, filename, lineno, open_at_start=True,
                    anomaly="Python return with no call", key=code))
        elif what == "c_call":
            close_dangling_c()
            node = Node(name, kind, filename, lineno, key=name)
            stack[-1].children.append(node)
            stack.append(node)
        else:  # c_return, c_exception
            if not pop_to("c", name):
                close_dangling_c()
                stack[-1].children.append(Node(
                    name, kind, filename, lineno, open_at_start=True,
                    anomaly="C return with no C call", key=name))
    return root


def walk(node):
    yield node
    for child in node.children:
        yield from walk(child)
