"""DECIMAL: an exact decimal number of up to 65 digits, ``scale`` of them after the point.

**Stored** (binlog row image, NEWDECIMAL; metadata precision and scale): the integer part and
the fraction each as groups of nine decimal digits in 4 big-endian bytes, with a shorter group
(:data:`DIG2BYTES` bytes for its digits) at each outer end: the integer part's most significant
and the fraction's least. The sign is the inverted top bit of the first byte; a negative number
has every byte inverted as well.

**Value**: :class:`decimal.Decimal`, exactly, with ``scale`` digits after the point (``-0.00``
keeps its sign, as the stored form does). A group holding more digits than it may (corrupt
bytes): ``ValueError``.

**Snapshot**: ``SELECT`` prints it exactly; :func:`from_text`. **Text**: :func:`text`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

__all__ = ["DIG2BYTES", "size", "size_checked", "groups", "decoder", "decode",
           "select_expression", "from_text", "text"]

#: Bytes of a group of 0..9 digits.
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_POW10 = tuple(10 ** i for i in range(10))


def size(precision: int, scale: int) -> int:
    """Stored size in bytes of a DECIMAL(precision, scale)."""
    i0, ix = divmod(precision - scale, 9)
    f0, fx = divmod(scale, 9)
    return i0 * 4 + DIG2BYTES[ix] + f0 * 4 + DIG2BYTES[fx]


def size_checked(precision: int, scale: int) -> int:
    """:func:`size`, raising ``ValueError`` for a DECIMAL no server can declare."""
    if not (0 < precision <= 65 and 0 <= scale <= 30 and scale <= precision):
        raise ValueError(f"impossible DECIMAL({precision},{scale})")
    return size(precision, scale)


def groups(precision: int, scale: int) -> list[tuple[int, int]]:
    """The stored digit groups of a DECIMAL(precision, scale), most significant first, as
    ``(bytes, digits)``: a partial integer group, whole 9-digit groups of the integer part and
    of the fraction, then a partial fraction group. The sign bit is the top bit of the first."""
    i0, ix = divmod(precision - scale, 9)
    f0, fx = divmod(scale, 9)
    out = [(DIG2BYTES[ix], ix)] if ix else []
    out += [(4, 9)] * (i0 + f0)
    if fx:
        out.append((DIG2BYTES[fx], fx))
    return out


def decoder(precision: int, scale: int) -> tuple[int, Any]:
    """A ``(size, decode(buf, offset) -> Decimal)`` pair for one DECIMAL(p, s).

    The whole value is read as one big-endian integer: the sign bit flips it, then the groups
    are taken from the least significant end (the fraction first), so they compose one integer
    N = whole * 10**scale + fraction, printed with the point ``scale`` digits from the right.
    """
    stored = size_checked(precision, scale)
    top = 1 << (stored * 8 - 1)
    mask = (1 << (stored * 8)) - 1
    layout = [(nbytes * 8, digits) for nbytes, digits in reversed(groups(precision, scale))]

    def decode_one(buf: bytes, offset: int) -> Decimal:
        raw = int.from_bytes(buf[offset:offset + stored], "big")
        if raw & top:
            v, sign = raw ^ top, ""
        else:
            v, sign = raw ^ mask ^ top, "-"
        n = 0
        weight = 1
        for bits, digits in layout:
            group = v & ((1 << bits) - 1)
            if group >= _POW10[digits]:
                raise ValueError("DECIMAL group out of range")
            n += group * weight
            weight *= _POW10[digits]
            v >>= bits
        if scale:
            text = str(n).rjust(scale + 1, "0")
            return Decimal(f"{sign}{text[:-scale]}.{text[-scale:]}")
        return Decimal(f"{sign}{n}")

    return stored, decode_one


_DECODERS: dict[tuple[int, int], tuple[int, Any]] = {}


def decode(buf: bytes, offset: int, precision: int, scale: int) -> tuple[Decimal, int]:
    """The DECIMAL(precision, scale) stored at ``offset``, and its size."""
    entry = _DECODERS.get((precision, scale))
    if entry is None:
        entry = _DECODERS[(precision, scale)] = decoder(precision, scale)
    stored, decode_one = entry
    if offset + stored > len(buf):
        raise ValueError("DECIMAL runs past the end of the value")
    return decode_one(buf, offset), stored


def select_expression(quoted_name: str) -> str:
    """What a snapshot selects for the column: the column itself prints exactly."""
    return quoted_name


def from_text(raw: str | bytes) -> Decimal:
    """The value of ``SELECT``'s text of a DECIMAL (``str`` or ``bytes``)."""
    return Decimal(raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape"))


def text(value: Decimal) -> str:
    """A DECIMAL value as the outputs print it: Python's text of the :class:`~decimal.Decimal`.
    That is the server's text (``-12.50``: every digit of the scale, the sign of ``-0.00``)
    unless the first significant digit is the seventh after the point or later, or the value is
    a zero of scale 7 or more: then the exponent form (``1E-7``, ``1.0E-7``, ``0E-7``) where
    ``SELECT`` prints the zeros."""
    return str(value)
