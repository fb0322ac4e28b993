"""Compressed binlog events: MariaDB's zlib blocks and MySQL's zstd transaction payloads.

MariaDB (``log_bin_compress=ON``) compresses part of an event into one *block*::

    header u8 = 0x80 | (algorithm << 4) | lenlen      algorithm 0 = zlib, lenlen 1..4
    uncompressed length, lenlen bytes, BIG-endian
    zlib stream

QUERY_COMPRESSED (165) compresses the query text after ``schema\\0``; the
WRITE/UPDATE/DELETE_ROWS_COMPRESSED events (166–168 v1, 169–171 v2) compress everything after
the column bitmaps. :func:`decompress_rows_event` rebuilds the plain rows event body so the row
decoder never needs to know compression exists.

MySQL (``binlog_transaction_compression=ON``) wraps a transaction's events into one
TRANSACTION_PAYLOAD (40) whose payload is a zstd frame of complete events without CRC32
trailers; :func:`unwrap_transaction_payload` splits them.

Every function refuses to inflate beyond ``max_size`` (the stream's ``max_decompressed_size``):
a corrupt or hostile length cannot make the replica allocate without bound. This module sits
below :mod:`protocol.binlog.events` (which decompresses QUERY_COMPRESSED's text with it) and
knows no event class.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import zstandard

from ..errors import MalformedPacket
from ._cursor import Cursor
from .header import HEADER_LEN, peek_event_size

__all__ = [
    "MAX_DECOMPRESSED_SIZE",
    "decompress_block",
    "plain_rows_type",
    "decompress_rows_event",
    "unwrap_transaction_payload",
]

# An event cannot exceed max_allowed_packet (1 GiB at most); neither can its decompressed form.
MAX_DECOMPRESSED_SIZE = 1 << 30

COMPRESSION_ZSTD = 0
COMPRESSION_NONE = 255


class CompressedPayload(Protocol):
    """What :func:`unwrap_transaction_payload` reads of a TRANSACTION_PAYLOAD event
    (:class:`protocol.binlog.events.TransactionPayloadEvent`)."""

    @property
    def compression(self) -> int: ...
    @property
    def uncompressed_size(self) -> int | None: ...
    @property
    def payload(self) -> bytes: ...


def decompress_block(block: bytes | bytearray | memoryview,
                     max_size: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress one MariaDB compressed block (header, big-endian length, zlib stream).

    Raises:
        MalformedPacket: bad header, unknown algorithm, corrupt zlib data, or a decompressed
            length other than the declared one.
    """
    cur = Cursor(block)
    head = cur.u8("compressed block header")
    if not head & 0x80:
        raise MalformedPacket(f"compressed block header {head:#04x} lacks the 0x80 marker")
    algorithm, lenlen = (head >> 4) & 0x07, head & 0x07
    if algorithm != 0:
        raise MalformedPacket(f"compressed block algorithm {algorithm} is not zlib")
    if not 1 <= lenlen <= 4:
        raise MalformedPacket(f"compressed block length size {lenlen} is not 1..4")
    length = cur.uint_be(lenlen, "uncompressed length")
    if length > max_size:
        raise MalformedPacket(f"compressed block claims {length} bytes, more than {max_size}")
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(cur.view(cur.remaining), length + 1)
    except zlib.error as exc:
        raise MalformedPacket(f"corrupt zlib data in compressed block: {exc}") from None
    if len(data) != length or not inflater.eof:
        raise MalformedPacket(
            f"compressed block decompressed to {len(data)} bytes, header says {length}")
    return data


def plain_rows_type(type_code: int) -> int:
    """The plain rows type of a MariaDB compressed rows type (166–168 → 23–25, 169–171 → 30–32)."""
    if 166 <= type_code <= 168:
        return type_code - 166 + 23
    if 169 <= type_code <= 171:
        return type_code - 169 + 30
    raise MalformedPacket(f"event type {type_code} is not a compressed rows event")


def decompress_rows_event(type_code: int, body: bytes | bytearray | memoryview,
                          post_header_len: int,
                          max_size: int = MAX_DECOMPRESSED_SIZE) -> tuple[int, bytes]:
    """Rebuild the plain body of a MariaDB ``*_ROWS_COMPRESSED`` event.

    The uncompressed prefix is ``table_id flags [v2 extra] width bitmap [update bitmap]``; the
    compressed block holding the row images follows it.

    Returns:
        ``(plain_type_code, plain_body)`` to hand to the row decoder.
    """
    plain = plain_rows_type(type_code)
    cur = Cursor(body)
    cur.skip(4 if post_header_len == 6 else 6, "table id")
    cur.skip(2, "rows flags")
    if plain >= 30:
        extra_len = cur.u16("extra data length")
        if extra_len < 2:
            raise MalformedPacket(f"rows extra data length {extra_len} < 2")
        cur.skip(extra_len - 2, "rows extra data")
    width = cur.lenenc("column count")
    bitmap = (width + 7) // 8
    cur.skip(bitmap, "columns bitmap")
    if plain in (24, 31):
        cur.skip(bitmap, "update columns bitmap")
    prefix = bytes(cur.data[:cur.pos])
    return plain, prefix + decompress_block(cur.view(cur.remaining), max_size)


def _zstd_decompress(payload: bytes, limit: int) -> bytes:
    """Decompress a zstd frame, refusing to produce more than ``limit`` bytes (zip bombs)."""
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(payload) as reader:
            while True:
                chunk = reader.read(1 << 20)
                if not chunk:
                    break
                out += chunk
                if len(out) > limit:
                    raise MalformedPacket(
                        f"transaction payload decompresses to more than {limit} bytes")
    except zstandard.ZstdError as exc:
        raise MalformedPacket(f"corrupt zstd transaction payload: {exc}") from None
    return bytes(out)


def unwrap_transaction_payload(event: CompressedPayload,
                               max_size: int = MAX_DECOMPRESSED_SIZE) -> list[memoryview]:
    """The inner events of a TRANSACTION_PAYLOAD, each whole (header + body, no CRC32).

    Raises:
        MalformedPacket: unknown compression, corrupt zstd data, or inner events that do not
            tile the payload exactly.
    """
    if event.compression == COMPRESSION_NONE:
        data = event.payload
    elif event.compression == COMPRESSION_ZSTD:
        limit = max_size if event.uncompressed_size is None else event.uncompressed_size
        if limit > max_size:
            raise MalformedPacket(f"transaction payload claims {limit} bytes, more than {max_size}")
        data = _zstd_decompress(event.payload, limit)
        if event.uncompressed_size is not None and len(data) != event.uncompressed_size:
            raise MalformedPacket(f"transaction payload decompressed to {len(data)} bytes, "
                                  f"header says {event.uncompressed_size}")
    else:
        raise MalformedPacket(f"transaction payload compression {event.compression} unknown")
    view = memoryview(data)
    events: list[memoryview] = []
    offset = 0
    while offset < len(view):
        size = peek_event_size(view, offset)
        if size is None or size < HEADER_LEN or offset + size > len(view):
            raise MalformedPacket(f"inner event at payload offset {offset} is truncated")
        events.append(view[offset:offset + size])
        offset += size
    return events
