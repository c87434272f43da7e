"""Reports on a big trace: events/s and peak RSS of load, summary,
flamegraph, to_pstats, to_collapsed and merge.

    python benchmarks/reports.py [--events N] [--dir DIR] [--only a,b]
                                 [--kind synthetic|loop]

Writes (once; kept in DIR) a synthetic Chrome trace of N events laid out as
frametrace's C writer lays them out (4 threads, call trees up to 40 deep
over 300 functions), then runs each report in its own child process and
reads the child's peak RSS (VmHWM) and CPU time (time.process_time(): on
a machine shared with other jobs, steadier than the wall-clock time).
"x events" is peak RSS over the size of the Python Events the report
reads (sys.getsizeof of one Event, times N); load and merge are timed
from the file, the others from the loaded trace (load time left out).
The reports' pass over the events is C only (its Python reference,
tests/report_oracle.py, is for the tests).
--kind loop: instead of the synthetic trees (about one distinct call path
per 1.4 events, the worst case of the reports that work per path), a
recorded trace of a training-like loop (a model's layers, forward and
backward, an optimizer; 4 threads), written by write_chrome.  A report, never a test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

REPORTS = ("load", "summary", "flamegraph", "to_pstats", "to_collapsed", "merge")


def generate(path: str, n: int, seed: int = 1) -> None:
    """n complete events, each thread's parents first, as write_chrome writes."""
    rnd = random.Random(seed)
    pid = 4242
    threads = [(pid + i, 139990000000000 + i * 4096) for i in range(4)]
    funcs = [(f"mod{i % 17}.func_{i}", f"/src/pkg/mod{i % 17}.py:{10 + i}") for i in range(300)]
    origin = 1_000_000_000
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"traceEvents":[{"ph":"M","name":"process_name","cat":"__metadata",'
                 f'"pid":{pid},"tid":0,"args":{{"name":"python synthetic.py"}}}},\n')
        for serial, (tid, ident) in enumerate(threads, 1):
            fh.write(f'{{"ph":"M","name":"thread_name","cat":"__metadata","pid":{pid},"tid":{tid},'
                     f'"args":{{"name":"T{serial}","thread_id":{ident},"native_thread_id":{tid},'
                     f'"thread_serial":{serial}}}}},\n')
        per = n // len(threads)
        t_end = 0
        written = 0
        for k, (tid, _ident) in enumerate(threads):
            count = per if k < len(threads) - 1 else n - written
            out: list[str] = []
            t = 0

            def tree(depth: int, budget: int, start: int) -> tuple[int, int]:
                """Writes a call and budget-1 descendants from start; (end, used)."""
                nonlocal out
                idx = out.__len__()
                out.append("")
                used = 1
                now = start + rnd.randrange(50, 500)
                while used < budget:
                    if depth >= 40:
                        break
                    kids = min(budget - used, rnd.randrange(1, 9) if depth < 6 else
                               rnd.choice((1, 1, 2, 3, 20)))
                    now, got = tree(depth + 1, kids, now)
                    used += got
                    now += rnd.randrange(10, 200)
                end = now + rnd.randrange(20, 300)
                name, where = funcs[rnd.randrange(len(funcs)) if depth else depth]
                cat = "c" if depth and rnd.random() < 0.3 else "python"
                if cat == "c":
                    where = "<built-in>:0"
                out[idx] = (f'{{"ph":"X","cat":"{cat}","pid":{pid},"tid":{tid},'
                            f'"ts":{start // 1000}.{start % 1000:03d},'
                            f'"dur":{(end - start) // 1000}.{(end - start) % 1000:03d},'
                            f'"name":"{name}","args":{{"file":"{where}"}}}},\n')
                return end, used

            left = count
            while left > 0:
                chunk = min(left, rnd.randrange(1000, 50000))
                t, used = tree(0, chunk, t + 1000)
                left -= used
                written += used
                fh.write("".join(out))
                out = []
            t_end = max(t_end, t)
        fh.seek(fh.tell() - 2)  # the last ",\n"
        other = {"frametrace": {
            "format": "frametrace", "version": 1, "origin_ns": origin, "start_ns": origin,
            "stop_ns": origin + t_end + 1000, "pid": pid, "dropped": 0, "dropped_records": 0,
            "dropped_by_thread": {str(t): 0 for t, _ in threads},
            "thread_ids": {str(t): i for t, i in threads},
            "thread_serials": {str(t): s for s, (t, _) in enumerate(threads, 1)},
            "native_thread_ids": {str(t): t for t, _ in threads},
            "clock_anchor": {"monotonic_ns": origin, "wall_ns": 1_700_000_000_000_000_000},
            "metadata": {"command": ["python", "synthetic.py"], "events": written}}}
        fh.write('],"displayTimeUnit":"ns","otherData":' + json.dumps(other, separators=(",", ":"))
                 + "}")


LOOP = r"""
import sys, threading
import frametrace
from frametrace.export import write_chrome


class Layer:
    def __init__(self, width):
        self.w = [0.5] * width

    def forward(self, x):
        return [self.activate(v * w) for v, w in zip(x, self.w)]

    def activate(self, v):
        return v if v > 0 else 0.01 * v

    def backward(self, g):
        return [self.grad(v) for v in g]

    def grad(self, v):
        return v * 0.5


class Model:
    def __init__(self, depth, width):
        self.layers = [Layer(width) for _ in range(depth)]

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return self.loss(x)

    def loss(self, x):
        return sum(x) / len(x)

    def backward(self, g):
        for layer in reversed(self.layers):
            g = layer.backward(g)
        return g


def optimizer_step(model):
    for layer in model.layers:
        update(layer)


def update(layer):
    layer.w = [w - 0.001 for w in layer.w]


def batches(n, width):
    for i in range(n):
        yield [float((i + j) % 7) for j in range(width)]


def train(model, steps, width):
    for x in batches(steps, width):
        model.forward(x)
        model.backward(x)
        optimizer_step(model)


path, events = sys.argv[1], int(sys.argv[2])
width, depth = 8, 6
with frametrace.Tracer() as one:  # the events of a step
    train(Model(depth, width), 1, width)
steps = events // 4 // len(one.getEvents())
with frametrace.Tracer(buffer_size=1 << 26, c_calls=True) as tracer:
    threads = [threading.Thread(target=train, args=(Model(depth, width), steps, width))
               for _ in range(3)]
    for t in threads:
        t.start()
    train(Model(depth, width), steps, width)
    for t in threads:
        t.join()
print(write_chrome(tracer, path))
"""

CHILD = r"""
import os, sys, time, frametrace
from frametrace import loader, reports
what, path, out, report_pass = sys.argv[1:5]
def hwm():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
base = hwm()
if what == "merge":
    merge = getattr(frametrace, "merge", None) or loader.merge
    if not callable(merge):
        merge = merge.merge
    t0, c0 = time.perf_counter(), time.process_time()
    merge([path], out)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = None
else:
    t0, c0 = time.perf_counter(), time.process_time()
    trace = loader.load(path)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(trace.events)
    if what != "load":
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM: the report's own peak from here
        base = hwm()
        t0, c0 = time.perf_counter(), time.process_time()
        if what == "summary":
            str(trace.summary())
        elif what == "flamegraph":
            reports.write_flamegraph_svg(trace, out)
        elif what == "to_pstats":
            trace.to_pstats(out)
        elif what == "to_collapsed":
            trace.to_collapsed(out)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
print(repr((dt, hwm(), base, n, cpu)))
"""


def event_size() -> int:
    """Bytes of one Event (with a shared name and location)."""
    out = subprocess.run([sys.executable, "-c",
                          "import sys, frametrace._tracer as t;"
                          "e=t.Event(('f','x.py',1,'py',1,2,3,4,0,-1,False,False,1,False));"
                          "print(sys.getsizeof(e))"], capture_output=True, text=True, check=True)
    return int(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=15_000_000)
    ap.add_argument("--dir", default="/tmp/frametrace-reports-bench")
    ap.add_argument("--only", default=",".join(REPORTS))
    ap.add_argument("--passes", default="c", choices=("c",), help="the reports' pass: C only")
    ap.add_argument("--kind", default="synthetic", choices=("synthetic", "loop"))
    ns = ap.parse_args()
    os.makedirs(ns.dir, exist_ok=True)
    stem = "trace" if ns.kind == "synthetic" else "loop"
    path = os.path.join(ns.dir, f"{stem}-{ns.events}.json")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        if ns.kind == "synthetic":
            generate(path + ".tmp", ns.events)
        else:
            out = subprocess.run([sys.executable, "-c", LOOP, path + ".tmp", str(ns.events)],
                                 capture_output=True, text=True, check=True)
            ns.events = int(out.stdout.split()[-1])  # what was recorded
        os.replace(path + ".tmp", path)
        print(f"generated {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if ns.kind == "loop":
        # What was recorded (about --events), kept beside the file.
        if os.path.exists(path + ".events"):
            with open(path + ".events") as fh:
                ns.events = int(fh.read())
        else:
            with open(path + ".events", "w") as fh:
                fh.write(str(ns.events))
    size = os.path.getsize(path)
    per_event = event_size()
    ev_bytes = per_event * ns.events
    print(f"{ns.events:,} events, file {size / 2**20:.0f} MiB, Events {ev_bytes / 2**20:.0f} MiB "
          f"({per_event} B each); Python {sys.version.split()[0]}")
    print("| report | pass | seconds | events/s | CPU s | events/CPU s | peak RSS MiB | peak / Events |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for what in ns.only.split(","):
        for report_pass in ns.passes.split(","):
            if what in ("load", "merge") and report_pass != ns.passes.split(",")[0]:
                continue  # no report pass in them
            out = os.path.join(ns.dir, "out-" + what)
            res = subprocess.run([sys.executable, "-c", CHILD, what, path, out, report_pass],
                                 capture_output=True, text=True)
            if res.returncode:
                print(f"| {what} | {report_pass} | failed: "
                      f"{res.stderr.strip().splitlines()[-1:]} | | | | | |")
                continue
            dt, peak, _base, _n, cpu = eval(res.stdout.strip().splitlines()[-1])
            print(f"| {what} | {report_pass} | {dt:.1f} | {ns.events / dt / 1e6:.2f}M | {cpu:.1f} | "
                  f"{ns.events / cpu / 1e6:.2f}M | {peak / 2**20:.0f} | {peak / ev_bytes:.2f}x |",
                  flush=True)
            if os.path.exists(out):
                os.remove(out)


if __name__ == "__main__":
    main()
