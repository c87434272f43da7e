"""The frametrace command counts and names each OS thread that recorded, also
where CPython reused threading idents: a program starts
and joins 50 named threads in turn."""
import re

from test_cli import frametrace_cmd

PROGRAM = '''\
import threading

def leaf():
    return 1

def work(i):
    for _ in range(i + 1):
        leaf()

idents = set()
for i in range(50):
    t = threading.Thread(target=work, args=(i,), name=f"w{i}")
    t.start()
    t.join()
    idents.add(t.ident)
print("idents", len(idents))
'''


def test_run_and_summary_count_each_thread(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    proc = frametrace_cmd("run", "-o", "t.json", "prog.py", cwd=tmp_path, check=0)
    idents = int(re.search(r"idents (\d+)", proc.stdout).group(1))
    assert idents < 50, "no ident was reused: the test shows nothing"
    assert " events of 51 threads written to " in proc.stderr, proc.stderr

    proc = frametrace_cmd("summary", "t.json", "--per-thread", "--limit", "0", cwd=tmp_path, check=0)
    assert ", 51 threads" in proc.stdout.splitlines()[0], proc.stdout
    headers = [line for line in proc.stdout.splitlines() if line.startswith("thread ")]
    assert len(headers) == 51
    for i in range(50):
        assert sum(h.endswith(f" (w{i})") for h in headers) == 1, headers


def test_merge_keeps_each_thread(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    for name in ("a.json", "b.json"):
        frametrace_cmd("run", "-o", name, "prog.py", cwd=tmp_path, check=0)
    frametrace_cmd("merge", "a.json", "b.json", "-o", "all.json", cwd=tmp_path, check=0)
    proc = frametrace_cmd("summary", "all.json", "--per-thread", "--limit", "1", cwd=tmp_path, check=0)
    assert ", 102 threads" in proc.stdout.splitlines()[0], proc.stdout
    headers = [line for line in proc.stdout.splitlines() if line.startswith("thread ")]
    assert len(headers) == 102
    for i in range(50):
        assert sum(f" (w{i} [pid " in h for h in headers) == 2, headers  # one per process
