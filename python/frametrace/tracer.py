"""The Tracer: the C type, plus decorator use."""
from __future__ import annotations

import functools
import threading
import warnings
from typing import Any, Callable, Optional, TypeVar

from . import _tracer

F = TypeVar("F", bound=Callable[..., Any])


class Tracer(_tracer.Tracer):
    """Records every Python and C call of every thread between start() and
    stop().  A context manager, and a decorator:

        @frametrace.trace()
        def train(): ...

    Each outermost call of a decorated function is traced; the first one
    uses this tracer, later ones a fresh one with the same options.  The
    tracer of the latest traced call is ``train.tracer``.  The decorator
    never changes what the function does, returns or raises:

    - a call made while another call of the same function is running, in
      this thread (recursion) or in another one, runs inside the outer
      call's trace, which records every thread; what it does after the
      outer call returns is cut there (``open_at_stop``).  The wrapper's
      own frames are not in the trace.
    - a call made while another frametrace tracer is active (``with
      frametrace.trace()``, a session, ``frametrace run``, another
      decorated function), or while a profiler frametrace cannot run
      beside is installed, runs untraced by this decorator (its events are
      in the other trace, if any) and leaves ``train.tracer`` as it was;
      the first such call of each decorated function warns
      (``RuntimeWarning``) saying why.

    A generator or coroutine function is traced only while it makes the
    generator or coroutine, not while that runs.

    ``ignore=`` and ``include=`` (sequences of patterns; a single str is a
    TypeError) leave functions out of the trace: with include, only the
    functions it matches are recorded, and ignore removes from those.  A
    pattern without ``*?[`` is a dotted name matching a module and its
    submodules, or a function (``module.qualname``) and what is nested in
    it (a class: its methods); any other is an ``fnmatch`` glob over
    ``module.qualname``.  See ``frametrace.filters``.  An ignored
    function's calls are still recorded, under the nearest recorded
    caller.  Decided once per function, in C, when it is first seen;
    with ``backend="monitoring"`` ignored code costs nothing after its first
    events (``sys.monitoring.DISABLE``; see ``frametrace.filters`` for what
    that means for later tracers and other tools).
    """

    def __call__(self, func: F) -> F:
        if not callable(func):
            raise TypeError(f"Tracer() decorates a callable, not {type(func).__name__}")
        options: dict[str, Any] = {"buffer_size": self.buffer_size, "c_calls": self.c_calls,
                                   "backend": self.backend, "max_memory": self.max_memory,
                                   "ignore": self.ignore, "include": self.include}
        template: Optional[Tracer] = self
        # Which call owns the trace: decided under `owned`, while no trace of
        # this decorator records.  The owner holds `busy` from before its
        # start() to after its stop(): a call that finds the trace stopping
        # waits for it, then owns a new trace.
        owned = threading.Lock()
        busy = threading.Lock()
        owner: Optional[int] = None
        stopping: Optional[int] = None  # the thread that stops the trace
        warned = False

        @functools.wraps(func)
        def traced(*args: Any, **kwargs: Any) -> Any:
            nonlocal template, owner, stopping, warned
            # Inside the trace: no call of ours, so none in the trace.
            if owner is not None and stopping is None:
                return func(*args, **kwargs)
            me = threading.get_ident()
            while True:
                with owned:
                    if stopping is None or stopping == me:
                        inner = owner is not None or stopping is not None
                        if not inner:
                            busy.acquire()
                            owner = me
                            tracer = template if template is not None else Tracer(**options)
                            template = None
                        break
                with busy:  # the stop ends
                    pass
            if inner:
                return func(*args, **kwargs)
            try:
                tracer._ignore(traced)
                tracer.start()
            except RuntimeError as exc:
                with owned:
                    owner = None
                    if tracer.start_ns is None:  # never ran: the next call's
                        template = tracer
                    busy.release()
                if not warned:
                    warned = True
                    warnings.warn(f"frametrace: {func.__qualname__}() runs untraced by its "
                                  f"@frametrace.trace() decorator: {exc}",
                                  RuntimeWarning, stacklevel=2)
                return func(*args, **kwargs)
            traced.tracer = tracer  # type: ignore[attr-defined]
            try:
                return func(*args, **kwargs)
            finally:
                stopping = me  # before the stop: no call of ours in the trace
                try:
                    tracer.stop()
                finally:
                    with owned:
                        owner = stopping = None
                        busy.release()

        traced.tracer = self  # type: ignore[attr-defined]
        return traced  # type: ignore[return-value]


def trace(**options: Any) -> Tracer:
    """A new Tracer(**options): ``with frametrace.trace() as tracer: ...``."""
    return Tracer(**options)
