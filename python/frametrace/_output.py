"""Output files that exist only once complete: every writer of frametrace
goes through here.  A regular file is written to a temporary beside it
and renamed over it when complete; anything else (a FIFO, a device, a
name of an open descriptor) is written in place.  What a user is promised
is in docs/guarantees.md, "A trace file that exists is complete".
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import stat
import sys
import tempfile
import zlib
from typing import IO, Any, Iterator, Optional

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FD_DIR = re.compile(r"/proc/[^/]+/fd|/dev/fd")


def _names_open_fd(path: str) -> bool:
    """True if path, or a symbolic link on the way to what it names, is an
    entry of a /proc/PID/fd (or /dev/fd) directory."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if _FD_DIR.fullmatch(os.path.realpath(os.path.dirname(p))):
            return True
        if not os.path.islink(p):
            return False
        p = os.path.join(os.path.dirname(p), os.readlink(p))
    return False


def writes_in_place(path: str) -> bool:
    """True if path is written directly rather than replaced: not a regular
    file, or the name of an open file descriptor."""
    try:
        st = os.stat(path)
    except OSError:
        return _names_open_fd(path)
    return not stat.S_ISREG(st.st_mode) or _names_open_fd(path)


def _write_error(exc: OSError, name: str) -> OSError:
    if exc.errno is None:
        return exc
    return OSError(exc.errno, f"could not write {name}: {os.strerror(exc.errno)}")


def reason(exc: BaseException) -> str:
    """Why a write failed, for a message that names the file already: the
    errno text of an OSError, else the exception's text."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return str(exc)


def say(text: str) -> None:
    """Prints text and a newline on stderr, if it can: a closed, missing or
    broken stderr (a reader that went away) loses the text, and never
    changes what the process does next.  Written to the descriptor, past
    the stream's buffer: text that could not be written is not left there
    for the interpreter's exit to fail on (exit status 120)."""
    err = sys.stderr
    if err is None:  # print() would write to stdout
        return
    try:
        err.flush()  # the program's text first
    except (OSError, ValueError, AttributeError):  # closed or broken: the text is lost
        return
    try:
        fd = err.fileno()
    except (OSError, ValueError, AttributeError):  # not a file
        fd = -1
    if fd < 0:
        try:
            print(text, file=err, flush=True)  # a stream in memory (a test's capture)
        except (OSError, ValueError, AttributeError):
            pass
        return
    data = memoryview((str(text) + "\n").encode(getattr(err, "encoding", None) or "utf-8",
                                          "backslashreplace"))
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # EPIPE (SIGPIPE is ignored by Python), EBADF, EAGAIN
        pass


def _again(exc: OSError) -> OSError:
    return OSError(exc.errno, exc.strerror) if exc.errno else exc


def _create_temp(target: str, name: str) -> tuple[int, str]:
    directory, base = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            # 0o666: the umask decides, as for open(); mkstemp would give 0600.
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as exc:  # named after the target: the temporary is ours
            raise _write_error(exc, name) from None
    raise FileExistsError(f"could not create a temporary file next to {name}")


def why_unwritable(path: str) -> Optional[str]:
    """Why this process could not write a trace to path, or None: path is
    a folder, or no file can be made where the writers would make one (the
    folder of the file a link names, created if missing).  Tried as they
    do: a temporary made there and removed."""
    if os.path.isdir(path):
        return "is a folder; give the trace's file name"
    if writes_in_place(path):
        return None  # a device, a FIFO or an open descriptor: written as it is
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"cannot create folder {folder}: {existing} is not a folder"
    try:
        if existing == folder:
            fd, tmp = _create_temp(target, path)
            os.close(fd)
            os.unlink(tmp)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".frametrace-check.", dir=existing))
    except OSError as exc:
        where = folder if existing == folder else f"folder {folder} (in {existing})"
        return f"cannot write to {where}: {reason(exc)}"
    return None


@contextlib.contextmanager
def _replacing(path: str) -> Iterator[tuple[str, int]]:
    """(where to write, fd open on it): a new temporary, renamed over path
    (the file a symbolic link names) when the block ends without an
    exception, removed otherwise."""
    target = os.path.realpath(path)
    if os.path.islink(target):
        # realpath stops at a loop of links; open() would fail with ELOOP,
        # and the rename would replace the link.
        raise OSError(errno.ELOOP, f"could not write {path}: {os.strerror(errno.ELOOP)}")
    fd, tmp = _create_temp(target, path)
    try:
        yield tmp, fd
        try:
            os.fsync(fd)  # the data is on disk before the name points to it
        except OSError as exc:
            raise _write_error(exc, path) from None
        closing, fd = fd, -1
        os.close(closing)
        os.replace(tmp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _makedirs(path: str) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)


@contextlib.contextmanager
def output_path(path: Any) -> Iterator[str]:
    """The path a writer that opens files itself (the C writers) writes
    to: a temporary, renamed over path when the block ends without an
    exception; path itself when it is written in place.  Creates path's
    folder."""
    path = os.fspath(path)
    _makedirs(path)
    if writes_in_place(path):
        yield path
        return
    with _replacing(path) as (tmp, _fd):
        yield tmp


class _Raw(io.FileIO):
    """An fd's FileIO that writes all it is given, gzip-compressed if
    deflate is set (the gzip trailer at close).  A write error names the
    target and says why, and is raised again by every later write and by
    close(): a caller that swallowed it cannot end up with a file that
    looks complete.  Once discarding, writes go nowhere."""

    target = ""
    discard = False
    deflate: Any = None  # zlib.compressobj(..., wbits=31): gzip
    failed: Optional[OSError] = None

    def write(self, b: Any) -> int:
        data = memoryview(b).cast("B")
        if not self.discard:
            self._write_all(data if self.deflate is None else self.deflate.compress(data))
        return data.nbytes

    def close(self) -> None:
        if self.closed:
            return
        try:
            deflate, self.deflate = self.deflate, None
            if not self.discard:
                if deflate is not None and self.failed is None:
                    self._write_all(deflate.flush())
                if self.failed is not None:
                    raise _again(self.failed)
        finally:
            super().close()

    def _write_all(self, data: Any) -> None:
        if self.failed is not None:
            raise _again(self.failed)
        view = memoryview(data)
        try:
            while view:
                done = super().write(view)
                if not done:  # a blocking fd writes something or fails
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                view = view[done:]
        except OSError as exc:
            self.failed = _write_error(exc, self.target)
            raise self.failed from None


@contextlib.contextmanager
def open_output(path: Any, mode: str = "w", *, compresslevel: Optional[int] = None,
                encoding: Optional[str] = None, errors: Optional[str] = None,
                newline: Optional[str] = None) -> Iterator[IO[Any]]:
    """Like ``open(path, mode)`` for mode "w" or "wb" (gzip-compressed at
    compresslevel if given), the file replacing path only once complete
    (see the module's docstring).  Creates path's folder."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_output: mode must be 'w' or 'wb', not {mode!r}")
    path = os.fspath(path)
    _makedirs(path)
    with contextlib.ExitStack() as stack:
        if writes_in_place(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o666)
            stack.callback(os.close, fd)
        else:
            _tmp, fd = stack.enter_context(_replacing(path))
        raw = _Raw(fd, "wb", closefd=False)
        raw.target = path
        if compresslevel is not None:
            # Compressed below the buffer, not by gzip.GzipFile, which keeps
            # a buffer of its own that a failed close leaves unflushed.
            raw.deflate = zlib.compressobj(compresslevel, zlib.DEFLATED, 31)
        buffered = io.BufferedWriter(raw, 1 << 16)
        fh: Any = buffered
        if mode == "w":
            fh = io.TextIOWrapper(buffered, encoding=encoding or "utf-8", errors=errors,
                                  newline=newline)
        try:
            yield fh
            fh.close()  # flushes: a write error raises here, before the rename
        except BaseException:
            # What is still buffered (the gzip trailer too) goes nowhere: a
            # file written in place ends where the failure was, and no
            # layer writes again when it is collected.
            raw.discard = True
            with contextlib.suppress(Exception):
                fh.close()
            raise
