"""The docs' picture of a trace: the bundled example's first trace, opened
in the Perfetto UI and saved as a PNG.  FRAMETRACE_SCREENSHOTS=DIR (CI's
browser stage gives docs/_static) keeps it there as perfetto.png, so the
README shows what the UI shows today."""
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.browser


def test_example_trace_screenshot(perfetto_ui, tmp_path):
    subprocess.run([sys.executable, str(ROOT / "examples" / "train_loop.py")], cwd=tmp_path,
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    trace = sorted((tmp_path / "traces").glob("*.0.json"))[0]
    png = tmp_path / "perfetto.png"
    with perfetto_ui.open(trace) as page:
        page.screenshot(png, width=1400, height=700)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert struct.unpack(">II", data[16:24]) == (1400, 700)
    out = os.environ.get("FRAMETRACE_SCREENSHOTS")
    if out:
        shutil.copyfile(png, pathlib.Path(out) / "perfetto.png")
