"""What the temporal types share: the value Python cannot hold, and the fractional seconds.

DATE, DATETIME, TIMESTAMP and TIME.

**Text.** A temporal value prints as the server prints it — ``YYYY-MM-DD``, ``HH:MM:SS`` — then
its fraction in one of three forms: exactly the column's ``fsp`` digits (:func:`fraction_text`,
what ``SELECT`` prints), six digits when there are microseconds (:func:`micro_fraction_text`, what
``binlake decode`` prints), or those digits with the trailing zeros dropped (``trim``, what the
Open Protocol output prints, as TiCDC does). Nothing when the fraction is zero, in the last two.

**Zero and invalid temporal values.** The server stores dates Python cannot hold: ``0000-00-00``,
``2024-00-10`` (NO_ZERO_IN_DATE off), ``2024-02-30`` (ALLOW_INVALID_DATES), year 0, the zero
TIMESTAMP. Such a value decodes to :class:`InvalidTemporal`, a small frozen type holding the
exact text ``SELECT`` prints for it. It is never coerced to a nearby valid value, and it never
raises; sinks map it to NULL (and may keep the text alongside).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

__all__ = ["InvalidTemporal", "fractional_size", "read_fraction", "fraction_text",
           "micro_fraction_text", "wall_clock_text"]


@dataclass(frozen=True, slots=True)
class InvalidTemporal:
    """A DATE/DATETIME/TIMESTAMP/TIME the server accepted but Python cannot represent.

    ``text`` is what ``SELECT`` prints for the value, e.g. ``'0000-00-00'`` or
    ``'2024-00-10 00:00:00.000'``. Sinks treat it as NULL.
    """

    text: str

    def __str__(self) -> str:
        return self.text


def fractional_size(fsp: int) -> int:
    """Bytes of the fractional part of a TIME2/DATETIME2/TIMESTAMP2 with ``fsp`` digits."""
    return (fsp + 1) // 2


def read_fraction(buf: bytes, offset: int, fsp: int) -> int:
    """The fractional part (microseconds) stored big-endian after DATETIME2/TIMESTAMP2: two
    digits per byte, so 1-2 digits take one byte (hundredths), 3-4 two, 5-6 three."""
    if fsp <= 2:
        return buf[offset] * 10000 if fsp else 0
    if fsp <= 4:
        return ((buf[offset] << 8) | buf[offset + 1]) * 100
    return (buf[offset] << 16) | (buf[offset + 1] << 8) | buf[offset + 2]


def fraction_text(us: int, fsp: int) -> str:
    """``.`` and exactly ``fsp`` digits of ``us`` microseconds (nothing for ``fsp`` 0): how
    ``SELECT`` prints the fraction of a column declared with ``fsp`` digits."""
    return f".{us:06d}"[: fsp + 1] if fsp else ""


def micro_fraction_text(us: int, *, trim: bool = False) -> str:
    """``.`` and six digits of ``us`` microseconds, nothing when ``us`` is 0; with ``trim`` the
    trailing zeros dropped (``.5`` for half a second)."""
    if not us:
        return ""
    digits = f"{us:06d}"
    return "." + (digits.rstrip("0") if trim else digits)


def wall_clock_text(value: datetime.datetime, fsp: int | None = None, *,
                    trim: bool = False) -> str:
    """A date and time of day as the server prints them, ``YYYY-MM-DD HH:MM:SS`` (the year on
    four digits, also before 1000), then the fraction: exactly ``fsp`` digits when given, else
    :func:`micro_fraction_text`'s. A time zone the value carries is not printed nor applied."""
    # isoformat, not strftime('%Y'): glibc does not pad years before 1000 ('1-01-01').
    whole = value.replace(tzinfo=None).isoformat(" ", "seconds")
    if fsp is not None:
        return whole + fraction_text(value.microsecond, fsp)
    return whole + micro_fraction_text(value.microsecond, trim=trim)
