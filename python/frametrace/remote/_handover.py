"""The hand-over's claims (one attach traces a process at a time, one
script is handed to it at a time) and its private folder."""
from __future__ import annotations

import errno
import os
import socket
import struct
import tempfile
import time
from typing import Iterable, Optional

from ._errors import AttachError


def claim(name: str, uids: frozenset[int], wait: float = 0.0) -> Optional[socket.socket]:
    """A claim on name, held until the socket returned is closed or this
    process ends: a Unix socket bound in the abstract namespace (no file
    anyone could plant, remove or leave behind).  None when an attach of
    uid in uids holds it for wait seconds.  A name taken by anyone else
    (any local user can bind any name) is no attach of this target's: it
    is passed over, so that no one can keep root or the target's user from
    attaching, and the socket returned then claims nothing."""
    deadline = time.monotonic() + wait
    unanswered = 0
    held_by_attach = False
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + name)
            # Lets the next attaches ask who holds it: each asks once (a
            # connection stays queued, never accepted, until this closes).
            sock.listen(16)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise AttachError(f"cannot claim {name}: {exc.strerror}") from None
        if held_by_attach:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
            continue
        holder = _claim_holder(name)
        if holder is None:
            # Between an attach's bind and its listen, or released: asked
            # again; a holder that never answers is no attach.
            unanswered += 1
            if unanswered == 2:
                return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            time.sleep(0.1)
            continue
        if holder not in uids:
            return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held_by_attach = True
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _claim_holder(name: str) -> Optional[int]:
    """The uid of the process that listens on the claim name, or None."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1.0)  # whoever holds it may be hostile
    try:
        sock.connect("\0" + name)
        ucred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", ucred)[1])
    except OSError:
        return None
    finally:
        sock.close()


class Workdir:
    """attach's private folder (the script, the socket), always reached
    through the descriptor opened when it was made: the target's user, who
    owns it while the target reads the script, cannot redirect anything
    done in it (no path looked up again, no symbolic link followed)."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="frametrace-attach-")
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.given = False

    def write(self, name: str, text: str) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=self.fd)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def give(self, names: Iterable[str], uid: int) -> None:
        """Gives the folder and names in it to uid: the folder last (until
        then no one else can enter it)."""
        for name in names:
            os.chown(name, uid, -1, dir_fd=self.fd, follow_symlinks=False)
        os.fchown(self.fd, uid, -1)
        self.given = True

    def leave(self, name: str) -> None:
        """Leaves the folder to a script that may still run (it removes
        it), without name."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1

    def remove(self) -> None:
        if self.fd < 0:
            return
        try:
            if self.given:
                # Taken back first: nothing more can be made in it.
                os.fchown(self.fd, os.geteuid(), -1)
                os.fchmod(self.fd, 0o700)
            _empty(self.fd)
            if os.path.samestat(os.lstat(self.path), os.fstat(self.fd)):
                os.rmdir(self.path)
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.fd = -1


def _empty(dir_fd: int, depth: int = 8) -> None:
    """Removes what the folder open as dir_fd holds (folders depth deep)."""
    for name in os.listdir(dir_fd):
        try:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except IsADirectoryError:
                if not depth:
                    continue
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=dir_fd)
                try:
                    _empty(sub, depth - 1)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            pass
