"""frametrace run --ignore/--include (repeatable), with --fork-traces and --follow-children too, and bad patterns refused before the program runs."""
import os
import subprocess
import sys

import pytest

import frametrace
from support import child_env

pytestmark = pytest.mark.usefixtures("clock")

SCRIPT = """\
import os, sys
import helper

def f():
    helper.g()
    return len("ab")

def main():
    f()
    if "--fork" in sys.argv:
        pid = os.fork()
        if pid == 0:
            f()
            sys.exit(0)
        os.waitpid(pid, 0)

main()
"""

HELPER = """\
def g():
    return h()

def h():
    return sorted([2, 1])
"""


def run(tmp_path, *args, check=0):
    (tmp_path / "p.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text(HELPER)
    package_root = os.path.dirname(os.path.dirname(frametrace.__file__))
    proc = subprocess.run([sys.executable, "-m", "frametrace", "run", *map(str, args)],
                          cwd=tmp_path, env=child_env(PYTHONPATH=package_root),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == check, proc.stderr
    return proc


def tree(path):
    """(name, depth) of the events from main() on (not the import of helper)."""
    events = frametrace.load(path).events
    names = [e.name for e in events]
    start = names.index("main") if "main" in names else 0
    return [(e.name, e.depth) for e in events[start:]]


def test_ignore_and_include(tmp_path):
    run(tmp_path, "-o", "all.json", "p.py")
    assert tree(tmp_path / "all.json") == [
        ("main", 1), ("f", 2), ("g", 3), ("h", 4), ("sorted", 5), ("len", 3)]
    run(tmp_path, "--ignore", "helper.g", "--ignore", "builtins.len", "-o", "i.json", "p.py")
    assert tree(tmp_path / "i.json") == [("main", 1), ("f", 2), ("h", 3), ("sorted", 4)]
    run(tmp_path, "--include", "helper", "--include", "__main__.f", "--ignore", "helper.h",
        "-o", "n.json", "p.py")
    # helper's module code (helper.<module>) is in "helper" too.
    assert [(e.name, e.depth) for e in frametrace.load(tmp_path / "n.json").events] == [
        ("<module>", 0), ("f", 0), ("g", 1)]



@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_keeps_the_filters(tmp_path):
    run(tmp_path, "--fork-traces", "--ignore", "helper.g", "-o", "t.json", "p.py", "--fork")
    children = [p for p in os.listdir(tmp_path) if p.startswith("t.") and p != "t.json"]
    assert len(children) == 1
    names = [name for name, _ in tree(tmp_path / children[0])]
    assert "f" in names and "h" in names and "g" not in names


@pytest.mark.parametrize("args, message", [
    (["--ignore", ""], "ignore= pattern 0 is empty"),
    (["--include", "a..b"], "include= pattern 'a..b' is not a dotted name"),
])
def test_bad_patterns_refused(tmp_path, args, message):
    proc = run(tmp_path, *args, "-o", "t.json", "p.py", check=2)
    assert message in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "t.json").exists()


CHILDREN = """\
import multiprocessing, sys
import helper

def work():
    helper.g()

if __name__ == "__main__":
    p = multiprocessing.get_context(sys.argv[1]).Process(target=work)
    p.start()
    p.join()
    print(p.pid)
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_follow_children_filters_the_children(tmp_path, method):
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "kids.py").write_text(CHILDREN)
    package_root = os.path.dirname(os.path.dirname(frametrace.__file__))
    proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "--follow-children",
                           "--ignore", "helper.h", "-o", "t.json", "kids.py", method],
                          cwd=tmp_path, env=child_env(PYTHONPATH=package_root),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names = {e.name for e in frametrace.load(tmp_path / f"t.{int(proc.stdout)}.json").events}
    assert {"work", "g", "sorted"} <= names  # h's own call of sorted is still recorded
    assert "h" not in names
