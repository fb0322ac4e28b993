"""The 19-byte v4 binlog event header and the CRC32 trailer every modern event carries.

Every binlog event, in a file or on the wire, starts with the same header::

    timestamp u32 | type_code u8 | server_id u32 | event_size u32 | log_pos u32 | flags u16

``event_size`` counts the header, the body and the 4-byte CRC32 trailer when the binlog has
``binlog_checksum=CRC32``. ``log_pos`` is the *end* position of the event in its binlog file
(0 for artificial events, and on MariaDB 11.4+ for events inside a transaction); the stream
tracker (:mod:`protocol.binlog.stream`) turns it into the event's own start and end.
"""

from __future__ import annotations

import struct
import zlib

from ..errors import ChecksumMismatch, TruncatedData
from .model import EventHeader

__all__ = [
    "HEADER_LEN",
    "CHECKSUM_LEN",
    "LOG_EVENT_BINLOG_IN_USE_F",
    "LOG_EVENT_THREAD_SPECIFIC_F",
    "LOG_EVENT_SUPPRESS_USE_F",
    "LOG_EVENT_ARTIFICIAL_F",
    "LOG_EVENT_RELAY_LOG_F",
    "LOG_EVENT_IGNORABLE_F",
    "LOG_EVENT_SKIP_REPLICATION_F",
    "parse_header",
    "peek_event_size",
    "crc32_of",
    "verify_crc32",
]

HEADER_LEN = 19
CHECKSUM_LEN = 4

LOG_EVENT_BINLOG_IN_USE_F = 0x0001
LOG_EVENT_THREAD_SPECIFIC_F = 0x0004
LOG_EVENT_SUPPRESS_USE_F = 0x0008
LOG_EVENT_ARTIFICIAL_F = 0x0020
LOG_EVENT_RELAY_LOG_F = 0x0040
LOG_EVENT_IGNORABLE_F = 0x0080
LOG_EVENT_SKIP_REPLICATION_F = 0x8000

_HEADER = struct.Struct("<IBIIIH")
_EVENT_SIZE = struct.Struct("<I")  # at offset 9
_CRC = struct.Struct("<I")
_FORMAT_DESCRIPTION = 15


def parse_header(data: bytes | bytearray | memoryview, *, file: str = "", position: int = 0,
                 next_position: int = 0) -> EventHeader:
    """Parse the common header at the start of ``data``.

    Args:
        data: the event's bytes (at least the 19 header bytes).
        file, position, next_position: where the stream tracker says the event sits; stored
            verbatim in the returned header.

    Raises:
        TruncatedData: fewer than 19 bytes.
    """
    if len(data) < HEADER_LEN:
        raise TruncatedData(f"event header needs {HEADER_LEN} bytes, got {len(data)}")
    timestamp, type_code, server_id, event_size, log_pos, flags = _HEADER.unpack_from(data, 0)
    return EventHeader(timestamp, type_code, server_id, event_size, log_pos, flags,
                       file, position, next_position)


def peek_event_size(data: bytes | bytearray | memoryview, offset: int = 0) -> int | None:
    """The ``event_size`` field of the header at ``offset``, or ``None`` if not yet buffered."""
    if len(data) - offset < HEADER_LEN:
        return None
    size: int = _EVENT_SIZE.unpack_from(data, offset + 9)[0]
    return size


def crc32_of(data: bytes | bytearray | memoryview) -> int:
    """The binlog checksum (ISO-HDLC CRC-32, as zlib computes it) of ``data``."""
    return zlib.crc32(data) & 0xFFFFFFFF


def verify_crc32(event: bytes | bytearray | memoryview, *, file: str, position: int) -> None:
    """Check the CRC32 trailer of a whole event (header, body and the 4 trailer bytes).

    Raises:
        TruncatedData: the event is too short to hold a header and a trailer.
        ChecksumMismatch: the trailer does not match; names the file and position.
    """
    if len(event) < HEADER_LEN + CHECKSUM_LEN:
        raise TruncatedData(f"event of {len(event)} bytes is too short to carry a CRC32")
    end = len(event) - CHECKSUM_LEN
    expected: int = _CRC.unpack_from(event, end)[0]
    actual = crc32_of(memoryview(event)[:end])
    if expected != actual and event[4] == _FORMAT_DESCRIPTION and event[17] & 1:
        # A server sets LOG_EVENT_BINLOG_IN_USE_F in the FDE of the file it is writing and
        # clears it on close without rewriting the CRC: MySQL computes the FDE's CRC with
        # the flag cleared. Check it that way too.
        cleared = bytearray(event[:end])
        cleared[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
        if crc32_of(cleared) == expected:
            return
    if expected != actual:
        raise ChecksumMismatch(file, position, expected, actual)
