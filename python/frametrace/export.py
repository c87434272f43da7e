"""Writing traces to files.

Until the viewer formats land, one portable format: a JSON document
(``.json``, or gzip-compressed ``.json.gz``) holding the events, the ranges
and steps of a session, and metadata::

    {"format": "frametrace", "version": 1,
     "metadata": {"pid": ..., "start_ns": ..., "stop_ns": ..., ...},
     "event_fields": ["name", "filename", ...],
     "events": [[...], ...],
     "ranges": [{"name": ..., "thread_id": ..., "start_ns": ..., "end_ns": ...}],
     "steps": [{"name": "step#0", "start_ns": ..., "end_ns": ...}]}
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Any, Iterable, Mapping, Sequence

from ._tracer import Event

FORMAT = "frametrace"
VERSION = 1
EVENT_FIELDS: tuple[str, ...] = tuple(Event.__match_args__)


def trace_document(
    events: Sequence[Event],
    *,
    metadata: Mapping[str, Any] | None = None,
    ranges: Iterable[Mapping[str, Any]] = (),
    steps: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The JSON-ready document of a trace."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "metadata": dict(metadata or {}),
        "event_fields": list(EVENT_FIELDS),
        "events": [list(ev) for ev in events],
        "ranges": [dict(r) for r in ranges],
        "steps": [dict(s) for s in steps],
    }


def write_json(path: str | os.PathLike[str], document: Mapping[str, Any]) -> str:
    """Writes document to path (gzip-compressed if it ends in .gz); returns
    the path written."""
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as fh:
        json.dump(document, fh, separators=(",", ":"))
    return path


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a document written by write_json, checking that it is one."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable frametrace trace: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a frametrace trace (no \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise ValueError(f"{path}: unsupported frametrace trace version {doc.get('version')!r}")
    return doc
