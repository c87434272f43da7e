"""frametrace.load of a file that is not there: an OSError."""

import pytest

from frametrace.loader import load


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope.json")
