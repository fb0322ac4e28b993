"""Progress for the operator: lines while the daemon catches up, and a summary when it stops.

A daemon started far behind (a new lake from ``start.from = earliest``, one stopped for a day,
a burst the lake could not keep up with) can stream for minutes before it is live. While it is
behind by more than a live daemon ever is (``lake.flush_interval`` plus a second), it logs one
INFO line every ``log.progress_interval`` seconds: transactions and rows landed so far; the work
not durable yet (:class:`Work`: transactions and rows decoded, their rate, bytes read, what the
sink buffers and when it lands) — a backlog lands by size, and by time only every
``lake.catch_up_flush_interval``, so without it the line would stand still for a minute while
the daemon works; the lag (:mod:`replica.observe.lag`) and an estimate of the time left from how
fast the bytes behind shrink. The metrics count durable work only; these lines are the one place
decoded work is shown. Reaching the server's end is said once; the stop is
summed up in one line.

Pure formatting and a small state object, so the lines are unit-tested without a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from replica.observe.lag import Lag
from sinks.contract import SnapshotProgress as SnapshotState

__all__ = ["Landed", "Progress", "Work", "SnapshotProgress", "format_bytes", "format_duration",
           "format_summary", "format_snapshot_entry"]


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass(frozen=True, slots=True)
class Landed:
    """What the daemon has landed since it started (durable in the lake)."""

    transactions: int
    rows: int


@dataclass(frozen=True, slots=True)
class Work:
    """What the daemon has done that is not necessarily durable: decoded since it started,
    and what the sink holds for the next flush."""

    #: Transactions and rows decoded and handed to the sink since the start.
    transactions: int
    rows: int
    #: Bytes read from the server's stream since the start.
    bytes_read: int
    #: Committed transactions buffered for the next flush, and their rows' bytes.
    buffered_transactions: int
    buffered_bytes: int
    #: Seconds until a flush by time lands the buffer (None: nothing buffered).
    lands_in: float | None
    #: A table's buffer of this size lands sooner.
    flush_bytes: int


def _work_text(work: Work, previous: Work | None, span: float) -> str:
    text = f"{work.transactions} transactions and {work.rows} rows decoded"
    if previous is not None and span > 0:
        text += (f" ({(work.transactions - previous.transactions) / span:.0f} transactions/s, "
                 f"{(work.rows - previous.rows) / span:.0f} rows/s)")
    text += f", {format_bytes(work.bytes_read)} read"
    if work.lands_in is not None and work.buffered_transactions:
        text += (f"; {work.buffered_transactions} transactions "
                 f"({format_bytes(work.buffered_bytes)}) buffered, landing in "
                 f"{format_duration(work.lands_in)} or once a table holds "
                 f"{format_bytes(work.flush_bytes)}")
    return text


def format_summary(landed: Landed, elapsed: float) -> str:
    return (f"{landed.transactions} transactions and {landed.rows} rows landed in "
            f"{format_duration(elapsed)}")


def _lag_text(lag: Lag) -> str:
    parts = []
    if lag.seconds is not None:
        parts.append(format_duration(lag.seconds))
    if lag.bytes is not None:
        parts.append(format_bytes(lag.bytes))
    return " and ".join(parts) + " behind the server" if parts else "behind the server"


class Progress:
    """Decides, sample by sample, whether there is a progress line to log.

    Args:
      started: when the daemon started (monotonic seconds).
      live_lag: a daemon at most this many seconds behind is live, not catching up.
    """

    def __init__(self, started: float, live_lag: float) -> None:
        self.started = started
        self.live_lag = live_lag
        self.catching_up = False
        self._last: tuple[float, Landed, int | None, Work | None] | None = None

    def sample(self, now: float, landed: Landed, lag: Lag | None,
               work: Work | None = None) -> str | None:
        """The line for this sample, or None when there is nothing to say. With ``work``, the
        line also says what is decoded and buffered, and the rate is the decoding's."""
        # the estimate follows the stream's reading when known: landing moves in flushes
        remaining = None if lag is None else lag.unread if lag.unread is not None else lag.bytes
        previous, self._last = self._last, (now, landed, remaining, work)
        if lag is None:
            return None
        if lag.caught_up:
            if not self.catching_up:
                return None
            self.catching_up = False
            return (f"caught up with the server: {format_summary(landed, now - self.started)} "
                    "since the start")
        # Behind by the lake's age; or, nothing landed yet (a new lake: no age), by what the
        # stream has still to read — a backlog lands by size, so its first flush may be late.
        behind = lag.seconds > self.live_lag if lag.seconds is not None else bool(lag.unread)
        if not self.catching_up and not behind:
            return None
        self.catching_up = True
        line = f"catching up: {landed.transactions} transactions and {landed.rows} rows landed"
        span = now - previous[0] if previous is not None else 0.0
        if work is not None:
            line += "; " + _work_text(work, previous[3] if previous is not None else None, span)
        elif previous is not None and span > 0:
            tx_rate = (landed.transactions - previous[1].transactions) / span
            row_rate = (landed.rows - previous[1].rows) / span
            line += f" ({tx_rate:.0f} transactions/s, {row_rate:.0f} rows/s)"
        line += f"; {_lag_text(lag)}"
        if previous is not None and previous[2] is not None and remaining is not None:
            gained = (previous[2] - remaining) / span if span > 0 else 0
            if gained > 0:
                line += f", ~{format_duration(remaining / gained)} left"
            else:
                line += ", not gaining on the server"
        return line


def format_snapshot_entry(rows: int, chunks: int, last: Sequence[str] | None) -> str:
    """``30 rows in 3 chunks, last key 30`` from a table's entry of the checkpoint's snapshot
    state (the last key as the SQL literals it is paged by)."""
    text = f"{rows} rows in {chunks} chunk{'' if chunks == 1 else 's'}"
    if last:
        text += f", last key {', '.join(str(v) for v in last)}"
    return text


class SnapshotProgress:
    """A line per table being snapshotted, each time :meth:`sample` is called (the progress
    interval): what its checkpoint entry says landed, the rows read and staged but not landed
    yet (a table without a key lands at the end of its one read: without them its line would
    say 0 rows for as long as it is read), and the rate since the last sample."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}

    def sample(self, now: float, state: SnapshotState,
               staged: dict[str, int] | None = None) -> list[str]:
        lines = []
        seen = {}
        for entry in sorted(state.tables or (), key=lambda e: e.name):
            name = entry.name
            waiting = (staged or {}).get(name, 0)
            if entry.status != "running" and not waiting:  # pending until it lands
                continue
            rows = entry.rows + waiting
            seen[name] = (now, rows)
            line = (f"snapshot of {name}: "
                    f"{format_snapshot_entry(entry.rows, entry.chunks, entry.last_key)} landed")
            if waiting:
                line += (f", {waiting} more read and staged (a table without a key lands "
                         "when its one read ends)")
            previous = self._last.get(name)
            if previous is not None and now > previous[0]:
                line += f" ({(rows - previous[1]) / (now - previous[0]):.0f} rows/s)"
            lines.append(line)
        self._last = seen
        return lines
