"""The symbols the built extensions import (read with nm) are exactly the
private ones csrc/compat.h lists (see tests/unit/test_private_api.py)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import frametrace._testing
import frametrace._tracer
from support import ROOT


CSRC = os.path.join(ROOT, "csrc")
PACKAGE = os.path.join(ROOT, "python", "frametrace")
ENTRY = re.compile(r"^\s*\*\s+(private|implied|testing): (\S+) 3\.(\d+)(?:-3\.(\d+)|\+) — \S")


def entries():
    """[(kind, name, first minor, last minor or None)] from compat.h."""
    found = []
    with open(os.path.join(CSRC, "compat.h"), encoding="utf-8") as f:
        for line in f:
            m = ENTRY.match(line)
            if m:
                kind, name, first, last = m.groups()
                found.append((kind, name, int(first), int(last) if last else None))
    return found


def listed(kinds, fields):
    """Names of the entries of these kinds in force on this Python: symbols,
    or with fields the PyThreadState fields (without the prefix)."""
    minor = sys.version_info[1]
    names = set()
    for kind, name, first, last in entries():
        is_field = name.startswith("PyThreadState.")
        if kind in kinds and is_field == fields and first <= minor and (last is None or minor <= last):
            names.add(name[len("PyThreadState."):] if fields else name)
    return names


def imported_private_symbols(module=frametrace._tracer):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--undefined-only", module.__file__],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines()
            if line.split() and line.split()[-1].startswith("_Py")}


def test_imported_private_symbols_are_exactly_those_listed():
    imported = imported_private_symbols()
    expected = listed({"private", "implied"}, fields=False)
    assert imported - expected == set(), "imported but not listed in csrc/compat.h"
    assert expected - imported == set(), "listed in csrc/compat.h but no longer imported"
