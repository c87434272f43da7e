"""How C functions made by binding generators are named.

pybind11 (and nanobind, and torch's own bindings) make C functions whose
self is neither a module nor an instance of a class that defines them: a
function record (a capsule before pybind11 2.12, an object of a private
type since), or the class a static method was looked up on.  Their name is
``{__module__}.{__name__}``, never the binding machinery's type, never
empty.  frametrace._testing.bound_function() makes such a function as
pybind11 does (PyCFunction_NewEx with a capsule self that owns the method
definition); a real pybind11 module is built in test_pybind11_module when
pybind11 and a C++ compiler are there, and torch's bindings are checked in
tests/pytorch/test_names_torch.py."""
import gc
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import frametrace
from frametrace import _testing
from frametrace.testing import assert_valid_trace

BACKENDS = ["setprofile"] + (["monitoring"] if sys.version_info >= (3, 12) else [])


def names_of_calls(backend, program):
    with frametrace.trace(backend=backend) as tracer:
        program()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    return [ev.name for ev in events if ev.filename == "<built-in>"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_binding_functions_are_named_by_module_and_name(backend):
    linear = _testing.bound_function("linear", "torch._C._nn")
    relu = _testing.bound_function("relu", "torch")
    top = _testing.bound_function("abs_like", "builtins")

    def program():
        assert linear(1, 2) == (1, 2)
        relu()
        linear()
        top()

    assert names_of_calls(backend, program) == [
        "torch._C._nn.linear", "torch.relu", "torch._C._nn.linear", "abs_like"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_empty_names(backend):
    nameless = _testing.bound_function("", "torch._ops.profiler")
    nameless_no_module = _testing.bound_function("", None)

    def program():
        nameless()
        nameless_no_module()

    # Without a module, the function record's type is all there is.
    # torch's "torch._ops.NS" is called as torch.ops.NS.
    assert names_of_calls(backend, program) == [
        "torch.ops.profiler.<unnamed>", "PyCapsule.<unnamed>"]


class Overload:
    """A stand-in for torch's OpOverload: it holds a C function with no name
    (pybind11's) and names itself in its instance dict."""

    def __init__(self, module, name):
        self._op = _testing.bound_function("", module)
        self.__module__ = module
        self.__name__ = name

    def __call__(self, /, *args, **kwargs):
        return self._op(*args, **kwargs)


class Loud:
    """Names that would run code if read through attributes."""
    reads = 0

    def __init__(self):
        self._op = _testing.bound_function("", "torch._ops.aten")

    @property
    def __name__(self):
        Loud.reads += 1
        return "from a property"

    def __call__(self):
        return self._op()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nameless_function_is_named_by_the_object_that_holds_and_calls_it(backend):
    """torch.ops.aten.add.Tensor(...) calls the overload's pybind11 function,
    which has no name: it is named by the overload's instance dict, its
    __module__ and __name__ (never through attributes: no Python code
    runs), each function apart; a nameless function called by other code,
    or by an object whose dict names nothing, keeps the module's name."""
    add = Overload("torch._ops.aten", "add.Tensor")
    mul = Overload("torch._ops.aten", "mul.Tensor")
    custom = Overload("torch._ops.mylib", "foo.default")
    plain = Overload("mypkg.ops", "thing")
    loose = _testing.bound_function("", "torch._ops.aten")
    loud = Loud()

    class Caller:
        def __init__(self, op):
            self.op = op

        def call(self):  # its self holds no nameless function: not the one called
            return loose()

    def program():
        add(1)
        mul(2)
        add(3)
        custom()
        plain()
        Caller(loose).call()
        loud()

    assert names_of_calls(backend, program) == [
        "torch.ops.aten.add.Tensor", "torch.ops.aten.mul.Tensor", "torch.ops.aten.add.Tensor",
        "torch.ops.mylib.foo.default", "mypkg.ops.thing", "torch.ops.aten.<unnamed>",
        "torch.ops.aten.<unnamed>"]
    assert Loud.reads == 0


def load_outside_import(name):
    """frametrace._testing's extension loaded again as module `name`, from
    its file, by no import of its package: as inductor loads each kernel
    it builds ("<hash>.kernel")."""
    import importlib.machinery
    import importlib.util

    path = _testing.__file__
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_function_of_a_module_made_outside_import_is_named_as_its_caller_holds_it(backend):
    """Inductor's kernels are each "kernel" of a module "<hash>.kernel"
    loaded from a file: named by the compiled graph's global that holds it
    (cpp_fused_relu_0) and the graph's module.  A module whose package is
    imported keeps its own name, whatever its callers call it."""
    kernel = load_outside_import("c3jgnrunzp7akfdpsspm._testing")
    assert "c3jgnrunzp7akfdpsspm" not in sys.modules
    graph = {"__name__": "torch._inductor.runtime.compile_tasks.cabc",
             "cpp_fused_relu_0": kernel.pattern_match, "alias": _testing.ticks_to_ns}
    code = compile("def call():\n    cpp_fused_relu_0('x', 'x')\n    alias([(0, 0), (1, 1)], [1])\n",
                   "<graph>", "exec")
    exec(code, graph)
    assert names_of_calls(backend, graph["call"]) == [
        "torch._inductor.runtime.compile_tasks.cabc.cpp_fused_relu_0",
        "frametrace._testing.ticks_to_ns"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_name_in_two_modules_stays_two_functions(backend):
    first = _testing.bound_function("step", "pkg.a")
    second = _testing.bound_function("step", "pkg.b")

    def program():
        for _ in range(3):
            first()
            second()

    assert names_of_calls(backend, program) == ["pkg.a.step", "pkg.b.step"] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_functions_made_and_freed_during_the_trace_keep_their_names(backend):
    """The table keeps each function's record (which owns the method
    definition it is keyed by) alive: a function made after another was
    freed cannot take its definition's address and so its name."""
    def program():
        for i in range(200):
            f = _testing.bound_function(f"f{i}", f"mod{i % 7}")
            f()
            del f
            gc.collect() if i % 50 == 0 else None

    names = names_of_calls(backend, program)
    made = [n for n in names if re.fullmatch(r"mod\d\.f\d+", n)]
    assert made == [f"mod{i % 7}.f{i}" for i in range(200)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_method_given_a_module_is_named_by_it(backend):
    """torch.relu is a static method of torch._C._VariableFunctionsClass
    whose __module__ torch set to "torch"; bytes.maketrans is one too, with
    no module: it keeps its class's name."""
    maketrans = bytes.maketrans
    module = maketrans.__module__

    def program():
        bytes.maketrans(b"a", b"b")

    # 3.15 makes a static method a function of module "builtins", bound to
    # no class.
    if sys.version_info < (3, 15):
        assert module is None
        assert names_of_calls(backend, program) == ["bytes.maketrans"]
    else:
        assert module == "builtins"
        assert names_of_calls(backend, program) == ["maketrans"]
    maketrans.__module__ = "mybinding"
    try:
        assert names_of_calls(backend, program) == ["mybinding.maketrans"]
    finally:
        maketrans.__module__ = module


@pytest.mark.parametrize("backend", BACKENDS)
def test_methods_bound_to_instances_keep_their_class(backend):
    """A module set on a method bound to its object changes nothing: the
    class is the better name (list.append, dict.fromkeys on a subclass)."""
    class D(dict):
        pass

    def program():
        [].append(1)
        D.fromkeys("a")
        type.mro(int)

    assert names_of_calls(backend, program) == ["list.append", "dict.fromkeys", "type.mro"]


def test_bound_function_rejects_a_module_that_is_not_a_string():
    with pytest.raises(TypeError, match="module must be a str or None, not int"):
        _testing.bound_function("f", 3)


PYBIND11_SOURCE = """
#include <pybind11/pybind11.h>
namespace py = pybind11;
struct Counter { int n = 0; int bump() { return ++n; } };
PYBIND11_MODULE(ftbind, m) {
    m.def("add", [](int a, int b) { return a + b; });
    py::module_ nn = m.def_submodule("nn");
    nn.def("linear", [](int x) { return 2 * x; });
    py::class_<Counter>(m, "Counter")
        .def(py::init<>())
        .def("bump", &Counter::bump)
        .def_static("make", []() { return Counter(); });
}
"""


@pytest.fixture(scope="module")
def pybind11_module(tmp_path_factory):
    pybind11 = pytest.importorskip("pybind11", reason="pybind11 is not installed")
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build a pybind11 module")
    build = tmp_path_factory.mktemp("pybind11")
    (build / "ftbind.cpp").write_text(PYBIND11_SOURCE)
    target = build / ("ftbind" + sysconfig.get_config_var("EXT_SUFFIX"))
    # The compiler is no sanitized program: the sanitizer runtime that a
    # sanitized interpreter's environment preloads is not for it.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LD_PRELOAD", "ASAN_", "UBSAN_", "LSAN_"))}
    subprocess.run([cxx, "-O0", "-shared", "-fPIC", "-std=c++17",
                    f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}",
                    str(build / "ftbind.cpp"), "-o", str(target)], check=True, env=env)
    sys.path.insert(0, str(build))
    try:
        import ftbind
        yield ftbind
    finally:
        sys.path.remove(str(build))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pybind11_module(pybind11_module, backend):
    m = pybind11_module

    def program():
        assert m.add(1, 2) == 3
        assert m.nn.linear(2) == 4
        counter = m.Counter.make()
        counter.bump()

    names = names_of_calls(backend, program)
    # 3.10's profile layer does not report a C function called as a bound
    # method (pybind11 methods are instancemethods): bump() is not a call.
    method = ["ftbind.bump"] if sys.version_info >= (3, 11) else []
    assert names == ["ftbind.add", "ftbind.nn.linear", "ftbind.make"] + method, names
    assert not any(re.search("pybind11|0x[0-9a-f]", n) for n in names)
