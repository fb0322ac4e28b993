"""How far the lake is behind the server: one definition, for /readyz, /metrics and ``status``.

The lag is measured against the **server's end** — its binlog position (``SHOW MASTER STATUS``
/ ``SHOW BINARY LOG STATUS``), GTID state and clock, read by :func:`query_server_end`:

* **caught up** — the lake holds everything the server has: the landed position is at (or past)
  the server's end, or the lake's GTID state is the server's. A running daemon also counts as
  caught up when its stream has reached the server's end (a heartbeat, which the server sends
  only when it has nothing more, or an end read from the server) and everything it received is
  landed;
* **seconds** — 0 when caught up; otherwise the server's clock now minus the moment up to which
  the lake is known to be complete: the commit time of the last landed transaction, or, for a
  daemon, the last moment it saw itself caught up if that is later. Every change older than
  that is in the lake;
* **bytes** — 0 when caught up; otherwise binlog bytes from the landed position to the server's
  end (across files, from ``SHOW BINARY LOGS``); None when not computable.

``binlake status`` measures once from the checkpoint (:func:`lag_of_checkpoint`); the daemon keeps
a :class:`LagTracker` fed by its stream and by a periodic :func:`query_server_end` on a side
connection, and /readyz and the ``binlake_lag_*`` gauges read :meth:`LagTracker.measure`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.binlog.model import BinlogPosition

__all__ = ["BinlogFile", "ServerEnd", "Lag", "LagTracker", "query_server_end", "distance",
           "same_gtid_state", "lag_of_checkpoint"]


@dataclass(frozen=True, slots=True)
class BinlogFile:
    """One row of ``SHOW BINARY LOGS``: a binlog file and its size in bytes."""

    name: str
    size: int


@dataclass(frozen=True, slots=True)
class ServerEnd:
    """What the server said about its end at one moment."""

    flavor: str  # "mariadb" or "mysql"
    now_us: int  # the server's clock, UTC microseconds
    gtid: str | None  # @@gtid_binlog_pos / @@gtid_executed
    position: BinlogPosition | None = None  # None without the privilege to see it
    files: tuple[BinlogFile, ...] = ()


@dataclass(frozen=True, slots=True)
class Lag:
    caught_up: bool
    seconds: float | None  # None: nothing is known to be landed yet
    bytes: int | None  # None: not computable (a GTID start, purged files, no privilege)
    #: Binlog bytes the daemon's stream has still to *read* to reach the server's end (None:
    #: no stream, or not computable). While catching up, landing waits for size (see
    #: ``LagTracker.stream_behind``), so ``bytes`` moves in steps; this moves as it reads.
    unread: int | None = None


def _text(value: str | bytes | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


async def query_server_end(conn: Any) -> ServerEnd:
    """The server's clock, GTID state, binlog end and files, on an open connection.

    Raises the connection's errors; a ServerError on the binlog statements (missing privilege)
    leaves ``position`` and ``files`` empty instead.
    """
    from protocol.errors import ServerError

    if conn.is_mariadb:
        rows = await conn.query("SELECT UNIX_TIMESTAMP(NOW(6)), @@gtid_binlog_pos")
        status_sql = "SHOW MASTER STATUS"
    else:
        rows = await conn.query("SELECT UNIX_TIMESTAMP(NOW(6)), @@gtid_executed")
        status_sql = "SHOW BINARY LOG STATUS"
    now, gtid = rows[0]
    flavor = "mariadb" if conn.is_mariadb else "mysql"
    now_us = round(float(_text(now) or 0) * 1_000_000)
    gtid_text = (_text(gtid) or "").replace("\n", "") or None
    try:
        status = await conn.query(status_sql)
        files = tuple(BinlogFile(_text(r[0]) or "", int(_text(r[1]) or 0))
                      for r in await conn.query("SHOW BINARY LOGS"))
    except ServerError:
        return ServerEnd(flavor, now_us, gtid_text)
    position = (BinlogPosition(_text(status[0][0]) or "", int(_text(status[0][1]) or 0))
                if status else None)
    return ServerEnd(flavor, now_us, gtid_text, position, files)


def distance(files: Sequence[BinlogFile], start: BinlogPosition,
             end: BinlogPosition) -> int | None:
    """Binlog bytes from ``start`` to ``end`` (None when a file is not in ``files``)."""
    if start >= end:
        return 0
    if start.file == end.file:
        return end.pos - start.pos
    names = [f.name for f in files]
    if start.file not in names or end.file not in names:
        return None
    total = 0
    for binlog in files[names.index(start.file):names.index(end.file)]:
        total += binlog.size - (start.pos if binlog.name == start.file else 0)
    return total + end.pos


def same_gtid_state(lake: object, server: str | None, flavor: str | None) -> bool:
    """The lake's GTID state text equals the server's (parsed, so order does not matter)."""
    from protocol.errors import GtidError
    from protocol.gtid import GtidPosition, GtidSet

    if not isinstance(lake, str) or not lake or not server:
        return False
    try:
        if flavor == "mariadb":
            return GtidPosition.parse(lake) == GtidPosition.parse(server)
        return GtidSet.parse(lake) == GtidSet.parse(server)
    except GtidError:
        return False


def _behind(end: ServerEnd, landed: BinlogPosition | None, complete_us: int | None) -> Lag:
    seconds = None if complete_us is None else max(0.0, (end.now_us - complete_us) / 1e6)
    gap = None
    if landed is not None and end.position is not None:
        gap = distance(end.files, landed, end.position)
    return Lag(False, seconds, gap)


_CAUGHT_UP = Lag(True, 0.0, 0)


def lag_of_checkpoint(checkpoint: dict[str, Any], end: ServerEnd) -> Lag:
    """The lag of a lake whose ``_checkpoint.json`` is ``checkpoint`` (what ``status`` shows)."""
    file, pos = checkpoint.get("binlog_file"), checkpoint.get("binlog_pos")
    landed = BinlogPosition(file, pos) if isinstance(file, str) and isinstance(pos, int) else None
    if (landed is not None and end.position is not None and landed >= end.position) or \
            same_gtid_state(checkpoint.get("gtid_state"), end.gtid, end.flavor):
        return _CAUGHT_UP
    commit_us = checkpoint.get("commit_time_us")
    return _behind(end, landed, commit_us if isinstance(commit_us, int) else None)


class LagTracker:
    """The daemon's lag, from what its stream and its periodic server reads showed.

    The pipeline tells it what landed (:meth:`landed`) and when a heartbeat came
    (:meth:`heartbeat`); the daemon tells it the server's end (:meth:`server_end`) and whether a
    stream is connected. ``stream`` returns the stream's received position and whether anything
    received is not landed yet (an open transaction, committed rows not flushed).

    Evidence ages: a heartbeat or an end read older than ``fresh_for`` seconds no longer proves
    the stream is at the end, so a daemon that stops hearing from the server drifts behind
    instead of showing a frozen 0.
    """

    def __init__(self, stream: Callable[[], tuple[BinlogPosition | None, bool]], *,
                 fresh_for: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._stream = stream
        self.fresh_for = fresh_for
        self._clock = clock
        self._wall = wall
        self.connected = False
        self.clock_offset = 0.0  # the server's clock minus ours, seconds
        self._landed: BinlogPosition | None = None
        self._landed_gtid_state: str | None = None
        self._complete_us: int | None = None  # every change before it is in the lake
        self._end: ServerEnd | None = None
        self._end_at = float("-inf")
        self._heartbeat: BinlogPosition | None = None
        self._heartbeat_at = float("-inf")
        self._start: BinlogPosition | None = None

    # --- what happened ---------------------------------------------------------------------

    def set_connected(self, connected: bool, *, clock_offset: float = 0.0,
                      start: BinlogPosition | None = None) -> None:
        """A stream began (with the server's clock offset and its start position) or ended."""
        self.connected = connected
        if connected:
            self.clock_offset = clock_offset
            if self._landed is None and start is not None:
                self._start = start  # a new lake is complete up to where it starts
        else:
            self._heartbeat = None

    def landed(self, position: BinlogPosition | None, commit_time_us: int | None,
               gtid_state: str | None) -> None:
        self._landed = position
        self._landed_gtid_state = gtid_state
        if commit_time_us is not None and (self._complete_us is None
                                           or commit_time_us > self._complete_us):
            self._complete_us = commit_time_us

    def server_changed(self) -> None:
        """The stream now comes from another server (a failover): positions known so far were
        offsets in the old server's binlog, meaningless against the new one's end; the bytes
        figure is unknown until something lands from the new server."""
        self._landed = None
        self._start = None
        self._heartbeat = None
        self._end = None
        self._end_at = float("-inf")

    def heartbeat(self, position: BinlogPosition) -> None:
        """The server sent a heartbeat: it had nothing more after ``position``."""
        self._heartbeat = position
        self._heartbeat_at = self._clock()
        self.measure()  # notes the moment it was caught up

    def server_end(self, end: ServerEnd) -> None:
        self._end = end
        self._end_at = self._clock()
        self.measure()

    # --- the figure -------------------------------------------------------------------------

    @property
    def server_now_us(self) -> int:
        return round((self._wall() + self.clock_offset) * 1e6)

    def measure(self) -> Lag | None:
        """The lag now; None before anything is known (no end read, heartbeat or landing)."""
        now = self._clock()
        server_now = self.server_now_us
        received, pending = self._stream() if self.connected else (None, True)
        fresh_end = self._end if now - self._end_at <= self.fresh_for else None
        if received is not None and not pending and self._at_end(now, received, fresh_end):
            self._complete_us = server_now
            return _CAUGHT_UP
        end = self._end  # a stale end is still good for the bytes; seconds use the clock now
        if end is None:
            if self._complete_us is None:
                return None
            return Lag(False, max(0.0, (server_now - self._complete_us) / 1e6), None)
        if received is not None and end.position is not None and received > end.position:
            end = ServerEnd(end.flavor, end.now_us, end.gtid, received, end.files)
        lag = _behind(ServerEnd(end.flavor, server_now, end.gtid, end.position, end.files),
                      self._landed or self._start, self._complete_us)
        if received is None or end.position is None:
            return lag
        return Lag(False, lag.seconds, lag.bytes, distance(end.files, received, end.position))

    def stream_behind(self) -> bool:
        """Whether the stream is known to be behind the server's end — catching up a backlog:
        a fresh end read lies past what the stream received, and no fresh heartbeat says the
        stream is at its end. Unknown (no end read, no privilege to see the position, no
        stream) is not behind. The pipeline flushes by size instead of by time while it is.

        Keeping up with a busy server, the stream passes an end read within milliseconds, so
        this is true at most for those; a backlog keeps it true until it is caught up.
        """
        if not self.connected:
            return False
        now = self._clock()
        end = self._end
        if end is None or end.position is None or now - self._end_at > self.fresh_for:
            return False
        received, _ = self._stream()
        if received is None or received >= end.position:
            return False
        return not (now - self._heartbeat_at <= self.fresh_for and self._heartbeat_at > self._end_at
                    and received == self._heartbeat)

    def _at_end(self, now: float, received: BinlogPosition, end: ServerEnd | None) -> bool:
        """Whether the newest fresh evidence says the stream is at the server's end."""
        heartbeat_fresh = now - self._heartbeat_at <= self.fresh_for
        if end is not None and (not heartbeat_fresh or self._end_at >= self._heartbeat_at):
            if end.position is not None and received >= end.position:
                return True
            # behind in bytes only by what holds no transaction (a server restart's new binlog
            # file, FLUSH LOGS): the GTID state says whether anything is missing
            return self._landed is not None and same_gtid_state(
                self._landed_gtid_state, end.gtid, end.flavor)
        return heartbeat_fresh and received == self._heartbeat
