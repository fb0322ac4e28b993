"""Builders of TABLE_MAP and rows event bodies for unit tests (hand-built, byte by byte)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.binlog.model import EventHeader


def lenenc(n: int) -> bytes:
    if n < 0xFB:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def lenenc_str(s: bytes) -> bytes:
    return lenenc(len(s)) + s


def tlv(tag: int, value: bytes) -> bytes:
    return bytes([tag]) + lenenc(len(value)) + value


def bits_lsb(flags: Sequence[bool]) -> bytes:
    out = bytearray((len(flags) + 7) // 8)
    for i, f in enumerate(flags):
        if f:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def bits_msb(flags: Sequence[bool]) -> bytes:
    out = bytearray((len(flags) + 7) // 8)
    for i, f in enumerate(flags):
        if f:
            out[i >> 3] |= 0x80 >> (i & 7)
    return bytes(out)


@dataclass
class Col:
    type_code: int
    meta: bytes = b""
    nullable: bool = True
    name: str = ""
    unsigned: bool = False
    charset: int | None = None  # for character columns
    labels: tuple[str, ...] | None = None  # ENUM/SET labels


def header(type_code: int = 19, position: int = 100) -> EventHeader:
    return EventHeader(timestamp=0, type_code=type_code, server_id=1, event_size=0, log_pos=0,
                       flags=0, file="bin.000001", position=position, next_position=position)


def table_map_body(cols: Sequence[Col], *, table_id: int = 42, schema: str = "db",
                   table: str = "t", numeric: Sequence[int] = (),
                   character: Sequence[int] = (), enums: Sequence[int] = (),
                   sets: Sequence[int] = (), pk: Sequence[int] = (), names: bool = True,
                   extra_tlvs: bytes = b"") -> bytes:
    """A TABLE_MAP body. ``numeric``/``character``/``enums``/``sets`` list the column indexes the
    optional metadata counts (the caller knows the types)."""
    body = table_id.to_bytes(6, "little") + b"\x01\x00"
    body += bytes([len(schema)]) + schema.encode() + b"\0"
    body += bytes([len(table)]) + table.encode() + b"\0"
    body += lenenc(len(cols)) + bytes(c.type_code for c in cols)
    meta = b"".join(c.meta for c in cols)
    body += lenenc(len(meta)) + meta
    body += bits_lsb([c.nullable for c in cols])
    opt = b""
    if numeric:
        opt += tlv(1, bits_msb([cols[i].unsigned for i in numeric]))
    if character:
        opt += tlv(3, b"".join(lenenc(cols[i].charset or 63) for i in character))
    if names:
        opt += tlv(4, b"".join(lenenc_str(c.name.encode()) for c in cols))
    for tag, idxs in ((5, sets), (6, enums)):
        if idxs:
            value = b""
            for i in idxs:
                labels = cols[i].labels or ()
                value += lenenc(len(labels)) + b"".join(lenenc_str(x.encode()) for x in labels)
            opt += tlv(tag, value)
    if pk:
        opt += tlv(8, b"".join(lenenc(i) for i in pk))
    return body + opt + extra_tlvs


def image(values: Sequence[bytes | None]) -> bytes:
    """A row image over the present columns: null bitmap + the encoded non-NULL values."""
    return bits_lsb([v is None for v in values]) + b"".join(v for v in values if v is not None)


def rows_body(width: int, images: Sequence[bytes], *, table_id: int = 42, flags: int = 1,
              present: Sequence[int] | None = None, present2: Sequence[int] | None = None,
              version: int = 1, extra: bytes = b"") -> bytes:
    present = range(width) if present is None else present
    body = table_id.to_bytes(6, "little") + flags.to_bytes(2, "little")
    if version == 2:
        body += (len(extra) + 2).to_bytes(2, "little") + extra
    body += lenenc(width) + bits_lsb([i in present for i in range(width)])
    if present2 is not None:
        body += bits_lsb([i in present2 for i in range(width)])
    return body + b"".join(images)


u16 = struct.Struct("<H").pack
i32 = struct.Struct("<i").pack
