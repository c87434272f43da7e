"""Every command's failure goes through one error type: the command raises
frametrace.cli.CommandError and prints nothing of it; main() prints
``frametrace COMMAND: message`` once and returns the status."""
import importlib.util

import pytest

from frametrace import cli


def bad_inputs(tmp_path):
    """For each command: arguments it refuses, and what it says."""
    missing = str(tmp_path / "nope.json")
    return {
        "run": (["run", str(tmp_path / "nope.py")],
                f"can't open file {str(tmp_path / 'nope.py')!r}: [Errno 2] No such file or "
                f"directory"),
        "attach": (["attach", "1", "--reason", "x"], "--reason goes only with --dump"),
        "attach --dump": (["attach", "1", "--dump", "-o", "x.json"],
                          "--dump does not go with -o: the flight recorder's own settings and "
                          "dump_dir apply"),
        "summary": (["summary", missing], None),
        "flamegraph": (["flamegraph", missing, "-o", str(tmp_path / "out.svg")], None),
        "merge": (["merge", missing, "-o", str(tmp_path / "all.json")], None),
        "view": (["view", missing, "--no-browser", "--port", "0"], f"{missing}: no such file"),
        # Without pyarrow, what to install; with it, the file.
        "convert": (["convert", missing, "-o", str(tmp_path / "d.parquet")],
                    None if importlib.util.find_spec("pyarrow") else
                    "writing a .parquet dataset needs pyarrow, which is not installed: "
                    "pip install 'frametrace[data]'"),
        "sql": (["sql", "select 1", missing], None),
        "ranks": (["ranks", missing], None),
        "compare": (["compare", missing, missing], None),
    }


CASES = ["run", "attach", "attach --dump", "summary", "flamegraph", "merge", "view", "convert",
         "sql", "ranks", "compare"]


def test_every_command_has_a_case():
    assert {case.split()[0] for case in CASES} == set(cli._COMMANDS)


@pytest.mark.parametrize("case", CASES)
def test_a_failing_command_prints_one_prefixed_line_and_exits_2(tmp_path, capsys, case):
    args, message = bad_inputs(tmp_path)[case]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"frametrace {args[0]}: ") and err.count("\n") == 1, err
    if message is not None:
        assert err == f"frametrace {args[0]}: {message}\n"
    else:
        assert "nope.json" in err


@pytest.mark.parametrize("case", CASES)
def test_a_failing_command_raises_command_error(tmp_path, capsys, case):
    args, message = bad_inputs(tmp_path)[case]
    parser, run_parser = cli._parser()
    if args[0] == "run":
        ns = cli._run.parse(parser, run_parser, args[1:], own_process=False)
    else:
        ns = parser.parse_args(args)
    with pytest.raises(cli.CommandError) as raised:
        cli._COMMANDS[args[0]].run(ns)
    assert raised.value.status == 2
    if message is not None:
        assert raised.value.message == message
    assert capsys.readouterr().err == ""  # main() alone prints it
