"""Reads a .pftrace with Perfetto's own compiled protobuf schema (the
`perfetto` package's perfetto_trace_pb2, on `protobuf`) and resolves it the
way Perfetto's trace processor does: interned data per sequence (cleared by
SEQ_INCREMENTAL_STATE_CLEARED), the sequence's TracePacketDefaults (track,
timestamp clock), clock snapshots with sequence-scoped incremental clocks
(each timestamp a delta added to the clock's last value, as int64), and
slices nested per track by SLICE_BEGIN/SLICE_END.

Every timestamp comes out in CLOCK_MONOTONIC ns, the tracer's clock, for
comparison with getEvents().  Importing this module skips the importing
test module when the package is missing (it is in the test extras)."""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field

import pytest

# protobuf's pure-Python decoder, not its C extension (upb): the sanitizer
# and valgrind runs of CI then report on frametrace's C code only.  The
# traces decoded here are small.
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

pb = pytest.importorskip(
    "perfetto.protos.perfetto.trace.perfetto_trace_pb2",
    reason="the perfetto package (Perfetto's protobuf schema for .pftrace) is not installed: "
           "pip install perfetto")
from google.protobuf import unknown_fields  # noqa: E402  (perfetto needs protobuf)
from google.protobuf.internal import api_implementation, decoder  # noqa: E402


def _str(value=None, *args):
    """str() as protobuf's pure-Python decoder calls it for a string field
    (str(bytes, "utf-8")), with surrogateescape: frametrace writes a name
    that is not UTF-8 (a file name's bytes) as those bytes, which trace
    processor keeps, and which come back here as Python decodes file names."""
    if args:
        return str(value, args[0], "surrogateescape")
    return str() if value is None else str(value)


if api_implementation.Type() == "python":
    decoder.str = _str  # the decoder's only other str() is of an exception

MONOTONIC = pb.BUILTIN_CLOCK_MONOTONIC
BOOTTIME = pb.BUILTIN_CLOCK_BOOTTIME
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
END = pb.TrackEvent.TYPE_SLICE_END


def unknown(msg, where="packet") -> list[str]:
    """Where msg or any message inside it has fields the schema lacks."""
    found = [where] if len(unknown_fields.UnknownFieldSet(msg)) else []
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        # protobuf 7 has is_repeated only, older ones label only.
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
        items = value if repeated else [value]
        for item in items:
            found += unknown(item, f"{where}.{fd.name}")
    return found


def read_packets(path) -> list:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        trace = pb.Trace.FromString(fh.read())
    return list(trace.packet)


@dataclass
class Slice:
    name: str
    category: str | None
    start: int
    end: int | None
    depth: int
    location: tuple | None  # (file, function, line) of a source location


@dataclass
class Sequence:
    """What one trusted_packet_sequence_id holds, as the reader built it."""
    id: int
    packets: list = field(default_factory=list)
    names: dict = field(default_factory=dict)        # iid -> str
    categories: dict = field(default_factory=dict)   # iid -> str
    locations: dict = field(default_factory=dict)    # iid -> (file, function, line)
    used_names: set = field(default_factory=set)
    used_categories: set = field(default_factory=set)
    used_locations: set = field(default_factory=set)
    reinterned: list = field(default_factory=list)   # iids interned twice
    defaults: object = None
    clocks: dict = field(default_factory=dict)       # clock id -> [snapshot ns, this clock's ns, incremental, last]


@dataclass
class Decoded:
    packets: list
    sequences: dict        # id -> Sequence
    tracks: dict           # uuid -> TrackDescriptor
    slices: dict           # track uuid -> [Slice] in begin order
    snapshots: list        # the global ClockSnapshots: {clock id: ns}
    primary_clock: int
    unknown: list


def decode(path) -> Decoded:
    packets = read_packets(path)
    sequences: dict[int, Sequence] = {}
    tracks, slices, stacks = {}, {}, {}
    snapshots, primary, bad = [], 0, []
    for i, pkt in enumerate(packets):
        bad += unknown(pkt, f"packet {i}")
        seq_id = pkt.trusted_packet_sequence_id
        seq = sequences.setdefault(seq_id, Sequence(seq_id))
        seq.packets.append(pkt)
        if pkt.sequence_flags & CLEARED:
            fresh = Sequence(seq_id, packets=seq.packets)
            sequences[seq_id] = seq = fresh
        if pkt.HasField("trace_packet_defaults"):
            seq.defaults = pkt.trace_packet_defaults
        if pkt.HasField("interned_data"):
            data = pkt.interned_data
            for table, entries, value in (
                    (seq.names, data.event_names, lambda e: e.name),
                    (seq.categories, data.event_categories, lambda e: e.name),
                    (seq.locations, data.source_locations,
                     lambda e: (e.file_name, e.function_name, e.line_number))):
                for e in entries:
                    if e.iid in table:
                        seq.reinterned.append(e.iid)
                    table[e.iid] = value(e)
        if pkt.HasField("clock_snapshot"):
            snap = pkt.clock_snapshot
            scoped = {c.clock_id: c for c in snap.clocks if 64 <= c.clock_id < 128}
            builtin = {c.clock_id: c.timestamp for c in snap.clocks if c.clock_id < 64}
            if scoped:
                # A sequence's clock, tied to a builtin one (MONOTONIC here).
                assert set(builtin) == {MONOTONIC}, snap
                for cid, c in scoped.items():
                    seq.clocks[cid] = [c.timestamp, builtin[MONOTONIC], c.is_incremental, c.timestamp]
            else:
                snapshots.append(builtin)
            if snap.primary_trace_clock:
                primary = snap.primary_trace_clock
            continue  # the reader parses nothing else of such a packet
        if pkt.HasField("track_descriptor"):
            tracks[pkt.track_descriptor.uuid] = pkt.track_descriptor
        if not pkt.HasField("track_event"):
            continue
        ev = pkt.track_event
        ts = resolve_timestamp(pkt, seq)
        track = ev.track_uuid if ev.HasField("track_uuid") else seq.defaults.track_event_defaults.track_uuid
        stack = stacks.setdefault(track, [])
        if ev.type == BEGIN:
            if ev.HasField("name_iid"):
                seq.used_names.add(ev.name_iid)
                name = seq.names[ev.name_iid]
            else:
                name = ev.name
            category = None
            for iid in ev.category_iids:
                seq.used_categories.add(iid)
                category = seq.categories[iid]
            for inline in ev.categories:  # named inline (frametrace.torch's ops)
                category = inline
            location = None
            if ev.HasField("source_location_iid"):
                seq.used_locations.add(ev.source_location_iid)
                location = seq.locations[ev.source_location_iid]
            s = Slice(name, category, ts, None, len(stack), location)
            slices.setdefault(track, []).append(s)
            stack.append(s)
        else:
            assert ev.type == END, ev
            s = stack.pop()
            s.end = ts
            assert s.start <= s.end, s
    assert all(not s for s in stacks.values()), "slices left open"
    return Decoded(packets, sequences, tracks, slices, snapshots, primary, bad)


def resolve_timestamp(pkt, seq: Sequence) -> int:
    """The packet's timestamp in CLOCK_MONOTONIC ns."""
    clock = pkt.timestamp_clock_id or (seq.defaults.timestamp_clock_id if seq.defaults else 0)
    assert clock, "a timestamp with no clock: Perfetto would take it as BOOTTIME"
    if clock == MONOTONIC:
        return pkt.timestamp
    c = seq.clocks[clock]  # a KeyError: a clock this sequence never defined
    if c[2]:  # incremental: a delta, read as int64
        delta = pkt.timestamp - (1 << 64) if pkt.timestamp >= 1 << 63 else pkt.timestamp
        c[3] += delta
        value = c[3]
    else:
        value = pkt.timestamp
    return value - c[0] + c[1]


def thread_tracks(decoded: Decoded) -> dict:
    """{tid: (uuid, ThreadDescriptor)}."""
    return {d.thread.tid: (uuid, d.thread) for uuid, d in decoded.tracks.items() if d.HasField("thread")}


def named_tracks(decoded: Decoded) -> dict:
    """{name: uuid} of the tracks that are neither a process nor a thread."""
    return {d.name: uuid for uuid, d in decoded.tracks.items()
            if not d.HasField("thread") and not d.HasField("process")}
