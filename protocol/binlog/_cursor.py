"""A bounds-checked little-endian reader over an event body.

Event bodies are small and their layouts are sequences of fixed-width integers, counted
strings and length-encoded integers. ``Cursor`` reads them in order and turns every overrun
into :class:`~protocol.errors.TruncatedData`, so decoders never leak ``IndexError`` or
``struct.error``. (The row decoder, the hot path, does not use this: it works on precompiled
structs directly.)
"""

from __future__ import annotations

import struct

from ..errors import MalformedPacket, TruncatedData
from ..packets import read_lenenc

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")


class Cursor:
    """Reads ``data[pos:end]`` front to back; ``end`` defaults to the end of ``data``."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0,
                 end: int | None = None) -> None:
        self.data = memoryview(data)
        self.pos = pos
        self.end = len(self.data) if end is None else end
        if not 0 <= pos <= self.end <= len(self.data):
            raise TruncatedData(f"field bounds {pos}..{end} exceed {len(self.data)} bytes")

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, size: int, what: str) -> int:
        start = self.pos
        if size < 0 or start + size > self.end:
            raise TruncatedData(
                f"{what}: need {size} bytes at offset {start}, only {self.end - start} left")
        self.pos = start + size
        return start

    def u8(self, what: str = "u8") -> int:
        return self.data[self._need(1, what)]

    def u16(self, what: str = "u16") -> int:
        value: int = _U16.unpack_from(self.data, self._need(2, what))[0]
        return value

    def u32(self, what: str = "u32") -> int:
        value: int = _U32.unpack_from(self.data, self._need(4, what))[0]
        return value

    def u64(self, what: str = "u64") -> int:
        value: int = _U64.unpack_from(self.data, self._need(8, what))[0]
        return value

    def i64(self, what: str = "i64") -> int:
        value: int = _I64.unpack_from(self.data, self._need(8, what))[0]
        return value

    def f64(self, what: str = "f64") -> float:
        value: float = _F64.unpack_from(self.data, self._need(8, what))[0]
        return value

    def uint(self, size: int, what: str = "integer") -> int:
        """An unsigned little-endian integer of ``size`` bytes (1..8)."""
        start = self._need(size, what)
        return int.from_bytes(self.data[start:start + size], "little")

    def uint_be(self, size: int, what: str = "integer") -> int:
        start = self._need(size, what)
        return int.from_bytes(self.data[start:start + size], "big")

    def take(self, size: int, what: str = "bytes") -> bytes:
        start = self._need(size, what)
        return bytes(self.data[start:start + size])

    def view(self, size: int, what: str = "bytes") -> memoryview:
        start = self._need(size, what)
        return self.data[start:start + size]

    def rest(self) -> bytes:
        start, self.pos = self.pos, self.end
        return bytes(self.data[start:self.end])

    def skip(self, size: int, what: str = "padding") -> None:
        self._need(size, what)

    def lenenc(self, what: str = "length-encoded integer") -> int:
        """A protocol length-encoded integer (0xFB NULL and 0xFF are errors here)."""
        try:
            value, self.pos = read_lenenc(self.data, self.pos, self.end)
        except MalformedPacket as exc:  # TruncatedData stays TruncatedData
            raise type(exc)(f"{what}: {exc}") from None
        return value

    def nul_terminated(self, what: str = "string") -> bytes:
        """Bytes up to (not including) the next NUL, consuming the NUL."""
        raw = bytes(self.data[self.pos:self.end])
        index = raw.find(b"\0")
        if index < 0:
            raise TruncatedData(f"{what}: no NUL terminator after offset {self.pos}")
        self.pos += index + 1
        return raw[:index]
