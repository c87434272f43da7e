"""Write the performance page's tables from benchmarks/results.

benchmarks/overhead.py and compare.py write one file per CPython
(overhead-3.X.md, compare-3.X.md); this takes the main tables out of each
(not the run's date, command or paths: the page shows figures, the files
keep the record).

    python tools/perf_tables.py [RESULTS_DIR] [OUT.md]
"""
import pathlib
import re
import sys

WANTED = ("### Slowdown", "### Added ns per profile event")


def _tables(text):
    """The wanted sections of one compare file: heading and table lines."""
    out, keep = [], False
    for line in text.splitlines():
        if line.startswith("### "):
            keep = line.startswith(WANTED)
            if keep:
                out += ["", "**" + line[4:] + "**", ""]  # under the CPython heading
            continue
        if keep and line.startswith("|"):
            out.append(line)
    return out


def _version_key(path):
    return [int(x) for x in path.stem.split("-")[1].split(".")]


def _first_table(text):
    """The first table of an overhead file: every workload and configuration."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def render(results):
    """The page fragment: per CPython, oldest first, the added cost per
    event (benchmarks/overhead.py), then the comparison with other tracers
    (benchmarks/compare.py)."""
    results = pathlib.Path(results)
    lines = ["### Added cost per profile event (`benchmarks/overhead.py`)", ""]
    for f in sorted(results.glob("overhead-3.*.md"), key=_version_key):
        version = f.stem.split("-")[1]
        lines += [f"#### CPython {version}", ""] + _first_table(f.read_text()) + [""]
    lines += ["### Against other tracers (`benchmarks/compare.py`)", ""]
    for f in sorted(results.glob("compare-3.*.md"), key=_version_key):
        if f.stem.endswith("-wall"):
            continue
        version = f.stem.split("-")[1]
        lines += [f"#### CPython {version}"] + _tables(f.read_text()) + [""]
    return "\n".join(lines).rstrip() + "\n"


def write(results, out):
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render(results)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)


if __name__ == "__main__":
    root = pathlib.Path(__file__).resolve().parent.parent
    args = sys.argv[1:] + [None, None]
    write(args[0] or root / "benchmarks" / "results",
          args[1] or root / "docs" / "_generated" / "performance-tables.md")
