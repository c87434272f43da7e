"""frametrace.torch with torch.compile: module ranges with a compiled model
or function (its modules' hooks traced out by dynamo, the step unchanged), inductor's
kernels and torch's operator overloads named apart, and a lazy compile
inside a window that overflows the rings said so, naming buffer_size."""
import re
import warnings

import pytest

from torch_support import torch, train, training  # skips the module without torch

import frametrace
import frametrace.torch

STEPS = 3
# Rings a compile overflows even when inductor's caches on disk spare it
# most of its work.
BUFFER = 1 << 16


def loop(model, opt, loader, prof=None):
    """torch_support.train's loop; the losses and the parameters after them."""
    losses = train(prof, model, opt, loader)
    return losses, [p.detach().clone() for p in opt.param_groups[0]["params"]]


@pytest.fixture(scope="module")
def compiled_run():
    """The same compiled job (fullgraph: a graph break would raise) run
    unprofiled, then under frametrace.torch.profile(module_names=model),
    whose window holds the first call, so that dynamo traces frametrace's
    module hooks; every warning of the profiled run is kept."""
    torch._dynamo.reset()
    model, opt, loader = training(STEPS)
    expected = loop(torch.compile(model, fullgraph=True), opt, loader)
    torch._dynamo.reset()
    model, opt, loader = training(STEPS)
    compiled = torch.compile(model, fullgraph=True)
    traces = []
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        with frametrace.torch.profile(module_names=model, on_trace_ready=traces.append,
                                      buffer_size=BUFFER) as prof:
            got = loop(compiled, opt, loader, prof)
    return expected, got, traces, [(w.category, str(w.message)) for w in told]


def test_a_compiled_step_is_what_it_is_unprofiled(compiled_run):
    (losses, params), (got_losses, got_params), _, _ = compiled_run
    assert got_losses == losses
    assert all(torch.equal(a, b) for a, b in zip(params, got_params))


def test_the_compiled_model_is_one_range_a_step_its_modules_none_said_once(compiled_run):
    _, _, traces, told = compiled_run
    names = [r.name for t in traces for r in t.ranges]
    assert names == ["MLP (compiled)"] * STEPS
    ours = [m for c, m in told if "module_names" in m]
    assert ours == ["frametrace.torch: module_names: 'MLP' runs compiled (torch.compile): the "
                    "modules compiled code runs have no ranges (dynamo traces frametrace's "
                    "module hooks out, so that the compiled step is unchanged)"]
    # torch's own warning about global module hooks is frametrace's to answer, not the program's.
    assert not [m for c, m in told if "global hooks" in m]
    from torch.nn.modules import module as nn_module
    assert not nn_module._global_forward_pre_hooks and not nn_module._global_forward_hooks
    assert not [f for f in warnings.filters if "global hooks" in str(f[1])]


def test_inductor_kernels_are_named_by_their_graph(compiled_run):
    """Each CPU kernel is "kernel" of its own "<hash>.kernel" module: it is
    named by the compiled graph's module and the name the graph calls it
    by (cpp_fused_...), forward's and backward's apart."""
    _, _, traces, _ = compiled_run
    names = {e.name for e in traces[0].events if e.filename == "<built-in>"}
    kernels = {n for n in names if "cpp_fused_" in n}
    assert not [n for n in names if n.endswith(".kernel.kernel") or "<unnamed>" in n]
    assert all(re.fullmatch(r"torch\._inductor\.runtime\.compile_tasks\.\w+\.cpp_fused_\w+", n)
               for n in kernels), kernels
    assert any("backward" in n for n in kernels) and len(kernels) >= 3, kernels


def test_a_lazy_compile_that_overflows_the_rings_names_buffer_size(compiled_run):
    _, _, traces, told = compiled_run
    assert traces[0].stats.dropped > 0  # a compile records millions of calls
    lost = [m for c, m in told if c is RuntimeWarning and "were lost entirely" in m]
    assert len(lost) == 1 and lost[0].startswith(
        f"frametrace: {traces[0].stats.dropped:,} events of cycle 0, steps 0-{STEPS} "
        f"were lost entirely (the oldest, per thread: buffer_size is "
        f"{BUFFER:,} records, a call and a return are two); buffer_size="), lost


def test_hooks_added_after_the_compile_and_a_model_compiled_in_place():
    """A model compiled and run before the profile (its code has no hook to
    call), and one compiled in place with module.compile() (its call runs
    no hook at all): no exception, the same losses, said once at entry."""
    torch._dynamo.reset()
    model, opt, loader = training(STEPS)
    expected, _ = loop(torch.compile(model), opt, loader)
    for in_place in (False, True):
        torch._dynamo.reset()
        model, opt, loader = training(STEPS)
        if in_place:
            model.compile()
        run = model if in_place else torch.compile(model)
        run(next(iter(loader))[0])  # compiled before the profile
        with pytest.warns(RuntimeWarning, match="runs compiled") as told:
            with frametrace.torch.profile(module_names=model, python_steps=0) as prof:
                got, _ = loop(run, opt, loader, prof)
        assert got == expected
        assert len([w for w in told if "module_names" in str(w.message)]) == 1


def compiled_function_run(prof_options):
    """A torch.compile'd function (fullgraph) that calls the model, in the
    loop: (losses, [graph], traces, warnings), each graph as its ops and
    its inputs' names; unprofiled with prof_options None."""
    torch._dynamo.reset()
    model, opt, loader = training(STEPS)
    graphs = []

    def backend(gm, inputs):
        graphs.append(([(n.op, str(n.target)) for n in gm.graph.nodes if n.op != "placeholder"],
                       sorted(n.name for n in gm.graph.nodes if n.op == "placeholder")))
        return gm.forward

    def forward(x):
        return model(x)

    compiled = torch.compile(forward, backend=backend, fullgraph=True)
    traces = []
    if prof_options is None:
        return train(None, compiled, opt, loader), graphs, traces, []
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        with frametrace.torch.profile(module_names=model, on_trace_ready=traces.append,
                                      **prof_options) as prof:
            losses = train(prof, compiled, opt, loader)
    return losses, graphs, traces, [str(w.message) for w in told]


def test_a_compiled_function_is_what_it_is_unprofiled_its_modules_said_once():
    """The modules a compiled function calls: the same graph, no graph
    break (fullgraph), the same losses; no ranges, which is said once; the
    function's call is in the Python trace, under torch's compile
    wrapper."""
    losses, graphs, _, _ = compiled_function_run(None)
    # Rings that keep the whole compile (its first call's frame too).
    got, got_graphs, traces, told = compiled_function_run({"buffer_size": 1 << 21})
    assert got == losses and got_graphs == graphs and len(graphs) == 1
    assert traces[0].stats.dropped == 0 and [r.name for t in traces for r in t.ranges] == []
    ours = [m for m in told if "module_names" in m]
    assert ours == ["frametrace.torch: module_names: modules ran in code torch.compile "
                    "compiled (a compiled function): they have no ranges there (dynamo traces "
                    "frametrace's module hooks out, so that the compiled step is unchanged)"]
    events = traces[0].events
    calls = [e for e in events if e.name.endswith("compiled_function_run.<locals>.forward")]
    assert len(calls) == STEPS
    assert all(events[e.parent].name.endswith("compile_wrapper") for e in calls)
