"""TIME: a signed duration of at most ±838:59:59.999999 (a time of day or an interval).

**Stored** (binlog row image, TIME2): 3 bytes big-endian holding ``hour << 12 | minute << 6 |
second`` offset by 2^23, then the fraction in :func:`~.temporal.fractional_size` bytes. A
negative value's fraction is stored negative as well, borrowing from the seconds: the borrow is
undone the way the server's own reader does. With 5-6 digits the 6 bytes are one number, MySQL's
packed form ``(hms << 24) + microseconds`` offset by 2^47. The old TIME (before MySQL 5.6) is a
signed 3-byte little-endian ``±HHMMSS``.

**Value**: :class:`datetime.timedelta`. A minute or second over 59 (or a fraction over 999999)
cannot be stored by a server: ``ValueError``.

**Snapshot**: ``SELECT`` prints it exactly (``[-]H:MM:SS[.fraction]``), read by
:func:`from_text`. **Text**: :func:`text` is the one TIME formatter of the project.
"""

from __future__ import annotations

import datetime

from .temporal import fraction_text, fractional_size, micro_fraction_text

__all__ = ["size", "decode", "decode_packed", "decode_old", "select_expression", "from_text",
           "text"]


def size(fsp: int) -> int:
    """Stored bytes of a TIME(fsp)."""
    return 3 + fractional_size(fsp)


def decode_packed(packed: int) -> datetime.timedelta:
    """TIME from MySQL's packed 64-bit form: ``(hms << 24) + microseconds``, signed (also the
    form of a TIME inside binary JSON)."""
    negative = packed < 0
    if negative:
        packed = -packed
    hms, us = packed >> 24, packed & 0xFFFFFF
    hour, minute, second = (hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63
    if minute > 59 or second > 59 or us > 999999:
        raise ValueError("impossible TIME")
    delta = datetime.timedelta(0, hour * 3600 + minute * 60 + second, us)
    return -delta if negative else delta


def decode(buf: bytes, offset: int, fsp: int) -> datetime.timedelta:
    """The TIME2 stored at ``offset``."""
    intpart = int.from_bytes(buf[offset:offset + 3], "big") - 0x800000
    if fsp == 0:
        return decode_packed(intpart << 24)
    if fsp <= 2:
        frac = buf[offset + 3]
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x100
        return decode_packed((intpart << 24) + frac * 10000)
    if fsp <= 4:
        frac = int.from_bytes(buf[offset + 3:offset + 5], "big")
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x10000
        return decode_packed((intpart << 24) + frac * 100)
    return decode_packed(int.from_bytes(buf[offset:offset + 6], "big") - 0x800000000000)


def decode_old(v: int) -> datetime.timedelta:
    """The old TIME (type 11), its signed 3 bytes already read as ``v`` (``±HHMMSS``)."""
    negative = v < 0
    v = -v if negative else v
    hours, rest = divmod(v, 10000)
    minutes, seconds = divmod(rest, 100)
    if minutes > 59 or seconds > 59:
        raise ValueError("impossible TIME")
    delta = datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return -delta if negative else delta


def select_expression(quoted_name: str) -> str:
    """What a snapshot selects for the column: the column itself prints exactly."""
    return quoted_name


def from_text(raw: str | bytes) -> datetime.timedelta:
    """The value of ``SELECT``'s text of a TIME (``[-]H:MM:SS[.fraction]``, ``str`` or ``bytes``)."""
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")
    negative = text.startswith("-")
    hms, _, fraction = text.lstrip("-").partition(".")
    hour, minute, second = hms.split(":")
    us = int(fraction.ljust(6, "0")) if fraction else 0
    delta = datetime.timedelta(0, int(hour) * 3600 + int(minute) * 60 + int(second), us)
    return -delta if negative else delta


def text(t: datetime.timedelta, fsp: int | None = None, *, trim: bool = False) -> str:
    """A TIME value as the server prints it, ``[-]HH:MM:SS`` (hours past 24 up to 838), then the
    fraction: exactly ``fsp`` digits when given (a TIME(fsp) column), else six digits when there
    are microseconds and none when there are not (``trim``: without their trailing zeros)."""
    total_us = t.days * 86400_000000 + t.seconds * 1000000 + t.microseconds
    sign = "-" if total_us < 0 else ""
    seconds, us = divmod(abs(total_us), 1000000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    fraction = fraction_text(us, fsp) if fsp is not None else micro_fraction_text(us, trim=trim)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}{fraction}"
