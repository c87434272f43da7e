"""The installed distribution's metadata agrees with the package."""
import importlib.metadata
import os
import subprocess
import sys

import pytest

import frametrace
from support import ROOT


def test_version_is_the_packages():
    # pyproject.toml reads the version from frametrace/_version.py: the
    # installed metadata and frametrace.__version__ are the same string.
    assert importlib.metadata.version("frametrace") == frametrace.__version__


def test_license_is_an_spdx_expression():
    meta = importlib.metadata.metadata("frametrace")
    assert meta["License-Expression"] == "MIT"
    # No License classifier beside the expression (PEP 639 forbids it).
    assert not [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    files = importlib.metadata.files("frametrace") or []
    assert any(f.name == "LICENSE" for f in files)


@pytest.mark.parametrize("platform", ["win32", "cygwin", "freebsd14"])
def test_build_refused_on_unsupported_platforms_with_a_message(platform):
    # setup.py stops before importing anything platform-specific or
    # compiling: the user reads why, not a C compiler error.
    setup_py = os.path.join(ROOT, "setup.py")
    if not os.path.exists(setup_py):
        pytest.skip("no setup.py beside the tests (a wheel's test run)")
    code = (f"import runpy, sys; sys.platform = {platform!r}; "
            f"sys.argv = ['setup.py', 'build_ext']; runpy.run_path({setup_py!r})")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert f"frametrace supports Linux (macOS untested); this is {platform!r}" in out.stderr
    assert "gcc" not in out.stderr and "error:" not in out.stderr
