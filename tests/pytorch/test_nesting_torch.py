"""torch's aten ops nest inside the calls that ran them on a transformer
encoder trained with AdamW, whose optimizer runs thin C calls (Tensor.sqrt,
.item, .mul_) a few tens of ns around their op: measured as
benchmarks/torch_nesting.py measures it."""
import importlib.util
import os

from torch_support import torch  # noqa: F401  (skips the module without torch)

BENCH = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks",
                     "torch_nesting.py")


def load_benchmark():
    spec = importlib.util.spec_from_file_location("torch_nesting", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_aten_ops_nest_in_their_calls_on_a_transformer_with_adamw():
    bench = load_benchmark()
    trace = bench.run(steps=8)
    figures = bench.nesting(trace)
    assert figures["aten_ops"] > 10_000
    assert figures["nested_pct"] >= 99.0, (figures, trace.tracer.anchor_widths_ns)
