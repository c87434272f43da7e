"""`from frametrace import *` adds frametrace's names and shadows no builtin:
frametrace.range (a named span) stays reachable as frametrace.range."""
import builtins

import frametrace


def test_star_import_shadows_no_builtin():
    namespace: dict = {}
    exec("from frametrace import *", namespace)
    shadowed = sorted(name for name in namespace
                      if name != "__builtins__" and hasattr(builtins, name))
    assert shadowed == []
    exec("r = range(3)", namespace)
    assert list(namespace["r"]) == [0, 1, 2]


def test_every_name_in_all_exists_and_range_is_still_public():
    assert all(hasattr(frametrace, name) for name in frametrace.__all__)
    assert "range" not in frametrace.__all__
    assert frametrace.range is frametrace.session.range
