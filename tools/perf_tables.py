"""Write the performance page's tables from benchmarks/results.

benchmarks/compare.py writes one compare-3.X.md per CPython; this takes the
slowdown and per-event tables out of each (not the run's date, command or
paths: the page shows figures, the files keep the record).

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
                out += ["", "#" + line, ""]  # one level down, under the CPython heading
            continue
        if keep and line.startswith("|"):
            out.append(line)
    return out


def render(results):
    """The page fragment, one section per CPython, oldest first."""
    files = sorted(pathlib.Path(results).glob("compare-3.*.md"),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.stem.split("-")[1])])
    lines = []
    for f in files:
        if f.stem.endswith("-wall"):
            continue
        version = f.stem.split("-")[1]
        lines += [f"### CPython {version}"] + _tables(f.read_text()) + [""]
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
