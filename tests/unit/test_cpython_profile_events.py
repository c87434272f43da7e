"""What CPython itself reports to a profile function, which the tracer's
tests (tests/system/test_stress.py) rely on."""
import functools
import sys




def helper(a, b=0):
    return a + b


def test_cpython_reports_no_call_for_a_partial():
    """What the previous test relies on: sys.setprofile sees none either."""
    seen = []

    def prof(frame, event, arg):
        if event.startswith("c_"):
            seen.append(getattr(arg, "__name__", arg))

    def run():
        functools.partial(len, "abcd")()
        functools.partial(helper, 1)()

    sys.setprofile(prof)
    try:
        run()
    finally:
        sys.setprofile(None)
    assert seen == ["setprofile"]
