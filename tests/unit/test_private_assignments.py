"""No product module sets another module's private attributes: what runs in
the process (the session, the flight recorder, a traced child's step,
``frametrace run``'s program) is registered in frametrace._running, and a
session's collaborators are given to it when it is made.

The rule, checked on the source of python/frametrace/**/*.py: an
assignment (``=``, ``+=``, annotated, ``del`` or ``setattr`` with a
constant name) to an attribute whose name starts with one underscore
(dunders are Python's, not a module's privates), of an object other than
``self`` or ``cls``, is allowed only when

- the object is not a name the module binds by an import (a module, or a
  class or function of another module), and
- the attribute is one that a class of the same module owns (assigns as
  ``self.<name>``, binds in its body, or lists in ``__slots__``): the
  module sets its own objects' state, as a function beside a class may.

One name is allowed, below, with its reason."""
import ast
import os

from support import ROOT

PACKAGE = os.path.join(ROOT, "python", "frametrace")

# os._exit is a documented public function of os (its underscore says
# "exit without cleanup", not "private"): a run wraps it, so that a program
# ending through it (multiprocessing's children do) still writes its trace.
ALLOWED = {("os", "_exit")}


def sources():
    for folder, _, names in os.walk(PACKAGE):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, PACKAGE), ast.parse(f.read(), path)


def is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def imported_names(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
    return names


def owned_attributes(tree):
    """The attributes the module's classes own."""
    owned = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del))
                    and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                owned.add(node.attr)
        for node in cls.body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                if isinstance(target, ast.Name):
                    owned.add(target.id)
                    if target.id == "__slots__" and isinstance(node.value, (ast.Tuple, ast.List)):
                        owned |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                owned.add(node.name)
    return owned


def private_assignments(tree):
    """(line, object's source, attribute) of each assignment to a private
    attribute of something other than self or cls."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            target, attr = node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("setattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            target, attr = node.args[0], node.args[1].value
        else:
            continue
        if not is_private(attr):
            continue
        if isinstance(target, ast.Name) and target.id in ("self", "cls"):
            continue
        yield node.lineno, ast.unparse(target), attr


def cross_module(tree):
    """The private assignments the rule refuses."""
    imported, owned = imported_names(tree), owned_attributes(tree)
    return [(line, target, attr) for line, target, attr in private_assignments(tree)
            if (target, attr) not in ALLOWED
            and (target.split(".")[0].split("(")[0].split("[")[0] in imported or attr not in owned)]


def test_no_module_sets_another_modules_private_attributes():
    found = [f"{name}:{line}: {target}.{attr}"
             for name, tree in sources() for line, target, attr in cross_module(tree)]
    assert found == []


def test_the_rule_sees_what_it_must():
    """The scan itself: each kind of cross-module assignment is found, a
    module's own objects' state is not."""
    tree = ast.parse(
        "from . import session\n"
        "import sys\n"
        "class Own:\n"
        "    __slots__ = ('_slot',)\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "def f(other, own):\n"
        "    session._flight_step = None\n"      # a module's
        "    other._step_hook += 1\n"            # another module's class's
        "    setattr(sys, '_x', 1)\n"             # setattr
        "    del other._gone\n"                   # del
        "    own._mine = 2\n"                     # this module's class's: allowed
        "    own._slot = 3\n"                     # a slot of it: allowed
        "    other.__doc__ = 'x'\n")              # a dunder: allowed
    assert cross_module(tree) == [(8, "session", "_flight_step"), (9, "other", "_step_hook"),
                       (10, "sys", "_x"), (11, "other", "_gone")]
