"""The product module exposes what the package uses and nothing else: the
tests' and benchmarks' hooks live in frametrace._testing, which the package
never imports."""
import os
import re

import frametrace
from frametrace import _testing, _tracer

PACKAGE = os.path.dirname(os.path.abspath(frametrace.__file__))

PRODUCT = {"Tracer", "Event", "Range", "ThreadInfo", "Stats", "ConflictError", "DEFAULT_BUFFER_SIZE",
           "DEFAULT_MAX_MEMORY", "MAX_BUFFER_SIZE",
           "_active_tracer", "_clock_ns", "_export_tids", "_wall_anchor", "_collapse_labels",
           "_ChromeColumns", "_collapsed_batch", "_die_of_signal", "_event_columns", "_join_ops",
           "_load_chrome_calls", "_load_perfetto",
           "_merge_chrome_lines", "_relay_signal", "_report_pass", "_set_range_sink", "_share_gil",
           "_thread_bootstrap",
           "_unrelay_signal", "_watch_relayed", "_write_events"}
TESTING = {"replay", "ticks_to_ns", "set_noop_profile", "set_noop_monitoring", "lifecycle_counts",
           "profile_off", "profile_on", "bound_function", "pattern_match", "nest"}


def public_names(module):
    return {name for name in vars(module) if not name.startswith("__")}


def package_sources():
    """(path in the package, text) of each of its modules, subpackages too."""
    for folder, _, names in sorted(os.walk(PACKAGE)):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, PACKAGE), f.read()


def test_product_module_exposes_only_what_the_package_uses():
    assert public_names(_tracer) == PRODUCT
    used = set()
    for _, text in package_sources():
        used |= set(re.findall(r"\b_tracer\.(\w+)", text))
        for names in re.findall(r"from \.+_tracer import ([\w, ]+)", text):
            used |= {n.strip() for n in names.split(",")}
    # _thread_bootstrap is handed to threading by the C code itself.
    assert used | {"_thread_bootstrap"} == PRODUCT


def test_testing_module_holds_the_test_hooks_and_the_package_never_imports_it():
    expected = TESTING if hasattr(_testing, "set_noop_monitoring") else TESTING - {"set_noop_monitoring"}
    assert public_names(_testing) == expected
    for name, text in package_sources():
        assert "_testing" not in re.sub(r"#.*", "", text), name
