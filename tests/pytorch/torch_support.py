"""torch for the tests of tests/pytorch, or the module skipped (failed under
FRAMETRACE_TORCH_REQUIRED=1) with the reason; and a small real training
loop (an MLP, a DataLoader, an optimizer) the tests share."""
import os
import sys

import pytest


def _unavailable():
    hint = "pip install torch==2.13.0 (the CPU build, for CPython 3.11 here)"
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any failure to import is the reason
        return f"torch does not import here ({exc!r}): {hint}"
    if getattr(torch, "__file__", None) is None:
        # A directory named torch on sys.path, not torch (a namespace
        # package: why this layer is tests/pytorch).
        sys.modules.pop("torch", None)
        return f"torch is not installed in this environment: {hint}"
    return None


WHY = _unavailable()
if WHY:
    if os.environ.get("FRAMETRACE_TORCH_REQUIRED"):
        pytest.fail(f"torch tests required (FRAMETRACE_TORCH_REQUIRED) but {WHY}", pytrace=False)
    pytest.skip(WHY, allow_module_level=True)

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                           torch.nn.Linear(64, 64), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def training(steps, batch=16, seed=0):
    """(model, optimizer, loader) of a small classification job of `steps`
    batches."""
    torch.manual_seed(seed)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(steps * batch, 32), torch.randint(0, 4, (steps * batch,)))
    return model, opt, DataLoader(data, batch_size=batch)


def train(prof, model, opt, loader):
    """The loop: one prof.step() per batch (none with prof None); the losses."""
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if prof is not None:
            prof.step()
    return losses
