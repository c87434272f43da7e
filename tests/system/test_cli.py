"""The frametrace command, run as ``python -m frametrace`` in subprocesses on
small programs written to tmp_path: run (scripts, -m, exit codes,
tracebacks), summary, flamegraph, merge, and bad input."""
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

import frametrace
from frametrace.loader import MergedTrace, load
from support import qual

needs_monitoring = pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")

SVG = "{http://www.w3.org/2000/svg}"

PROGRAM = '''\
import sys, threading

def crunch(n):
    return sum(i * i for i in range(n))

def worker():
    crunch(500)

def main():
    t = threading.Thread(target=worker)
    t.start()
    crunch(1000)
    t.join()
    print("argv=" + repr(sys.argv))
    print("name=" + __name__)
    print("path0=" + sys.path[0])
    if "--fail" in sys.argv:
        explode()
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[-1]))

def explode():
    raise RuntimeError("it broke")

main()
'''


def frametrace_cmd(*args, cwd, env=None, check=None):
    """Runs python -m frametrace args...; the CompletedProcess."""
    full_env = dict(os.environ)
    # The package is importable however it is installed (editable or not).
    package_root = os.path.dirname(os.path.dirname(frametrace.__file__))
    full_env["PYTHONPATH"] = os.pathsep.join(
        [package_root] + ([env.pop("PYTHONPATH")] if env and "PYTHONPATH" in env else []))
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "frametrace", *map(str, args)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=60)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def program(tmp_path):
    (tmp_path / "scripts").mkdir()
    path = tmp_path / "scripts" / "prog.py"
    path.write_text(PROGRAM)
    return path


def test_run_script_with_arguments(tmp_path, program):
    out = tmp_path / "out" / "trace.json"
    proc = frametrace_cmd("run", "-o", out, "scripts/prog.py", "a b", "-o", "--flag",
                          cwd=tmp_path, check=0)
    # The program's stdout is its own; sys.argv as python would give it.
    assert proc.stdout.splitlines() == [
        "argv=" + repr(["scripts/prog.py", "a b", "-o", "--flag"]),
        "name=__main__",
        "path0=" + str(program.parent.resolve()),
    ]
    assert f"written to {out}" in proc.stderr
    assert "sorted by self; top 10 shown" in proc.stderr  # the summary, on stderr
    assert " (scripts/prog.py:" in proc.stderr
    trace = load(out)
    names = {e.name for e in trace.events}
    assert {"main", "crunch", "worker"} <= names
    main = [e for e in trace.events if e.name == "main"]
    assert len(main) == 1 and not main[0].open_at_start and not main[0].open_at_stop
    # The command's own frames are not in the trace: the program starts fresh.
    module = next(e for e in trace.events if e.name == "<module>" and e.filename.endswith("prog.py"))
    assert not module.open_at_start
    # Read and compiled before the start: the program's <module> is the
    # main thread's only root, with no runpy or exec() around it.
    roots = [e for e in trace.events if e.depth == 0 and e.thread_id == module.thread_id]
    assert roots == [module]
    package = os.path.dirname(frametrace.__file__)
    assert not any(e.filename.startswith(package) for e in trace.events)
    assert len({e.thread_id for e in trace.events}) == 2


def test_run_module_compressed_and_options(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tool.py").write_text(textwrap.dedent('''\
        import sys
        def helper():
            return len(sys.argv)
        if __name__ == "__main__":
            helper()
            print("argv0=" + sys.argv[0])
            print("rest=" + repr(sys.argv[1:]))
            print("path0=" + sys.path[0])
        '''))
    proc = frametrace_cmd("run", "--no-c-calls", "-o", "t.json.gz", "-m", "mypkg.tool", "x", "-v",
                          cwd=tmp_path, check=0)
    assert proc.stdout.splitlines() == [
        "argv0=" + str(pkg / "tool.py"), "rest=['x', '-v']", "path0=" + str(tmp_path)]
    with open(tmp_path / "t.json.gz", "rb") as fh:
        assert fh.read(2) == b"\x1f\x8b"
    trace = load(tmp_path / "t.json.gz")
    assert "helper" in {e.name for e in trace.events}
    assert {e.kind for e in trace.events} == {"py"}  # --no-c-calls
    # The module found through PYTHONPATH too, from another directory.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = frametrace_cmd("run", "--buffer-size", "64", "-m", "mypkg.tool", cwd=elsewhere,
                          env={"PYTHONPATH": str(tmp_path)}, check=0)
    assert "rest=[]" in proc.stdout
    assert "events were lost entirely" in proc.stderr  # a 64-record ring overflows
    assert load(elsewhere / "frametrace.json").stats.dropped > 0


def test_run_failing_script(tmp_path, program):
    proc = frametrace_cmd("run", "-o", "fail.json", "scripts/prog.py", "--fail", cwd=tmp_path,
                          check=1)
    err = proc.stderr
    assert "Traceback (most recent call last):" in err
    assert "RuntimeError: it broke" in err
    # The traceback starts in the program, as python's would.
    tb = err[err.index("Traceback"):err.index("RuntimeError: it broke")]
    assert 'prog.py", line' in tb.splitlines()[1]
    assert "runpy" not in tb and "/frametrace/cli" not in tb
    trace = load(tmp_path / "fail.json")
    explode = [e for e in trace.events if e.name == "explode"]
    assert len(explode) == 1 and not explode[0].open_at_stop
    assert load(tmp_path / "fail.json").events  # the trace was still written


def test_run_script_with_a_syntax_error(tmp_path):
    (tmp_path / "bad.py").write_text("x = 1\ndef f(:\n    pass\n")
    proc = frametrace_cmd("run", "bad.py", cwd=tmp_path, check=1)
    assert "SyntaxError" in proc.stderr and 'bad.py", line 2' in proc.stderr
    assert "/frametrace/cli" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "frametrace.json").exists()  # nothing ran


def test_run_exit_code_preserved(tmp_path, program):
    proc = frametrace_cmd("run", "scripts/prog.py", "--exit", "3", cwd=tmp_path, check=3)
    assert "written to" in proc.stderr
    assert "main" in {e.name for e in load(tmp_path / "frametrace.json").events}


def test_run_missing_program(tmp_path):
    proc = frametrace_cmd("run", "nope.py", "arg", cwd=tmp_path, check=2)
    assert "can't open file 'nope.py'" in proc.stderr and "No such file" in proc.stderr
    assert proc.stderr.count("\n") == 1  # one clear line, no traceback
    proc = frametrace_cmd("run", "-m", "no_such_module_here", cwd=tmp_path, check=2)
    assert "No module named 'no_such_module_here'" in proc.stderr
    proc = frametrace_cmd("run", cwd=tmp_path, check=2)
    assert "give the program to run" in proc.stderr
    assert not os.path.exists(tmp_path / "frametrace.json")


@pytest.fixture
def two_runs(tmp_path, program):
    """Two runs of the program, one after the other: a.json and b.json.gz."""
    frametrace_cmd("run", "-o", "a.json", "scripts/prog.py", cwd=tmp_path, check=0)
    frametrace_cmd("run", "-o", "b.json.gz", "scripts/prog.py", cwd=tmp_path, check=0)
    return tmp_path / "a.json", tmp_path / "b.json.gz"


STEP_PROGRAM = """\
import sys
import frametrace


def step_work(i):
    return sum(j * j for j in range(100 + i))

def train(steps):
    for i in range(steps):
        step_work(i)
        frametrace.step()
    if "--fail" in sys.argv:
        raise ValueError("diverged")

train(int(sys.argv[1]))
print("done")
"""


@pytest.fixture
def step_program(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(STEP_PROGRAM)
    return path


def test_run_steps_writes_each_cycle(tmp_path, step_program):
    proc = frametrace_cmd("run", "--steps", "wait=1,active=2,repeat=2", "-o", "out/t.json",
                          "loop.py", "10", cwd=tmp_path, check=0)
    assert proc.stdout == "done\n"
    assert sorted(os.listdir(tmp_path / "out")) == ["t.0.json", "t.1.json"]
    assert "steps 1-2 (cycle 0)" in proc.stderr and "steps 4-5 (cycle 1)" in proc.stderr
    package = os.path.dirname(frametrace.__file__)
    for cycle, steps in ((0, [1, 2]), (1, [4, 5])):
        trace = load(tmp_path / "out" / f"t.{cycle}.json")
        assert trace.cycle == cycle
        assert [s.step for s in trace.steps] == steps
        work = [e for e in trace.events if e.name == "step_work"]
        assert len(work) == 2 and not any(e.open_at_start or e.open_at_stop for e in work)
        # Each traced call lies in its step; nothing of frametrace is traced.
        for e, s in zip(work, trace.steps):
            assert s.start_ns <= e.start_ns <= e.end_ns <= s.end_ns
        assert not any(e.filename.startswith(package) for e in trace.events)
        assert not any("runpy" in e.filename for e in trace.events)
        assert {e.name for e in trace.events} == {
            "<module>", "train", "step_work", qual("step_work.<locals>.<genexpr>"), "sum"}


def test_run_steps_says_once_per_cycle_what_its_rings_lost(tmp_path, step_program):
    """A cycle that lost events is told at the program's frametrace.step()
    that closed it, naming buffer_size, once (not again by the CLI)."""
    proc = frametrace_cmd("run", "--steps", "active=1,repeat=2", "--buffer-size", "64",
                          "-o", "t.json", "loop.py", "3", cwd=tmp_path, check=0)
    lost = [line for line in proc.stderr.splitlines() if "were lost entirely" in line]
    dropped = [load(tmp_path / f"t.{cycle}.json").stats.dropped for cycle in (0, 1)]
    assert all(dropped)
    line = STEP_PROGRAM.splitlines().index("        frametrace.step()") + 1
    assert [x.split(": ", 1)[0].endswith(f"loop.py:{line}") for x in lost] == [True, True], lost
    assert [x.split(": ", 1)[1].split("; buffer_size=")[0] for x in lost] == [
        f"RuntimeWarning: frametrace: {n:,} events of cycle {cycle}, steps {cycle}-{cycle} were "
        f"lost entirely (the oldest, per thread: buffer_size is 64 records, a call and a return "
        f"are two)" for cycle, n in enumerate(dropped)]
    assert all(x.endswith(" would have kept them") for x in lost), lost


def test_run_steps_python_steps_and_failures(tmp_path, step_program):
    proc = frametrace_cmd("run", "--steps", "3", "--python-steps", "1", "loop.py", "6",
                          "--fail", cwd=tmp_path, check=1)
    assert "ValueError: diverged" in proc.stderr and "done" not in proc.stdout
    trace = load(tmp_path / "frametrace.0.json")
    assert [s.step for s in trace.steps] == [0, 1, 2]
    assert [e.name for e in trace.events if e.name == "step_work"] == ["step_work"]
    # Python traced in step 0 only: the loop is cut at the tracer's stop.
    assert trace.tracer_stop_ns <= trace.steps[1].start_ns < trace.session_end_ns
    assert all(e.end_ns <= trace.tracer_stop_ns for e in trace.events)
    (loop,) = [e for e in trace.events if e.name == "train"]
    assert loop.open_at_stop and loop.end_ns == trace.tracer_stop_ns
    # A program that ends before its schedule records anything.
    proc = frametrace_cmd("run", "--steps", "skip_first=20,active=2", "loop.py", "4",
                          cwd=tmp_path, check=2)
    assert proc.stdout == "done\n"
    assert "no trace written" in proc.stderr and "frametrace.step() 4 times" in proc.stderr
    # Without frametrace, frametrace.step() does nothing.
    plain = subprocess.run([sys.executable, "loop.py", "3"], cwd=tmp_path, capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=os.path.dirname(
                               os.path.dirname(frametrace.__file__))))
    assert plain.returncode == 0 and plain.stdout == "done\n"


@pytest.mark.parametrize("args, words", [
    (["--steps", "active=x"], "active must be an integer, not 'x'"),
    (["--steps", "act=2"], "key=value pairs with keys"),
    (["--steps", "wait=1"], "active=N is required"),
    (["--steps", "active=0"], "active must be >= 1"),
    (["--steps", "wait=-1,active=1"], "wait must be >= 0"),
    (["--python-steps", "1"], "--python-steps needs --steps"),
    (["--steps", "active=2", "--python-steps", "3"], "larger than the schedule's active=2"),
])
def test_run_steps_bad_options(tmp_path, step_program, args, words):
    proc = frametrace_cmd("run", *args, "loop.py", "2", cwd=tmp_path, check=2)
    assert words in proc.stderr
    assert proc.stdout == ""  # the program did not run


def test_summary_flamegraph_and_merge(tmp_path, two_runs):
    a, b = two_runs
    proc = frametrace_cmd("summary", a, "--sort", "calls", "--limit", "5", cwd=tmp_path, check=0)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{a}: pid ")
    assert "sorted by calls; top 5 shown" in proc.stdout
    assert len([line for line in lines if "%" in line]) == 5
    proc = frametrace_cmd("summary", b, "--per-thread", "--limit", "0", cwd=tmp_path, check=0)
    assert "crunch (scripts/prog.py:3)" in proc.stdout
    assert "(MainThread)" in proc.stdout and proc.stdout.count("\nthread ") == 2

    frametrace_cmd("flamegraph", a, "-o", "flame.svg", cwd=tmp_path, check=0)
    root = ET.parse(tmp_path / "flame.svg").getroot()
    assert root.tag == SVG + "svg"
    assert any("crunch" in (t.text or "") for t in root.iter(SVG + "title"))

    proc = frametrace_cmd("merge", b, a, "-o", "all.json", cwd=tmp_path, check=0)
    assert "2 processes merged into all.json" in proc.stderr
    with open(tmp_path / "all.json") as fh:
        doc = json.load(fh)
    runs = {}
    for path in (a, b):
        trace = load(path)
        runs[trace.pid] = trace
    pid_a, pid_b = load(a).pid, load(b).pid
    spans = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] in ("python", "c"):
            lo, hi = spans.get(e["pid"], (float("inf"), 0))
            spans[e["pid"]] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    assert set(spans) == {pid_a, pid_b}
    # a ran first: on the common wall-clock timeline all of it comes before b.
    assert spans[pid_a][0] >= 0 and spans[pid_a][1] < spans[pid_b][0]
    merged = load(tmp_path / "all.json")
    assert isinstance(merged, MergedTrace)
    assert [p["pid"] for p in merged.processes] == [pid_b, pid_a]
    assert len(merged.events) == len(runs[pid_a].events) + len(runs[pid_b].events)
    proc = frametrace_cmd("summary", "all.json", cwd=tmp_path, check=0)
    assert "2 processes" in proc.stdout.splitlines()[0]

    # The same run twice: the second copy gets a pid of its own.
    proc = frametrace_cmd("merge", a, a, "-o", "aa.json.gz", cwd=tmp_path, check=0)
    twice = load(tmp_path / "aa.json.gz")
    pids = [p["pid"] for p in twice.processes]
    assert pids[0] == pid_a and pids[1] != pid_a
    assert f"(was {pid_a})" in proc.stderr


def test_summary_flamegraph_and_merge_of_pftrace(tmp_path, program):
    """The format the README recommends for big traces is read back by
    every command that reads a trace."""
    frametrace_cmd("run", "-o", "a.pftrace", "scripts/prog.py", cwd=tmp_path, check=0)
    frametrace_cmd("run", "-o", "b.pftrace.gz", "scripts/prog.py", cwd=tmp_path, check=0)
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace.gz"
    proc = frametrace_cmd("summary", b, "--per-thread", "--limit", "0", cwd=tmp_path, check=0)
    assert proc.stdout.startswith(f"{b}: pid "), proc.stdout
    assert "crunch (scripts/prog.py:3)" in proc.stdout
    assert "(MainThread)" in proc.stdout and proc.stdout.count("\nthread ") == 2

    frametrace_cmd("flamegraph", a, "-o", "flame.svg", cwd=tmp_path, check=0)
    root = ET.parse(tmp_path / "flame.svg").getroot()
    assert any("crunch" in (t.text or "") for t in root.iter(SVG + "title"))

    proc = frametrace_cmd("merge", a, b, "-o", "all.json", cwd=tmp_path, check=0)
    assert "2 processes merged into all.json" in proc.stderr
    merged = load(tmp_path / "all.json")
    assert [p["source"] for p in merged.processes] == [str(a), str(b)]
    assert len(merged.events) == len(load(a).events) + len(load(b).events)

    data = a.read_bytes()
    (tmp_path / "cut.pftrace").write_bytes(data[: len(data) // 2])
    for command in ("summary", "flamegraph"):
        proc = frametrace_cmd(command, "cut.pftrace", cwd=tmp_path, check=2)
        assert proc.stderr.startswith(f"frametrace {command}: cut.pftrace: "), proc.stderr
        assert "truncated" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_trace_files(tmp_path, two_runs):
    a, _ = two_runs
    data = a.read_bytes()
    (tmp_path / "cut.json").write_bytes(data[: len(data) // 3])
    (tmp_path / "foreign.json").write_text('{"traceEvents": [{"ph": "X", "name": "f", '
                                           '"ts": 1, "dur": 1, "pid": 1, "tid": 1}]}')
    for command in (["summary"], ["flamegraph"]):
        for name, words in (("cut.json", "truncated"), ("foreign.json", "not written by frametrace"),
                            ("missing.json", "No such file")):
            proc = frametrace_cmd(*command, name, cwd=tmp_path, check=2)
            assert proc.stderr.startswith(f"frametrace {command[0]}: "), proc.stderr
            assert name in proc.stderr and words in proc.stderr, proc.stderr
            assert "Traceback" not in proc.stderr
    proc = frametrace_cmd("merge", a, "cut.json", "-o", "m.json", cwd=tmp_path, check=2)
    assert "cut.json" in proc.stderr and "truncated" in proc.stderr
    assert not os.path.exists(tmp_path / "m.json")
    proc = frametrace_cmd("summary", a, "--sort", "bogus", cwd=tmp_path, check=2)
    assert "invalid choice" in proc.stderr


@needs_monitoring
def test_cli_backend_option(tmp_path):
    script = tmp_path / "p.py"
    script.write_text("def f():\n    return len('ab')\nf()\n")
    for backend in ("setprofile", "monitoring"):
        out = tmp_path / f"{backend}.json"
        proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "--backend", backend,
                               "-o", str(out), str(script)], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        trace = frametrace.load(out)
        assert [(e.name, e.depth) for e in trace.events] == [("<module>", 0), ("f", 1), ("len", 2)]


def test_run_output_format_follows_the_extension(tmp_path, program, step_program):
    """-o names the format: .pftrace is Perfetto's protobuf trace (a
    TracePacket first: field 1, length-delimited), .json Chrome JSON; any
    other extension is refused before the program runs."""
    frametrace_cmd("run", "-o", "t.pftrace", "scripts/prog.py", cwd=tmp_path, check=0)
    data = (tmp_path / "t.pftrace").read_bytes()
    assert data[:1] == b"\x0a" and b"crunch" in data
    proc = frametrace_cmd("run", "-o", "t.txt", "scripts/prog.py", cwd=tmp_path, check=2)
    assert "unknown trace extension" in proc.stderr and ".pftrace" in proc.stderr
    assert proc.stdout == "" and not (tmp_path / "t.txt").exists()
    frametrace_cmd("run", "--steps", "wait=1,active=2", "-o", "s.pftrace.gz", "loop.py", "4",
                   cwd=tmp_path, check=0)
    assert os.listdir(tmp_path).count("s.0.pftrace.gz") == 1
    # No Python traced (--python-steps 0): the steps still go to Chrome JSON...
    frametrace_cmd("run", "--steps", "wait=1,active=2", "--python-steps", "0", "-o", "n.json",
                   "loop.py", "4", cwd=tmp_path, check=0)
    steps_only = load(tmp_path / "n.0.json")
    assert [s.step for s in steps_only.steps] == [1, 2] and steps_only.events == []
    assert steps_only.tracer_stop_ns is None
    # ... and to a .pftrace just the same.
    frametrace_cmd("run", "--steps", "wait=1,active=2", "--python-steps", "0", "-o", "n.pftrace",
                   "loop.py", "4", cwd=tmp_path, check=0)
    steps_only = load(tmp_path / "n.0.pftrace")
    assert [s.step for s in steps_only.steps] == [1, 2] and steps_only.events == []
    assert steps_only.tracer_stop_ns is None
    # merge writes Chrome JSON only.
    frametrace_cmd("run", "-o", "a.json", "scripts/prog.py", cwd=tmp_path, check=0)
    proc = frametrace_cmd("merge", "a.json", "-o", "m.pftrace", cwd=tmp_path, check=2)
    assert "merge writes Chrome trace JSON" in proc.stderr and not (tmp_path / "m.pftrace").exists()


def test_run_refuses_an_output_it_cannot_write_before_the_program_runs(tmp_path, program):
    """-o naming a folder, or a place where no file can be created: refused
    before the program runs, as an unknown extension is, saying why."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("")
    cases = [("folder", "is a folder"),
             ("file/sub/t.json", f"{tmp_path / 'file'} is not a folder")]
    if os.path.isdir("/proc/self"):  # a folder where no one can create a file
        cases += [("/proc/t.json", "cannot write to /proc"),
                  ("/proc/new/t.json", "cannot write to folder /proc/new")]
    for output, why in cases:
        for steps in ([], ["--steps", "2"]):
            proc = frametrace_cmd("run", *steps, "-o", output, "scripts/prog.py", cwd=tmp_path,
                                  check=2)
            assert f"frametrace run: -o {os.path.join(tmp_path, output)}: " in proc.stderr, \
                proc.stderr
            assert why in proc.stderr, proc.stderr
            assert proc.stdout == "", (output, proc.stdout)  # the program never ran
    assert sorted(os.listdir(tmp_path)) == ["file", "folder", "scripts"]
    assert os.listdir(tmp_path / "folder") == []


FIB_PROGRAM = '''\
import sys

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

fib(int(sys.argv[1]))
'''


def test_run_keeps_a_whole_ordinary_program_by_default(tmp_path):
    """Without --buffer-size a thread's ring may grow to --max-memory: a
    program of more calls than the library's default ring holds (fib(27):
    635,621 calls, 1.27 million records) loses none."""
    (tmp_path / "fib.py").write_text(FIB_PROGRAM)
    frametrace_cmd("run", "-o", "t.pftrace", "fib.py", "27", cwd=tmp_path, check=0)
    trace = load(tmp_path / "t.pftrace")
    assert trace.stats.dropped == 0
    assert sum(e.name == "fib" for e in trace.events) == 635621
    assert 2 * len(trace.events) > frametrace.DEFAULT_BUFFER_SIZE


def lost_line(stderr):
    (line,) = [x for x in stderr.splitlines() if "lost entirely" in x]
    return line


def test_run_names_the_buffer_size_that_would_have_kept_everything(tmp_path):
    (tmp_path / "fib.py").write_text(FIB_PROGRAM)
    proc = frametrace_cmd("run", "--buffer-size", "4096", "-o", "t.pftrace", "fib.py", "18",
                          cwd=tmp_path, check=0)
    line = lost_line(proc.stderr)
    assert "a thread's ring reached --buffer-size 4,096 records" in line, line
    suggested = line.split("; --buffer-size ")[1].split(" would have kept them")[0]
    proc = frametrace_cmd("run", "--buffer-size", suggested.replace(",", ""), "-o", "t.pftrace",
                          "fib.py", "18", cwd=tmp_path, check=0)
    assert "lost entirely" not in proc.stderr
    assert load(tmp_path / "t.pftrace").stats.dropped == 0


def test_run_names_the_max_memory_that_would_have_kept_everything(tmp_path):
    (tmp_path / "fib.py").write_text(FIB_PROGRAM)
    proc = frametrace_cmd("run", "--max-memory", str(1 << 20), "-o", "t.pftrace", "fib.py",
                          "24", cwd=tmp_path, check=0)
    line = lost_line(proc.stderr)
    assert "the threads' rings together reached --max-memory 1,048,576 bytes" in line, line
    suggested = line.split("; --max-memory ")[1].split(" would have kept them")[0]
    proc = frametrace_cmd("run", "--max-memory", suggested.replace(",", ""), "-o", "t.pftrace",
                          "fib.py", "24", cwd=tmp_path, check=0)
    assert "lost entirely" not in proc.stderr
    assert load(tmp_path / "t.pftrace").stats.dropped == 0


def test_run_writes_pftrace_where_json_would_be_too_large(tmp_path, monkeypatch):
    """Without -o, a trace of more events than the Perfetto UI opens as
    JSON is written as frametrace.pftrace, said; with -o NAME.json it is
    JSON all the same."""
    from frametrace.cli import _run_output

    def traced():
        tracer = frametrace.Tracer()
        with tracer:
            sum(abs(i) for i in range(100))
        return tracer

    monkeypatch.setattr(_run_output, "JSON_EVENTS_THE_UI_OPENS", 50)
    monkeypatch.chdir(tmp_path)
    said = []
    monkeypatch.setattr(_run_output, "say", said.append)
    assert _run_output.write_run_trace(traced(), str(tmp_path / "frametrace.json"), "p", {}, 0,
                                       chosen=False) == 0
    assert not (tmp_path / "frametrace.json").exists()
    assert load(tmp_path / "frametrace.pftrace").stats.dropped == 0
    assert any("writing frametrace.pftrace" in x for x in said), said
    assert _run_output.write_run_trace(traced(), str(tmp_path / "frametrace.json"), "p", {}, 0,
                                       chosen=True) == 0
    assert load(tmp_path / "frametrace.json").events
