"""The wire between the attacher and the target: JSON objects, one a line,
over a Unix socket (the attacher's "go" is a bare line, its stop the end
of what it sends)."""
from __future__ import annotations

import json
import socket
from typing import Any, Optional


class Lines:
    """JSON lines read from a socket; None at its end."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def next(self) -> Optional[dict]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError(f"unexpected message {line[:200]!r}")
        return value


def send(sock: Any, message: dict) -> None:
    """Sends one message to the attacher; nothing if it is gone.  No
    SIGPIPE: the target may have restored its default action (death)."""
    data = json.dumps(message).encode() + b"\n"
    try:
        while data:
            data = data[sock.send(data, socket.MSG_NOSIGNAL):]
    except OSError:
        pass


def recv_line(sock: Any) -> bytes:
    """One bare line (the attacher's "go"), stripped."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            break
        data += chunk
    return data.strip()
