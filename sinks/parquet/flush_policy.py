"""``FlushPolicy``: when the Parquet sink flushes — by size, by row count, by time.

It counts what the next flush lands (commits, rows, snapshot chunks) and decides from that and
the caller's clock: a flush is *wanted* once the part writer says a file is big enough or
``flush_rows`` rows wait, and *due* once committed data has waited ``flush_interval_s`` —
``catch_up_interval_s`` while the caller says the source is behind (a backlog being caught up:
freshness buys nothing then, and every flush costs a file per table it touched). It reads no
clock of its own and does no I/O.
"""

from __future__ import annotations

from .options import SinkOptions

__all__ = ["FlushPolicy"]


class FlushPolicy:
    """See the module docstring."""

    __slots__ = ("_options", "chunks", "commits", "dirty_since", "rows", "wanted")

    def __init__(self, options: SinkOptions) -> None:
        self._options = options
        #: Changes to the checkpoint the next flush commits (transactions, GTID state, progress).
        self.commits = 0
        self.rows = 0  # rows of the transactions the next flush lands
        self.chunks = 0  # snapshot chunks the next flush lands
        self.dirty_since: float | None = None  # the caller's time when ``commits`` first rose
        self.wanted = False  # a threshold passed and the flush is left to the caller

    def full(self, parts_full: bool) -> bool:
        """A size (``parts_full``: a file reached its size) or row threshold passed."""
        return parts_full or self.rows >= self._options.flush_rows

    def interval(self, behind: bool) -> float:
        """How long committed data waits before a flush by time."""
        interval = self._options.flush_interval_s
        return max(interval, self._options.catch_up_interval_s) if behind else interval

    def due(self, now: float, behind: bool) -> bool:
        """Whether committed data has waited long enough (``now``: the caller's monotonic
        time); the first call after a commit starts the wait."""
        if self.commits == 0:
            self.dirty_since = None
            return False
        if self.dirty_since is None:
            self.dirty_since = now
            return False
        return now - self.dirty_since >= self.interval(behind)

    def lands_in(self, now: float, behind: bool) -> float | None:
        """Seconds until :meth:`due` says so (0: at the next chance); None if nothing waits."""
        if not self.commits:
            return None
        since = self.dirty_since if self.dirty_since is not None else now
        return max(0.0, since + self.interval(behind) - now)

    def flushed(self) -> int:
        """A flush landed everything counted: start again; the snapshot chunks it landed."""
        chunks = self.chunks
        self.commits = self.rows = self.chunks = 0
        self.dirty_since = None
        self.wanted = False
        return chunks
