"""Sphinx configuration: MyST pages, furo, the API reference from docstrings
and the CLI reference from the argparse parser (docs/development.md)."""
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))
sys.path.insert(0, str(HERE))

import perf_tables  # noqa: E402  (tools/perf_tables.py)

import frametrace  # noqa: E402  (the installed package: its C extension is built)

project = "frametrace"
author = "frametrace contributors"
release = frametrace.__version__
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "_stubs",  # docs/_stubs.py: the C extension's signatures from its .pyi
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_generated", "conftest.py"]
html_theme = "furo"
html_static_path = ["_static"]
html_title = f"frametrace {release}"
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# sphinx-argparse's domain cannot resolve MyST's any-links (it warns on each);
# a short name like `events` matching two classes' attributes is not a broken link.
suppress_warnings = ["myst.domains", "ref.python"]
autodoc_member_order = "bysource"

# The performance tables are written from benchmarks/results on every build,
# so the page shows the latest committed run.
GENERATED = HERE / "_generated"
perf_tables.write(HERE.parent / "benchmarks" / "results", GENERATED / "performance-tables.md")


def _flamegraph():
    # Made by the CLI from the bundled example, so the picture stays true.
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(HERE.parent / "examples" / "train_loop.py")],
                       cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        first = sorted(pathlib.Path(tmp, "traces").glob("*.0.json"))[0]
        subprocess.run([sys.executable, "-m", "frametrace", "flamegraph", str(first),
                        "-o", str(GENERATED / "flamegraph.svg")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


_flamegraph()


def _drop_module_docstrings(app, what, name, obj, options, lines):
    # Module docstrings are notes for the package's developers, written as
    # plain text; the pages say what a user needs.
    if what == "module":
        lines[:] = []


def setup(app):
    app.connect("autodoc-process-docstring", _drop_module_docstrings)
