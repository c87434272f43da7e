"""The environment variables frametrace reads (docs/environment.md): a
value it does not understand is refused, naming the variable and the values
it takes, before the program runs; never taken for the default."""
import os
import subprocess
import sys

import pytest

import frametrace

WAIT = 120  # seconds before a hung command fails the test


def _env(**values):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMETRACE_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(frametrace.__file__))
    env.update(values)
    return env


@pytest.mark.parametrize("name, value, takes", [
    ("FRAMETRACE_CLOCK", "MONOTONIC", '"auto" (the default'),
    ("FRAMETRACE_CLOCK", "monotonic ", '"monotonic"'),
    ("FRAMETRACE_CLOCK", "cycle", '"monotonic"'),
    ("FRAMETRACE_BACKEND", "SetProfile", '"setprofile" or "monitoring"'),
    ("FRAMETRACE_BACKEND", "setprofile ", '"setprofile" or "monitoring"'),
    ("FRAMETRACE_BACKEND", "sys.monitoring", '"setprofile" or "monitoring"'),
])
def test_run_refuses_a_value_it_does_not_understand(tmp_path, name, value, takes):
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "-o", "t.json", "prog.py"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env=_env(**{name: value}), timeout=WAIT)
    assert proc.returncode == 2, proc.stderr
    assert f"{name} must be " in proc.stderr and takes in proc.stderr
    assert f"got {value!r}" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("name, value", [
    ("FRAMETRACE_CLOCK", ""), ("FRAMETRACE_CLOCK", "auto"), ("FRAMETRACE_CLOCK", "monotonic"),
    ("FRAMETRACE_BACKEND", ""), ("FRAMETRACE_BACKEND", "auto"),
    ("FRAMETRACE_BACKEND", "setprofile"),
] + ([("FRAMETRACE_BACKEND", "monitoring")] if sys.version_info >= (3, 12) else []))
def test_run_takes_the_documented_values(tmp_path, name, value):
    (tmp_path / "prog.py").write_text("sorted(range(3))\n")
    proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "-o", "t.json", "prog.py"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env=_env(**{name: value}), timeout=WAIT)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "t.json").exists()
