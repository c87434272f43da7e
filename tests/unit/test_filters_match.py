"""The filters' pattern matcher (csrc/glob.c, through frametrace._testing):
globs agree with fnmatch.fnmatchcase, dotted names match by dotted prefix."""
import fnmatch
import random

import pytest

from frametrace import _testing
from frametrace.filters import TORCH_PLUMBING

match = _testing.pattern_match


@pytest.mark.parametrize("pattern, name, expected", [
    ("torch.nn", "torch.nn", True),
    ("torch.nn", "torch.nn.modules.module.Module._call_impl", True),
    ("torch.nn", "torch.nnx.f", False),
    ("torch.n", "torch.nn.f", False),
    ("torch.nn.modules.module.Module", "torch.nn.modules.module.Module.__getattr__", True),
    ("mod.f", "mod.f.<locals>.g", True),
    ("builtins.len", "builtins.len", True),
    ("builtins.len", "builtins.len_x", False),
    ("*._call_impl", "torch.nn.modules.module.Module._call_impl", True),
    ("*._call_impl", "x._call_impl_2", False),
    ("builtins.?en", "builtins.len", True),
    ("a.[!b]", "a.c", True),
    ("a.[!b]", "a.b", False),
    ("a.[", "a.[", True),       # no "]": a literal "["
    ("a.[]]", "a.]", True),     # "]" first in a set is a member
    ("a.[z-a]x", "a.bx", False),  # a reversed range is empty
    ("a.[!z-a]", "a.q", True),
    ("é.*", "é.ü", True),
])
def test_examples(pattern, name, expected):
    assert match(pattern, name) is expected


def test_globs_agree_with_fnmatch():
    rng = random.Random(19)
    pattern_chars = "ab.*?[]!-"
    name_chars = "ab.-]!["
    checked = 0
    for _ in range(20000):
        pattern = "".join(rng.choice(pattern_chars) for _ in range(rng.randint(1, 8)))
        if not any(c in pattern for c in "*?["):
            continue
        name = "".join(rng.choice(name_chars) for _ in range(rng.randint(0, 8)))
        assert match(pattern, name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)
        checked += 1
    assert checked > 10000


def test_dotted_names_match_by_prefix():
    rng = random.Random(7)
    for _ in range(5000):
        pattern = ".".join(rng.choice("ab") * rng.randint(1, 2) for _ in range(rng.randint(1, 3)))
        name = ".".join(rng.choice("ab") * rng.randint(1, 2) for _ in range(rng.randint(1, 4)))
        assert match(pattern, name) == (name == pattern or name.startswith(pattern + "."))


def test_torch_plumbing_is_valid():
    import frametrace

    assert frametrace.Tracer(ignore=TORCH_PLUMBING).ignore == TORCH_PLUMBING
    assert all(isinstance(p, str) and p for p in TORCH_PLUMBING)
    assert len(set(TORCH_PLUMBING)) == len(TORCH_PLUMBING)
