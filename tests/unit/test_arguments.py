"""Arguments of Tracer, trace() and profile() checked without starting a
tracer: the backend and clock chosen (by argument or environment), sizes,
and what cannot be decorated."""
import sys

import pytest

import frametrace


MONITORING = sys.version_info >= (3, 12)


def test_backend_argument(monkeypatch):
    assert frametrace.Tracer(backend="setprofile").backend == "setprofile"
    monkeypatch.delenv("FRAMETRACE_BACKEND", raising=False)
    default = "monitoring" if MONITORING else "setprofile"
    assert frametrace.Tracer().backend == default
    assert frametrace.Tracer(backend="auto").backend == default
    assert frametrace.Tracer(backend=None).backend == default
    monkeypatch.setenv("FRAMETRACE_BACKEND", "setprofile")
    assert frametrace.Tracer().backend == "setprofile"
    assert frametrace.Tracer(backend="auto").backend == "setprofile"
    with pytest.raises(TypeError, match="backend must be a str"):
        frametrace.Tracer(backend=1)
    with pytest.raises(ValueError, match="backend must be .* got 'sys.monitoring'"):
        frametrace.Tracer(backend="sys.monitoring")
    if MONITORING:
        assert frametrace.Tracer(backend="monitoring").backend == "monitoring"
    else:
        with pytest.raises(ValueError, match="needs sys.monitoring"):
            frametrace.Tracer(backend="monitoring")
    with pytest.raises(ValueError, match="backend"):
        frametrace.profile(backend="nope")


def test_clock_choice(monkeypatch):
    monkeypatch.setenv("FRAMETRACE_CLOCK", "monotonic")
    assert frametrace.Tracer().clock == "monotonic"
    monkeypatch.delenv("FRAMETRACE_CLOCK")
    default = frametrace.Tracer().clock
    assert default in ("cycles", "monotonic")
    for same in ("auto", ""):
        monkeypatch.setenv("FRAMETRACE_CLOCK", same)
        assert frametrace.Tracer().clock == default


@pytest.mark.parametrize("value", ["MONOTONIC", "monotonic ", " monotonic", "cycles", "tsc",
                                   "caf\udce9"])
def test_clock_environment_not_understood(monkeypatch, value):
    monkeypatch.setenv("FRAMETRACE_CLOCK", value)
    with pytest.raises(ValueError) as info:
        frametrace.Tracer(backend="setprofile")  # checked whatever the arguments
    assert str(info.value) == (
        'FRAMETRACE_CLOCK must be "auto" (the default: the CPU\'s cycle counter where it is '
        f'usable) or "monotonic", got {value!r}')


@pytest.mark.parametrize("value", ["SetProfile", "setprofile ", "MONITORING", "sys.monitoring",
                                   "none"])
def test_backend_environment_not_understood(monkeypatch, value):
    monkeypatch.setenv("FRAMETRACE_BACKEND", value)
    with pytest.raises(ValueError) as info:
        frametrace.Tracer(backend="setprofile")
    assert str(info.value) == ('FRAMETRACE_BACKEND must be "auto" (the default), "setprofile" '
                               f'or "monitoring", got {value!r}')


def test_backend_environment(monkeypatch):
    default = "monitoring" if MONITORING else "setprofile"
    for value in ("", "auto"):
        monkeypatch.setenv("FRAMETRACE_BACKEND", value)
        assert frametrace.Tracer().backend == default
    monkeypatch.setenv("FRAMETRACE_BACKEND", "monitoring")
    if MONITORING:
        assert frametrace.Tracer().backend == "monitoring"
        assert frametrace.Tracer(backend="setprofile").backend == "setprofile"
    else:
        with pytest.raises(ValueError, match="FRAMETRACE_BACKEND=monitoring needs sys.monitoring"):
            frametrace.Tracer()
        assert frametrace.Tracer(backend="setprofile").backend == "setprofile"


@pytest.mark.parametrize("size", [0, -1, -(2**70), 2**28 + 1, 2**64])
def test_buffer_size_out_of_range(size):
    with pytest.raises(ValueError, match="buffer_size"):
        frametrace.Tracer(buffer_size=size)


@pytest.mark.parametrize("size", ["10", 1.5, None, True, [1]])
def test_buffer_size_wrong_type(size):
    with pytest.raises(TypeError, match="buffer_size"):
        frametrace.Tracer(buffer_size=size)


def test_other_bad_arguments():
    with pytest.raises(TypeError, match="c_calls"):
        frametrace.Tracer(c_calls="yes")
    with pytest.raises(TypeError):
        frametrace.Tracer(bogus=1)
    with pytest.raises(TypeError):
        frametrace.Tracer(1, True)  # c_calls is keyword-only
    assert frametrace.Tracer(buffer_size=frametrace.MAX_BUFFER_SIZE).buffer_size == 2**28
    assert frametrace.Tracer().buffer_size == frametrace.DEFAULT_BUFFER_SIZE


def test_decorating_a_non_callable():
    with pytest.raises(TypeError, match="callable"):
        frametrace.trace()(42)
