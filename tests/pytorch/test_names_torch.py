"""torch's C functions are named as torch users know them: pybind11 bindings by module and name (torch._C._get_tracing_state, not
pybind11_detail_function_record_..._get_tracing_state), torch.relu (a
static method of _VariableFunctionsClass whose __module__ torch sets), no
empty name, no memory address in any name, on a real training step."""
import re

import pytest

import frametrace
from frametrace.testing import assert_valid_trace

from support import torch_installed

if not torch_installed():  # not importorskip: see torch_installed()
    pytest.skip("torch is not installed in this environment", allow_module_level=True)

import torch  # noqa: E402


def training_step_names():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16)

    def train():
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

    train()  # warm up: lazy imports and first-call paths
    with frametrace.trace() as tracer:
        train()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    return {ev.name for ev in events}, {ev.name for ev in events if ev.filename == "<built-in>"}


def test_torch_names():
    names, c_names = training_step_names()
    assert "" not in names
    assert not [n for n in names if "pybind11" in n]
    assert not [n for n in names if re.search(r"0x[0-9a-fA-F]{6,}", n)]
    assert not [n for n in c_names if n.startswith("_VariableFunctionsClass.")]
    assert {"torch.relu", "torch._C._nn.linear", "torch._C._get_tracing_state"} <= c_names
    # The optimizer's step ends its record_function through an operator overload.
    assert not [n for n in names if "<unnamed>" in n]
    assert "torch.ops.profiler._record_function_exit._RecordFunction" in c_names


def test_operator_overloads_are_named_as_called():
    """torch.ops.aten.add.Tensor(...) calls a pybind11 function with no
    name; it is named as the overload is called, each overload apart, and
    a packet's call by its own name."""
    x = torch.ones(2)
    torch.ops.aten.add.Tensor(x, x)  # first-call paths
    with frametrace.trace() as tracer:
        torch.ops.aten.add.Tensor(x, x)
        torch.ops.aten.mul.Tensor(x, x)
        torch.ops.aten.add.Scalar(x, 2)
        torch.ops.aten.add(x, x)
    c_names = [ev.name for ev in tracer.getEvents() if ev.filename == "<built-in>"]
    assert [n for n in c_names if n.startswith("torch.ops.")] == [
        "torch.ops.aten.add.Tensor", "torch.ops.aten.mul.Tensor", "torch.ops.aten.add.Scalar",
        "torch.ops.aten.add"]
