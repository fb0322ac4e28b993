"""``StreamProgress``: where the lake stands in the source's stream, and replay detection.

The sink numbers transactions (``_seq``) and remembers what the checkpoint needs to resume
from: the GTID state (MariaDB: the last GTID per domain; MySQL: the executed GTID set), the
binlog position after the last transaction, its GTID, commit time and server id, the server
streamed from, whether the GTID state covers the lake's start (seeded from the server) and the
divergences gone past by choice (see ``commit.Checkpoint``). A stream
resumed from a checkpoint may replay transactions the lake already holds (the server sends
from a GTID state or a position, not from a transaction number); :meth:`already_landed` is the
one test that recognises them, so they are skipped rather than landed twice.

It is also the one home of :class:`~sinks.parquet.rows.TransactionTags` — the metadata columns
every row of a transaction carries — for binlog transactions and for snapshot chunks alike.
"""

from __future__ import annotations

import json
from typing import Any

from protocol.binlog.model import BinlogPosition
from protocol.binlog.transactions import TransactionBegin
from protocol.failover import ServerIdentity
from protocol.frozen import positional_maker
from protocol.gtid import GtidPosition, GtidSet, MariadbGtid, MysqlGtid

from ..errors import SinkStateError
from .commit import Checkpoint
from .rows import TransactionTags

__all__ = ["StreamProgress"]

#: TransactionTags, built in C when protocol._native_slots is (one per transaction; every
#: field positional, in declaration order).
_make_tags = positional_maker(TransactionTags)


def _gtid_tags(gtid: Any) -> tuple[str | None, int | None, int | None, str | None,
                                   str | None, int | None]:
    if gtid is None:
        return None, None, None, None, None, None
    if isinstance(gtid, MariadbGtid):
        return str(gtid), gtid.domain, gtid.server_id, None, None, gtid.seq
    if isinstance(gtid, MysqlGtid):
        return str(gtid), None, None, str(gtid.tsid.uuid), gtid.tsid.tag or None, gtid.gno
    return str(gtid), None, None, None, None, None


class StreamProgress:
    """See the module docstring. ``seq`` is the last transaction numbered (landed or not)."""

    __slots__ = ("seq", "_gtid_state", "_domains", "_flavor", "_last_gtid", "_last_end",
                 "_last_commit_us", "_last_server_id", "server", "gtid_complete", "gtid_seed",
                 "_divergences")

    def __init__(self) -> None:
        self.seq = 0
        #: The GTID state: a MySQL GtidSet (added to in place), or — MariaDB — None with the
        #: last GTID per domain in ``_domains``, a dict stored into at each commit: building a
        #: new GtidPosition per transaction (GtidPosition.advance) showed in profiles.
        self._gtid_state: GtidSet | None = None
        self._domains: dict[int, MariadbGtid] | None = None
        self._flavor: str | None = None
        self._last_gtid: str | None = None
        self._last_end: BinlogPosition | None = None  # of the last commit, landed or not
        self._last_commit_us: int | None = None
        self._last_server_id: int | None = None
        self.server: ServerIdentity | None = None
        self.gtid_complete = False
        self.gtid_seed: str | None = None  # the state a new lake was seeded with
        self._divergences: list[dict[str, Any]] = []

    @property
    def gtid_set(self) -> GtidSet | None:
        """MySQL: the GTID set so far (added to in place; None for MariaDB or no GTIDs)."""
        return self._gtid_state

    def restore(self, checkpoint: Checkpoint) -> None:
        """Continue from a lake's checkpoint."""
        self.seq = checkpoint.seq
        self._flavor = checkpoint.gtid_flavor
        if checkpoint.gtid_state is not None:
            if self._flavor == "mariadb":
                self._domains = {g.domain: g for g in GtidPosition.parse(checkpoint.gtid_state)}
            elif self._flavor == "mysql":
                self._gtid_state = GtidSet.parse(checkpoint.gtid_state)
        self._last_gtid = checkpoint.gtid
        self._last_end = checkpoint.position
        self._last_commit_us = checkpoint.commit_time_us
        self._last_server_id = checkpoint.server_id
        self.server = checkpoint.server
        self.gtid_complete = checkpoint.gtid_state_complete
        self._divergences = list(checkpoint.divergences)

    def note_server(self, server: ServerIdentity) -> None:
        """The stream comes from ``server`` now. Another server than the recorded one makes
        the binlog position void: it was an offset in the old server's binlog (the position
        comes back with the next commit)."""
        if self.server is not None and not self.server.same_server(server):
            self._last_end = None
        self.server = server

    def seed(self, state: str, flavor: str) -> None:
        """A new lake's GTID state: the server's at its start point."""
        self._set_gtid_state(state, flavor)
        self.gtid_seed = state
        self.gtid_complete = True

    def complete(self, state: str) -> None:
        """Add to a MariaDB state begun before states were seeded the domains of ``state``
        (the server's at the checkpoint's position); per domain the newer GTID wins."""
        if self.gtid_complete or self._flavor not in (None, "mariadb"):
            raise SinkStateError("complete_gtid_state() on a complete or a MySQL state")
        domains = self._domains if self._domains is not None else {}
        for gtid in GtidPosition.parse(state):
            mine = domains.get(gtid.domain)
            if mine is None or mine.seq < gtid.seq:
                domains[gtid.domain] = gtid
        self._domains, self._gtid_state, self._flavor = domains, None, "mariadb"
        self.gtid_complete = True

    def diverge(self, state: str, record: dict[str, Any]) -> None:
        """Go on from ``state``, recording ``record`` (JSON data) as a divergence."""
        self._set_gtid_state(state, self._flavor or "")
        self._divergences.append(json.loads(json.dumps(record)))

    def _set_gtid_state(self, state: str, flavor: str) -> None:
        if flavor == "mariadb":
            self._domains = {g.domain: g for g in GtidPosition.parse(state)}
            self._gtid_state = None
        elif flavor == "mysql":
            self._gtid_state = GtidSet.parse(state)
            self._domains = None
        else:
            raise SinkStateError(f"unknown GTID flavor {flavor!r}")
        self._flavor = flavor

    def tags(self, begin: TransactionBegin) -> TransactionTags:
        """The next transaction's tags: its ``_seq`` (not taken until :meth:`advance`), GTID
        and start position."""
        gtid = begin.gtid
        position = begin.position
        if type(gtid) is MariadbGtid:  # the common case, without _gtid_tags' tuple
            return _make_tags(self.seq + 1, str(gtid), gtid.domain, gtid.server_id, None, None,
                              gtid.seq, position.file, position.pos)
        return _make_tags(self.seq + 1, *_gtid_tags(gtid), position.file, position.pos)

    @staticmethod
    def untagged(seq: int, position: BinlogPosition | None) -> TransactionTags:
        """Tags without a GTID (a snapshot chunk's rows): ``position`` None leaves the
        position columns as placeholders (a staged piece's, set at its landing)."""
        return _make_tags(seq, None, None, None, None, None, None,
                          position.file if position is not None else None,
                          position.pos if position is not None else None)

    def already_landed(self, begin: TransactionBegin) -> bool:
        """True for a transaction the checkpoint already covers (a replayed stream)."""
        gtid = begin.gtid
        if gtid is not None:
            domains = self._domains
            if domains is not None:  # a MariaDB state
                if not isinstance(gtid, MariadbGtid):
                    return False
                mine = domains.get(gtid.domain)
                return mine is not None and gtid.seq <= mine.seq
            state = self._gtid_state
            return isinstance(gtid, MysqlGtid) and state is not None and gtid in state
        last = self._last_end
        if gtid is None and last is not None:
            return begin.position.file == last.file and begin.position.pos < last.pos
        return False

    def advance(self, tags: TransactionTags, begin: TransactionBegin, gtid: Any,
                end: BinlogPosition, commit_us: int, server_id: int) -> None:
        """Move the resume point past the transaction ``tags`` numbered."""
        self.seq = tags.seq
        self._add_gtid(gtid)
        if gtid is begin.gtid:
            self._last_gtid = tags.gtid  # str(gtid), made at begin
        else:
            self._last_gtid = str(gtid) if gtid is not None else None
        self._last_end = end
        self._last_commit_us = commit_us
        self._last_server_id = server_id

    def reach(self, position: BinlogPosition) -> None:
        """Resume from ``position`` at the latest (a snapshot chunk consistent with it landed):
        it is a transaction boundary, and a new lake must not resume from an older point than
        its chunks are consistent with. The GTID state and last commit are untouched."""
        if self._last_end is None or self._last_end < position:
            self._last_end = position

    def _add_gtid(self, gtid: Any) -> None:
        if isinstance(gtid, MariadbGtid):
            domains = self._domains
            if domains is None:
                domains = self._domains = {}
                self._gtid_state = None
                self._flavor = "mariadb"
            domains[gtid.domain] = gtid
        elif isinstance(gtid, MysqlGtid):
            if self._gtid_state is None:
                self._gtid_state = GtidSet()
                self._domains = None
                self._flavor = "mysql"
            self._gtid_state.add(gtid)

    def _gtid_state_text(self) -> str | None:
        if self._domains is not None:
            return str(GtidPosition.from_binlog_state(self._domains.values()))
        state = self._gtid_state
        return state.to_text(",") if state is not None else None

    def checkpoint(self) -> Checkpoint:
        """The checkpoint saying every transaction numbered so far is landed."""
        return Checkpoint(
            seq=self.seq, position=self._last_end, gtid=self._last_gtid,
            gtid_state=self._gtid_state_text(), gtid_flavor=self._flavor,
            commit_time_us=self._last_commit_us, server_id=self._last_server_id,
            server=self.server, gtid_state_complete=self.gtid_complete,
            divergences=tuple(self._divergences),
        )
