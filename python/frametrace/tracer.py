"""The Tracer: the C type, plus decorator use."""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from . import _tracer

F = TypeVar("F", bound=Callable[..., Any])


class Tracer(_tracer.Tracer):
    """Records every Python and C call of every thread between start() and
    stop().  A context manager, and a decorator:

        @frametrace.trace()
        def train(): ...

    Each call of a decorated function is traced; the first call uses this
    tracer, later ones a fresh one with the same options.  The tracer of the
    latest call is ``train.tracer``.
    """

    def __call__(self, func: F) -> F:
        if not callable(func):
            raise TypeError(f"Tracer() decorates a callable, not {type(func).__name__}")
        options: dict[str, Any] = {"buffer_size": self.buffer_size, "c_calls": self.c_calls,
                                   "backend": self.backend}
        template = self

        @functools.wraps(func)
        def traced(*args: Any, **kwargs: Any) -> Any:
            tracer = template if template.start_ns is None else Tracer(**options)
            traced.tracer = tracer  # type: ignore[attr-defined]
            with tracer:
                return func(*args, **kwargs)

        traced.tracer = self  # type: ignore[attr-defined]
        return traced  # type: ignore[return-value]


def trace(**options: Any) -> Tracer:
    """A new Tracer(**options): ``with frametrace.trace() as tracer: ...``."""
    return Tracer(**options)
