"""CPython's private API, as frametrace uses it: exactly what csrc/compat.h
lists, nothing that crept in, nothing that went without its entry going.

compat.h lists each private use on a line "private: NAME VERSIONS — reason"
(and what public macros expand to as "implied: ...", or "testing: ..."
where only frametrace._testing uses it): the symbols the built
extension imports, and the PyThreadState fields read directly.  The product
module is checked exactly; the tests' own extension (frametrace._testing,
built from the same headers) may use no private symbol beyond that list."""
import ast
import ctypes
import os
import re
import shutil
import subprocess
import sys

import pytest

import frametrace._testing
import frametrace._tracer
from support import ROOT

CSRC = os.path.join(ROOT, "csrc")
PACKAGE = os.path.join(ROOT, "python", "frametrace")

ENTRY = re.compile(r"^\s*\*\s+(private|implied|testing): (\S+) 3\.(\d+)(?:-3\.(\d+)|\+) — \S")


def entries():
    """[(kind, name, first minor, last minor or None)] from compat.h."""
    found = []
    with open(os.path.join(CSRC, "compat.h"), encoding="utf-8") as f:
        for line in f:
            m = ENTRY.match(line)
            if m:
                kind, name, first, last = m.groups()
                found.append((kind, name, int(first), int(last) if last else None))
    return found


def listed(kinds, fields):
    """Names of the entries of these kinds in force on this Python: symbols,
    or with fields the PyThreadState fields (without the prefix)."""
    minor = sys.version_info[1]
    names = set()
    for kind, name, first, last in entries():
        is_field = name.startswith("PyThreadState.")
        if name.startswith("PyInterpreterState."):
            continue  # checked by test_interpreter_state_is_read_in_one_file
        if kind in kinds and is_field == fields and first <= minor and (last is None or minor <= last):
            names.add(name[len("PyThreadState."):] if fields else name)
    return names


def imported_private_symbols(module=frametrace._tracer):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--undefined-only", module.__file__],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines()
            if line.split() and line.split()[-1].startswith("_Py")}


def test_compat_h_lists_entries_in_the_form_this_test_reads():
    # A typo in the block would make its entry silently vanish.
    with open(os.path.join(CSRC, "compat.h"), encoding="utf-8") as f:
        text = f.read()
    lines = [line for line in text.splitlines() if re.match(r"^\s*\*\s+(private|implied|testing):", line)]
    assert lines and len(lines) == len(entries()), [l for l in lines if not ENTRY.match(l)]
    assert any(name == "_PyEval_SetProfile" for _, name, _, _ in entries())


def test_imported_private_symbols_are_exactly_those_listed():
    imported = imported_private_symbols()
    expected = listed({"private", "implied"}, fields=False)
    assert imported - expected == set(), "imported but not listed in csrc/compat.h"
    assert expected - imported == set(), "listed in csrc/compat.h but no longer imported"


def test_testing_extension_imports_nothing_unlisted():
    imported = imported_private_symbols(frametrace._testing)
    assert imported - listed({"private", "implied", "testing"}, fields=False) == set()


def test_private_setprofile_only_where_the_public_call_is_unsafe():
    # PyEval_SetProfileAllThreads() (3.12+) installs and removes the hook
    # where it survives threads exiting meanwhile (3.14.1+, CPython
    # gh-137400); a 3.14 build also runs on 3.14.0, and keeps the fallback.
    private = listed({"private"}, fields=False)
    if sys.version_info >= (3, 15):
        assert "_PyEval_SetProfile" not in private
        assert "_PyEval_SetProfile" not in imported_private_symbols()
    else:
        assert "_PyEval_SetProfile" in private


def test_listed_symbols_are_exported_by_this_interpreter():
    missing = [name for name in listed({"private", "implied", "testing"}, fields=False)
               if not hasattr(ctypes.pythonapi, name)]
    assert missing == []


def test_pythreadstate_fields_are_read_only_in_compat_h():
    # Fields read by the ft_tstate_*() accessors of compat.h ...
    with open(os.path.join(CSRC, "compat.h"), encoding="utf-8") as f:
        compat = f.read()
    used = set()
    for body in re.findall(r"\nft_tstate_\w+\(PyThreadState \*ts\)\n\{(.*?)\n\}", compat, re.S):
        used.update(re.findall(r"\bts->(\w+)", body))
    assert used, "no ft_tstate_*() accessor found in compat.h"
    every_listed = {name[len("PyThreadState."):] for _, name, _, _ in entries()
                    if name.startswith("PyThreadState.")}
    assert used == every_listed
    assert listed({"private"}, fields=True) <= used
    # ... and nowhere else: no variable declared PyThreadState * is
    # dereferenced outside compat.h.
    offenders = []
    sources = sorted(os.path.relpath(os.path.join(folder, name), CSRC)
                     for folder, _, names in os.walk(CSRC) for name in names)
    assert "testing/floors.c" in sources
    for name in sources:
        if name == "compat.h" or not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(CSRC, name), encoding="utf-8") as f:
            text = f.read()
        variables = set(re.findall(r"PyThreadState\s*\*\s*(\w+)", text))
        for var in variables:
            offenders += [f"{name}: {var}->{field}" for field in re.findall(rf"\b{var}->(\w+)", text)]
        offenders += [f"{name}: {m}" for m in re.findall(r"PyThreadState_(?:Get|GET)\(\)->\w+", text)]
    assert offenders == []


# Private names of other modules the package may use, with why.
ALLOWED_PRIVATE_PYTHON = {
    "sys._getframe",  # documented CPython API (cli/_program.py: the caller's frame)
    # cli/_program.py, run: waits for the program's non-daemon threads as Python's
    # exit does (3.10-3.15; a fallback joins them), and first looks, with
    # no call that would be traced, whether any is left.
    "threading._shutdown",
    "threading._active",
    "threading._limbo",
    # _endings.py, run: os._exit is documented API; while the program runs
    # it is wrapped so that the trace is written before the process ends.
    "os._exit",
}
# Asked for by name in csrc/: lifecycle.c copies threading._active ({ident:
# Thread}) for the threads' names in C, since threading.enumerate() holds
# _active_limbo_lock, which an interrupt just after its __enter__ leaves held.
ALLOWED_PRIVATE_FROM_C = {"_active"}


def private_python_names():
    """module._name uses in python/frametrace/**.py of modules not ours."""
    found = set()
    for path in sorted(os.path.join(folder, name) for folder, _, names in os.walk(PACKAGE)
                       for name in names if name.endswith(".py")):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                    and not node.module.startswith("frametrace"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.add(f"{node.module}.{alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and not modules[node.value.id].startswith("frametrace") \
                    and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.add(f"{modules[node.value.id]}.{node.attr}")
    return found


def private_names_from_c():
    """Private attributes and modules the C code asks Python for by name."""
    found = set()
    call = re.compile(r"(?:PyObject_GetAttrString|PyObject_CallMethod|PyImport_ImportModule)"
                      r"\s*\([^;]*?\"(_[A-Za-z]\w*)\"", re.S)
    for name in sorted(os.listdir(CSRC)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(CSRC, name), encoding="utf-8") as f:
                found.update(call.findall(f.read()))
    return found


def test_private_python_api_is_only_what_is_allowed():
    assert private_python_names() == ALLOWED_PRIVATE_PYTHON
    assert private_names_from_c() == ALLOWED_PRIVATE_FROM_C


def test_interpreter_state_is_read_in_one_file():
    # The one PyInterpreterState field (the Python audit hooks, set aside
    # while every thread's hook is set) is reached through CPython's
    # internal headers in audit_aside.c only, and nothing else of them.
    fields = {name[len("PyInterpreterState."):] for _, name, _, _ in entries()
              if name.startswith("PyInterpreterState.")}
    assert fields == {"audit_hooks"}
    users = {}
    for folder, _, names in os.walk(CSRC):
        for name in names:
            if name.endswith((".c", ".h")):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    text = f.read()
                if "Py_BUILD_CORE" in text or "internal/pycore" in text or "->audit_hooks" in text:
                    users[name] = sorted(set(re.findall(r"\binterp->(\w+)", text)))
    assert users == {"audit_aside.c": ["audit_hooks"]}
