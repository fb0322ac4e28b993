"""Packet framing of the client/server protocol, and the length-encoded primitives.

Every message is carried in packets of ``int<3> length | int<1> sequence id | payload``. A
payload of 0xFFFFFF bytes or more is split into chunks of exactly 0xFFFFFF bytes with
consecutive sequence ids; a chunk shorter than 0xFFFFFF ends the message, so a payload whose
size is a multiple of 0xFFFFFF ends with an empty chunk.

The sequence id is shared by both directions of one exchange: the client sends a command with
id 0, the server answers with 1, 2, ... and the client's reply during authentication continues
the count. :class:`PacketCodec` keeps that one counter for both directions; the replication
stream resets it where the protocol does (a new command, a semi-sync ACK).

The same reader carries the binlog stream, whose events reach 1 GiB. Received bytes are kept in
one ``bytearray`` with a read offset; chunk headers are scanned in place, remembering how far the
scan got, so a message split over many ``receive_data`` calls costs O(n) and is copied out of
the buffer exactly once (``b"".join`` over memoryview slices).
"""

from __future__ import annotations

import struct
from typing import Any

from .binlog.native import text_collect as _native_text_collect
from .binlog.native import text_rows as _native_text_rows
from .errors import MalformedPacket, PacketSequenceError, PacketTooLarge, TruncatedData
from .native_frames import split_payloads as _native_split_payloads

__all__ = [
    "MAX_CHUNK",
    "DEFAULT_MAX_PACKET_SIZE",
    "PacketCodec",
    "frame_packet",
    "read_lenenc",
    "read_lenenc_int",
    "read_lenenc_bytes",
    "read_nul_bytes",
    "read_fixed",
    "lenenc_int",
    "lenenc_bytes",
]

MAX_CHUNK = 0xFFFFFF
DEFAULT_MAX_PACKET_SIZE = 1 << 30  # MariaDB's MAX_MAX_ALLOWED_PACKET; the dump thread uses it

_HEADER = struct.Struct("<I")  # 3-byte length + 1-byte sequence id, read as one little-endian u32
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

_BUFFER_COMPACT_THRESHOLD = 1 << 16
# next_payloads_after copies a buffer up to this size whole and splits it in one pass (a few
# reads' worth); a larger one (a big event still arriving) is scanned first, then copied.
_ONE_PASS_MAX = 1 << 20


class PacketCodec:
    """Frames outgoing payloads and reassembles incoming ones, checking sequence ids.

    h11-style and I/O-free: feed received bytes with :meth:`receive_data`, pull complete
    payloads with :meth:`next_packet`, turn payloads into wire bytes with :meth:`send`.

    Args:
        max_packet_size: the largest joined payload accepted; a bigger one raises
            :class:`PacketTooLarge` as soon as its announced chunks exceed it.
        check_sequence: verify that every received chunk carries the expected sequence id.
    """

    __slots__ = (
        "max_packet_size",
        "check_sequence",
        "sequence",
        "_buf",
        "_start",
        "_scan_pos",
        "_scan_chunks",
        "_scan_size",
        "_scan_seq",
    )

    def __init__(self, max_packet_size: int = DEFAULT_MAX_PACKET_SIZE, *,
                 check_sequence: bool = True) -> None:
        self.max_packet_size = max_packet_size
        self.check_sequence = check_sequence
        #: The sequence id the next packet (sent or received) carries.
        self.sequence = 0
        self._buf = bytearray()
        self._start = 0  # first unconsumed byte of _buf
        # Progress of scanning a message made of several chunks (reset when it is returned).
        self._scan_pos = 0
        self._scan_chunks: list[tuple[int, int]] = []
        self._scan_size = 0
        self._scan_seq = 0

    # --- sequence ------------------------------------------------------------------------------

    def reset_sequence(self, sequence: int = 0) -> None:
        """Start a new exchange: the next packet (either direction) carries ``sequence``."""
        if self._scan_chunks:
            raise MalformedPacket("cannot reset the sequence in the middle of a split packet")
        self.sequence = sequence & 0xFF

    # --- sending -------------------------------------------------------------------------------

    def send(self, payload: bytes | bytearray | memoryview, sequence: int | None = None) -> bytes:
        """Return the wire bytes of ``payload`` and advance the sequence id past them.

        Args:
            payload: the message body, any length (split at 0xFFFFFF as the protocol says).
            sequence: force this sequence id (e.g. 0 for a new command or a semi-sync ACK);
                by default the codec's running counter is used.
        """
        if sequence is not None:
            self.sequence = sequence & 0xFF
        data, self.sequence = frame_packet(payload, self.sequence)
        return data

    # --- receiving -----------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes received from the peer (never parses; see :meth:`next_packet`)."""
        if self._start and (self._start >= _BUFFER_COMPACT_THRESHOLD
                            or self._start == len(self._buf)):
            del self._buf[: self._start]
            self._scan_pos -= self._start
            self._scan_chunks = [(s - self._start, n) for s, n in self._scan_chunks]
            self._start = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """How many received bytes are not yet returned as packets."""
        return len(self._buf) - self._start

    def next_packet(self) -> tuple[int, bytes] | None:
        """Return ``(sequence id of the first chunk, joined payload)``, or None if incomplete.

        Raises:
            PacketSequenceError: a chunk carries an unexpected sequence id.
            PacketTooLarge: the joined payload would exceed ``max_packet_size``.
        """
        buf = self._buf
        end = len(buf)
        if not self._scan_chunks:
            pos = self._start
            if end - pos < 4:
                return None
            (header,) = _HEADER.unpack_from(buf, pos)
            length = header & 0xFFFFFF
            seq = header >> 24
            if self.check_sequence and seq != self.sequence:
                raise PacketSequenceError(self.sequence, seq)
            if length > self.max_packet_size:
                raise PacketTooLarge(
                    f"packet of {length} bytes exceeds the maximum of {self.max_packet_size}")
            if length < MAX_CHUNK:
                if end - pos - 4 < length:
                    return None
                if length < 4096:
                    payload = bytes(buf[pos + 4: pos + 4 + length])
                else:  # one copy, not two, for large payloads
                    with memoryview(buf) as view:
                        payload = bytes(view[pos + 4: pos + 4 + length])
                self._start = pos + 4 + length
                self.sequence = (seq + 1) & 0xFF
                return seq, payload
            # The first chunk of a split message: scan the rest in place.
            self._scan_chunks = []
            self._scan_size = 0
            self._scan_pos = pos
            self._scan_seq = seq
        return self._scan_split_message(end)

    def next_packets(self) -> list[bytes]:
        """The payloads of every complete packet buffered, in order, as :meth:`next_packet`
        returns them one by one; it stops (without raising) before anything that is not a
        plain packet: a split one (16 MiB and more), a wrong sequence id, one over
        ``max_packet_size`` — :meth:`next_packet` then returns or raises it.

        One call per read instead of one per packet: a binlog dump of small transactions is
        mostly packets of a few hundred bytes, and the per-call work showed in profiles.
        Sequence ids advance as they arrive, so a caller whose peer restarts the numbering
        in mid-stream (semi-sync ACK requests) must use :meth:`next_packet`.
        """
        stops, seq = self._plain_packets(None)
        buf = self._buf
        pos = self._start
        out: list[bytes] = []
        for stop in stops:
            if stop - pos < 4100:
                out.append(bytes(buf[pos + 4:stop]))
            else:  # one copy, not two, for large payloads
                with memoryview(buf) as view:
                    out.append(bytes(view[pos + 4:stop]))
            pos = stop
        self._take_until(stops, seq)
        return out

    def next_payloads_after(self, status: int) -> list[bytes]:
        """The payloads of the complete plain packets buffered that begin with the byte
        ``status``, without it, in order, as :meth:`next_packets` takes them; it stops before
        the first packet that does not begin so (or that it would stop before), which
        :meth:`next_packet` then returns whole.

        For the binlog dump, whose events come each after an OK byte: one ``bytes`` per event
        and no view, where taking the packet and then a view past its first byte cost three
        objects (making a view costs more than copying a small event).
        """
        if not self._scan_chunks:
            if _native_split_payloads is not None:  # in C: no copy of the buffer, no loop
                payloads, pos, seq = _native_split_payloads(
                    self._buf, self._start, len(self._buf), self.sequence,
                    self.check_sequence, self.max_packet_size, status)
                if payloads:
                    self._start = pos
                    self.sequence = seq
                return payloads
            if len(self._buf) - self._start <= _ONE_PASS_MAX:
                return self._payloads_one_pass(status)
        stops, seq = self._plain_packets(status)
        if not stops:
            return []
        # One copy of the packets taken (never of a partial one still arriving), each
        # payload then sliced from it.
        start = self._start
        with memoryview(self._buf) as view:
            data = bytes(view[start:stops[-1]])
        out: list[bytes] = []
        begin = 0
        for stop in stops:
            stop -= start
            out.append(data[begin + 5:stop])
            begin = stop
        self._take_until(stops, seq)
        return out

    def _payloads_one_pass(self, status: int) -> list[bytes]:
        """:meth:`next_payloads_after` for a buffer of at most ``_ONE_PASS_MAX`` bytes: one
        copy of all of it (a partial packet at its end included, bounded so), then each
        packet checked and sliced in the same loop, as :meth:`_plain_packets` checks them."""
        start = self._start
        with memoryview(self._buf) as view:
            data = bytes(view[start:])
        end = len(data)
        pos = 0
        seq = self.sequence
        check = self.check_sequence
        limit = min(self.max_packet_size, MAX_CHUNK - 1)
        unpack = _HEADER.unpack_from
        out: list[bytes] = []
        append = out.append
        while end - pos >= 5:
            (header,) = unpack(data, pos)
            length = header & 0xFFFFFF
            stop = pos + 4 + length
            if ((check and header >> 24 != seq) or length > limit or stop > end
                    or not length or data[pos + 4] != status):
                break
            append(data[pos + 5:stop])
            seq = ((header >> 24) + 1) & 0xFF
            pos = stop
        if out:
            self._start = start + pos
            self.sequence = seq
        return out

    def _plain_packets(self, status: int | None) -> tuple[list[int], int]:
        """Where each complete plain packet buffered ends (absolute offsets in the buffer),
        in order, up to the first that is split, carries a wrong sequence id, exceeds
        ``max_packet_size`` or (with ``status``) is empty or begins with another byte; and
        the sequence id expected after them."""
        if self._scan_chunks:
            return [], self.sequence
        buf = self._buf
        end = len(buf)
        pos = self._start
        seq = self.sequence
        check = self.check_sequence
        limit = min(self.max_packet_size, MAX_CHUNK - 1)
        unpack = _HEADER.unpack_from
        least = 4 if status is None else 5
        stops: list[int] = []
        while end - pos >= least:
            (header,) = unpack(buf, pos)
            length = header & 0xFFFFFF
            stop = pos + 4 + length
            if ((check and header >> 24 != seq) or length > limit or stop > end
                    or (status is not None and (not length or buf[pos + 4] != status))):
                break
            stops.append(stop)
            seq = ((header >> 24) + 1) & 0xFF
            pos = stop
        return stops, seq

    def _take_until(self, stops: list[int], seq: int) -> None:
        """The packets :meth:`_plain_packets` found are taken."""
        if stops:
            self._start = stops[-1]
            self.sequence = seq

    def text_rows(self, kinds: bytes, columns: list[list[Any]]) -> tuple[int, int]:
        """Take every complete plain text-protocol row packet buffered, in order, each value
        appended to its column's list as ``kinds`` (``protocol.results.TEXT_*``, one per
        column) says; returns ``(rows, fallbacks)``. The native extension does it without a
        Python object per packet (a snapshot reads millions of rows); without it, or at the
        first packet that is not a plain row (EOF/OK/ERR, split, wrong sequence id, malformed),
        it stops and :meth:`next_packet` returns that packet as usual. ``fallbacks`` counts the
        TEXT_INT/TEXT_FLOAT values kept as ``str`` because they are not plain numbers.
        """
        if _native_text_rows is None or self._scan_chunks or not self.check_sequence:
            return 0, 0
        start, seq, rows, fallbacks = _native_text_rows(
            self._buf, self._start, len(self._buf), self.sequence, self.max_packet_size, kinds,
            columns)
        self._start = start
        self.sequence = seq
        return rows, fallbacks

    def text_collect(self, out: bytearray) -> tuple[int, int]:
        """Take every complete plain text-protocol row packet buffered, in order, appending
        each payload to ``out`` unparsed (a 4-byte little-endian length, then the payload:
        ``protocol.binlog.native.text_collect``); returns ``(rows, last)``, ``last`` where the
        last one starts in ``out`` (-1: none). Stops as :meth:`text_rows` does; without the
        native extension it takes nothing."""
        if _native_text_collect is None or self._scan_chunks or not self.check_sequence:
            return 0, -1
        start, seq, rows, last = _native_text_collect(
            self._buf, self._start, len(self._buf), self.sequence, self.max_packet_size, out)
        self._start = start
        self.sequence = seq
        return rows, last

    def _scan_split_message(self, end: int) -> tuple[int, bytes] | None:
        buf = self._buf
        pos = self._scan_pos
        chunks = self._scan_chunks
        while end - pos >= 4:
            (header,) = _HEADER.unpack_from(buf, pos)
            length = header & 0xFFFFFF
            seq = header >> 24
            expected = (self._scan_seq + len(chunks)) & 0xFF
            if self.check_sequence and seq != expected:
                raise PacketSequenceError(expected, seq)
            if self._scan_size + length > self.max_packet_size:
                raise PacketTooLarge(
                    f"split packet of more than {self._scan_size + length} bytes exceeds the "
                    f"maximum of {self.max_packet_size}")
            if end - pos - 4 < length:
                break
            chunks.append((pos + 4, length))
            self._scan_size += length
            pos += 4 + length
            if length < MAX_CHUNK:
                with memoryview(buf) as view:
                    payload = b"".join([view[s: s + n] for s, n in chunks])
                first_seq = self._scan_seq
                self.sequence = (first_seq + len(chunks)) & 0xFF
                self._start = pos
                self._scan_chunks = []
                self._scan_size = 0
                return first_seq, payload
        self._scan_pos = pos
        return None


def frame_packet(payload: bytes | bytearray | memoryview, sequence: int) -> tuple[bytes, int]:
    """Return the wire bytes of ``payload`` starting at ``sequence`` and the next sequence id."""
    size = len(payload)
    if size < MAX_CHUNK:
        return _HEADER.pack(size | (sequence << 24)) + payload, (sequence + 1) & 0xFF
    parts: list[bytes | bytearray | memoryview] = []
    view = memoryview(payload)
    offset = 0
    while True:
        n = min(MAX_CHUNK, size - offset)
        parts.append(_HEADER.pack(n | (sequence << 24)))
        parts.append(view[offset: offset + n])
        sequence = (sequence + 1) & 0xFF
        offset += n
        if n < MAX_CHUNK:
            break
    return b"".join(parts), sequence


# --- length-encoded and fixed fields ------------------------------------------------------------
#
# Readers take the payload (bytes or memoryview) and an offset and return (value, new offset).
# They raise TruncatedData rather than letting IndexError or struct.error escape.

_LENENC_WIDTH = {0xFC: 2, 0xFD: 3, 0xFE: 8}


def read_lenenc(data: bytes | bytearray | memoryview, offset: int,
                end: int | None = None) -> tuple[int, int]:
    """Read a length-encoded integer that must be a number: the one lenenc reader of the project
    (packets, TABLE_MAP and rows bodies, event fields all use it).

    Raises:
        TruncatedData: the integer runs past ``end`` (default: the end of ``data``).
        MalformedPacket: the prefix is 0xFF (undefined) or 0xFB (NULL, which only the text
            protocol's rows may hold: :func:`read_lenenc_int` reads those).
    """
    if end is None:
        end = len(data)
    if offset >= end:
        raise TruncatedData(f"length-encoded integer truncated at offset {offset}")
    first = data[offset]
    if first < 0xFB:
        return first, offset + 1
    width = _LENENC_WIDTH.get(first)
    if width is None:
        raise MalformedPacket(
            f"invalid length-encoded integer prefix {first:#04x} at offset {offset}")
    stop = offset + 1 + width
    if stop > end:
        raise TruncatedData(f"length-encoded integer truncated at offset {offset}")
    return int.from_bytes(data[offset + 1:stop], "little"), stop


def read_lenenc_int(data: bytes | memoryview, offset: int) -> tuple[int | None, int]:
    """Read a length-encoded integer; 0xFB (the text protocol's NULL) gives ``None``."""
    if offset < len(data) and data[offset] == 0xFB:
        return None, offset + 1
    return read_lenenc(data, offset)


def read_lenenc_bytes(data: bytes | memoryview, offset: int) -> tuple[bytes | None, int]:
    """Read a length-encoded string as bytes; a NULL marker gives ``None``."""
    length, offset = read_lenenc_int(data, offset)
    if length is None:
        return None, offset
    end = offset + length
    if end > len(data):
        raise TruncatedData(
            f"length-encoded string of {length} bytes truncated at offset {offset}")
    return bytes(data[offset:end]), end


def read_nul_bytes(data: bytes | memoryview, offset: int) -> tuple[bytes, int]:
    """Read a NUL-terminated string (without its NUL)."""
    raw = data if isinstance(data, bytes) else bytes(data)
    end = raw.find(b"\0", offset)
    if end < 0:
        raise TruncatedData(f"NUL-terminated string starting at offset {offset} has no NUL")
    return raw[offset:end], end + 1


def read_fixed(data: bytes | memoryview, offset: int, size: int) -> tuple[bytes, int]:
    """Read exactly ``size`` bytes."""
    end = offset + size
    if end > len(data):
        raise TruncatedData(f"{size}-byte field truncated at offset {offset}")
    return bytes(data[offset:end]), end


def lenenc_int(value: int) -> bytes:
    """Encode a length-encoded integer."""
    if value < 0:
        raise ValueError("length-encoded integers are unsigned")
    if value < 0xFB:
        return bytes((value,))
    if value < 1 << 16:
        return b"\xfc" + _U16.pack(value)
    if value < 1 << 24:
        return b"\xfd" + _U32.pack(value)[:3]
    return b"\xfe" + _U64.pack(value)


def lenenc_bytes(value: bytes) -> bytes:
    """Encode a length-encoded string."""
    return lenenc_int(len(value)) + value
