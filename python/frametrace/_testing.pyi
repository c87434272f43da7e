"""frametrace._testing: test and benchmark helpers, never used by the package."""
import sys
from typing import Any

def set_noop_profile(enable: object, /, *, clock: bool = False) -> None: ...
if sys.version_info >= (3, 12):
    def set_noop_monitoring(enable: object, /, *, clock: bool = False,
                            c_calls: bool = True) -> None: ...
def replay(
    records: list[tuple[int, str, int]],
    *,
    base_ts: int,
    stop_ns: int,
    capacity: int | None = None,
    base_stack: list[int] = ...,
    stop_stack: list[int] | None = None,
    with_dropped: bool = False,
    loss_ns: int = 0,
    packed: bool = False,
    discarded: int = 0,
) -> Any: ...  # the events, or (events, records lost, events lost) with with_dropped
def lifecycle_counts(tracer: Any, /) -> dict[str, int]: ...  # rings, hook_installs, tool_takes, restarts
def pattern_match(pattern: str, name: str, /) -> bool: ...
def nest(frames: list[tuple[int, int, int]], ops: list[tuple[int, int]], tolerance_ns: int,
         /) -> tuple[list[tuple[int, int, int]], list[int]]: ...
def ticks_to_ns(anchors: list[tuple[int, int]], ticks: list[int], /) -> list[int]: ...
def profile_off() -> Any: ...  # the saved profile function, for profile_on()
def profile_on(saved: Any, /) -> None: ...
