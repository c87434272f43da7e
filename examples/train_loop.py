"""A small pure-Python training loop, traced for its first steps only.

    python examples/train_loop.py [--steps N] [--trace-steps K] [--out FILE]

The tracer stops inside the loop after K steps while training goes on: every
frame still running then (the loop, its callers) ends exactly at the stop.
Prints a summary of what was recorded and writes the events as JSON lines.
"""
import argparse
import json
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


def train(tracer, steps, trace_steps, rng):
    model = Linear(4, 2, rng)
    data = make_data(rng, 64)
    losses = []
    step = 0
    while step < steps:
        for batch in batches(data, 8):
            losses.append(train_step(model, batch, 0.05))
            step += 1
            if step == trace_steps:
                tracer.stop()  # Python tracing ends; training goes on
            if step == steps:
                break
    return losses


def prefetch(rng, n):
    """A data-loader-like thread, traced too."""
    return make_data(rng, n)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--trace-steps", type=int, default=3)
    parser.add_argument("--out", default="train_loop_events.jsonl")
    args = parser.parse_args(argv)

    rng = random.Random(0)
    with frametrace.trace() as tracer:
        loader = threading.Thread(target=prefetch, args=(random.Random(1), 16), name="loader")
        loader.start()
        losses = train(tracer, args.steps, args.trace_steps, rng)
        loader.join()
    events = tracer.getEvents()

    stop = tracer.stop_ns
    assert all(ev.end_ns <= stop for ev in events), "an event ends after the stop"
    steps = sum(1 for ev in events if ev.name == "train_step")
    threads = Counter(ev.thread_id for ev in events)
    capped = [ev.name for ev in events if ev.open_at_stop]
    print(f"trained {len(losses)} steps, final loss {losses[-1]:.4f}")
    print(f"traced {tracer.stop_ns - tracer.start_ns} ns: {len(events)} events, "
          f"{len(threads)} threads, {tracer.dropped} dropped")
    print(f"train_step traced {steps} times (tracer stopped after step {args.trace_steps})")
    print(f"frames open at stop, capped at stop_ns: {', '.join(capped[-4:])}")
    busiest = Counter(ev.name for ev in events).most_common(5)
    print("most called: " + ", ".join(f"{name} x{n}" for name, n in busiest))
    with open(args.out, "w") as fh:
        for ev in events:
            fh.write(json.dumps(dict(zip(frametrace.Event.__match_args__, ev))) + "\n")
    print(f"events written to {args.out}")


if __name__ == "__main__":
    main()
