"""A small pure-Python training loop, profiled over a schedule.

    python examples/train_loop.py [--steps N] [--python-steps K] [--out DIR]

Two windows of three active steps are recorded (wait=1, warmup=1, active=3,
repeat=2).  In each, Python is traced only in the first K active steps: the
tracer stops inside the loop while the window goes on recording steps and
ranges, and every frame still running then (the loop, its callers) ends
exactly at that stop.  Prints a summary of each trace and writes it to DIR.
"""
import argparse
import math
import random
import threading
from collections import Counter

import frametrace


class Linear:
    def __init__(self, n_in, n_out, rng):
        self.w = [[rng.gauss(0, 0.1) for _ in range(n_in)] for _ in range(n_out)]
        self.b = [0.0] * n_out

    def forward(self, x):
        return [sum(wi * xi for wi, xi in zip(row, x)) + b for row, b in zip(self.w, self.b)]

    def update(self, x, grad, lr):
        for row, g in zip(self.w, grad):
            for i, xi in enumerate(x):
                row[i] -= lr * g * xi
        self.b = [b - lr * g for b, g in zip(self.b, grad)]


def loss_and_grad(pred, target):
    diff = [p - t for p, t in zip(pred, target)]
    return sum(d * d for d in diff) / len(diff), [2 * d / len(diff) for d in diff]


def batches(data, size):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def train_step(model, batch, lr):
    total = 0.0
    for x, y in batch:
        pred = model.forward(x)
        loss, grad = loss_and_grad(pred, y)
        model.update(x, grad, lr)
        total += loss
    return total / len(batch)


def make_data(rng, n):
    data = []
    for _ in range(n):
        x = [rng.uniform(-1, 1) for _ in range(4)]
        data.append((x, [math.sin(x[0]) + x[1], x[2] * x[3]]))
    return data


def train(prof, steps, rng):
    model = Linear(4, 2, rng)
    data = make_data(rng, 64)
    losses = []
    while len(losses) < steps:
        for batch in batches(data, 8):
            with frametrace.range("train_step"):
                losses.append(train_step(model, batch, 0.05))
            prof.step()  # the Python tracer stops here after python_steps
            if len(losses) == steps:
                break
    return losses


def prefetch(rng, n):
    """A data-loader-like thread, traced too."""
    return make_data(rng, n)


def summarize(trace):
    events = trace.events
    assert all(ev.end_ns <= trace.tracer_stop_ns for ev in events), "an event ends after the stop"
    traced_steps = sum(1 for ev in events if ev.name == "train_step")
    capped = [ev.name for ev in events if ev.open_at_stop]
    busiest = Counter(ev.name for ev in events).most_common(4)
    threads = len({ev.thread_serial for ev in events})
    print(f"trace {trace.cycle}: steps {trace.steps[0].step}-{trace.steps[-1].step}, "
          f"{len(events)} Python/C events on {threads} thread{'s' if threads != 1 else ''}, "
          f"{trace.stats.dropped} dropped")
    print(f"  Python traced for {(trace.tracer_stop_ns - trace.tracer_start_ns) / 1e6:.2f} ms "
          f"of a {(trace.session_end_ns - trace.session_start_ns) / 1e6:.2f} ms window: "
          f"train_step traced {traced_steps}x, {len(trace.ranges)} ranges recorded")
    print(f"  frames open at the tracer's stop, capped there: {', '.join(capped[-3:])}")
    print("  most called: " + ", ".join(f"{name} x{n}" for name, n in busiest))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--python-steps", type=int, default=2,
                        help="active steps of each window in which Python is traced")
    parser.add_argument("--out", default="traces", help="directory for the trace files")
    args = parser.parse_args(argv)

    written = []
    save = frametrace.trace_handler(args.out)

    def on_trace_ready(trace):
        summarize(trace)
        written.append(save(trace))

    sched = frametrace.schedule(wait=1, warmup=1, active=3, repeat=2)
    rng = random.Random(0)
    with frametrace.profile(schedule=sched, python_steps=args.python_steps,
                            on_trace_ready=on_trace_ready) as prof:
        loader = threading.Thread(target=prefetch, args=(random.Random(1), 4000), name="loader")
        loader.start()
        losses = train(prof, args.steps, rng)
        loader.join()
    print(f"trained {len(losses)} steps, final loss {losses[-1]:.4f}")
    print("traces written: " + ", ".join(written))


if __name__ == "__main__":
    main()
