"""frametrace.torch: a torch training loop on one timeline, its Python from
frametrace and torch's ops (and GPU kernels) from torch.profiler.

    import frametrace.torch

    sched = frametrace.schedule(wait=1, warmup=1, active=3)
    with frametrace.torch.profile(schedule=sched, module_names=model,
                                  on_trace_ready=frametrace.trace_handler("traces/")) as prof:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()

One ``step()`` drives frametrace's session and ``torch.profiler`` on the
same schedule; each window's ``frametrace.Trace`` holds torch's ops nested
under the Python calls that ran them.  ``flight_recorder`` is a flight
recorder whose dumps hold torch's ops.  torch is imported when a profile or
a flight recorder is entered, never by ``import frametrace``.  How the two
are joined: :doc:`/pytorch`.
"""
from __future__ import annotations

import math
import os
import re
import socket
import threading
import uuid
import warnings
from typing import Any, Callable, Iterable, Literal, Optional, Sequence, Union, cast

from . import _tracer
from .export import Slice, _json_document
from .filters import TORCH_PLUMBING as PLUMBING
from .schedule import ProfilerAction, Schedule
from .session import Profile as _Session
from ._trace import Trace
from .tracer import Options

__all__ = ["PLUMBING", "profile", "Profile", "flight_recorder", "tensorboard_trace_handler", "join_torch", "torch_trace_slices", "read_torch_chrome",
           "torch_chrome_as_frametrace", "is_torch_chrome"]

# How long a window's handler waits for torch's results of the same
# window (delivered by the step() that closed it, or the exit).
_TORCH_RESULT_TIMEOUT_S = 600.0
# How far (ns) an op may cross the edge of a Python frame and still be
# moved to nest, beside the anchor's width: measured joins are off by up
# to about 50 ns (an aten::select 4-45 ns before its generator's resume).
_TOLERANCE_NS = 200


# torch.compile's wrapper warns at each call while a global module hook is set.
_GLOBAL_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


class _ModuleNames:
    """nn.Module calls as frametrace ranges, through torch's global module
    hooks: each call of a module of the given models is a range named by its
    path in ``named_modules()`` (the model itself by its class name), any
    other module ``ClassName_N`` (N counting that class's modules in the
    order first called, as torch.profiler names them).  The hooks are
    Python functions the session's tracers ignore; the ranges are
    frametrace's C type, whose methods are never traced.

    Code torch.compile compiled runs no hook: dynamo traces the hooks as
    part of the model, and they trace to nothing (a range is no tensor
    op), so that a compiled step is what it is without them (the same
    graph, no graph break).  The compiled model's own call (its
    OptimizedModule, run eagerly) is the range "NAME (compiled)"; the
    modules it runs have none, which a RuntimeWarning says once, as it
    does for the modules a compiled function calls (dynamo runs a
    function of the hook's, marked assume_constant_result, while it
    compiles; the compiled code never does).  The program's warnings
    settings are left as they were (see install)."""

    def __init__(self, models: Any):
        import torch

        if isinstance(models, torch.nn.Module):
            models = [models]
        elif isinstance(models, (list, tuple)):
            models = list(models)
        else:
            raise TypeError(f"module_names must be a torch.nn.Module or a list of them, "
                            f"not {type(models).__name__}")
        for i, m in enumerate(models):
            if not isinstance(m, torch.nn.Module):
                raise TypeError(f"module_names[{i}] must be a torch.nn.Module, not {type(m).__name__}")
        # Module -> its Range (strong references until the profile ends).
        self.ranges: dict = {}
        for m in models:
            for path, module in m.named_modules():
                if module not in self.ranges:
                    self.ranges[module] = _tracer.Range(path or type(module).__name__)
        self.told = False
        self.filter: Any = None  # the warnings filter install() adds
        self.filters: list = []  # the list it went into
        self.counts: dict = {}
        self.handles: list = []
        # The name of a model that ran compiled (its modules had no ranges).
        self.compiled: Optional[str] = None
        # Whether dynamo compiled a call of the hooks (modules run by
        # compiled code, which have no ranges).
        self.traced_out = False

    def _unnamed(self, module: Any) -> Any:
        orig = getattr(module, "_orig_mod", None) if _is_compiled_module(module) else None
        if orig is not None and orig in self.ranges:
            if self.compiled is None:
                self.compiled = self.ranges[orig].name
            name = f"{self.ranges[orig].name} (compiled)"
        else:
            cls = type(module).__name__
            n = self.counts.get(cls, 0)
            self.counts[cls] = n + 1
            name = f"{cls}_{n}"
        r = self.ranges[module] = _tracer.Range(name)
        return r

    def install(self) -> None:
        from torch.compiler import assume_constant_result, is_dynamo_compiling
        from torch.nn.modules import module as nn_module

        ranges = self.ranges
        unnamed = self._unnamed

        # Run by dynamo while it compiles a hook's call (a module called in
        # compiled code, a torch.compile'd function's too), never by the
        # compiled code: its result is a constant of the graph.
        @assume_constant_result
        def compiling() -> bool:
            self.traced_out = True
            return True

        # No call in the common path but is_dynamo_compiling() (ignored)
        # and the Range's own (ignored) method: a dict subscript is no call
        # event.  Dynamo folds is_dynamo_compiling() to True: a hook it
        # traces is an empty function, no graph break, no side effect.
        def pre_hook(module: Any, args: Any) -> None:
            if is_dynamo_compiling():
                compiling()
                return
            try:
                r = ranges[module]
            except KeyError:
                r = unnamed(module)
            r.__enter__()

        def post_hook(module: Any, args: Any, output: Any) -> None:
            if is_dynamo_compiling():
                return
            try:
                r = ranges[module]
            except KeyError:  # entered before the hooks were installed
                return
            r.__exit__(None, None, None)

        self.code = (pre_hook, post_hook, _ModuleNames._unnamed, is_dynamo_compiling, compiling)
        self.handles = [nn_module.register_module_forward_pre_hook(pre_hook),
                        nn_module.register_module_forward_hook(post_hook, always_call=True)]
        # A compiled model's call warns while any global module hook is set
        # (its wrapper's hooks fire too: that call is named "NAME
        # (compiled)"): not the program's to see, nor to raise under -W error.
        # The entry goes into the list as it is: filterwarnings() would
        # also reset every module's record of warnings shown, so that the
        # program's own "default" and "once" warnings were said again.
        self.filter = ("ignore", re.compile(_GLOBAL_HOOKS_WARNING, re.I), UserWarning, None, 0)
        self.filters = cast(list, warnings.filters)  # a list, typed a Sequence
        self.filters.insert(0, self.filter)

    def tell_compiled(self) -> None:
        """Says once that modules run by compiled code have no ranges:
        when a compiled model ran, or one was compiled in place
        (``module.compile()``), whose call runs no hook at all, or dynamo
        compiled a module's call (in a torch.compile'd function: its call
        is in the Python trace, the function under torch's
        ``compile_wrapper``)."""
        if self.told:
            return
        name = self.compiled
        if name is None:
            name = next((r.name for m, r in self.ranges.items()
                         if getattr(m, "_compiled_call_impl", None) is not None), None)
        why = ("(dynamo traces frametrace's module hooks out, so that the compiled step "
               "is unchanged)")
        if name is not None:
            what = (f"{name!r} runs compiled (torch.compile): the modules compiled code runs "
                    f"have no ranges {why}")
        elif self.traced_out:
            what = (f"modules ran in code torch.compile compiled (a compiled function): "
                    f"they have no ranges there {why}")
        else:
            return
        self.told = True
        warnings.warn(f"frametrace.torch: module_names: {what}", RuntimeWarning, stacklevel=3)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        # This very entry (the program may have added an equal one), from
        # the list it went into, without filterwarnings()'s reset either.
        at = next((i for i, f in enumerate(self.filters) if f is self.filter), None)
        if at is not None:  # None: never added, or the filters were reset
            del self.filters[at]
        self.ranges.clear()


def _is_compiled_module(module: Any) -> bool:
    """Whether module is torch.compile's wrapper of a model (dynamo is
    imported then)."""
    import sys

    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    compiled = getattr(eval_frame, "OptimizedModule", None)
    return compiled is not None and isinstance(module, compiled)


def _torch_activities(torch: Any, activities: Optional[Sequence[Any]]) -> list:
    from torch.profiler import ProfilerActivity

    if activities is not None:
        return list(activities)
    found = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        found.append(ProfilerActivity.CUDA)
    return found


class Profile:
    """A frametrace session and a torch.profiler profile driven by one
    ``step()``; see ``frametrace.torch.profile``."""

    def __init__(self, *, schedule: Optional[Callable[[int], ProfilerAction]] = None,
                 python_steps: Optional[int] = None,
                 on_trace_ready: Optional[Callable[[Trace], Any]] = None,
                 module_names: Any = None, activities: Optional[Sequence[Any]] = None,
                 record_shapes: bool = False, trace_children: bool = False,
                 options: Optional[Options] = None, **tracer_options: Any):
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"on_trace_ready must be callable, not {type(on_trace_ready).__name__}")
        if not isinstance(record_shapes, bool):
            raise TypeError(f"record_shapes must be a bool, not {type(record_shapes).__name__}")
        self._options: dict[str, Any] = dict(
            schedule=schedule, python_steps=python_steps, trace_children=trace_children,
            options=Options.given("frametrace.torch.profile", options, tracer_options))
        _Session(**self._options, on_trace_ready=on_trace_ready)  # checked now, not at enter
        self.schedule = schedule
        self.python_steps = python_steps
        self.on_trace_ready = on_trace_ready
        self.module_names = module_names
        self.activities = activities
        self.record_shapes = record_shapes
        self.last_trace: Optional[Trace] = None
        self.session: Optional[_Session] = None
        self.torch_profiler: Any = None
        self._modules: Optional[_ModuleNames] = None
        self._results: dict = {}  # cycle -> torch's profile object of that window
        self._kept: Any = None  # the latest window's, as torch.profiler keeps it
        self._torch_cycles = 0
        self._torch_failed: Optional[BaseException] = None
        self._stepping_thread = 0  # the native id of the thread that entered
        self._cond = threading.Condition(threading.Lock())

    @property
    def step_num(self) -> int:
        return self.session.step_num if self.session is not None else 0

    # -- torch's side ----------------------------------------------------

    def _torch_ready(self, prof: Any) -> None:
        """torch's on_trace_ready, on the training thread inside torch's
        step(): hands the window's results and activities over (the join
        and the writing are the session's writer thread's)."""
        result = prof.profiler
        kineto: Any = getattr(result, "kineto_results", None)
        # torch builds a window's activities the first time they are asked
        # for, in C++ with the GIL (several ms for thousands of ops): here,
        # where nothing else waits for it, rather than on the writer thread,
        # where the loop would wait for the GIL meanwhile.
        activities = (kineto.trace_activities() if hasattr(kineto, "trace_activities")
                      else None)
        with self._cond:
            # The activities refer to the result's objects: kept together.
            self._results[self._torch_cycles] = (result, activities)
            self._torch_cycles += 1
            # The window's results are frametrace's: torch's next window
            # starts a profile of its own (as without acc_events) and has no
            # earlier one to warn "Profiler clears events" about.  Kept here
            # as torch kept it, with its activities (freed on this thread
            # when the next comes, not on the writer's with the GIL).
            self._kept = (result, activities)
            prof.profiler = None
            self._cond.notify_all()

    def _torch_step(self, final: bool) -> None:
        prof = self.torch_profiler
        if prof is None:
            return
        try:
            if final:
                self.torch_profiler = None
                prof.__exit__(None, None, None)
            else:
                prof.step()
        except BaseException as exc:
            with self._cond:
                self._torch_failed = exc
                self._cond.notify_all()
            raise

    def _wait_torch(self, cycle: int) -> tuple:
        """(torch's profile object, its activities or None) of a window."""
        with self._cond:
            ok = self._cond.wait_for(lambda: cycle in self._results or self._torch_failed is not None,
                                     timeout=_TORCH_RESULT_TIMEOUT_S)
            result = self._results.pop(cycle, (None, None))
        if result[0] is None:
            why = (f"torch.profiler failed: {self._torch_failed!r}" if self._torch_failed is not None
                   else "torch.profiler delivered no results" if ok else "timed out")
            raise RuntimeError(f"frametrace.torch: cycle {cycle}: no torch ops to join ({why})")
        return result

    def _ready(self, trace: Trace) -> None:
        """The session's on_trace_ready (its writer thread): torch's ops of
        the same window joined into trace, then the user's handler."""
        result, activities = self._wait_torch(trace.cycle)
        kineto = getattr(result, "kineto_results", None)
        if kineto is not None:
            if activities is not None:
                # torch's own objects, read in C: no Python object per op.
                join_torch(trace, activities,
                           args_of=_metadata_args if self.record_shapes else None)
            else:
                join_torch(trace, _activities_of(kineto, with_args=self.record_shapes))
            _as_torch_writes(trace, self._stepping_thread, steps=self.schedule is not None)
        self.last_trace = trace
        if self.on_trace_ready is not None:
            self.on_trace_ready(trace)

    # -- the protocol ----------------------------------------------------

    def __enter__(self) -> "Profile":
        try:
            import torch
            import torch.profiler as tp
        except ImportError as exc:
            raise ImportError(f"frametrace.torch needs torch, which does not import here "
                              f"({exc}): pip install torch") from exc

        # The children (trace_children) trace Python only, and hand their
        # traces to the user's handler, in the child.
        session = _Session(on_trace_ready=self._ready, **self._options,
                           _ignore=_ignored_code(tp), _children_ready=self.on_trace_ready,
                           _step_hook=self._torch_step)
        torch_schedule = None
        if self.schedule is not None:
            # Called by torch's step() while Python may be traced: no call
            # the tracer would record (Schedule._action is ignored code;
            # an enum's hash and name are Python functions, `is` is not).
            action = (self.schedule._action if isinstance(self.schedule, Schedule)
                      else self.schedule)
            pairs = tuple((a, getattr(tp.ProfilerAction, a.name)) for a in ProfilerAction)

            def torch_schedule(step: int) -> Any:
                act = action(step)
                for ours, theirs in pairs:
                    if ours is act:
                        return theirs
                raise ValueError(f"schedule({step}) returned {act!r}, not a "
                                 f"frametrace.ProfilerAction")
        modules = _ModuleNames(self.module_names) if self.module_names is not None else None
        prof = tp.profile(activities=_torch_activities(torch, self.activities),
                          schedule=torch_schedule, on_trace_ready=self._torch_ready,
                          record_shapes=self.record_shapes, with_stack=False)
        # frametrace's step track stands for torch's ProfilerStep#N
        # annotations, which would span two steps of the Python frames.
        prof.record_steps = False
        if modules is not None:
            modules.install()
            modules.tell_compiled()
            session.ignore_code(modules.code)
        if torch_schedule is not None:
            session.ignore_code((torch_schedule,))
        self._stepping_thread = threading.get_native_id()  # torch's ProfilerStep's thread
        self.session, self._modules = session, modules
        try:
            prof.__enter__()  # torch first: its start is not in the Python trace
            self.torch_profiler = prof
            session.__enter__()
        except BaseException:
            if self.torch_profiler is not None:
                self.torch_profiler = None
                prof.__exit__(None, None, None)
            if modules is not None:
                modules.remove()
            raise
        return self

    def step(self) -> None:
        """Ends the current step of both profilers and starts the next."""
        if self.session is None:
            raise RuntimeError("step() called outside a session: use it inside "
                               "'with frametrace.torch.profile(...) as prof:'")
        self.session.step()
        if self._modules is not None and (self._modules.compiled or self._modules.traced_out):
            self._modules.tell_compiled()

    def stop(self) -> None:
        """Stops Python tracing now; torch's ops, the steps and the ranges
        go on being recorded to the end of the window."""
        if self.session is not None:
            self.session.stop()

    def __exit__(self, *exc_info: Any) -> Literal[False]:
        session = self.session
        try:
            if session is not None:
                session.__exit__(*exc_info)  # torch's exit runs inside (its hook)
        finally:
            if self._modules is not None:
                if self._modules.compiled or self._modules.traced_out:
                    self._modules.tell_compiled()
                self._modules.remove()
                self._modules = None
        return False


def profile(*, schedule: Optional[Callable[[int], ProfilerAction]] = None,
            python_steps: Optional[int] = None,
            on_trace_ready: Optional[Callable[[Trace], Any]] = None,
            module_names: Any = None, activities: Optional[Sequence[Any]] = None,
            record_shapes: bool = False, trace_children: bool = False,
            options: Optional[Options] = None, **tracer_options: Any) -> Profile:
    """Profiles a torch training loop: Python with frametrace, torch's ops
    with torch.profiler, on one schedule and one timeline (a context
    manager; ``prof.step()`` ends each step of both).

    schedule, python_steps, on_trace_ready, trace_children and the
    tracer's options (or ``options=``): as for ``frametrace.profile``
    (``ignore=PLUMBING`` leaves nn.Module's call machinery out).  Each
    window's Trace has torch's ops and kernels in ``slices`` and
    ``slice_tracks``.  module_names: an ``nn.Module`` (or a list) whose
    modules' calls become ranges named by their path.  activities,
    record_shapes: torch.profiler's (default activities: CPU, and CUDA
    where available).  See :doc:`/pytorch`."""
    return Profile(schedule=schedule, python_steps=python_steps, on_trace_ready=on_trace_ready,
                   module_names=module_names, activities=activities, record_shapes=record_shapes,
                   trace_children=trace_children,
                   options=Options.given("frametrace.torch.profile", options, tracer_options))


def flight_recorder(dump_dir: Union[str, "os.PathLike[str]"], *,
                    cycle_steps: Optional[int] = None,
                    activities: Optional[Sequence[Any]] = None,
                    record_shapes: bool = False, **options: Any) -> Any:
    """A flight recorder (``frametrace.flight_recorder``) whose dumps hold
    torch's ops of the dumped steps, nested in their Python frames:
    torch.profiler runs beside it in cycles of cycle_steps steps (default:
    10, or ``steps`` if more).  ``metadata.dump.torch`` says whether a dump
    has them.  activities, record_shapes: torch.profiler's; options:
    ``frametrace.flight_recorder``'s.  What it costs and when a dump is
    Python only: :doc:`/flight-recorder`."""
    from ._torch_flight import TorchFlightRecorder

    return TorchFlightRecorder(dump_dir, cycle_steps=cycle_steps, activities=activities,
                               record_shapes=record_shapes, **options)


def _ignored_code(tp: Any) -> tuple:
    """torch.profiler's step code, run between two steps of a window while
    frametrace traces: kept out of the Python trace (what it calls in C
    still shows)."""
    p = tp.profile
    return tuple(f for f in (p.step, p._transit_action, Profile._torch_step,
                             Profile.step, Profile._torch_ready)
                 if hasattr(f, "__code__"))


# ---- joining torch's results ------------------------------------------------

class _Activity:
    """One torch activity: times in wall-clock ns."""

    __slots__ = ("name", "category", "start", "end", "device", "resource", "args")

    def __init__(self, name: str, category: str, start: int, end: int, device: int,
                 resource: int, args: Optional[dict] = None):
        self.name, self.category, self.start, self.end = name, category, start, end
        self.device, self.resource, self.args = device, resource, args


def _activities_of(kineto: Any, with_args: bool = False) -> list:
    """A ``_ProfilerResult``'s activities (torch 2.13 has
    ``trace_activities()``; older ones: through its Chrome export).
    with_args: each one's metadata (record_shapes' "Input Dims", ...) as
    its args, parsed from torch's JSON text of it."""
    if hasattr(kineto, "trace_activities"):
        out = []
        for a in kineto.trace_activities():
            start = a.timestamp()
            args = _metadata_args(a.metadata_json()) if with_args else None
            out.append(_Activity(a.name(), a.type(), start, start + max(a.duration(), 0),
                                 a.device_id(), abs(a.resource_id()), args))
        return out
    import tempfile

    with tempfile.TemporaryDirectory(prefix="frametrace-torch.") as d:
        path = os.path.join(d, "torch.json")
        kineto.save(path)
        return read_torch_chrome(path)[1]


def _metadata_args(text: str) -> Optional[dict]:
    """An activity's args from torch's JSON text of its metadata (the
    members of an object, without the braces)."""
    import json

    try:
        return json.loads("{" + text + "}") if text else None
    except ValueError:
        return {"torch_metadata": text}  # kept as torch wrote it


def read_torch_chrome(path: Union[str, "os.PathLike[str]"]) -> tuple[dict, list]:
    """torch.profiler's Chrome trace (``export_chrome_trace``): (its
    top-level members but traceEvents, [_Activity] with wall-clock ns:
    ``baseTimeNanoseconds`` + ts).  ValueError if it is not one."""
    name = os.fspath(path)
    doc = _json_document(name, "torch.profiler trace")
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{name}: not a Chrome trace (no traceEvents list)")
    base = doc.get("baseTimeNanoseconds")
    if isinstance(base, bool) or not isinstance(base, int):
        raise ValueError(f"{name}: not a torch.profiler trace (no integer baseTimeNanoseconds)")
    out = []
    for n, ev in enumerate(doc["traceEvents"]):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        try:
            ts = _us_to_ns(ev["ts"])
            dur = _us_to_ns(ev.get("dur", 0))
            out.append(_Activity(str(ev.get("name", "")), str(ev.get("cat", "")), base + ts,
                                 base + ts + max(dur, 0), int(ev.get("pid", 0)),
                                 abs(int(ev.get("tid", 0))), ev.get("args") or None))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{name}: traceEvents[{n}]: not a complete event: {exc!r}") from None
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    return head, out


def torch_chrome_as_frametrace(path: Union[str, "os.PathLike[str]"], output: str) -> str:
    """torch.profiler's Chrome trace at path rewritten at output as a
    Chrome trace ``frametrace merge`` takes: the same events (times in us
    from ``baseTimeNanoseconds``, to the ns), and an
    ``otherData.frametrace`` whose clock anchor puts ts 0 at that wall-clock
    time (origin 0 on a clock of ns since the base); torch's own top-level
    members (trace_id, deviceProperties, ...) go to its metadata."""
    import json

    from .export import FORMAT, VERSION, _us_text

    name = os.fspath(path)
    doc = _json_document(name, "torch.profiler trace")
    base = doc.get("baseTimeNanoseconds") if isinstance(doc, dict) else None
    if isinstance(base, bool) or not isinstance(base, int) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{name}: not a torch.profiler Chrome trace (baseTimeNanoseconds and "
                         f"traceEvents expected)")
    events = []
    left_out: list = []
    pid = None
    start, stop = None, 0
    for n, ev in enumerate(doc["traceEvents"]):
        if not isinstance(ev, dict):
            raise ValueError(f"{name}: traceEvents[{n}] is not an object")
        if any(k in ev and (isinstance(ev[k], bool) or not isinstance(ev[k], int))
               for k in ("pid", "tid")):
            # Kineto's pseudo-processes ("Spans", "Traces": the profiling
            # window, markers): no process of the merged file has them.
            left_out.append(ev.get("name"))
            continue
        ev = dict(ev)
        times = ""
        try:
            for key in ("ts", "dur"):
                if key in ev:
                    ns = _us_to_ns(ev.pop(key))
                    if key == "ts" and ns < 0:
                        raise ValueError("negative ts: before baseTimeNanoseconds")
                    times += f',"{key}":{_us_text(ns)}'
                    if key == "ts" and ev.get("ph") == "X":
                        start = ns if start is None else min(start, ns)
                        end = ns + max(0, _us_to_ns(ev.get("dur", 0)))
                        stop = max(stop, end)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: traceEvents[{n}]: {exc}") from None
        if pid is None and ev.get("ph") == "X" and ev.get("cat") in ("cpu_op", "user_annotation"):
            pid = ev.get("pid")
        text = json.dumps(ev, separators=(",", ":"))
        events.append(text[:-1] + times + "}" if len(ev) else "{" + times[1:] + "}")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
        pid = 0
    meta = {k: v for k, v in doc.items() if k not in ("traceEvents", "baseTimeNanoseconds")}
    other = {"format": FORMAT, "version": VERSION, "origin_ns": 0, "start_ns": start or 0,
             "stop_ns": stop, "pid": pid, "dropped": 0, "thread_ids": {},
             "clock_anchor": {"monotonic_ns": 0, "wall_ns": base},
             "metadata": {"torch_profiler": meta, "baseTimeNanoseconds": base,
                          "left_out": {"why": "pid or tid not an integer (kineto's "
                                              "pseudo-processes)", "names": left_out}},
             "source": name, "process_name": f"torch.profiler {pid}"}
    from ._output import open_output

    with open_output(output, "w", encoding="utf-8") as fh:
        fh.write('{"otherData":' + json.dumps({"frametrace": other}, separators=(",", ":"))
                 + ',"traceEvents":[\n')
        fh.write(",\n".join(events))
        fh.write("]}\n")
    return output


def is_torch_chrome(top: dict) -> bool:
    """Whether a Chrome document's top-level members are torch.profiler's
    (baseTimeNanoseconds) rather than frametrace's."""
    other = top.get("otherData")
    return "baseTimeNanoseconds" in top and not (isinstance(other, dict) and "frametrace" in other)


def _us_to_ns(value: Any) -> int:
    """A Chrome ts/dur in us (a JSON number) as ns, rounded: torch writes
    three decimals, which a float holds to well under a ns at today's
    offsets from baseTimeNanoseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a number of us expected, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value * 1000):  # json reads 1e999 as inf
        raise ValueError(f"{value!r} us is out of range")
    return round(value * 1000)


def torch_trace_slices(trace: Trace, activities: Iterable[Any], *, offset_ns: int,
                       pid: Optional[int] = None,
                       tolerance_ns: int = 250) -> tuple[dict, list]:
    """torch's activities as frametrace Slices of trace: ({thread serial:
    [Slice]}, [(track name, [Slice])]).  activities: torch's own
    (``_ProfilerResult.trace_activities()``) or ``_Activity``s; offset_ns:
    wall-clock minus monotonic ns (from the trace's clock anchor);
    tolerance_ns: how far an op may cross a frame's edge and still be
    moved to nest.  An op of a traced thread goes on its track, nested in
    the frames of the trace's tracer (an op that crosses a frame's edge by
    at most tolerance_ns is moved onto the side of the edge where the rest
    of it lies, and says so in its args: ``frametrace_moved_start_ns`` /
    ``_end_ns``; one that crosses more, such as record_function's
    annotations, goes unchanged on a track of its own, where Perfetto
    neither drops nor misnests it).  The replay and the sweep run in C
    with the GIL released (``_tracer._join_ops``)."""
    return _join(trace, activities, offset_ns=offset_ns, pid=pid, tolerance_ns=tolerance_ns,
                 args_of=None)


def _join(trace: Trace, activities: Iterable[Any], *, offset_ns: int, pid: Optional[int],
          tolerance_ns: int, args_of: Optional[Callable[[str], Any]]) -> tuple[dict, list]:
    tracer = trace.tracer
    if tracer is None and trace.threads:
        raise ValueError("torch's ops are joined with a tracer's records: this trace has "
                         "threads but no tracer (read from a file?)")
    pid = os.getpid() if pid is None else pid
    thread_of: dict[int, tuple] = {}  # no tracer (no Python traced): every op on a track
    for i, t in enumerate(tracer.threads if tracer is not None else ()):
        if t.native_thread_id:  # the latest thread that had a native id
            thread_of[t.native_thread_id] = (i, t.serial, t.name or f"thread {t.thread_id}")
    if not isinstance(activities, (list, tuple)):
        activities = list(activities)
    return _tracer._join_ops(tracer, activities, Slice, thread_of, offset_ns, pid,
                             tolerance_ns, args_of)


def _outside_track(names: dict, serial: Optional[int], native_id: int) -> str:
    """The track of a thread's ops outside its frames: those of a thread
    not traced (serial None: by its native id), or those that cross the
    frames of a traced one (names: {serial: its name}), named as the C
    join (csrc/join_ops.c) names them."""
    if serial is None:
        return f"torch: thread {native_id}"
    return f"torch: {names.get(serial, serial)} (not nested in its frames)"


def join_torch(trace: Trace, activities: Iterable[Any], *,
               args_of: Optional[Callable[[str], Any]] = None) -> Trace:
    """Puts torch's activities (wall-clock ns) into trace, on its clock,
    through trace.clock_anchor (see torch_trace_slices).  args_of: for
    torch's own activities, what makes an op's args of its metadata's
    JSON text (None: no args)."""
    anchor = trace.clock_anchor
    if not anchor:
        raise ValueError("the trace has no clock_anchor: torch's times cannot be placed on it")
    offset = anchor["wall_ns"] - anchor["monotonic_ns"]
    # The join is off by the anchor's width at most, plus torch's own
    # conversion of its counter to the wall clock (tens of ns, measured).
    tolerance = _TOLERANCE_NS + int(anchor.get("width_ns") or 0)
    slices, tracks = _join(trace, activities, offset_ns=offset, pid=trace.pid,
                           tolerance_ns=tolerance, args_of=args_of)
    trace.slices = slices
    trace.slice_tracks = tracks
    return trace


def _as_torch_writes(trace: Trace, stepping_thread: int, steps: bool) -> None:
    """What readers of torch.profiler's files (Holistic Trace Analysis,
    TensorBoard's profiler) look for, added to a joined trace: torch's
    top-level members, and with steps (a schedule: torch.profiler records
    steps only with one) the ProfilerStep#N annotations by which they find
    the iterations, as ops of the thread that stepped (native id
    stepping_thread) outside its frames (a step spans two steps' Python
    frames)."""
    anchor = trace.clock_anchor or {}
    if steps and trace.steps:
        names: dict = {}
        serial = None
        for t in trace.threads:  # the latest thread that had the native id, as the join
            if t.native_thread_id == stepping_thread:
                serial, names[t.serial] = t.serial, t.name or f"thread {t.thread_id}"
        track = _outside_track(names, serial, stepping_thread)
        marks = [Slice(f"ProfilerStep#{s.step}", "user_annotation", s.start_ns, s.end_ns)
                 for s in trace.steps]
        for name, items in trace.slice_tracks:
            if name == track:
                items.extend(marks)
                break
        else:
            trace.slice_tracks.append((track, marks))
    trace.chrome_top_level = {
        "schemaVersion": _SCHEMA_VERSION,
        "deviceProperties": _device_properties(),
        "trace_id": uuid.uuid4().hex.upper(),
        "host_name": socket.gethostname(),
        # ts (us from the window's start) + this = the wall clock, as in
        # torch's files.
        "baseTimeNanoseconds": trace.session_start_ns + anchor["wall_ns"] - anchor["monotonic_ns"],
    }


# The schemaVersion kineto writes (torch 2.x).
_SCHEMA_VERSION = 1


def _device_properties() -> list:
    """torch.profiler's deviceProperties: each CUDA device's, as kineto
    lists them ([] without CUDA; not run here: no GPU)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append({"id": i, "name": p.name, "totalGlobalMem": p.total_memory,
                    "computeMajor": p.major, "computeMinor": p.minor,
                    "numSms": p.multi_processor_count})
    return out


class tensorboard_trace_handler:  # noqa: N801 - named as torch.profiler's
    """An on_trace_ready that writes each trace to dir_name as torch.profiler's
    ``tensorboard_trace_handler`` does: ``{worker_name}.{time_ns}.pt.trace.json``
    (``.gz`` with use_gzip), worker_name by default ``{hostname}_{pid}``:
    the directory TensorBoard's profiler plugin and Holistic Trace
    Analysis read.  It pickles: spawned children (``trace_children``) use
    it too."""

    def __init__(self, dir_name: Union[str, "os.PathLike[str]"], worker_name: Optional[str] = None,
                 use_gzip: bool = False):
        self.dir_name = os.fspath(dir_name)
        if worker_name is not None and not isinstance(worker_name, str):
            raise TypeError(f"worker_name must be a str or None, not {type(worker_name).__name__}")
        if not isinstance(use_gzip, bool):
            raise TypeError(f"use_gzip must be a bool, not {type(use_gzip).__name__}")
        self.worker_name = worker_name
        self.use_gzip = use_gzip

    def __call__(self, trace: Trace) -> str:
        import time

        os.makedirs(self.dir_name, exist_ok=True)
        worker = self.worker_name or f"{socket.gethostname()}_{trace.pid}"
        name = f"{worker}.{time.time_ns()}.pt.trace.json" + (".gz" if self.use_gzip else "")
        return trace.to_chrome(os.path.join(self.dir_name, name))

    def __repr__(self) -> str:
        return f"frametrace.torch.tensorboard_trace_handler({self.dir_name!r})"

