"""TIMESTAMP: a point in time, stored as seconds since the epoch in UTC.

**Stored** (binlog row image, TIMESTAMP2): 4 bytes big-endian seconds, then the fraction in
:func:`~.temporal.fractional_size` bytes (see :func:`~.temporal.read_fraction`). Seconds 0 with
no fraction is the zero TIMESTAMP ``0000-00-00 00:00:00``. The old TIMESTAMP (before MySQL 5.6)
is 4 bytes little-endian seconds.

**Value**: an aware UTC :class:`datetime.datetime`; the zero TIMESTAMP is an
:class:`~.temporal.InvalidTemporal` with the text ``SELECT`` prints (``fsp`` zero digits).

**Snapshot**: ``SELECT`` prints a TIMESTAMP in the session's time zone, so a snapshot selects
``UNIX_TIMESTAMP(c)`` — the stored seconds and fraction whatever the zone; ``0`` is the zero
TIMESTAMP.

**Text**: :func:`text` — as ``SELECT`` prints it in UTC (session ``time_zone = '+00:00'``), the
Open Protocol output's form with ``trim``; :func:`iso_text` — the same with its offset,
``+00:00``, the form of ``binlake decode``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from .temporal import (
    InvalidTemporal,
    fraction_text,
    fractional_size,
    read_fraction,
    wall_clock_text,
)

__all__ = ["EPOCH", "size", "zero", "decode", "decode_old", "select_expression", "from_text",
           "text", "iso_text"]

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def size(fsp: int) -> int:
    """Stored bytes of a TIMESTAMP(fsp)."""
    return 4 + fractional_size(fsp)


def zero(fsp: int) -> InvalidTemporal:
    """The zero TIMESTAMP of a TIMESTAMP(fsp) column, as ``SELECT`` prints it."""
    return InvalidTemporal("0000-00-00 00:00:00" + fraction_text(0, fsp))


def decode(buf: bytes, offset: int, fsp: int) -> datetime.datetime | InvalidTemporal:
    """The TIMESTAMP2 stored at ``offset``. Raises ``ValueError`` for a fraction over 999999."""
    seconds = int.from_bytes(buf[offset:offset + 4], "big")
    us = read_fraction(buf, offset + 4, fsp)
    if us > 999999:
        raise ValueError("TIMESTAMP2 fraction out of range")
    if seconds == 0 and us == 0:
        return zero(fsp)
    return EPOCH + datetime.timedelta(0, seconds, us)


def decode_old(seconds: int) -> datetime.datetime | InvalidTemporal:
    """The old TIMESTAMP (type 7), its 4 little-endian bytes already read as ``seconds``."""
    if seconds == 0:
        return zero(0)
    return EPOCH + datetime.timedelta(seconds=seconds)


def select_expression(quoted_name: str) -> str:
    """What a snapshot selects for the column: the stored seconds, whatever the time zone."""
    return f"UNIX_TIMESTAMP({quoted_name})"


def from_text(fsp: int) -> Callable[[str | bytes], datetime.datetime | InvalidTemporal]:
    """The converter of :func:`select_expression`'s text (``seconds[.fraction]``, as ``str``
    or ``bytes``) for a TIMESTAMP(fsp) column into :func:`decode`'s value."""
    zero_value = zero(fsp)

    def convert(raw: str | bytes) -> datetime.datetime | InvalidTemporal:
        text = raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")
        seconds, _, fraction = text.partition(".")
        us = int(fraction.ljust(6, "0")) if fraction else 0
        if seconds == "0" and not us:
            return zero_value
        return EPOCH + datetime.timedelta(0, int(seconds), us)

    return convert


def text(value: datetime.datetime | InvalidTemporal, fsp: int | None = None, *,
         trim: bool = False) -> str:
    """A TIMESTAMP value as ``SELECT`` prints it in UTC, ``YYYY-MM-DD HH:MM:SS``, then the
    fraction (:func:`~.temporal.wall_clock_text`: ``fsp`` digits, else six when there are
    microseconds, ``trim`` drops their trailing zeros); the zero TIMESTAMP as its own text."""
    if isinstance(value, InvalidTemporal):
        return value.text
    return wall_clock_text(value.astimezone(datetime.UTC), fsp, trim=trim)


def iso_text(value: datetime.datetime | InvalidTemporal) -> str:
    """:func:`text` with the offset after it, ``YYYY-MM-DD HH:MM:SS[.ffffff]+00:00`` (ISO 8601
    with a space): a reader of the text sees that the time is UTC, not the server's zone."""
    if isinstance(value, InvalidTemporal):
        return value.text
    return text(value) + "+00:00"
