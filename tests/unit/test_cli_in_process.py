"""The frametrace command's code run in this process: main() and the
progress shown only on a terminal."""
import io


import frametrace
from frametrace import cli


def test_progress_only_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    shown = Terminal()
    progress = cli.Progress("merging", stream=shown, delay=0)
    progress(1, 4)
    progress(4, 4)
    progress.close()
    assert shown.getvalue().startswith("\rmerging: 25%")
    assert shown.getvalue().endswith("\rmerging: 100%\n")
    piped = io.StringIO()
    progress = cli.Progress("merging", stream=piped, delay=0)
    progress(1, 4)
    progress.close()
    assert piped.getvalue() == ""
    slow = Terminal()
    progress = cli.Progress("merging", stream=slow, delay=60)  # short work shows nothing
    progress(1, 4)
    progress.close()
    assert slow.getvalue() == ""


def test_main_in_process(tmp_path, capsys):
    assert cli.main(["--version"]) == 0
    assert frametrace.__version__ in capsys.readouterr().out
    assert cli.main(["summary", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err
    assert cli.main([]) == 2
