"""Write errors of every writer, the CLI and the pytest plugin, in processes
under a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: write(2) fails
with EFBIG): the error says why, the target keeps what it had, and no
temporary is left.  Interruptions, modes, devices and
FIFOs: tests/tracer/test_atomic_writes.py."""
import errno
import os
import resource
import signal
import subprocess
import sys
import textwrap

import pytest

from support import child_env, run_json, run_stderr_gone

# How the writers handle a failing write: the same whatever clock or backend
# recorded the trace (as in test_atomic_writes.py).
pytestmark = [pytest.mark.usefixtures("clock"), pytest.mark.one_setup]

LIMIT = 4096  # bytes: below what each writer writes here
PREVIOUS = "the previous trace\n"


def limited():
    """preexec_fn: files of at most LIMIT bytes; a write past it fails."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".tmp")]


def test_every_writer_reports_a_write_error_and_keeps_the_target(tmp_path):
    out = run_json(f"""
        import json, os, resource, signal
        import frametrace
        from frametrace import reports
        from frametrace.export import write_chrome, write_perfetto
        from frametrace.loader import merge

        # 300 functions that take microseconds: every writer's output
        # (collapsed stacks: a line per function) is larger than the limit.
        ns = {{}}
        exec("\\n".join(f"def function_number_{{i}}(x):\\n    return sum(range(x))"
                         for i in range(300)), ns)
        with frametrace.Tracer(c_calls=False) as tracer:
            for n in range(20):
                for i in range(300):
                    ns[f"function_number_{{i}}"](300)
        source = {str(tmp_path / "source.json")!r}
        write_chrome(tracer, source)
        trace = frametrace.load(source)
        writers = {{
            "chrome.json": lambda p: write_chrome(tracer, p),
            "chrome.json.gz": lambda p: write_chrome(tracer, p),
            "perfetto.pftrace": lambda p: write_perfetto(tracer, p),
            "perfetto.pftrace.gz": lambda p: write_perfetto(tracer, p),
            "save.json": lambda p: trace.save(p),
            "save.json.gz": lambda p: trace.save(p),
            "pstats.prof": lambda p: reports.write_pstats(trace, p),
            "collapsed.txt": lambda p: reports.write_collapsed(trace, p),
            "flame.svg": lambda p: reports.write_flamegraph_svg(trace, p),
            "merged.json": lambda p: merge([source], p),
        }}
        directory = {str(tmp_path / "out")!r}
        os.mkdir(directory)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))
        result = {{}}
        for name, write in writers.items():
            target = os.path.join(directory, name)
            with open(target, "w") as f:
                f.write({PREVIOUS!r})
            try:
                write(target)
            except OSError as exc:
                with open(target) as f:
                    result[name] = [exc.errno, str(exc), f.read()]
            else:
                result[name] = "written"
        print(json.dumps(result))
    """)
    directory = tmp_path / "out"
    for name, got in out.items():
        assert got != "written", name
        code, message, content = got
        assert code == errno.EFBIG, (name, message)
        assert message.endswith(f"could not write {directory / name}: {os.strerror(errno.EFBIG)}"), \
            (name, message)
        assert content == PREVIOUS, name
    assert sorted(os.listdir(directory)) == sorted(out)  # no temporary left


# 300 functions that take microseconds: a flame graph larger than the
# limit too.
PROGRAM = """
ns = {}
exec("\\n".join(f"def function_number_{i}(x):\\n    return sum(range(x))"
                 for i in range(300)), ns)
for n in range(20):
    for i in range(300):
        ns[f"function_number_{i}"](300)
"""


def frametrace_cmd(*args, cwd, preexec_fn=None):
    return subprocess.run([sys.executable, "-m", "frametrace", *map(str, args)], cwd=cwd,
                          env=child_env(), capture_output=True, text=True, timeout=120,
                          preexec_fn=preexec_fn)


def test_the_cli_reports_a_write_error_and_keeps_the_target(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    good = tmp_path / "good.json"
    proc = frametrace_cmd("run", "-o", good, "prog.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    out.mkdir()
    targets = {"run": out / "t.json", "flamegraph": out / "t.svg", "merge": out / "all.json"}
    for target in targets.values():
        target.write_text(PREVIOUS)
    commands = {
        "run": ("run", "-o", targets["run"], "prog.py"),
        "flamegraph": ("flamegraph", good, "-o", targets["flamegraph"]),
        "merge": ("merge", good, "-o", targets["merge"]),
    }
    why = os.strerror(errno.EFBIG)  # "File too large"
    for command, args in commands.items():
        proc = frametrace_cmd(*args, cwd=tmp_path, preexec_fn=limited)
        assert proc.returncode != 0, (command, proc.stderr)
        assert str(targets[command]) in proc.stderr and why in proc.stderr, (command, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert targets[command].read_text() == PREVIOUS, command
    assert sorted(os.listdir(out)) == ["all.json", "t.json", "t.svg"]
    run_err = frametrace_cmd(*commands["run"], cwd=tmp_path, preexec_fn=limited).stderr
    assert f"could not write the trace to {targets['run']}: {why}" in run_err, run_err


def test_the_pytest_plugin_reports_a_write_error_and_leaves_no_file(tmp_path):
    (tmp_path / "test_fails.py").write_text(textwrap.dedent("""
        def work(i):
            return i * 2

        def test_fails(frametrace_tracer):
            for i in range(5000):
                work(i)
            assert False
    """))
    traces = tmp_path / "traces"
    env = child_env(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "frametrace.pytest_plugin", "-p", "no:cacheprovider",
         f"--frametrace-failures={traces}", "test_fails.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the test's failure only
    assert f"could not write the trace to {traces}: " in proc.stdout, proc.stdout
    assert os.strerror(errno.EFBIG) in proc.stdout and str(traces / "test_fails.py") in proc.stdout, \
        proc.stdout
    assert os.listdir(traces) == []  # no part of a trace, no temporary



# The program takes stderr away from frametrace: closes it, sets it to
# None, or leaves it a pipe whose reader has gone (`... 2>&1 | head -1`).
STDERR_GONE = '''\
import sys, time

def work():
    return sum(range(100))

work()
if sys.argv[1] == "closed":
    sys.stderr.close()
elif sys.argv[1] == "none":
    sys.stderr = None
else:
    while True:  # until the reader has gone
        try:
            print("waiting", file=sys.stderr, flush=True)
        except BrokenPipeError:
            break
        time.sleep(0.01)
'''


@pytest.mark.parametrize("how", ["closed", "none", "broken"])
def test_no_stderr_still_writes_the_trace(tmp_path, how):
    """What frametrace prints (the progress, the summary) never stands
    between the recording and its file, nor changes the exit status."""
    (tmp_path / "prog.py").write_text(STDERR_GONE)

    def without_stderr(*command):
        return run_stderr_gone([sys.executable, *command, "prog.py", how], tmp_path, child_env(),
                               first_line="waiting\n" if how == "broken" else None)

    # Untraced: 0, or 120 where Python's exit fails to flush the program's
    # "waiting" left in stderr's buffer (3.14).
    untraced, _ = without_stderr()
    status, out = without_stderr("-m", "frametrace", "run", "-o", "t.json")
    assert status == untraced
    assert out == ""  # nothing of frametrace's on the program's stdout
    from frametrace.loader import load

    assert "work" in {e.name for e in load(str(tmp_path / "t.json")).events}
