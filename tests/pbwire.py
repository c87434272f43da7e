"""A protobuf wire-format reader, for checking .pftrace files without a
protobuf library: a message is {field number: [values]}, where a value is
an int (varint) or bytes (length-delimited; decode nested ones on demand)."""
from __future__ import annotations

from collections import defaultdict


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def message(buf: bytes) -> dict[int, list]:
    fields: dict[int, list] = defaultdict(list)
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
            assert len(value) == n, "truncated"
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        fields[field].append(value)
    return fields


def one(msg: dict[int, list], field: int, default=None):
    values = msg.get(field, [])
    assert len(values) <= 1, (field, values)
    return values[0] if values else default
