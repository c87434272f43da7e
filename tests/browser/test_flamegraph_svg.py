"""The SVG flame graph in headless Chromium, its script run: a search
highlights the frames it matches and says their share of the time once
(nested matches counted once); a thread's frame shows its name."""
import os
import subprocess
import sys

import pytest

from perfetto_ui import find_chromium, unavailable

pytestmark = pytest.mark.browser

PROGRAM = '''\
import threading

def leaf(n):
    return sum(range(n))

def inner(n):
    return leaf(n) + leaf(n)

def outer():
    for _ in range(200):
        inner(2000)

t = threading.Thread(target=outer, name="worker")
t.start()
t.join()
'''


def dom_after_scripts(chromium, svg, fragment):
    args = [chromium, "--headless", "--disable-gpu", "--virtual-time-budget=3000",
            "--dump-dom", f"file://{svg}#{fragment}"]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_search_highlights_and_measures(tmp_path):
    why = unavailable()
    if why and os.environ.get("FRAMETRACE_BROWSER_REQUIRED"):
        pytest.fail(f"Chromium required (FRAMETRACE_BROWSER_REQUIRED) but {why}")
    if why:
        pytest.skip(why)
    chromium = find_chromium()
    (tmp_path / "prog.py").write_text(PROGRAM)
    svg = tmp_path / "f.svg"
    subprocess.run([sys.executable, "-m", "frametrace", "run", "-o", "t.json", "prog.py"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)
    subprocess.run([sys.executable, "-m", "frametrace", "flamegraph", "t.json", "-o", str(svg)],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)
    text = svg.read_text()
    assert 'data-n="worker"' in text and 'data-n="MainThread"' in text  # names, not idents
    plain = dom_after_scripts(chromium, svg, "")
    assert plain.count('fill="rgb(230,0,230)"') == 0
    dom = dom_after_scripts(chromium, svg, "s=^(inner|leaf)$")
    # inner and leaf above it (its calls of one path merge): two frames,
    # one span of time.
    assert dom.count('fill="rgb(230,0,230)"') == 2, dom[-3000:]
    both = float(dom.split('id="matched"', 1)[1].split("matched: ", 1)[1].split("%")[0])
    inner = dom_after_scripts(chromium, svg, "s=^inner$")
    alone = float(inner.split('id="matched"', 1)[1].split("matched: ", 1)[1].split("%")[0])
    assert 0 < both == alone < 100
