"""Filters: which functions a tracer leaves out (``ignore=``, ``include=``).

``Tracer``, ``trace``, ``profile``, ``attach`` and ``frametrace run``
(``--ignore``, ``--include``, repeatable) take sequences of patterns::

    frametrace.profile(ignore=frametrace.filters.TORCH_PLUMBING)
    frametrace.trace(include=["mypkg"], ignore=["mypkg.utils.log"])

A function is named ``module.qualname``: a Python function by the
``__name__`` of the module it runs in and its code's ``co_qualname``
(``mypkg.models.Net.forward``; on CPython 3.10, whose code objects have no
qualified name, by its bare name: ``mypkg.models.forward``); a C function
by its module or its class (``builtins.len``, ``builtins.list.append``,
``math.sqrt``, ``collections.OrderedDict.move_to_end``; an extension
function bound to neither, as pybind11's are, by its ``__module__`` and
name: ``torch._C._nn.linear``).

- A pattern without ``*``, ``?`` or ``[`` is a dotted name: it matches the
  name itself and every name it is a dotted prefix of.  ``torch.nn``
  matches all of ``torch.nn`` and its submodules, ``mypkg.Net`` matches
  the class's methods, ``mypkg.f`` matches ``f`` and the functions defined
  inside it (``mypkg.f.<locals>.g``), but ``torch.n`` matches nothing.
- Any other pattern is a glob over the whole name, with
  ``fnmatch.fnmatchcase`` semantics (``*`` crosses dots):
  ``*._call_impl``, ``torch.*.__getattr__``.

With ``include``, only the functions it matches are recorded (C functions
included: ``include=["mypkg"]`` records no ``len``); ``ignore`` removes
functions from what is recorded.  The calls an ignored function makes are
still recorded, under the nearest recorded caller; the trace's invariants
hold as without filters.  frametrace's own functions are never recorded.

Bad patterns raise when the tracer is made: a str in place of a sequence
(``ignore="torch"``) is a TypeError, as is any item that is not a str; an
empty pattern, a dotted name with an empty part (``"torch."``) or an empty
``include`` is a ValueError.

Cost.  Each function is matched once, in C, when the tracer first sees it
(the patterns are compiled when the tracer is made; no Python code runs
inside the hook for it); after that an ignored function costs a table
lookup per event on the setprofile backend.  On the sys.monitoring backend
(CPython 3.12+), the callbacks return ``sys.monitoring.DISABLE`` for the
PY_START, PY_RESUME, PY_RETURN and PY_YIELD events of code the filters
ignore, so CPython stops calling them at those places: the ignored code
then runs at nearly untraced speed.  Ignored C functions and the
PY_THROW/PY_UNWIND events of ignored code are skipped inside the callback
(CPython refuses DISABLE from those, and disabling a CALL event would hide
every callee at that call site).  ``benchmarks/filters.py`` measures both.

DISABLE outlives the tracer: it stays with sys.monitoring's profiler tool
id (2) until ``sys.monitoring.restart_events()``, which re-enables the
disabled events of every tool.  frametrace calls it when a monitoring
tracer starts with filters other than those under which DISABLE was last
returned (a tracer without filters after one with them included), and only
then: a session's windows with the same filters keep their savings.
Another profiler that takes tool id 2 after a filtered frametrace tracer
(cProfile on 3.12+) misses the events frametrace disabled until someone
calls ``sys.monitoring.restart_events()``.
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
