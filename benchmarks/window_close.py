"""The pause a training loop sees when a session's active window closes, and
a session's memory over many cycles.  A report, never a test.

    python benchmarks/window_close.py pause [--events N] [--rounds R]
                                            [--handler chrome|perfetto|save|none]
    python benchmarks/window_close.py memory [--cycles N] [--cli]
    python benchmarks/window_close.py torch [--reps R] [--active N]

pause: each round is a window of one active step that records about N
events (a recursive function, --events, default 1M); the figure is how long
the prof.step() that closes the window takes, the time the training thread
is held before its next step starts; then how much longer the next step's
fixed work takes than alone (a write holding the GIL slows it); and, apart,
how long the handler took to finish after the close (the write).  Between rounds the loop waits for
the previous write, outside what is measured.

memory: a session with repeat=0 and one active step per cycle, each writing
its trace with to_chrome() over the previous one; RSS (/proc/self/statm)
and Python's own allocations (tracemalloc) after 10, 100, ... cycles.
--cli: the same under ``frametrace run --steps``, in a child process.

torch: a transformer encoder trained with AdamW (CPU, one intra-op thread),
one window (schedule(wait=8, warmup=1, active=N, repeat=1)), each writing
its file as its users do: frametrace.torch (``frametrace.trace_handler(dir)``, on its
writer thread), torch.profiler without stacks and with_stack=True
(``export_chrome_trace`` in on_trace_ready, inside step()), and the loop
untraced (the noise).  Each configuration in a child process of its own,
the order rotated each repetition.  A "normal" step is the median wall of
the wait steps (nothing recorded yet).  Figures, medians over the
repetitions: "added" is the wall from the closing step's step() call to the
end of the 5th step after it, less 5 normal steps (the closing step's own
traced work is the per-step overhead, not the close's); "close" that
step() call alone; "max after" the slowest of the 5 steps after the close
as a ratio to a normal step ("worst" that ratio's largest over the
repetitions); "blocked" the time the 5 steps after the
close spent blocked (wall less time on or waiting for a CPU, from
/proc/thread-self/schedstat: the GIL, for this loop) beyond normal steps,
which other processes on a busy machine do not inflate; "loop cpu" the
training thread's CPU time over the close call and the 5 steps after it
beyond normal steps (also not inflated by others' load); "write" the
handler's time.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
from typing import Any

import frametrace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import fib, fib_arg_for  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pause(args: argparse.Namespace) -> None:
    n = fib_arg_for(args.events)
    tmp = tempfile.mkdtemp(prefix="frametrace-close-")
    done = threading.Event()
    written: list = []

    def handler(trace):
        t0 = time.perf_counter()
        path = os.path.join(tmp, f"t{trace.cycle % 2}")
        if args.handler == "chrome":
            trace.to_chrome(path + ".json")
        elif args.handler == "perfetto":
            trace.to_perfetto(path + ".pftrace")
        elif args.handler == "save":
            trace.save(path + ".frametrace.json")
        written.append((trace.cycle, time.perf_counter() - t0))
        done.set()

    pauses = []
    nexts = []

    def next_step_work():
        t0 = time.perf_counter()
        for _ in range(100):  # ~30 ms, in many calls: the GIL can change hands
            fib(18)
        return time.perf_counter() - t0

    alone = statistics.median(next_step_work() for _ in range(5))
    sched = frametrace.schedule(wait=1, warmup=0, active=1, repeat=args.rounds)
    with frametrace.profile(schedule=sched, buffer_size=1 << 23,
                            on_trace_ready=None if args.handler == "none" else handler) as prof:
        for step in range(2 * args.rounds):
            if step % 2:  # the active step
                fib(n)
                t0 = time.perf_counter()
                prof.step()  # closes the window
                pauses.append(time.perf_counter() - t0)
            else:
                if step:
                    # The step after the close: how much longer than alone
                    # (a write holding the GIL slows it down).
                    nexts.append(next_step_work() - alone)
                if args.handler != "none" and step:
                    done.wait()  # the previous write: outside what is measured
                    done.clear()
                prof.step()
    trace = prof.last_trace
    count = len(trace.events)
    print(f"handler {args.handler}: {count:,} events a window (fib({n})), {args.rounds} rounds, "
          f"{trace.stats.dropped} dropped")
    ms = sorted(p * 1e3 for p in pauses)
    print(f"  pause at window close: median {statistics.median(ms):.2f} ms, "
          f"min {ms[0]:.2f}, max {ms[-1]:.2f}")
    if nexts:
        ns = sorted(x * 1e3 for x in nexts)
        print(f"  next step's fixed work (100 x fib(18), {alone * 1e3:.1f} ms alone): "
              f"{statistics.median(ns):+.1f} ms median, {ns[-1]:+.1f} ms max")
    if written:
        ws = sorted(w for _, w in written)
        print(f"  handler (the write): median {statistics.median(ws) * 1e3:.0f} ms")


MEMORY_PROGRAM = """
import os, sys, tracemalloc, gc
import frametrace

def fib(n):
    return n if n < 2 else fib(n - 1) + abs(fib(n - 2))

def rss_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

checkpoints = {CHECKPOINTS}
tracemalloc.start()
for step in range(max(checkpoints) + 1):
    fib(12)
    if step in checkpoints:
        gc.collect()
        print(f"{{step}} {{rss_mib():.1f}} {{tracemalloc.get_traced_memory()[0] / 2**20:.2f}}",
              file=sys.stderr, flush=True)
    frametrace.step()
"""


def memory(args: argparse.Namespace) -> None:
    checkpoints = [c for c in (10, 100, 1000, 10000) if c <= args.cycles]
    tmp = tempfile.mkdtemp(prefix="frametrace-cycles-")
    script = os.path.join(tmp, "loop.py")
    with open(script, "w") as fh:
        fh.write(textwrap.dedent(MEMORY_PROGRAM.format(CHECKPOINTS=checkpoints)))
    if args.cli:
        # run --steps writes one file per cycle: a small one (fib(12)).
        cmd = [sys.executable, "-m", "frametrace", "run", "-o", os.path.join(tmp, "t.json"),
               "--buffer-size", "65536", "--steps", "wait=0,warmup=0,active=1,repeat=0", script]
        what = "frametrace run --steps (repeat=0)"
    else:
        session = textwrap.dedent("""
            import frametrace, runpy, sys, os
            out = sys.argv[1]
            with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1),
                                    buffer_size=65536,
                                    on_trace_ready=lambda t: t.to_chrome(out)):
                runpy.run_path(sys.argv[2], run_name="__main__")
        """)
        cmd = [sys.executable, "-c", session, os.path.join(tmp, "t.json"), script]
        what = "profile(repeat=0), to_chrome handler"
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(f"{what}: cycles, RSS MiB, tracemalloc MiB")
    for line in proc.stderr.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            print(f"  {parts[0]:>6} {parts[1]:>8} {parts[2]:>8}")
    if proc.returncode:
        print(proc.stderr[-2000:])


TORCH_CONFIGS = ("untraced", "torch_ops", "torch_stack", "frametrace.torch")
AFTER = 5  # steps after the close that are measured
WAIT = 8


def sched_ns() -> tuple[int, int]:
    """This thread's time on a CPU and waiting for one (ns, from
    /proc/thread-self/schedstat): the rest of a step's wall is time it
    was blocked, on the GIL for a loop that never sleeps.  Unlike the
    wall, not inflated by other processes on a busy machine."""
    with open("/proc/thread-self/schedstat") as fh:
        ran, queued, _slices = fh.read().split()
    return int(ran), int(queued)


def torch_child(config: str, active: int, out_dir: str) -> dict:
    import torch

    import frametrace.torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    head = torch.nn.Linear(128, 10)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(16, 32, 128)
    y = torch.randint(0, 10, (16,))

    def train_step() -> None:
        loss = torch.nn.functional.cross_entropy(head(model(x).mean(dim=1)), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):  # untraced: the first steps allocate
        train_step()
    written: dict = {}

    def ft_handler(trace):
        t0 = time.perf_counter_ns()
        frametrace.trace_handler(out_dir)(trace)
        written["write_ms"] = (time.perf_counter_ns() - t0) / 1e6
        written["writer_cpu_ms"] = time.thread_time_ns() / 1e6  # the join's and the write's
        written["ops"] = sum(len(v) for v in trace.slices.values()) + sum(
            len(v) for _n, v in trace.slice_tracks)

    def torch_handler(prof):
        t0 = time.perf_counter_ns()
        prof.export_chrome_trace(os.path.join(out_dir, f"{config}.json"))
        written["write_ms"] = (time.perf_counter_ns() - t0) / 1e6

    sched = dict(wait=WAIT, warmup=1, active=active, repeat=1)
    if config == "untraced":
        cm: Any = contextlib.nullcontext(types.SimpleNamespace(step=lambda: None))
    elif config == "frametrace.torch":
        cm = frametrace.torch.profile(schedule=frametrace.schedule(**sched),
                                      on_trace_ready=ft_handler)
    else:
        from torch.profiler import ProfilerActivity, profile, schedule
        cm = profile(activities=[ProfilerActivity.CPU], schedule=schedule(**sched),
                     with_stack=config == "torch_stack", on_trace_ready=torch_handler)
    close = WAIT + active  # the step whose step() closes the window
    ends, calls, blocked, cpu, call_cpu = [], [], [], [], []
    with cm as prof:
        last = time.perf_counter_ns()
        ran, queued = sched_ns()
        for _ in range(close + AFTER + 3):
            train_step()
            before = time.perf_counter_ns()
            cpu_before = time.thread_time_ns()
            prof.step()
            now = time.perf_counter_ns()
            call_cpu.append(time.thread_time_ns() - cpu_before)
            ends.append(now - last)
            calls.append(now - before)
            ran_now, queued_now = sched_ns()
            blocked.append(now - last - (ran_now - ran) - (queued_now - queued))
            cpu.append(ran_now - ran)
            ran, queued = ran_now, queued_now
            last = now
    normal = statistics.median(ends[1:WAIT])
    after = ends[close + 1:close + 1 + AFTER]
    normal_blocked = statistics.median(blocked[1:WAIT])
    return {"config": config, "normal_ms": normal / 1e6, "close_ms": calls[close] / 1e6,
            "added_ms": (calls[close] + sum(after) - AFTER * normal) / 1e6,
            "blocked_ms": (sum(blocked[close + 1:close + 1 + AFTER])
                           - AFTER * normal_blocked) / 1e6,
            "cpu_ms": (call_cpu[close] + sum(cpu[close + 1:close + 1 + AFTER])
                       - AFTER * statistics.median(cpu[1:WAIT])) / 1e6,
            "max_ratio": max(after) / normal,
            "after_ms": [round(a / 1e6, 1) for a in after], **written}


def torch_report(args: argparse.Namespace) -> None:
    import json

    runs: dict = {c: [] for c in TORCH_CONFIGS}
    with tempfile.TemporaryDirectory(prefix="frametrace-close-torch-") as tmp:
        for rep in range(args.reps):
            order = TORCH_CONFIGS[rep % len(TORCH_CONFIGS):] + TORCH_CONFIGS[:rep % len(TORCH_CONFIGS)]
            for config in order:
                out = os.path.join(tmp, f"{config}-{rep}")
                os.mkdir(out)
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "torch",
                                       "--child", config, "--active", str(args.active), "--out", out],
                                      capture_output=True, text=True)
                if proc.returncode:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{config}: exit {proc.returncode}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                runs[config].append(result)
                if args.verbose:
                    print(f"  rep {rep} {config}: {result}", flush=True)
    print(f"transformer encoder (2 layers, d_model 128, batch 16 x 32) + AdamW, 1 thread; "
          f"{args.active} active steps; medians of {args.reps} runs; added = close call + "
          f"{AFTER} steps after it - {AFTER} normal steps")
    print(f"{'configuration':18} {'normal ms':>9} {'close ms':>9} {'added ms':>9} "
          f"{'max after':>9} {'worst':>6} {'blocked ms':>10} {'loop cpu':>9} {'write ms':>9}   added per run")
    for config in TORCH_CONFIGS:
        rs = runs[config]

        def med(key: str) -> float:
            vals = [r[key] for r in rs if key in r]
            return statistics.median(vals) if vals else float("nan")

        print(f"{config:18} {med('normal_ms'):9.1f} {med('close_ms'):9.1f} {med('added_ms'):+9.1f} "
              f"{med('max_ratio'):8.2f}x {max(r['max_ratio'] for r in rs):5.2f}x "
              f"{med('blocked_ms'):+10.1f} {med('cpu_ms'):+9.1f} "
              f"{med('write_ms'):9.1f}   "
              + " ".join(f"{r['added_ms']:+.0f}" for r in rs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("pause")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--handler", choices=("chrome", "perfetto", "save", "none"), default="chrome")
    m = sub.add_parser("memory")
    m.add_argument("--cycles", type=int, default=1000)
    m.add_argument("--cli", action="store_true")
    t = sub.add_parser("torch")
    t.add_argument("--reps", type=int, default=5)
    t.add_argument("--active", type=int, default=3)
    t.add_argument("--verbose", action="store_true")
    t.add_argument("--child", choices=TORCH_CONFIGS, help=argparse.SUPPRESS)
    t.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    gc.collect()
    if args.what == "torch":
        if args.child:
            import json

            print(json.dumps(torch_child(args.child, args.active, args.out)))
        else:
            torch_report(args)
        return
    (pause if args.what == "pause" else memory)(args)


if __name__ == "__main__":
    main()
