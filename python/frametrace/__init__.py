"""frametrace: trace every Python and C function entry and exit, cheaply.

    with frametrace.trace() as tracer:
        train()
    events = tracer.getEvents()

(PYTEST_DONT_REWRITE: pytest asks to rewrite this package because of its
plugin; under ``frametrace run -m pytest`` it is imported already, and
pytest would warn.  It holds no asserts.)
"""
from ._version import __version__
from ._tracer import DEFAULT_BUFFER_SIZE, DEFAULT_MAX_MEMORY, MAX_BUFFER_SIZE, Event, ThreadInfo
from ._tracer import ConflictError, Stats
from .flight import FlightRecorder, flight_recorder
from .loader import MergedTrace, load
from .remote import AttachError, AttachResult, attach
from .schedule import ProfilerAction, Schedule, schedule
from ._sql import sql
from ._trace import RangeRecord, StepRecord, Trace, as_trace
from .session import Profile, profile, range, step, trace_handler
from .tracer import Options, Tracer, trace

# frametrace.range stays public but out of __all__: `from frametrace import *`
# must not replace the builtin range.
__all__ = [
    "AttachError",
    "AttachResult",
    "ConflictError",
    "DEFAULT_BUFFER_SIZE",
    "DEFAULT_MAX_MEMORY",
    "MAX_BUFFER_SIZE",
    "Event",
    "FlightRecorder",
    "MergedTrace",
    "Options",
    "Profile",
    "ProfilerAction",
    "RangeRecord",
    "Schedule",
    "Stats",
    "StepRecord",
    "ThreadInfo",
    "Trace",
    "Tracer",
    "__version__",
    "as_trace",
    "attach",
    "flight_recorder",
    "load",
    "profile",
    "schedule",
    "sql",
    "step",
    "trace",
    "trace_handler",
]
