"""Catch-up progress for a person at a terminal: where the stream is against the server's end.

A daemon started far behind (a new lake from ``start.from = earliest``, or one that was stopped
for a day) can stream for minutes before it is live. When stderr is a terminal the daemon asks
the server for its binlog files and sizes (``SHOW BINARY LOGS``) at connect, and every few
seconds logs one line: the position reached, the end it is heading for, the share done, the
bytes left, the rate and an estimate of the time left. Once the position passes the end seen at
connect it says so once and falls silent; from then on lag is the metrics' business.

Pure functions and a small state object, so the formatting is unit-tested without a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.binlog.model import BinlogPosition

__all__ = ["BinlogFile", "CatchUpProgress", "bytes_behind", "format_bytes", "format_duration",
           "format_progress"]


@dataclass(frozen=True, slots=True)
class BinlogFile:
    """One row of ``SHOW BINARY LOGS``: a binlog file and its size in bytes."""

    name: str
    size: int


def bytes_behind(files: Sequence[BinlogFile], position: BinlogPosition) -> int | None:
    """Bytes of binlog from ``position`` to the end of the last file; None if the position's
    file is not among ``files`` (purged since, or not known yet)."""
    for i, binlog in enumerate(files):
        if binlog.name == position.file:
            rest = sum(f.size for f in files[i + 1:])
            return max(0, binlog.size - position.pos) + rest
    return None


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def format_progress(position: BinlogPosition, end: BinlogPosition, behind: int, total: int,
                    rate: float | None) -> str:
    """The progress line, e.g. ``catching up: mysql-bin.000002:4096 of mysql-bin.000003:1000
    (61.5%, 2.3 MiB behind, 1.1 MiB/s, ~2 s left)``.

    Args:
        behind: bytes from ``position`` to ``end``; total: bytes from where the catch-up began.
        rate: bytes per second over the last interval (None before there is one).
    """
    done = 100.0 if total <= 0 else max(0.0, min(100.0, 100.0 * (total - behind) / total))
    parts = [f"{done:.1f}%", f"{format_bytes(behind)} behind"]
    if rate is not None and rate > 0:
        parts.append(f"{format_bytes(rate)}/s")
        parts.append(f"~{format_duration(behind / rate)} left")
    return f"catching up: {position} of {end} ({', '.join(parts)})"


class CatchUpProgress:
    """Turns (time, position) samples into progress lines towards one binlog end.

    :meth:`update` returns the line to show, or None when there is nothing to say: the position
    is not in the known files, or the end was already reported as reached.
    """

    def __init__(self, files: Sequence[BinlogFile]) -> None:
        self.files = tuple(files)
        last = self.files[-1] if self.files else None
        self.end = BinlogPosition(last.name, last.size) if last else None
        self._total: int | None = None
        self._last: tuple[float, int] | None = None
        self.done = self.end is None

    def update(self, now: float, position: BinlogPosition) -> str | None:
        if self.done or self.end is None:
            return None
        behind = bytes_behind(self.files, position)
        if behind is None:
            return None
        if self._total is None:
            self._total = behind
        if behind <= 0:
            self.done = True
            return f"caught up with the binlog end seen at connect ({self.end})"
        rate = None
        if self._last is not None and now > self._last[0]:
            rate = (self._last[1] - behind) / (now - self._last[0])
        self._last = (now, behind)
        return format_progress(position, self.end, behind, self._total, rate)
