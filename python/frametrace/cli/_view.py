"""``frametrace view``: opens a trace in the Perfetto UI (served by
frametrace.view)."""
from __future__ import annotations

import argparse
from typing import Any

from ._common import CommandError, bounded


def add_parser(sub: Any) -> argparse.ArgumentParser:
    # Imported here: a child of run --follow-children imports this package
    # (its trace's writer) and needs nothing of the server.
    from ..view import DEFAULT_PORT

    p = sub.add_parser(
        "view", help="open a trace in the Perfetto UI",
        description="Open a trace in the Perfetto UI, served on 127.0.0.1 to the UI "
                    "alone.")
    p.add_argument("trace", help="a trace file (.json, .json.gz, .pftrace)")
    p.add_argument("--ui", metavar="DIR",
                   help="serve a local build of the Perfetto UI from DIR (offline)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, metavar="N",
                   help=f"the port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--no-browser", action="store_true",
                   help="print the URL to open instead of opening a browser")
    return p


_port = bounded(int, "a port number", lambda v: 0 <= v <= 65535, "0-65535")


def run(ns: argparse.Namespace) -> int:
    from ..view import ViewError, view

    try:
        return view(ns.trace, ui_dir=ns.ui, port=ns.port, browser=not ns.no_browser)
    except ViewError as exc:
        raise CommandError(str(exc)) from None
