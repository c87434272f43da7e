"""frametrace against other Python tracers and profilers, on the same
workloads, in the same conditions.

    python benchmarks/compare.py                      # everything installed: 20-30 min
    python benchmarks/compare.py --quick              # a smoke run, 1-2 minutes
    python benchmarks/compare.py --reps 9 --workloads fib,mixed \\
        --tracers untraced,floor,cProfile,frametrace --out /tmp/results

Peers are optional (``pip install '.[bench]'``): one that does not import is
reported as "skipped (not installed)", never replaced by anything.

Every measurement is its own child process running this file (--child):
it imports its tracer, warms the workload up untraced and the tracer up on
a tiny run, then times tracer start + workload (the tracer still recording
at the end of the timed region) on the process CPU clock (the tables'
default: steady on a shared machine) and the wall clock, and reads its RSS
before and after.  Children of the configurations are run
in turn, the order rotated each repetition, for each workload; the report
takes medians over the repetitions.  In the first --post-reps repetitions a
child goes on to stop the tracer and time turning the recording into events
and writing a trace file; in the others it exits before stop().

"events" in "added ns/event" are profile callbacks (call, return, c_call,
c_return, c_exception) of the workload, counted once per workload with a
Python sys.setprofile/threading.setprofile function: the same denominator
for every configuration, whatever each one records.  "kept" counts
complete calls (call/return pairs) in a tracer's output.

A report, not a test: nothing is asserted.  Results go to stdout and to
DIR/compare-<python>.md (tables), .json (every child's raw numbers) and
.png (a chart, if matplotlib is installed); --report redoes the tables of a
.json (--clock wall: compare-<python>-wall.md).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import workloads as wl  # noqa: E402

MARK = "@@compare "  # prefixes the child's result lines on stdout


class Skip(Exception):
    """This configuration cannot run here; the message says why."""


def _version(dist):
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _import(module):
    import importlib
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise Skip("not installed") from None
        raise Skip(f"import failed: {exc}") from None
    except Exception as exc:  # a broken install: say so, never fake it
        raise Skip(f"import failed: {type(exc).__name__}: {exc}") from None


def _count_in_file(path, needle):
    """Occurrences of needle in a (possibly huge) file, read in chunks."""
    count, tail = 0, b""
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 24)
            if not chunk:
                return count
            data = tail + chunk
            count += data.count(needle)
            # The tail is too short to hold a needle, so none is counted twice;
            # one across the chunks' boundary is counted in the next round.
            tail = data[-(len(needle) - 1):]


def _pb_fields(buf, pos, end):
    """(field, start, end) of the length-delimited fields and (field, value,
    None) of the varints of a protobuf message in buf[pos:end]."""
    while pos < end:
        key = shift = 0
        while True:
            b = buf[pos]
            pos += 1
            key |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        field, wire = key >> 3, key & 7
        if wire == 0 or wire == 2:
            value = shift = 0
            while True:
                b = buf[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
                shift += 7
            if wire == 0:
                yield field, value, None
            else:
                yield field, pos, pos + value
                pos += value
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"protobuf wire type {wire}")


def count_perfetto_slices(path, chunk_size=1 << 24):
    """TrackEvents of type SLICE_BEGIN in a Perfetto trace: Trace.packet (1)
    -> TracePacket.track_event (11) -> TrackEvent.type (9) == 1."""
    n, buf = 0, b""
    with open(path, "rb") as fh:  # in chunks: the file can be GBs
        while True:
            chunk = fh.read(chunk_size)
            if not chunk:
                return n
            buf += chunk
            done = 0
            try:
                for _, ps, pe in _pb_fields(buf, 0, len(buf)):
                    if pe > len(buf):
                        break  # the packet goes on in the next chunk
                    for field, s, e in _pb_fields(buf, ps, pe):
                        if field == 11 and e is not None:
                            for tf, value, te in _pb_fields(buf, s, e):
                                if tf == 9 and te is None and value == 1:
                                    n += 1
                    done = pe
            except IndexError:  # a packet header cut by the chunk's end
                pass
            buf = buf[done:]


# ---- the configurations --------------------------------------------------------
# Each class runs in a child process: probe() (raise Skip, or return a
# version), setup() (outside the timing), start() (timed), then, in post
# repetitions only, stop(), convert() and write(path) timed one by one.  The
# class attributes say what was measured, for the report's legend.


class Config:
    keeps = False          # keeps every call (a timeline), not aggregates
    records_c = True       # records calls of C functions too
    probe_in_child = True  # False: always available, nothing to import
    kept_what = "calls counted in its stats"
    stop_what = "stop()"
    convert_what = None    # what "to events" measured; None: nothing to do
    write_what = None      # what "write" measured; None: no trace file
    post_order = ("convert", "write")

    def __init__(self, plan, options):
        self.plan = plan          # {"callbacks", "threads", "tmp", "warm"}
        self.options = options

    @classmethod
    def probe(cls, options):
        return ""

    def setup(self):
        pass

    def start(self):
        pass

    def stop(self):
        pass

    def discard(self):
        """Drop the (warm-up) tracer for good, before the next one is set up."""

    def after_stop(self):
        """Numbers read after stop(), not timed: {"dropped": n, ...}."""
        return {}

    def convert(self):
        """Timed; returns {"kept": n} (complete calls) or {"calls": n}."""
        return {}

    def write(self, path):
        """Timed; writes a trace file to path (or elsewhere: returns it)."""
        return path

    def count_file(self, path):
        """Untimed: complete calls in the written file, or None."""
        return None

    def spans(self):
        """Complete calls to size a buffer for: callbacks / 2, with room."""
        return self.plan["callbacks"] // 2 * 11 // 10 + 10_000


class Untraced(Config):
    stop_what = None
    probe_in_child = False


class Floor(Config):
    """frametrace._testing.set_noop_profile: a C profile function doing
    nothing, installed with PyEval_SetProfile on the calling thread (and by
    the threads workload's worker threads on themselves)."""
    stop_what = "set_noop_profile(False)"

    @classmethod
    def probe(cls, options):
        return "frametrace " + _import("frametrace").__version__

    def setup(self):
        from frametrace import _testing
        self.set = _testing.set_noop_profile
        wl.thread_hooks[:] = [lambda: self.set(True)]

    def start(self):
        self.set(True)

    def stop(self):
        self.set(False)
        wl.thread_hooks[:] = []


class CProfile(Config):
    probe_in_child = False
    stop_what = "disable()"
    convert_what = "create_stats() (per-function aggregates)"

    def setup(self):
        import cProfile
        self.prof = cProfile.Profile()

    def start(self):
        self.prof.enable()

    def stop(self):
        self.prof.disable()

    def convert(self):
        self.prof.create_stats()
        return {"calls": sum(nc for _, nc, _, _, _ in self.prof.stats.values())}


class Yappi(Config):
    """Wall clock, builtins on (C functions profiled, like the others)."""
    stop_what = "yappi.stop()"
    convert_what = "get_func_stats() (per-function aggregates)"

    @classmethod
    def probe(cls, options):
        _import("yappi")
        return "yappi " + _version("yappi")

    def setup(self):
        import yappi
        self.yappi = yappi
        yappi.clear_stats()
        yappi.set_clock_type("wall")

    def start(self):
        self.yappi.start(builtins=True, profile_threads=True)

    def stop(self):
        self.yappi.stop()

    def convert(self):
        return {"calls": sum(s.ncall for s in self.yappi.get_func_stats())}


class VizTracerConfig(Config):
    """Default options (C functions logged), tracer_entries large enough to
    keep every call."""
    keeps = True
    convert_what = "parse() (its buffer to Chrome event dicts)"
    kept_what = "entries counted by parse()"
    write_what = "save() of the parsed trace, .json"

    @classmethod
    def probe(cls, options):
        _import("viztracer")
        return "viztracer " + _version("viztracer")

    def setup(self):
        from viztracer import VizTracer
        self.viz = VizTracer(tracer_entries=self.spans(), verbose=0, register_global=False)

    def start(self):
        self.viz.start()

    def stop(self):
        self.viz.stop()

    def discard(self):
        # Before 3.12 a VizTracer registers its thread hook with
        # threading.setprofile() when created, which keeps it alive, and its
        # dealloc calls threading.setprofile(None): the warm-up tracer, freed
        # only when the next one replaces the hook, would unhook the next one
        # from new threads.  Free it now.
        import threading
        if sys.version_info < (3, 12):
            threading.setprofile(None)
        del self.viz

    def convert(self):
        return {"kept": self.viz.parse()}

    def write(self, path):
        self.viz.save(path)
        return path


class Trace0(Config):
    """Perfetto protobuf (its default), written by a background thread while
    tracing; Python functions only (no C-call events)."""
    keeps = True
    records_c = False
    stop_what = "__exit__() (drains its rings, finishes the file)"
    kept_what = "SLICE_BEGIN track events in its .pftrace"
    write_what = None  # streamed while tracing: the file is there at stop

    @classmethod
    def probe(cls, options):
        if sys.version_info < (3, 13):
            try:
                _import("trace0")
            except Skip as exc:
                raise Skip(f"{exc}; trace0 needs Python 3.13+") from None
        _import("trace0")
        return "trace0 " + _version("trace0")

    def setup(self):
        from trace0 import Tracer
        self.path = os.path.join(self.plan["tmp"], "trace0.pftrace")
        self.tracer = Tracer(self.path, format="protobuf", trace_subprocesses=False)

    def start(self):
        self.tracer.__enter__()

    def stop(self):
        self.tracer.__exit__(None, None, None)

    def output(self):
        return self.path

    def count_file(self, path):
        return count_perfetto_slices(path)


class TorchProfiler(Config):
    """torch.profiler.profile(activities=[CPU], with_stack=True)."""
    keeps = True
    stop_what = "stop() (kineto collects its results)"
    convert_what = "events() (FunctionEvent list)"
    kept_what = "python_function events in its Chrome JSON"
    write_what = "export_chrome_trace(), .json"
    post_order = ("write", "convert")  # events() can take very long

    @classmethod
    def probe(cls, options):
        torch = _import("torch")
        _import("torch.profiler")
        return "torch " + torch.__version__

    def setup(self):
        from torch.profiler import ProfilerActivity, profile
        self.prof = profile(activities=[ProfilerActivity.CPU], with_stack=True)

    def start(self):
        self.prof.start()

    def stop(self):
        self.prof.stop()

    def convert(self):
        return {"kept_events": len(self.prof.events())}

    def write(self, path):
        self.prof.export_chrome_trace(path)
        return path

    def count_file(self, path):
        return _count_in_file(path, b'"cat": "python_function"')


class Frametrace(Config):
    """frametrace.Tracer(c_calls=True), buffer_size large enough to keep
    every call; options (such as backend=) are passed on, except
    backend="setprofile" to a frametrace older than the backend argument
    (setprofile was its only backend)."""
    keeps = True
    convert_what = "getEvents()"
    kept_what = "len(getEvents())"
    write_what = "export.write_chrome(), .json"

    @classmethod
    def probe(cls, options):
        frametrace = _import("frametrace")
        options = cls.accepted(options)
        try:
            tracer = frametrace.Tracer(buffer_size=16, **options)
        except TypeError as exc:
            raise Skip(f"this frametrace takes no {', '.join(options)}: {exc}") from None
        except (ValueError, RuntimeError, NotImplementedError) as exc:
            raise Skip(f"{type(exc).__name__}: {exc}") from None
        backend = getattr(tracer, "backend", "setprofile")
        where = os.path.dirname(frametrace.__file__)
        return f"frametrace {frametrace.__version__}, backend {backend} ({where})"

    @staticmethod
    def accepted(options):
        import frametrace
        if options.get("backend") == "setprofile":
            try:
                frametrace.Tracer(buffer_size=16, backend="setprofile")
            except TypeError:
                return {k: v for k, v in options.items() if k != "backend"}
        return options

    def setup(self):
        import frametrace
        self.export = frametrace.export
        per_thread = self.plan["callbacks"] // self.plan["threads"] * 11 // 10 + 10_000
        size = min(per_thread, frametrace.MAX_BUFFER_SIZE)
        self.tracer = frametrace.Tracer(buffer_size=size, c_calls=True,
                                        **self.accepted(self.options))

    def start(self):
        self.tracer.start()

    def stop(self):
        self.tracer.stop()

    def after_stop(self):
        return {"dropped": self.tracer.stats.dropped}

    def convert(self):
        events = self.tracer.getEvents()
        n = len(events)
        del events
        return {"kept": n}

    def write(self, path):
        self.export.write_chrome(self.tracer, path)
        return path


# name -> (class, options).  One line per configuration: adding one (another
# backend, say) is adding a line.  A configuration that cannot run here
# (peer not installed, option not accepted) is reported as skipped.
CONFIGS = {
    "untraced": (Untraced, {}),
    "floor": (Floor, {}),
    "cProfile": (CProfile, {}),
    "yappi": (Yappi, {}),
    "viztracer": (VizTracerConfig, {}),
    "trace0": (Trace0, {}),
    "torch": (TorchProfiler, {}),
    "frametrace": (Frametrace, {"backend": "setprofile"}),
    "frametrace-monitoring": (Frametrace, {"backend": "monitoring"}),
}

# ---- the child -------------------------------------------------------------------


def _emit(**fields):
    sys.stdout.write(MARK + json.dumps(fields) + "\n")
    sys.stdout.flush()


def _rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(spec):
    op = spec["op"]
    cls, options = CONFIGS[spec["config"]] if "config" in spec else (None, None)
    if op == "probe":
        try:
            _emit(ok=cls.probe(options) or "")
        except Skip as exc:
            _emit(skip=str(exc))
        return
    work = wl.BY_NAME[spec["workload"]]
    if op == "count":
        kinds = wl.count_events(work.fn, spec["arg"])
        # Cross-check on a small run against frametrace's own events: two
        # callbacks per event, less the ends that were outside the trace.
        check = None
        try:
            import frametrace
            small = spec["check_arg"]
            expected = wl.count_callbacks(work.fn, small)
            tracer = frametrace.Tracer(buffer_size=expected + 100_000, c_calls=True,
                                       **Frametrace.accepted({"backend": "setprofile"}))
            tracer.start()
            work.fn(small)
            tracer.stop()
            seen = sum(2 - e.open_at_start - e.open_at_stop for e in tracer.getEvents())
            check = {"arg": small, "setprofile": expected, "frametrace": seen,
                     "dropped": tracer.stats.dropped}
        except ImportError:
            pass
        _emit(callbacks=sum(kinds.values()), kinds=kinds, check=check)
        return

    # op == "run"
    plan = {"callbacks": spec["callbacks"], "threads": work.threads, "tmp": spec["tmp"]}
    work.fn(work.quick)  # warm-up: specialization, caches, allocator
    warm = cls(dict(plan, callbacks=20_000, tmp=tempfile.mkdtemp(dir=spec["tmp"])), options)
    warm.setup()  # and the tracer's one-time costs (torch's kineto set-up)
    warm.start()
    wl.fib(12)
    warm.stop()
    warm.discard()
    del warm
    gc.collect()
    cfg = cls(plan, options)
    cfg.setup()
    gc.collect()

    rss0 = _rss()
    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    cfg.start()
    work.fn(spec["arg"])
    t1, c1 = time.perf_counter_ns(), time.process_time_ns()
    rss1 = _rss()
    _emit(phase="trace", wall_ns=t1 - t0, cpu_ns=c1 - c0, rss_delta=rss1 - rss0)
    if not spec["post"]:
        sys.stdout.flush()
        os._exit(0)  # no stop(), no teardown: the next child is waiting

    def timed(phase, fn, *args):
        _emit(phase=phase, begin=True)
        t = time.perf_counter_ns()
        out = fn(*args)
        return out, (time.perf_counter_ns() - t) / 1e9

    if cls.stop_what:
        _, secs = timed("stop", cfg.stop)
        _emit(phase="stop", s=secs, **cfg.after_stop())
    for step in cls.post_order:
        if step == "convert" and cls.convert_what:
            out, secs = timed("convert", cfg.convert)
            _emit(phase="convert", s=secs, **out)
        elif step == "write":
            if cls.write_what:
                path, secs = timed("write", cfg.write, os.path.join(spec["tmp"], "trace.json"))
            elif hasattr(cfg, "output"):
                path, secs = cfg.output(), None  # written while tracing
            else:
                continue
            _emit(phase="write", s=secs, bytes=os.path.getsize(path))
            kept = cfg.count_file(path)
            os.unlink(path)
            if kept is not None:
                _emit(phase="count", kept_file=kept)
    _emit(phase="peak", peak_rss_delta=max(0, _peak_rss() - rss0))
    sys.stdout.flush()
    os._exit(0)


# ---- the driver ------------------------------------------------------------------


def _child_rss(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _child_env():
    """The environment of a child, which runs in benchmarks/: PYTHONPATH's
    relative entries made absolute from where compare.py was started (with
    PYTHONPATH=python every frametrace configuration was skipped as not
    installed)."""
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(
            os.path.abspath(p) if p else p for p in env["PYTHONPATH"].split(os.pathsep))
    return env


def run_child(spec, timeout, max_rss, tmp_root):
    """The child's result lines, and a failure message or None."""
    tmp = tempfile.mkdtemp(prefix="compare-", dir=tmp_root)
    spec = dict(spec, tmp=tmp)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    lines, failure = [], None
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                cwd=HERE, env=_child_env())

        def read():
            for line in proc.stdout:
                if line.startswith(MARK):
                    lines.append((time.monotonic(), json.loads(line[len(MARK):])))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        began = time.monotonic()
        peak = 0
        while proc.poll() is None:
            time.sleep(0.25)
            rss = _child_rss(proc.pid)
            peak = max(peak, rss)
            if rss > max_rss:
                failure = f"killed at {rss / 2**30:.1f} GiB RSS (limit {max_rss / 2**30:.0f} GiB)"
            elif time.monotonic() - began > timeout:
                failure = f"killed after {timeout:.0f} s (timeout)"
            if failure:
                proc.kill()
                proc.wait()
                break
        reader.join(5)
        if failure is None and proc.returncode != 0:
            err.seek(0)
            tail = err.read().strip().splitlines()[-3:]
            failure = f"exit status {proc.returncode}: " + " / ".join(tail)
    shutil.rmtree(tmp, ignore_errors=True)
    killed_at = time.monotonic()
    # A phase that began and never ended was cut short: say how long it ran.
    open_phase = None
    results = []
    for when, rec in lines:
        if rec.get("begin"):
            open_phase = (rec["phase"], when)
        else:
            if open_phase and rec.get("phase") == open_phase[0]:
                open_phase = None
            results.append(rec)
    if failure and open_phase:
        results.append({"phase": open_phase[0], "cut": killed_at - open_phase[1],
                        "failure": failure})
    return results, failure


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] + " " + __doc__.splitlines()[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small workloads (~0.01-0.05 s) and 3 reps: a smoke run")
    parser.add_argument("--reps", type=int, default=None,
                        help="timed repetitions per configuration (default 7, 3 with --quick)")
    parser.add_argument("--post-reps", type=int, default=1,
                        help="repetitions that also time stop, to-events and write (default 1)")
    parser.add_argument("--workloads", default=",".join(w.name for w in wl.WORKLOADS),
                        help="comma-separated, from: " + ", ".join(w.name for w in wl.WORKLOADS))
    parser.add_argument("--tracers", default=",".join(CONFIGS),
                        help="comma-separated configurations, from: " + ", ".join(CONFIGS))
    parser.add_argument("--out", default=os.path.join(HERE, "results"),
                        help="directory for compare-<python>.md/.json/.png "
                             "(default benchmarks/results)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="the clock of the x untraced / ns per event / floor "
                             "columns: the process's CPU time (default: steady on a "
                             "shared machine) or wall time; the other is shown too")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds before a timing-only child is killed (default 300)")
    parser.add_argument("--post-timeout", type=float, default=420,
                        help="seconds before a child that also stops, converts and "
                             "writes is killed (default 420)")
    parser.add_argument("--max-rss-gib", type=float, default=14,
                        help="a child is killed past this RSS (default 14 GiB)")
    parser.add_argument("--tmp", default=None, help="where trace files are written")
    parser.add_argument("--no-chart", action="store_true", help="write no PNG")
    parser.add_argument("--report", metavar="JSON",
                        help="run nothing: redo the tables (and chart) of an earlier run's "
                             ".json, e.g. with the other --clock")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 3 if args.quick else 7
    if args.reps < 1 or args.post_reps < 0:
        parser.error("--reps must be at least 1, --post-reps at least 0")
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.tracers = [t.strip() for t in args.tracers.split(",") if t.strip()]
    for w in args.workloads:
        if w not in wl.BY_NAME:
            parser.error(f"unknown workload {w!r}; known: {', '.join(wl.BY_NAME)}")
    for t in args.tracers:
        if t not in CONFIGS:
            parser.error(f"unknown tracer {t!r}; known: {', '.join(CONFIGS)}")
    if "untraced" not in args.tracers:
        args.tracers.insert(0, "untraced")  # every ratio is to it
    return args


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def drive(args):
    began = time.time()
    max_rss = int(args.max_rss_gib * 2**30)
    tmp_root = args.tmp or tempfile.gettempdir()
    versions, skipped = {}, {}
    for name in args.tracers:
        if not CONFIGS[name][0].probe_in_child:
            versions[name] = ""
            continue
        res, failure = run_child({"op": "probe", "config": name}, 120, max_rss, tmp_root)
        if failure or not res:
            skipped[name] = f"probe failed: {failure}"
        elif "skip" in res[0]:
            skipped[name] = res[0]["skip"]
        else:
            versions[name] = res[0]["ok"]
        log(f"{name}: " + (f"skipped ({skipped[name]})" if name in skipped else versions[name] or "ok"))
    configs = [c for c in args.tracers if c not in skipped]

    counts = {}
    for w in args.workloads:
        work = wl.BY_NAME[w]
        arg = work.quick if args.quick else work.full
        res, failure = run_child({"op": "count", "workload": w, "arg": arg,
                                  "check_arg": work.quick}, 600, max_rss, tmp_root)
        if failure or not res:
            raise SystemExit(f"counting the events of {w} failed: {failure}")
        counts[w] = dict(res[0], arg=arg)
        log(f"{w}({arg}): {res[0]['callbacks']:,} profile events")

    runs = {(w, c): [] for w in args.workloads for c in configs}
    total = args.reps * len(args.workloads) * len(configs)
    done = 0
    for rep in range(args.reps):
        post = rep < args.post_reps
        for wi, w in enumerate(args.workloads):
            k = (rep + wi) % len(configs)
            for c in configs[k:] + configs[:k]:
                spec = {"op": "run", "workload": w, "config": c, "arg": counts[w]["arg"],
                        "callbacks": counts[w]["callbacks"], "post": post}
                t = time.monotonic()
                res, failure = run_child(spec, args.post_timeout if post else args.timeout,
                                         max_rss, tmp_root)
                runs[(w, c)].append({"rep": rep, "post": post, "phases": res,
                                     "failure": failure})
                done += 1
                trace = next((r for r in res if r.get("phase") == "trace"), None)
                log(f"[{done}/{total}] rep {rep + 1} {w} {c}: "
                    + (f"{trace['wall_ns'] / 1e9:.3f} s" if trace else "no timing")
                    + (f" (+{time.monotonic() - t:.0f} s in all)" if post else "")
                    + (f" -- {failure}" if failure else ""))
    raw = {"python": platform.python_version(), "implementation": platform.python_implementation(),
           "machine": platform.machine(), "cpus": os.cpu_count(), "argv": sys.argv[1:],
           "executable": sys.executable, "clock": args.clock, "quick": args.quick,
           "reps": args.reps, "post_reps": args.post_reps, "versions": versions,
           "skipped": skipped, "configs": configs, "workloads": args.workloads,
           "counts": counts, "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(began)),
           "seconds": time.time() - began,
           "runs": {f"{w}/{c}": v for (w, c), v in runs.items()}}
    return raw


# ---- the report ------------------------------------------------------------------


def _f(x, fmt, empty=""):
    return empty if x is None else format(x, fmt)


def summarize(raw):
    """{(workload, config): numbers} from the raw runs."""
    key = "wall_ns" if raw["clock"] == "wall" else "cpu_ns"
    other = "cpu_ns" if key == "wall_ns" else "wall_ns"
    out = {}
    for w in raw["workloads"]:
        for c in raw["configs"]:
            runs = raw["runs"][f"{w}/{c}"]
            traces = [p for r in runs for p in r["phases"] if p.get("phase") == "trace"]
            s = {"n": len(traces), "failures": [r["failure"] for r in runs if r["failure"]]}
            if traces:
                s["med"] = statistics.median(p[key] for p in traces)
                s["min"] = min(p[key] for p in traces)
                s["max"] = max(p[key] for p in traces)
                s["med_other"] = statistics.median(p[other] for p in traces)
                s["rss"] = statistics.median(p["rss_delta"] for p in traces)
            post = {}
            for r in runs:
                if not r["post"]:
                    continue
                for p in r["phases"]:
                    ph = p.get("phase")
                    if ph in ("stop", "convert", "write", "count", "peak"):
                        for k, v in p.items():
                            if k != "phase":
                                post.setdefault((ph, k), []).append(v)
            s["post"] = {k: (statistics.median(v) if all(isinstance(x, (int, float)) for x in v)
                             and v else v[0]) for k, v in post.items()}
            out[(w, c)] = s
    for w in raw["workloads"]:
        base = out[(w, "untraced")]
        floor = out.get((w, "floor"))
        events = raw["counts"][w]["callbacks"]
        for c in raw["configs"]:
            s = out[(w, c)]
            if "med" not in s or "med" not in base:
                continue
            s["x"] = s["med"] / base["med"]
            s["x_other"] = s["med_other"] / base["med_other"]
            s["added"] = (s["med"] - base["med"]) / events
            s["added_min"] = (s["min"] - base["min"]) / events
            if floor and "med" in floor and c != "untraced":
                f_added = (floor["med"] - base["med"]) / events
                s["vs_floor"] = s["added"] / f_added if f_added > 0 else None
            post = s["post"]
            kept = post.get(("convert", "kept"), post.get(("count", "kept_file")))
            s["kept"] = kept
            s["calls"] = post.get(("convert", "calls"))
            seen = kept if kept is not None else s["calls"]
            k = raw["counts"][w].get("kinds")
            if seen is not None and k:
                s["expected_calls"] = k["call"] + (k["c_call"] if CONFIGS[c][0].records_c else 0)
                s["partial"] = seen < 0.98 * s["expected_calls"]
    return out


PARTIAL = "†"
CLOCKS = {"cpu": "process CPU time", "wall": "wall time"}


def _cut(post, phase):
    """A phase that was stopped: '> N s (why)'."""
    cut = post.get((phase, "cut"))
    if cut is None:
        return None
    failure = post.get((phase, "failure")) or ""
    why = "RSS limit" if "RSS" in failure else "timeout" if "timeout" in failure else "stopped"
    return f"killed after {cut:.0f} s ({why})"


def report(raw):
    s = summarize(raw)
    W, C = raw["workloads"], raw["configs"]
    clock = raw["clock"]
    other = CLOCKS["cpu" if clock == "wall" else "wall"]
    L = []
    L.append(f"## frametrace against other tracers: CPython {raw['python']} "
             f"({raw['machine']}, {raw['cpus']} CPUs)")
    L.append("")
    L.append(f"`python benchmarks/compare.py {' '.join(raw['argv'])}`".replace("  ", " ")
             + f" -- {raw['started']}, {raw['seconds'] / 60:.0f} min; {raw['reps']} reps "
             f"per configuration (one child process each, configurations alternated), "
             f"medians; stop/convert/write timed in {raw['post_reps']} rep(s)."
             + (" **--quick sizes.**" if raw["quick"] else "")
             + (f" Tables redone on the {CLOCKS[clock]} (`--report`)."
                if raw.get("clock_run", clock) != clock else ""))
    L.append("")
    L.append("Versions: " + "; ".join(f"{c}: {v}" for c, v in raw["versions"].items() if v))
    if raw["skipped"]:
        L.append("")
        L.append("Skipped: " + "; ".join(f"{c} (skipped: {why})" for c, why in raw["skipped"].items()))
    L.append("")
    L.append("Workloads (profile events counted with a sys.setprofile/threading.setprofile "
             "pass; a call is two):")
    L.append("")
    for w in W:
        work = wl.BY_NAME[w]
        cnt = raw["counts"][w]
        k = cnt.get("kinds")
        L.append(f"- `{w}` ({work.fn.__name__}({cnt['arg']:,})): {work.about}; "
                 f"{cnt['callbacks']:,} events"
                 + (f": {k['call']:,} Python calls, {k['c_call']:,} C calls" if k else ""))
    L.append("")

    # Summary: slowdown per tracer and workload.
    L.append(f"### Slowdown (x untraced, median {CLOCKS[clock]}; tracer start included, stop not)")
    L.append("")
    rows = []
    for c in C:
        rows.append([c] + [_f(s[(w, c)].get("x"), ".2f") + "x" + PARTIAL * bool(s[(w, c)].get("partial"))
                           if s[(w, c)].get("x") else "failed" for w in W])
    L.append(wl.markdown_table(["tracer"] + W, rows))
    L.append("")
    if any(x.get("partial") for x in s.values()):
        L.append(f"{PARTIAL}: the tracer saw fewer than 98% of the workload's calls "
                 "(see the notes at the end).")
        L.append("")
    L.append("### Added ns per profile event, and as a multiple of the floor's")
    L.append("")
    rows = []
    for c in C[1:]:
        cells = []
        for w in W:
            x = s[(w, c)]
            if "added" not in x:
                cells.append("failed")
                continue
            cell = f"{x['added']:.0f}"
            if x.get("vs_floor") is not None and c != "floor":
                cell += f" ({x['vs_floor']:.1f}x)"
            cell += PARTIAL * bool(x.get("partial"))
            cells.append(cell)
        rows.append([c] + cells)
    L.append(wl.markdown_table(["tracer"] + W, rows))
    L.append("")

    L.append("### Overhead, per workload")
    L.append("")
    rows = []
    for w in W:
        for c in C:
            x = s[(w, c)]
            calls = x.get("kept") if x.get("kept") is not None else x.get("calls")
            rows.append([
                f"{w}", c,
                _f(x.get("med") and x["med"] / 1e9, ".3f", "failed"),
                (f"{x['min'] / 1e9:.3f}-{x['max'] / 1e9:.3f}" if "min" in x else ""),
                _f(x.get("x"), ".2f"), _f(x.get("x_other"), ".2f"),
                "" if c == "untraced" else _f(x.get("added"), ".1f"),
                "" if c == "untraced" else _f(x.get("added_min"), ".1f"),
                "" if c in ("untraced", "floor") else _f(x.get("vs_floor"), ".2f"),
                _f(calls, ",d"),
                f"{x['n']}" + (f" ({len(x['failures'])} failed)" if x["failures"] else ""),
            ])
    L.append(wl.markdown_table(
        ["workload", "tracer", "median s", "min-max s", "x untraced", f"x untraced ({other})",
         "added ns/event", "added ns/event, min runs", "/ floor", "calls seen", "runs"], rows, left=2))
    L.append("")
    L.append("'calls seen': complete calls in the tracer's output, or the calls counted "
             "in its aggregates (cProfile, yappi), from the post-processing rep: compare "
             "with the workload's Python + C calls above (fewer: calls not recorded, "
             "threads not traced, or events dropped).  'min runs': from the fastest run "
             "of each (the machine's noise only ever adds time).")
    L.append("")

    keepers = [c for c in C if CONFIGS[c][0].keeps]
    aggregators = [c for c in C if not CONFIGS[c][0].keeps and CONFIGS[c][0].convert_what]
    L.append("### Recording: memory, stop, to events, trace file")
    L.append("")
    rows = []
    for w in W:
        for c in keepers:
            x = s[(w, c)]
            p = x["post"]
            kept = x.get("kept")
            size = p.get(("write", "bytes"))
            rows.append([
                w, c, _f(kept, ",d"),
                _f(x.get("rss") / 2**20 if "rss" in x else None, ".1f"),
                _f(x["rss"] / kept if kept and "rss" in x else None, ".1f"),
                _cut(p, "stop") or _f(p.get(("stop", "s")), ".3f"),
                _cut(p, "convert") or _f(p.get(("convert", "s")), ".3f"),
                _cut(p, "write") or ("streamed" if size is not None and p.get(("write", "s")) is None
                                     else _f(p.get(("write", "s")), ".3f")),
                _f(size / 2**20 if size is not None else None, ".1f"),
                _f(size / kept if size is not None and kept else None, ".1f"),
                _f(p.get(("peak", "peak_rss_delta")) / 2**20
                   if p.get(("peak", "peak_rss_delta")) is not None else None, ",.0f"),
                _f(p.get(("stop", "dropped")), ",d"),
            ])
    L.append(wl.markdown_table(
        ["workload", "tracer", "calls kept", "RSS delta MiB", "bytes/call (RSS)", "stop s",
         "to events s", "write s", "file MiB", "file bytes/call", "peak RSS delta MiB",
         "dropped"], rows, left=2))
    L.append("")
    L.append("What each column measured:")
    L.append("")
    for c in keepers:
        cls = CONFIGS[c][0]
        L.append(f"- {c}: stop = `{cls.stop_what}`; to events = "
                 + (f"`{cls.convert_what}`" if cls.convert_what else "nothing (no in-memory events)")
                 + "; write = " + (f"`{cls.write_what}`" if cls.write_what else
                                   ("written while tracing" if hasattr(cls, "output") else "no trace file"))
                 + f"; calls: {cls.kept_what}.")
    L.append("")
    for c in aggregators:
        cls = CONFIGS[c][0]
        secs = [s[(w, c)]["post"].get(("convert", "s")) for w in W]
        secs = [x for x in secs if x is not None]
        rss = [s[(w, c)].get("rss") for w in W if s[(w, c)].get("rss") is not None]
        if secs:
            L.append(f"- {c} keeps per-function aggregates, no events: "
                     f"`{cls.convert_what.split(' (')[0]}` took at most {max(secs):.3f} s, "
                     f"its RSS grew by at most {max(rss or [0]) / 2**20:.1f} MiB.")
    L.append("")
    L.append("RSS delta: resident memory at the end of the workload (tracer still on) less "
             "before start(); bytes/call divides it by the calls kept.  Peak RSS delta: "
             "the child's peak through stop, to events and write, less the same baseline.")
    notes = []
    for w in W:
        chk = raw["counts"][w].get("check")
        if chk and (chk["setprofile"] != chk["frametrace"] or chk["dropped"]):
            notes.append(f"{w}({chk['arg']}): sys.setprofile counted {chk['setprofile']:,} "
                         f"events, frametrace {chk['frametrace']:,} (dropped {chk['dropped']})")
        for c in C:
            x = s[(w, c)]
            for f in sorted(set(x["failures"])):
                phases = [p for p in ("stop", "convert", "write") if (p, "cut") in x["post"]]
                label = {"stop": "stop", "convert": "to events", "write": "write"}
                notes.append(f"{w}/{c}: {f}" + (f", in {label[phases[0]]}" if phases else ""))
            if x.get("partial"):
                seen = x["kept"] if x.get("kept") is not None else x["calls"]
                calls = x["expected_calls"]
                notes.append(f"{w}/{c}: {seen:,} of the workload's {calls:,} "
                             + ("" if CONFIGS[c][0].records_c else "Python ")
                             + f"calls seen ({seen / calls:.1%})")
            dropped = x["post"].get(("stop", "dropped"))
            if dropped:
                notes.append(f"{w}/{c}: {dropped:,} events dropped")
    if notes:
        L.append("")
        L.append("Notes:")
        L.append("")
        L.extend(f"- {n}" for n in notes)
    return "\n".join(L) + "\n", s


def chart(raw, s, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: chart skipped")
        return None
    W, C = raw["workloads"], raw["configs"][1:]
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    width = 0.8 / max(1, len(C))
    palette = plt.get_cmap("tab10").colors
    for i, c in enumerate(C):
        xs = [j + (i - (len(C) - 1) / 2) * width for j in range(len(W))]
        color = palette[list(CONFIGS).index(c) % len(palette)]  # the same in every chart
        axes[0].bar(xs, [s[(w, c)].get("x") or 0 for w in W], width, label=c, color=color)
        axes[1].bar(xs, [max(s[(w, c)].get("added") or 0, 0.1) for w in W], width, label=c,
                    color=color)
    for ax, title in ((axes[0], f"slowdown (x untraced, {CLOCKS[raw['clock']]})"),
                      (axes[1], "added ns per profile event")):
        ax.set_yscale("log")
        ax.set_xticks(range(len(W)))
        ax.set_xticklabels(W)
        ax.set_title(title)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].axhline(1, color="black", linewidth=0.8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(C), fontsize=9, frameon=False)
    fig.suptitle(f"CPython {raw['python']}: median of {raw['reps']} runs"
                 + (" (--quick)" if raw["quick"] else ""))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return
    if args.report:
        with open(args.report) as fh:
            raw = json.load(fh)
        raw.setdefault("clock_run", raw["clock"])
        raw["clock"] = args.clock
    else:
        raw = drive(args)
    text, summary = report(raw)
    sys.stdout.write(text)
    sys.stdout.flush()
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "compare-" + ".".join(raw["python"].split(".")[:2])
                        + ("" if raw["clock"] == "cpu" else "-" + raw["clock"]))
    with open(stem + ".md", "w") as fh:
        fh.write(text)
    written = [stem + ".md"]
    if not args.report:
        with open(stem + ".json", "w") as fh:
            json.dump(raw, fh, indent=1)
        written.append(stem + ".json")
    if not args.no_chart and chart(raw, summary, stem + ".png"):
        written.append(stem + ".png")
    log("wrote " + ", ".join(written))


if __name__ == "__main__":
    main()
