"""frametrace run's endings (frametrace._endings): os._exit never comes back
and SIGTERM always ends the process, whatever stopping the recording raises
(an interrupt that stop() kept, a session refusing a stop from its own
writer thread).  Each case runs in a child process: the endings are real."""
import signal
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import os, signal, sys
    from frametrace._endings import Endings

    def stop():
        raise {exc}("stop() refused")

    def end(status, why):
        print("written:", status, why, flush=True)
        return 7

    Endings().arm(end, stop)
    if sys.argv[1] == "os_exit":
        os._exit(0)
    else:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10**8):  # the handler runs between two bytecodes
            pass
    print("came back", flush=True)
""")


@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "RuntimeError"])
@pytest.mark.parametrize("how", ["os_exit", "sigterm"])
def test_the_process_ends_as_it_would_whatever_stop_raises(how, exc):
    proc = subprocess.run([sys.executable, "-c", PROGRAM.format(exc=exc), how],
                          capture_output=True, text=True, timeout=120)
    assert "came back" not in proc.stdout, proc.stderr
    if how == "os_exit":
        assert proc.stdout == "written: 0 called os._exit(0)\n", proc.stderr
        assert proc.returncode == 7, proc.stderr
    else:
        assert proc.stdout == f"written: {-signal.SIGTERM} was ended by SIGTERM\n", proc.stderr
        assert proc.returncode == -signal.SIGTERM, proc.stderr
