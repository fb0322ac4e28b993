"""A sans-I/O reader of binlog *files*: the 4-byte magic, then whole events, back to back.

The caller reads the file however it likes and hands the bytes over; the reader returns each
event whole, ready for :meth:`protocol.binlog.stream.EventStream.feed`::

    reader = BinlogFileReader()
    stream = EventStream(file="mysql-bin.000001")
    reader.receive_data(path.read_bytes())
    reader.receive_data(b"")                      # end of file
    while (raw := reader.next_event()) is not END_OF_FILE:
        if raw is NEED_DATA: ...                  # only when fed incrementally
        events = stream.feed(raw)

An event cut short by the end of the file (a server that crashed mid-write, or a file still
being written) is reported as :class:`~protocol.errors.TruncatedData` naming its offset; the
caller decides whether that is an error (``binlake decode`` says so) or a place to wait.
"""

from __future__ import annotations

import enum

from ..errors import MalformedPacket, TruncatedData
from .header import HEADER_LEN, peek_event_size

__all__ = ["BINLOG_MAGIC", "NEED_DATA", "END_OF_FILE", "BinlogFileReader", "split_binlog"]

BINLOG_MAGIC = b"\xfebin"
_COMPACT_THRESHOLD = 1 << 20
DEFAULT_MAX_EVENT_SIZE = 1 << 30  # max_allowed_packet's ceiling bounds every event


class ReaderState(enum.Enum):
    NEED_DATA = "NEED_DATA"
    END_OF_FILE = "END_OF_FILE"


NEED_DATA = ReaderState.NEED_DATA
END_OF_FILE = ReaderState.END_OF_FILE


class BinlogFileReader:
    """Splits binlog file bytes into events; tracks the file offset of the next event."""

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._buffer = bytearray()
        self._start = 0  # consumed bytes at the front of the buffer
        self._offset = 0  # file offset of buffer[_start]
        self._eof = False
        self._magic_seen = False
        self._max_event_size = max_event_size

    @property
    def offset(self) -> int:
        """File offset of the next event (after the magic: 4 at the start)."""
        return self._offset

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer more file bytes; ``b""`` means the end of the file."""
        if not data:
            self._eof = True
            return
        if self._eof:
            raise RuntimeError("received data after end of file")
        if self._start > _COMPACT_THRESHOLD:
            del self._buffer[:self._start]
            self._start = 0
        self._buffer += data

    def next_event(self) -> bytes | ReaderState:
        """The next whole event, ``NEED_DATA``, or ``END_OF_FILE``.

        Raises:
            MalformedPacket: the file does not start with the binlog magic, or an event header
                gives an impossible size.
            TruncatedData: the file ends inside an event.
        """
        available = len(self._buffer) - self._start
        if not self._magic_seen:
            if available < len(BINLOG_MAGIC):
                return self._short(available, "binlog magic")
            magic = bytes(self._buffer[self._start:self._start + 4])
            if magic != BINLOG_MAGIC:
                raise MalformedPacket(f"not a binlog file: magic {magic.hex()} is not fe62696e")
            self._consume(4)
            self._magic_seen = True
            available -= 4
        if available == 0 and self._eof:
            return END_OF_FILE
        size = peek_event_size(self._buffer, self._start)
        if size is None:
            return self._short(available, "event header")
        if size < HEADER_LEN or size > self._max_event_size:
            raise MalformedPacket(f"event at offset {self._offset} claims {size} bytes")
        if available < size:
            return self._short(available, f"event of {size} bytes")
        event = bytes(self._buffer[self._start:self._start + size])
        self._consume(size)
        return event

    def _short(self, available: int, what: str) -> ReaderState:
        if self._eof:
            raise TruncatedData(
                f"binlog file ends inside the {what} at offset {self._offset} "
                f"({available} bytes left)")
        return NEED_DATA

    def _consume(self, size: int) -> None:
        self._start += size
        self._offset += size


def split_binlog(data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
    """All events of a whole binlog file as ``(offset, event bytes)`` pairs."""
    reader = BinlogFileReader()
    reader.receive_data(data)
    reader.receive_data(b"")
    events: list[tuple[int, bytes]] = []
    while True:
        event = reader.next_event()
        if event is END_OF_FILE:
            return events
        if isinstance(event, bytes):
            events.append((reader.offset - len(event), event))
