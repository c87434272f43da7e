"""Every code example of README.md and docs/ runs: Python blocks in one
namespace per page (in order, as a reader would type them), shell blocks
with bash, each page in a fresh directory.  An example that cannot run here
(it installs, opens a browser, needs torch or a second process) carries a
`<!-- skip: next "why" -->` comment just above it.  A test an example
defines is run too."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

sybil = pytest.importorskip("sybil")
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))

# What the examples call but leave to the reader: a small training loop.
STAND_INS = '''
import frametrace

def train_step(batch=None):
    return sum(i * i for i in range(200))

def train():
    for _ in range(3):
        train_step()

loader = [1, 2, 3, 4, 5, 6, 7, 8]

def model(batch):
    return train_step(batch)

_looks = iter([False, True])

def something_looks_wrong():
    return next(_looks, False)
'''

# A program the shell examples trace.
TRAIN_PY = '''
import frametrace

def train_step(i):
    return sum(range(1000 + i))

for i in range(8):
    train_step(i)
    frametrace.step()
'''


def _run_shell(example):
    # The page's directory, with the installed frametrace first on PATH.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", example.parsed],
                          cwd=example.namespace["_cwd"], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}"


PARSERS = [
    PythonCodeBlockParser(),
    CodeBlockParser(language="sh", evaluator=_run_shell),
    SkipParser(),
]
DOCUMENTS = {}


def _examples():
    for page in PAGES:
        doc = sybil.Sybil(PARSERS, path=str(ROOT)).parse(page)
        DOCUMENTS[page] = doc
        for example in doc:
            yield pytest.param(page, example, id=f"{page.relative_to(ROOT)}:{example.line}")


@pytest.mark.parametrize("page,example", list(_examples()))
def test_example(page, example, tmp_path_factory, monkeypatch):
    namespace = DOCUMENTS[page].namespace
    if "_cwd" not in namespace:
        cwd = tmp_path_factory.mktemp(page.stem)
        (cwd / "train.py").write_text(TRAIN_PY)
        (cwd / "examples").symlink_to(ROOT / "examples")
        namespace["_cwd"] = str(cwd)
        exec(textwrap.dedent(STAND_INS), namespace)
    monkeypatch.chdir(namespace["_cwd"])
    before = set(namespace)
    example.evaluate()
    _run_tests_defined(namespace, before)


def _run_tests_defined(namespace, before):
    """A pytest example defines a test: run it, with the plugin's fixture
    (a started tracer around the body) where it asks for one."""
    import builtins
    import frametrace
    # Sybil takes __builtins__ out of the namespace after each example; the
    # functions defined there look builtins up in it.
    namespace.setdefault("__builtins__", builtins)
    for name in sorted(set(namespace) - before):
        if name.startswith("test_") and callable(namespace[name]):
            with frametrace.trace() as tracer:
                namespace[name](frametrace_tracer=tracer)
