"""Filters (ignore=, include=): exact call trees of known code with functions
left out, their calls re-parented to the nearest recorded caller, on the
backend of each setup (tracer/conftest.py); the sys.monitoring backend's
DISABLE and restart_events() across tracers; bad patterns."""
import sys
import threading
import types

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import QUALNAMES, find, only, qual, subtree, traced
from targets import calls

PY = "py"
C = "c"
MOD = calls.__name__  # "targets.calls"
HERE = __name__
needs_monitoring = pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
needs_qualnames = pytest.mark.skipif(not QUALNAMES, reason="3.10's code objects have no "
                                     "qualified name: a method is named by its bare name")

NUMBERS = (qual("numbers"), PY, [])


@pytest.fixture(autouse=True)
def _events_restarted():
    """What a filtered monitoring tracer disabled stays disabled for the
    profiler tool id: later tests (cProfile's among them) get it back."""
    yield
    if sys.version_info >= (3, 12):
        sys.monitoring.restart_events()


def program_tree(**filters):
    _, events = traced(calls.program, **filters)
    return subtree(events, only(events, "program"))


def test_ignore_function_reparents_its_calls():
    assert program_tree(ignore=[f"{MOD}.branch"]) == ("program", PY, [
        ("leaf", PY, []), ("leaf", PY, []),
        (qual("Point.__init__"), PY, []),
        (qual("Point.norm"), PY, [("math.sqrt", C, [])]),
        ("consume", PY, [("sum", C, [NUMBERS] * 4)]),
        ("len", C, []), ("list.append", C, []), ("dict.get", C, []),
    ])


@needs_qualnames
def test_ignore_class_matches_its_methods():
    assert program_tree(ignore=[f"{MOD}.Point", "builtins"]) == ("program", PY, [
        ("branch", PY, [("leaf", PY, []), ("leaf", PY, [])]),
        ("math.sqrt", C, []),
        ("consume", PY, [NUMBERS] * 4),
    ])


def test_module_prefix_is_dotted():
    # "targets.cal" is no module: nothing is left out.
    full = program_tree()
    assert program_tree(ignore=["targets.cal", f"{MOD}.lea"]) == full
    # "targets" covers its submodule: program itself goes, the C calls stay.
    _, events = traced(calls.program, ignore=["targets"])
    inside = [ev for ev in events if not ev.open_at_start]
    assert not [ev.name for ev in inside if ev.kind == PY]
    assert sorted(ev.name for ev in inside if ev.kind == C) == [
        "dict.get", "len", "list.append", "math.sqrt", "sum"]


def test_glob_patterns():
    assert program_tree(ignore=[f"{MOD}.[bl]*", "*.get", "builtins.?en"]) == ("program", PY, [
        (qual("Point.__init__"), PY, []),
        (qual("Point.norm"), PY, [("math.sqrt", C, [])]),
        ("consume", PY, [("sum", C, [NUMBERS] * 4)]),
        ("list.append", C, []),
    ])


def test_c_functions_ignored():
    assert program_tree(ignore=["builtins.len", "math", "builtins.list.append"]) == (
        "program", PY, [
            ("branch", PY, [("leaf", PY, []), ("leaf", PY, [])]),
            (qual("Point.__init__"), PY, []),
            (qual("Point.norm"), PY, []),
            ("consume", PY, [("sum", C, [NUMBERS] * 4)]),
            ("dict.get", C, []),
        ])
    assert program_tree(ignore=["builtins.*"]) == program_tree(ignore=["builtins"])


def test_binding_functions_matched_by_module_and_name():
    # Made as pybind11 makes its functions (self: a capsule, __module__ set):
    # matched by the name the trace shows, as every C function is.
    from frametrace import _testing

    linear = _testing.bound_function("linear", "torch._C._nn")
    relu = _testing.bound_function("relu", "torch")
    top = _testing.bound_function("abs_like", "builtins")

    def program():
        linear()
        relu()
        top()

    def c_names(**filters):
        _, events = traced(program, **filters)
        return [ev.name for ev in events if ev.kind == C]

    assert c_names() == ["torch._C._nn.linear", "torch.relu", "abs_like"]
    assert c_names(ignore=["torch._C"]) == ["torch.relu", "abs_like"]
    assert c_names(ignore=["torch.relu", "builtins.abs_like"]) == ["torch._C._nn.linear"]
    assert c_names(include=["torch.*"]) == ["torch._C._nn.linear", "torch.relu"]


def test_include_only():
    # Only the module's Python functions: no C function is in it.
    assert program_tree(include=[MOD]) == program_tree(c_calls=False)
    assert program_tree(include=[f"{MOD}.program", f"{MOD}.consume", "builtins.sum"]) == (
        "program", PY, [("consume", PY, [("sum", C, [])])])


def test_include_then_ignore():
    assert program_tree(include=[MOD, "math"], ignore=[f"{MOD}.leaf", f"{MOD}.numbers"]) == (
        "program", PY, [
            ("branch", PY, []),
            (qual("Point.__init__"), PY, []),
            (qual("Point.norm"), PY, [("math.sqrt", C, [])]),
            ("consume", PY, []),
        ])


def producer():
    yield calls.leaf(1)
    yield calls.leaf(2)


async def coro():
    calls.leaf(3)


def drive():
    for _ in producer():
        calls.leaf(0)
    gen = producer()
    next(gen)
    list(gen)
    try:
        coro().send(None)
    except StopIteration:
        pass


def test_ignored_generator_and_coroutine():
    _, events = traced(drive, ignore=[f"{HERE}.producer", f"{HERE}.coro", "builtins"])
    assert subtree(events, only(events, "drive")) == ("drive", PY, [("leaf", PY, [])] * 7)
    # Recorded generator, ignored consumer.
    _, events = traced(drive, ignore=[f"{HERE}.drive", "builtins", f"{HERE}.coro"])
    assert [subtree(events, i) for i in find(events, "producer")] == [
        ("producer", PY, [("leaf", PY, [])])] * 2 + [("producer", PY, [])] + [
        ("producer", PY, [("leaf", PY, [])])] * 2 + [("producer", PY, [])]


def test_exception_through_ignored_frames():
    _, events = traced(calls.catcher, ignore=[f"{MOD}.level2"])
    assert subtree(events, only(events, "catcher")) == ("catcher", PY, [
        ("level1", PY, [("level3", PY, [])]),
        ("leaf", PY, []),
    ])
    _, events = traced(calls.catcher, ignore=[f"{MOD}.level1", f"{MOD}.level3"])
    assert subtree(events, only(events, "catcher")) == ("catcher", PY, [
        ("level2", PY, []), ("leaf", PY, [])])


def thread_work():
    calls.leaf(5)
    calls.branch(1)


def test_threads():
    def run():
        threads = [threading.Thread(target=thread_work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    # 3.14's threading runs a thread's target inside Context.run.
    _, events = traced(run, ignore=[f"{HERE}.thread_work", "threading", "builtins",
                                    "_thread", "*Context.run"])
    for i in find(events, "leaf"):
        parent = events[i].parent
        assert parent == -1 or events[parent].name == "branch", events[parent]
    assert len(find(events, "leaf")) == 6 and len(find(events, "branch")) == 3
    assert {events[i].thread_id for i in find(events, "branch")} != {threading.get_ident()}
    assert not find(events, "thread_work") and not find(events, "Thread.run")


def stop_inside(tracer):
    def inner():
        tracer.stop()
        calls.leaf(9)  # after the stop

    def ignored():
        inner()

    def outer():
        ignored()

    outer()


def test_latched_stop_inside_ignored_frame():
    tracer = frametrace.Tracer(ignore=[f"{HERE}.stop_inside.<locals>.ignored"])
    tracer.start()
    stop_inside(tracer)
    tracer.stop()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    names = [ev.name for ev in events if ev.name.startswith("stop_inside")]
    if QUALNAMES:
        assert names == ["stop_inside", "stop_inside.<locals>.outer",
                         "stop_inside.<locals>.inner"]
        inner = only(events, "stop_inside.<locals>.inner")
        assert events[events[inner].parent].name == "stop_inside.<locals>.outer"
        assert events[inner].open_at_stop
    assert not find(events, "leaf")


def test_exports_of_filtered_trace(tmp_path):
    from frametrace.export import write_chrome, write_perfetto
    from pftrace import decode

    tracer, events = traced(calls.program, ignore=[f"{MOD}.branch", "builtins.len"])
    write_chrome(tracer, tmp_path / "t.json")
    loaded = frametrace.load(tmp_path / "t.json")
    assert_valid_trace(loaded.events, tracer.start_ns, tracer.stop_ns)
    assert sorted(ev.name for ev in loaded.events) == sorted(ev.name for ev in events)
    write_perfetto(tracer, tmp_path / "t.pftrace")
    names = [sl.name for slices in decode(tmp_path / "t.pftrace").slices.values()
             for sl in slices]
    assert sorted(names) == sorted(ev.name for ev in events)
    assert "leaf" in names and "branch" not in names and "len" not in names


def test_attributes_and_decorator():
    tracer = frametrace.Tracer(ignore=(p for p in ["a.b", "c*"]), include=["a", "c"])
    assert tracer.ignore == ("a.b", "c*") and tracer.include == ("a", "c")
    plain = frametrace.Tracer()
    assert plain.ignore == () and plain.include is None

    @frametrace.trace(ignore=[f"{MOD}.leaf"])
    def run():
        calls.branch(2)

    for _ in range(2):  # the second call makes a fresh tracer with the same options
        run()
        events = run.tracer.getEvents()
        assert run.tracer.ignore == (f"{MOD}.leaf",)
        assert find(events, "branch") and not find(events, "leaf")


def test_session_windows_keep_the_filters():
    traces = []
    with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1, repeat=2),
                            on_trace_ready=traces.append, ignore=iter([f"{MOD}.leaf"]),
                            include=[MOD]) as prof:
        for _ in range(2):
            calls.branch(2)
            prof.step()
    assert len(traces) == 2
    for trace in traces:
        names = [ev.name for ev in trace.events]
        assert names.count("branch") == 1 and "leaf" not in names
        assert "len" not in names


@pytest.mark.parametrize("kwargs, error, message", [
    ({"ignore": "torch.nn"}, TypeError, "ignore= takes a sequence of patterns, not a str"),
    ({"include": b"x"}, TypeError, "include= takes a sequence of patterns, not a bytes"),
    ({"ignore": 5}, TypeError, "ignore= takes a sequence of pattern strings, not int"),
    ({"ignore": ["a", 3]}, TypeError, "ignore= patterns must be str, not int (item 1: 3)"),
    ({"include": [""]}, ValueError, "include= pattern 0 is empty"),
    ({"ignore": ["torch."]}, ValueError, "ignore= pattern 'torch.' is not a dotted name"),
    ({"ignore": [".nn"]}, ValueError, "ignore= pattern '.nn' is not a dotted name"),
    ({"ignore": ["a..b"]}, ValueError, "ignore= pattern 'a..b' is not a dotted name"),
    ({"include": []}, ValueError, "include= is empty: it would record nothing"),
])
def test_bad_patterns(kwargs, error, message):
    with pytest.raises(error) as info:
        frametrace.Tracer(**kwargs)
    assert str(info.value).startswith(message), str(info.value)
    with pytest.raises(error):
        frametrace.profile(**kwargs)
    # attach() checks them before it looks for the process.
    with pytest.raises(error) as info:
        frametrace.attach(1, **kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_globs_may_hold_dots_anywhere():
    assert frametrace.Tracer(ignore=["*.", ".*"]).ignore == ("*.", ".*")


# ---- 3.12.0-3.12.4's unpaired C events (CPython issue 122029) ------------------------

bound_len = types.MethodType(len, [1, 2])


def unpaired():
    bound_len()
    bound_len(*())
    calls.leaf(1)


@pytest.mark.parametrize("filters", [
    {"ignore": ["builtins.len"]},
    {"ignore": [f"{HERE}.unpaired"]},
    {"include": ["builtins.len", f"{MOD}.leaf"]},
])
def test_unpaired_c_events_with_filters(filters):
    _, events = traced(unpaired, **filters)  # valid, whatever CPython delivered
    assert len(find(events, "leaf")) == 1
    if filters.get("ignore") == ["builtins.len"]:
        assert not find(events, "len")


# ---- the monitoring backend: DISABLE and restart_events() -----------------------------

def disabled_target():
    calls.leaf(1)
    return len("ab")


def gen_target():
    yield 1
    yield 2


def raising_target():
    raise KeyError("x")


def restarts():
    from frametrace import _testing

    return _testing.lifecycle_counts(frametrace.Tracer())["restarts"]


def names_under(events, name):
    return [ev.name for ev in events if ev.name == name]


@needs_monitoring
def test_filters_change_restarts_events_once():
    mon = dict(backend="monitoring")
    f = f"{HERE}.disabled_target"
    _, events = traced(disabled_target, ignore=[f], **mon)
    assert not find(events, "disabled_target") and find(events, "leaf")
    before = restarts()  # the tracer above restarted if earlier ones had other filters
    # The same filters: no restart, still ignored (and still disabled).
    _, events = traced(disabled_target, ignore=[f], **mon)
    assert not find(events, "disabled_target")
    assert restarts() == before
    # No filters: restarted once, and the formerly ignored code is seen again
    # (it did not run between the tracers: without the restart its PY_START
    # and PY_RETURN would stay disabled).
    _, events = traced(disabled_target, **mon)
    assert subtree(events, only(events, "disabled_target")) == (
        "disabled_target", PY, [("leaf", PY, []), ("len", C, [])])
    assert restarts() == before + 1
    # No DISABLE returned since: no restart for the next plain tracer.
    traced(disabled_target, **mon)
    assert restarts() == before + 1


@needs_monitoring
def test_other_filters_restart():
    mon = dict(backend="monitoring")
    traced(disabled_target, ignore=[f"{HERE}.disabled_target"], **mon)
    before = restarts()
    _, events = traced(disabled_target, ignore=[f"{MOD}.leaf"], **mon)
    assert restarts() == before + 1
    assert find(events, "disabled_target") and not find(events, "leaf")
    # Filters that ignored C functions only: no DISABLE returned.
    traced(disabled_target, ignore=["builtins.len"], **mon)
    _, events = traced(disabled_target, ignore=["builtins.len"], **mon)
    traced(disabled_target, **mon)
    assert restarts() == before + 2  # the leaf filter's DISABLE, undone once


@needs_monitoring
def test_private_ignore_never_disables():
    traced(disabled_target, backend="monitoring")
    before = restarts()
    tracer = frametrace.Tracer(backend="monitoring")
    tracer._ignore(disabled_target)
    with tracer:
        disabled_target()
    assert not find(tracer.getEvents(), "disabled_target")
    _, events = traced(disabled_target, backend="monitoring")
    assert find(events, "disabled_target") and restarts() == before


@needs_monitoring
def test_unwind_and_throw_of_ignored_code_are_not_disabled():
    def run():
        for _ in range(3):
            try:
                raising_target()
            except KeyError:
                pass
            gen = gen_target()
            next(gen)
            try:
                gen.throw(ValueError)
            except ValueError:
                pass
        calls.leaf(1)

    # CPython raises ValueError in the traced code if PY_UNWIND's or
    # PY_THROW's callback returns DISABLE: run() would fail.
    _, events = traced(run, backend="monitoring",
                       ignore=[f"{HERE}.raising_target", f"{HERE}.gen_target"])
    assert not find(events, "raising_target") and not find(events, "gen_target")
    assert len(find(events, "leaf")) == 1


@needs_monitoring
def test_ignored_c_callee_keeps_its_call_site():
    # len and leaf are called from one call site; ignoring len there must
    # not hide leaf (a CALL disabled at a site hides every callee).
    def run():
        for f in (len, calls.leaf, len, calls.leaf):
            f(1) if f is calls.leaf else f("x")

    _, events = traced(run, backend="monitoring", ignore=["builtins.len"])
    assert len(find(events, "leaf")) == 2 and not find(events, "len")
