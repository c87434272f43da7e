"""frametrace is refused in a subinterpreter, on every version, with an
ImportError saying so; the main interpreter traces as before.  Both kinds
where the Python has them: Py_NewInterpreter()'s legacy ones
(_testcapi.run_in_subinterp), and those of _interpreters
(_xxsubinterpreters before 3.13).  Each runs in a child process."""
import os
import subprocess
import sys

import pytest

import frametrace

pytestmark = [pytest.mark.usefixtures("clock"), pytest.mark.every_setup]

WAIT = 120

# argv: the file the subinterpreter writes what its import did to, and
# whether the main interpreter imports frametrace first.
_SCRIPT = r"""
import sys
out, first = sys.argv[1], sys.argv[2] == "first"
code = f'''
try:
    import frametrace
    said = "imported"
except ImportError as exc:
    said = "ImportError: " + str(exc)
with open({out!r}, "a") as f:
    f.write(said + "\\n")
'''
if first:
    import frametrace
ways = []
try:
    import _testcapi
except ImportError:
    pass
else:
    ways.append("legacy")
    _testcapi.run_in_subinterp(code)
for name in ("_interpreters", "_xxsubinterpreters"):
    try:
        mod = __import__(name)
    except ImportError:
        continue
    ways.append(name)
    interp = mod.create()
    try:
        mod.run_string(interp, code)
    finally:
        mod.destroy(interp)
    break
print(" ".join(ways))
import frametrace
with frametrace.trace() as tracer:
    sorted(range(5))
assert any(e.name == "sorted" for e in tracer.getEvents())
print("traced")
"""


@pytest.mark.parametrize("first", ["first", "not first"])
def test_import_in_a_subinterpreter_is_refused(tmp_path, first):
    out = tmp_path / "said.txt"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(frametrace.__file__)))
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(out), first],
                          capture_output=True, text=True, env=env, timeout=WAIT)
    assert proc.returncode == 0, proc.stderr
    ways, traced = proc.stdout.split("\n")[:2]
    if not ways:
        pytest.skip("this Python has neither _testcapi nor _interpreters")
    assert traced == "traced"
    said = out.read_text().splitlines()
    assert len(said) == len(ways.split()), (ways, said)
    for line in said:
        assert line.startswith("ImportError: ") and "subinterpreter" in line, (ways, said)
    assert "halted" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
