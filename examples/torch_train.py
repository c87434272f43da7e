"""A small torch training loop profiled with frametrace.torch: Python from
frametrace, torch's ops from torch.profiler, on one timeline, in one file.

    pip install torch==2.13.0     # the CPU build (see the README)
    python examples/torch_train.py [--steps N] [--python-steps K] [--out DIR]

One window (wait=1, warmup=1, active=3): Python is traced in its first K
active steps (default: all), torch's ops in all of them; each nn.Module
call of the model is a range named by its path ("encoder.0").  The trace
is written as DIR/torch_train.json (Chrome JSON) and .pftrace; open either
with `frametrace view DIR/torch_train.pftrace`.
"""
import argparse
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

import frametrace
import frametrace.torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                           torch.nn.Linear(128, 128), torch.nn.ReLU())
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--python-steps", type=int, default=None)
    ap.add_argument("--out", default="traces")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(args.steps * 32, 64), torch.randint(0, 10, (args.steps * 32,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)

    def write(trace):
        # On frametrace's writer thread, while the loop goes on.
        base = os.path.join(args.out, "torch_train")
        trace.save(base + ".json")
        trace.save(base + ".pftrace")
        ops = sum(len(v) for v in trace.slices.values())
        print(f"window {trace.cycle}: {len(trace.events)} Python/C events, {ops} torch ops "
              f"on their threads' tracks, {len(trace.ranges)} module ranges; clock join within "
              f"{trace.clock_anchor['width_ns']} ns -> {base}.json, {base}.pftrace")

    sched = frametrace.schedule(wait=1, warmup=1, active=3, repeat=1)
    with frametrace.torch.profile(schedule=sched, python_steps=args.python_steps,
                                  module_names=model, on_trace_ready=write) as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    print(f"trained {args.steps} steps, last loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
