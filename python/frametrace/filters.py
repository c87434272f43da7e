"""Filters: which functions a tracer leaves out (``ignore=``, ``include=``).

``Tracer``, ``trace``, ``profile``, ``attach`` and ``frametrace run``
(``--ignore``, ``--include``, repeatable) take sequences of patterns::

    frametrace.profile(ignore=frametrace.filters.TORCH_PLUMBING)
    frametrace.trace(include=["mypkg"], ignore=["mypkg.utils.log"])

A pattern is a dotted name (a module, class or function and everything
under it) or a glob over ``module.qualname``.  How functions are named,
what each kind of pattern matches, the errors and the costs:
:doc:`/tracing`.
"""
from __future__ import annotations

__all__ = ["TORCH_PLUMBING"]

# What an nn.Module training step runs that is torch's machinery, not the
# model's or the loop's code: picked from what a torch 2.13 step of an
# nn.Sequential MLP with SGD records (tests/pytorch/test_filters_torch.py).
# The model's forward() methods, torch.nn.functional, the loss, backward()
# and the optimizer's step() stay; so do the C calls the ignored functions
# make (the ops), under the nearest recorded caller.
TORCH_PLUMBING: tuple[str, ...] = (
    # nn.Module's call path (hooks are dispatched inside _call_impl) and
    # its attribute access
    "torch.nn.modules.module.Module._wrapped_call_impl",
    "torch.nn.modules.module.Module._call_impl",
    "torch.nn.modules.module.Module.__getattr__",
    "torch.nn.modules.module.Module.__setattr__",
    "torch.nn.modules.module.Module.__delattr__",
    "torch.utils.hooks",
    # scripting and tracing checks
    "torch._jit_internal.is_scripting",
    "torch.jit.annotate",
    "torch.jit._trace.is_tracing",
    "torch._C._get_tracing_state",
    # __torch_function__ dispatch checks
    "torch._C._has_torch_function",
    "torch._C._has_torch_function_unary",
    "torch._C._has_torch_function_variadic",
    "torch.overrides.is_tensor_like",
    "torch._VF.VFModule.__getattr__",
    "torch._C.DisableTorchFunctionSubclass",
    "torch._C._are_functorch_transforms_active",
    "torch._C._get_privateuse1_backend_name",
    # backward()'s bookkeeping around the engine call
    "torch._C._stash_obj_in_tls",
    "torch._C._remove_obj_from_tls",
    # the optimizer's step wrappers and the profiler annotation they open
    "torch.optim.optimizer.Optimizer.profile_hook_step.<locals>.wrapper",
    "torch.optim.optimizer._use_grad_for_differentiable.<locals>._use_grad",
    "torch.optim.optimizer._get_value",
    "torch.optim.optimizer._to_scalar",
    "torch.autograd.profiler.record_function",
    "torch.autograd.profiler._maybe_cupti_monitor",
    "torch.profiler._cupti_monitor",
    "torch._ops",
    "torch.ops.profiler",  # record_function's enter and exit, operators called as torch.ops
    # torch.compile's guards around eager code
    "torch._compile._disable_dynamo.<locals>.inner",
    "torch._dynamo.eval_frame.DisableContext.__call__.<locals>._fn",
    "torch._dynamo.eval_frame._callback_from_stance",
    "torch._dynamo.decorators.graph_break",
    "torch._C._dynamo.eval_frame.set_eval_frame",
    "torch.compiler.is_compiling",
    "torch.compiler.is_exporting",
    "torch._utils.is_compiling",
    # grad-mode context managers
    "torch.autograd.grad_mode",
    "torch._C._set_grad_enabled",
    "torch._C.is_grad_enabled",
)
