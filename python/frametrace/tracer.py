"""The Tracer: the C type, plus decorator use; and its options, checked once."""
from __future__ import annotations

import dataclasses
import functools
import os
import threading
import warnings
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar, Union

from . import _tracer

F = TypeVar("F", bound=Callable[..., Any])

BACKENDS = ("auto", "setprofile", "monitoring")


@dataclasses.dataclass(frozen=True, init=False)
class Options:
    """A tracer's options, checked once (frozen; equal and hashable by value):

        options = frametrace.Options(buffer_size=1 << 16, ignore=["torch"])
        with frametrace.trace(options=options): ...
        frametrace.profile(options=options, on_trace_ready=frametrace.trace_handler("traces"))

    buffer_size: ring capacity in records per thread (a call and a return
    are two).  c_calls: record calls of C functions.  backend: "auto",
    "setprofile" or "monitoring" (kept as given: whether this Python has
    it is checked when a tracer is made).  max_memory: bytes all rings may
    hold together.  ignore, include: the patterns (``frametrace.filters``),
    kept as tuples.  Every function that makes tracers (``Tracer``,
    ``trace``, ``profile``, ``flight_recorder``, ``attach``,
    ``frametrace.torch``) takes these options one by one, or as
    ``options=`` (not both); ``tracer.options`` gives a tracer's.  A bad
    value raises TypeError or ValueError naming the option."""

    buffer_size: int
    c_calls: bool
    backend: str
    max_memory: int
    ignore: tuple[str, ...]
    include: Optional[tuple[str, ...]]

    def __init__(self, buffer_size: int = _tracer.DEFAULT_BUFFER_SIZE, *, c_calls: bool = True,
                 backend: Optional[str] = "auto", max_memory: int = _tracer.DEFAULT_MAX_MEMORY,
                 ignore: Optional[Iterable[str]] = None,
                 include: Optional[Iterable[str]] = None):
        if backend is None:
            backend = "auto"
        if not isinstance(backend, str):
            raise TypeError(f'backend must be a str ("auto", "setprofile" or "monitoring"), '
                            f"not {type(backend).__name__}")
        if backend not in BACKENDS:
            raise ValueError(f'backend must be "auto", "setprofile" or "monitoring", '
                             f"got {backend!r}")
        # The C type's checks, one implementation: the backend it is given
        # is one every Python has, the chosen one may run in another (attach).
        checked = _tracer.Tracer(buffer_size, c_calls=c_calls, backend="setprofile",
                                 max_memory=max_memory, ignore=ignore, include=include)
        self._set(checked, backend)

    def _set(self, tracer: _tracer.Tracer, backend: str) -> None:
        for name in OPTION_NAMES:  # the tracer's attributes of the same names
            value = backend if name == "backend" else getattr(tracer, name)
            object.__setattr__(self, name, value)  # frozen: set once, here

    @classmethod
    def of(cls, tracer: _tracer.Tracer) -> "Options":
        """A tracer's options (its backend the one it chose)."""
        options = cls.__new__(cls)
        options._set(tracer, tracer.backend)
        return options

    @classmethod
    def given(cls, caller: str, options: Optional["Options"],
              one_by_one: Mapping[str, Any]) -> "Options":
        """The options a function was given: ``options=``, or one by one."""
        unknown = sorted(one_by_one.keys() - set(OPTION_NAMES))
        if unknown:
            raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
        if options is None:
            return cls(**one_by_one)
        if not isinstance(options, Options):
            raise TypeError(f"options must be a frametrace.Options, not {type(options).__name__}")
        if one_by_one:
            raise TypeError(f"{caller}(): give options= or {', '.join(one_by_one)}, not both")
        return options

    def as_dict(self) -> dict[str, Any]:
        """The options as keyword arguments of plain lists, str, int and
        bool (what ``attach`` sends to its target, which checks them again)."""
        return {name: list(value) if isinstance(value, tuple) else value
                for name, value in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Any) -> "Options":
        """Options from ``as_dict()``'s output, checked as input from
        elsewhere: exactly those keys, each value checked."""
        if not isinstance(data, dict) or set(data) != set(OPTION_NAMES):
            raise ValueError(f"tracer options must be a dict with the keys "
                             f"{', '.join(OPTION_NAMES)}, got {data!r:.200}")
        return cls(**data)

    def to_keep(self, dropped_records: int, held: Optional[int]) -> tuple[str, Optional[int]]:
        """The option and the value that would have kept a trace's lost
        records (``stats.dropped_records``): ``("max_memory", bytes)`` when
        the rings together reached it (held: ``tracer.ring_bytes`` at the
        stop, when known), else ``("buffer_size", records)``, or
        ``("buffer_size", None)`` past the largest ring."""
        lost = dropped_records
        if held is not None and held + 8 * lost > self.max_memory:
            return "max_memory", -(-(held + 8 * lost) * 5 // 4 // 2**20) * 2**20  # whole MiB
        needed = self.buffer_size + lost  # as if one thread lost them all
        return "buffer_size", needed if needed <= _tracer.MAX_BUFFER_SIZE else None


OPTION_NAMES = tuple(field.name for field in dataclasses.fields(Options))
_UNSET: Any = object()


class Tracer(_tracer.Tracer):
    """Records every Python and C call of every thread between start() and
    stop().  Its options are given one by one (``Tracer(buffer_size=N,
    c_calls=..., backend=..., max_memory=..., ignore=..., include=...)``) or
    as ``options=`` a ``frametrace.Options``; ``tracer.options`` gives them
    back.  A context manager, and a decorator:

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

    ``ignore=`` and ``include=`` (sequences of patterns) leave functions
    out: :doc:`/tracing`.
    """

    def __new__(cls, buffer_size: Any = _UNSET, *, options: Optional[Options] = None,
                **one_by_one: Any) -> "Tracer":
        if buffer_size is not _UNSET:  # the C type's one positional argument
            one_by_one["buffer_size"] = buffer_size
        if options is None:  # checked by the C type, with this Python's backend
            return super().__new__(cls, **one_by_one)
        options = Options.given("Tracer", options, one_by_one)
        return super().__new__(cls, **dataclasses.asdict(options))

    @property
    def options(self) -> Options:
        """This tracer's options (``frametrace.Options``; its backend the
        one it chose): ``Tracer(options=tracer.options)`` is a like one."""
        return Options.of(self)

    def save(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Writes this stopped tracer or snapshot as ``Trace.save(path)``
        does (format by extension); returns the path.  ValueError while it
        runs: stop it, or save a ``snapshot()``."""
        from ._trace import as_trace

        return as_trace(self).save(path)

    def __call__(self, func: F) -> F:
        if not callable(func):
            raise TypeError(f"Tracer() decorates a callable, not {type(func).__name__}")
        options = self.options
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
                            tracer = template if template is not None else Tracer(options=options)
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


def trace(*, options: Optional[Options] = None, **one_by_one: Any) -> Tracer:
    """A new Tracer with these options (``frametrace.Options``, or one by
    one): ``with frametrace.trace() as tracer: ...``."""
    return Tracer(options=options, **one_by_one)
