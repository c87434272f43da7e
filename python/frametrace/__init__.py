"""frametrace: trace every Python and C function entry and exit, cheaply.

    with frametrace.trace() as tracer:
        train()
    events = tracer.getEvents()
"""
from ._tracer import DEFAULT_BUFFER_SIZE, MAX_BUFFER_SIZE, Event
from .tracer import Tracer, trace

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "MAX_BUFFER_SIZE",
    "Event",
    "Tracer",
    "trace",
    "__version__",
]
