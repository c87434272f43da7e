"""frametrace.Options, the tracer's options checked once, and every way in:
each function that makes tracers, and the run and attach commands, takes
each option and names a bad one; the command line reads them all back."""
import dataclasses
import pickle
import sys

import pytest

import frametrace
import frametrace.torch
from frametrace import cli
from frametrace.tracer import OPTION_NAMES

MONITORING = sys.version_info >= (3, 12)

# A bad value of each option, with the error and what it must say.
BAD = {
    "buffer_size": (0, ValueError, "buffer_size must be between"),
    "c_calls": ("yes", TypeError, "c_calls must be a bool"),
    "backend": ("perf", ValueError, "backend must be"),
    "max_memory": (0, ValueError, "max_memory must be between"),
    "ignore": ([""], ValueError, "ignore= pattern 0 is empty"),
    "include": ([], ValueError, "include= is empty"),
}

# Every function that makes tracers, called with the tracer's options only.
MAKERS = {
    "Tracer": lambda **kw: frametrace.Tracer(**kw),
    "trace": lambda **kw: frametrace.trace(**kw),
    "profile": lambda **kw: frametrace.profile(**kw),
    "flight_recorder": lambda **kw: frametrace.flight_recorder("unused-dir", **kw),
    "attach": lambda **kw: frametrace.attach(1, **kw),  # checked before pid 1 is looked at
    "torch.profile": lambda **kw: frametrace.torch.profile(**kw),
    "torch.flight_recorder": lambda **kw: frametrace.torch.flight_recorder("unused-dir", **kw),
}


def test_the_options_are_the_tracers():
    assert OPTION_NAMES == ("buffer_size", "c_calls", "backend", "max_memory", "ignore",
                            "include")
    options = frametrace.Options()
    tracer = frametrace.Tracer(backend="setprofile")
    assert options == dataclasses.replace(tracer.options, backend="auto")
    assert (options.buffer_size, options.max_memory) == (frametrace.DEFAULT_BUFFER_SIZE,
                                                         frametrace.DEFAULT_MAX_MEMORY)
    assert (options.ignore, options.include, options.c_calls) == ((), None, True)


def test_frozen_normalised_and_hashable():
    options = frametrace.Options(buffer_size=64, ignore=iter(["a.b", "c"]), include=["a"])
    assert options.ignore == ("a.b", "c") and options.include == ("a",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.buffer_size = 1
    assert options == frametrace.Options(buffer_size=64, ignore=("a.b", "c"), include=("a",))
    assert len({options, frametrace.Options(buffer_size=64, ignore=["a.b", "c"],
                                            include=["a"])}) == 1
    assert pickle.loads(pickle.dumps(options)) == options  # to spawned children
    assert frametrace.Options(backend=None).backend == "auto"
    with pytest.raises(ValueError, match="buffer_size"):
        dataclasses.replace(options, buffer_size=-1)  # checked again


@pytest.mark.parametrize("name", OPTION_NAMES)
def test_a_bad_option_is_named(name):
    value, error, message = BAD[name]
    with pytest.raises(error, match=message):
        frametrace.Options(**{name: value})
    with pytest.raises(TypeError, match="backend must be a str"):
        frametrace.Options(backend=1)


def test_the_backend_is_checked_where_a_tracer_runs():
    # Options may go to another Python (attach): the name is checked, whether
    # this Python has it when a tracer is made here.
    options = frametrace.Options(backend="monitoring")
    if MONITORING:
        assert frametrace.Tracer(options=options).backend == "monitoring"
    else:
        with pytest.raises(ValueError, match="needs sys.monitoring"):
            frametrace.Tracer(options=options)
        with pytest.raises(ValueError, match="needs sys.monitoring"):
            frametrace.profile(options=options)


@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize("name", OPTION_NAMES)
def test_every_maker_takes_every_option_and_names_a_bad_one(maker, name):
    value, error, message = BAD[name]
    with pytest.raises(error, match=message):
        MAKERS[maker](**{name: value})


@pytest.mark.parametrize("maker", MAKERS)
def test_every_maker_takes_options(maker):
    with pytest.raises(TypeError, match="options must be a frametrace.Options, not dict"):
        MAKERS[maker](options={"buffer_size": 64})
    with pytest.raises(TypeError, match="give options= or buffer_size, not both"):
        MAKERS[maker](options=frametrace.Options(), buffer_size=64)
    with pytest.raises(TypeError, match="'buffer'"):
        MAKERS[maker](buffer=64)


def test_the_options_reach_the_tracers():
    options = frametrace.Options(buffer_size=64, c_calls=False, backend="setprofile",
                                 max_memory=1 << 20, ignore=["a"], include=["b", "a.c"])
    assert frametrace.Tracer(options=options).options == options
    assert frametrace.trace(options=options).options == options
    assert frametrace.profile(options=options).options == options
    assert frametrace.profile(**options.as_dict()).options == options
    assert frametrace.flight_recorder("unused-dir", options=options).tracer.options == options
    assert frametrace.flight_recorder("unused-dir", buffer_size=64, c_calls=False,
                                      backend="setprofile", max_memory=1 << 20, ignore=["a"],
                                      include=["b", "a.c"]).tracer.options == options


@pytest.mark.parametrize("data, message", [
    ([], "must be a dict"),
    ({"buffer_size": 64}, "must be a dict with the keys"),
    (dict(frametrace.Options().as_dict(), extra=1), "must be a dict with the keys"),
    (dict(frametrace.Options().as_dict(), max_memory=-1), "max_memory must be between"),
    (dict(frametrace.Options().as_dict(), ignore="abc"), "ignore"),
    (dict(frametrace.Options().as_dict(), backend=["auto"]), "backend must be a str"),
])
def test_options_from_elsewhere_are_checked(data, message):
    """What attach's target receives: exactly the keys, each value checked."""
    with pytest.raises((TypeError, ValueError), match=message):
        frametrace.Options.from_dict(data)
    options = frametrace.Options(buffer_size=64, ignore=["a"])
    assert frametrace.Options.from_dict(options.as_dict()) == options


# ---- the command line ---------------------------------------------------------------

FLAGS = ["--buffer-size", "64", "--max-memory", "1048576", "--no-c-calls", "--backend",
         "setprofile", "--ignore", "a", "--ignore", "b.c", "--include", "a"]


@pytest.mark.parametrize("command", [["run", "p.py"], ["attach", "1"]])
def test_run_and_attach_read_every_option_back(capsys, command):
    parser, _ = cli._parser()
    ns = parser.parse_args(command[:1] + FLAGS + command[1:])
    assert cli._tracer_options(ns) == frametrace.Options(
        buffer_size=64, max_memory=1 << 20, c_calls=False, backend="setprofile",
        ignore=["a", "b.c"], include=["a"])
    assert cli._tracer_options(parser.parse_args(command)) == frametrace.Options()
    # argparse writes the usage lines: every option is in them.
    assert cli.main([command[0], "--help"]) == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.startswith(f"usage: frametrace {command[0]} ")
    for flag in [f for f in FLAGS if f.startswith("--")]:
        assert f"[{flag}" in usage


@pytest.mark.parametrize("command", ["run", "attach"])
@pytest.mark.parametrize("flag, value, message", [
    ("--buffer-size", "0", "buffer_size must be between"),
    ("--max-memory", "0", "max_memory must be between"),
    ("--ignore", "", "ignore= pattern 0 is empty"),
    ("--include", "a..b", "include= pattern 'a..b' is not a dotted name"),
])
def test_a_bad_option_on_the_command_line(capsys, command, flag, value, message):
    args = [command, flag, value] + (["no-such-script.py"] if command == "run" else ["1"])
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"frametrace {command}: {message}" in err
