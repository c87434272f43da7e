"""The installed distribution's metadata agrees with the package."""
import importlib.metadata

import frametrace


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
