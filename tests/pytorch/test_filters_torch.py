"""ignore=frametrace.filters.TORCH_PLUMBING on a real torch training step
(an nn.Sequential MLP, MSE loss, SGD): none of nn.Module's plumbing is
recorded, the model's forward() methods, backward and the optimizer's step
are, re-parented to the nearest recorded caller, and the step records far
fewer events."""
import collections
import sys

import pytest

from support import torch_installed

if not torch_installed():  # not importorskip: see torch_installed()
    pytest.skip("torch is not installed in this environment (pip install torch==2.13.0: "
                "the CPU wheel)", allow_module_level=True)

import torch  # noqa: E402

import frametrace  # noqa: E402
from frametrace.filters import TORCH_PLUMBING  # noqa: E402
from frametrace.testing import assert_valid_trace  # noqa: E402

pytestmark = pytest.mark.usefixtures("clock")

# What the plumbing is recorded as (names as frametrace shows them).
PLUMBING_NAMES = {
    "Module._wrapped_call_impl", "Module._call_impl", "Module.__getattr__",
    "Module.__setattr__", "is_scripting", "annotate", "is_tensor_like",
    "record_function.__init__", "record_function.__enter__", "record_function.__exit__",
    "Optimizer.profile_hook_step.<locals>.wrapper",
    "_use_grad_for_differentiable.<locals>._use_grad",
    "_disable_dynamo.<locals>.inner", "DisableContext.__call__.<locals>._fn",
    "torch._C._has_torch_function", "torch._C._has_torch_function_unary",
    "torch._C._has_torch_function_variadic", "torch._C._dynamo.eval_frame.set_eval_frame",
    "OpOverloadPacket.__call__", "set_grad_enabled.__init__", "torch._C._set_grad_enabled",
    "torch._C.is_grad_enabled", "VFModule.__getattr__", "torch._C._get_tracing_state",
    "DisableTorchFunctionSubclass.__exit__", "torch._C._are_functorch_transforms_active",
    "torch._C._get_privateuse1_backend_name", "torch._C._stash_obj_in_tls",
    "torch._C._remove_obj_from_tls", "torch.ops.profiler._record_function_enter_new",
    "torch.ops.profiler._record_function_exit._RecordFunction",
}


def make_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 4)

    def train_step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):  # warm: lazy imports and first-call paths out of the way
        train_step()
    return train_step


def traced_step(step, **filters):
    with frametrace.Tracer(**filters) as tracer:
        step()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    return events


def is_plumbing(name):
    return name in PLUMBING_NAMES


def test_torch_plumbing_ignored():
    step = make_step()
    full = traced_step(step)
    kept = traced_step(step, ignore=TORCH_PLUMBING)
    full_names = collections.Counter(ev.name for ev in full if not ev.open_at_start)
    kept_names = collections.Counter(ev.name for ev in kept if not ev.open_at_start)
    # The plumbing is there without the filter, and gone with it.
    assert {n for n in full_names if is_plumbing(n)} >= {
        "Module._wrapped_call_impl", "Module._call_impl", "Module.__getattr__",
        "is_scripting", "torch.ops.profiler._record_function_exit._RecordFunction"}
    assert not [n for n in kept_names if is_plumbing(n)]
    # What the user's step does stays, as often as without the filter.
    for name in ("Linear.forward", "ReLU.forward", "Sequential.forward", "mse_loss",
                 "Tensor.backward", "SGD.step", "Optimizer.zero_grad", "torch._C._nn.linear",
                 "_EngineBase.run_backward"):
        assert kept_names[name] == full_names[name] > 0, name
    assert kept_names["Linear.forward"] == 3
    # Re-parented: each layer's forward() right under Sequential.forward,
    # the optimizer's step right under the training step.
    for ev in kept:
        if ev.name in ("Linear.forward", "ReLU.forward"):
            assert kept[ev.parent].name == "Sequential.forward"
        if ev.name == "SGD.step":
            assert kept[ev.parent].name == "make_step.<locals>.train_step"
    assert sum(kept[ev.parent].name == "Sequential.forward" for ev in kept) == 5 + 1
    cut = 1 - len(kept) / len(full)
    print(f"\nTORCH_PLUMBING: {len(full)} -> {len(kept)} events per step ({cut:.1%} fewer), "
          f"Python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"backend {frametrace.Tracer().backend}")
    assert cut > 0.3
