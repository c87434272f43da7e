"""The performance page's tables (tools/perf_tables.py) come from
benchmarks/results: one section per CPython with results, no run dates."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import perf_tables  # noqa: E402


def test_a_table_per_cpython_with_results():
    results = ROOT / "benchmarks" / "results"
    page = perf_tables.render(results)
    for f in results.glob("overhead-3.*.md"):
        version = f.stem.split("-")[1]
        assert f"#### CPython {version}\n\n|" in page, version
    assert "| tracer |" in page
    assert not re.search(r"20\d\d-\d\d-\d\d", page), "a dated run in the page"


def test_renders_given_files(tmp_path):
    (tmp_path / "overhead-3.99.md").write_text("## cost, 2031-01-01\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nnotes\n")
    (tmp_path / "compare-3.99.md").write_text(
        "run on 2031-01-01\n### Slowdown (x)\n| t | x |\n|---|---|\n| f | 2.0x |\n### Other\n| z |\n")
    page = perf_tables.render(tmp_path)
    assert page.count("#### CPython 3.99") == 2
    assert "| 1 | 2 |" in page and "| f | 2.0x |" in page
    assert "| z |" not in page and "2031" not in page
