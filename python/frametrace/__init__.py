"""frametrace: trace every Python and C function entry and exit, cheaply.

    with frametrace.trace() as tracer:
        train()
    events = tracer.getEvents()
"""
from ._tracer import DEFAULT_BUFFER_SIZE, MAX_BUFFER_SIZE, Event
from .loader import MergedTrace, load
from .remote import AttachError, AttachResult, attach
from .schedule import ProfilerAction, Schedule, schedule
from .session import Profile, RangeRecord, StepRecord, Trace, profile, range, save, step
from .tracer import Tracer, trace

__version__ = "0.1.0"

__all__ = [
    "AttachError",
    "AttachResult",
    "DEFAULT_BUFFER_SIZE",
    "MAX_BUFFER_SIZE",
    "Event",
    "MergedTrace",
    "Profile",
    "ProfilerAction",
    "RangeRecord",
    "Schedule",
    "StepRecord",
    "Trace",
    "Tracer",
    "__version__",
    "attach",
    "load",
    "profile",
    "range",
    "save",
    "schedule",
    "step",
    "trace",
]
