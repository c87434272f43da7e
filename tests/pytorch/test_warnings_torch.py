"""frametrace.torch leaves the program's warnings settings as they were:
its filters, and its record of the warnings already shown (which decides
that a "default" or "once" warning is said once).  torch's warnings about
frametrace's own doings (its global module hooks with a compiled model,
the profile torch.profiler starts for each window) are not the program's
to see; frametrace's own that a model ran compiled is said once.

Each case runs in a child interpreter: torch says some warnings once per
process, which an earlier test would have used up."""
import json
import subprocess
import sys
import textwrap

from support import child_env
from torch_support import torch  # noqa: F401 - skips the module without torch


def run_child(source):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


PROGRAM = """
    import json, sys, warnings
    sys.path.insert(0, {tests!r})
    from torch_support import torch, training
    import frametrace, frametrace.torch

    def say():
        warnings.warn("the program's own", UserWarning)

    model, opt, loader = training(6)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    x0 = next(iter(loader))[0]
    compiled(x0)  # compiled before: no compile inside the profile
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("{action}")
        filters = warnings.filters
        before = list(filters)
        say()
        # Three windows: torch.profiler starts a profile for each.
        sched = frametrace.schedule(wait=0, warmup=1, active=1)
        with frametrace.torch.profile(schedule=sched, module_names=model,
                                      python_steps=0) as prof:
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(compiled(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                say()
                prof.step()
        say()
        same = warnings.filters is filters and filters == before
    print(json.dumps({{"same": same, "said": [str(w.message) for w in told]}}))
"""


def program(action):
    import os
    return PROGRAM.format(tests=os.path.dirname(os.path.abspath(__file__)), action=action)


def test_the_programs_filters_and_warnings_shown_are_its_own():
    for action in ("default", "once"):
        result = run_child(program(action))
        said = result["said"]
        assert result["same"]
        assert said.count("the program's own") == 1, (action, said)
        assert not [m for m in said if "Profiler clears events" in m or "global hooks" in m]
        assert len([m for m in said if "module_names" in m and "runs compiled" in m]) == 1, said


def test_frametrace_says_its_warning_once_when_every_warning_is_shown():
    said = run_child(program("always"))["said"]
    assert said.count("the program's own") == 8  # before, six steps, after
    assert not [m for m in said if "Profiler clears events" in m or "global hooks" in m]
    assert len([m for m in said if "module_names" in m]) == 1, said
