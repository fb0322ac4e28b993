"""Where a connection's dump starts, on whichever server of the topology answered.

The lake's GTID state works on any server of the topology, its file/position only on the server
that wrote it, and a divergence never passes unnoticed.

:func:`plan_resume` runs on every (re)connection, before the dump is asked for:

1. **Know the server.** Its identity (:class:`~protocol.failover.ServerIdentity`) is compared
   with the one the lake's checkpoint recorded; a change is one WARNING ("following a new
   primary"), and the sink records the new identity with its next commit.
2. **A lake that exists** resumes from its GTID state whenever that state covers everything
   before the lake's start (``gtid_state_complete``) and the server has GTIDs (MariaDB always,
   MySQL with ``gtid_mode=ON``): ``@slave_connect_state`` on MariaDB, ``COM_BINLOG_DUMP_GTID``
   with the lake's executed set on MySQL. The sink skips any transaction the state covers, so
   a replayed one never lands twice. Only a lake without a usable GTID state resumes by
   file/position, and only on the server recorded with it (:class:`ServerChanged` otherwise).
3. **Divergence.** Before a GTID resume the lake's state is compared with the server's: on
   MariaDB with ``@@gtid_binlog_pos`` (a domain whose last sequence number is below the lake's
   lacks the lake's later transactions), on MySQL with ``@@gtid_executed`` (the lake's set must
   be a subset). A server that lacks transactions the lake holds stops the daemon with
   :class:`GtidDiverged` naming them — unless ``start.on_divergence = "continue"``, which
   resumes from where both histories agree and records the divergence in the checkpoint.
   (A MariaDB server whose binlog has higher sequence numbers from another writer passes this
   check; the dump refuses it, and :func:`diverged_from_dump` says it the same way.)
4. **A new lake** starts where the configuration says, and its GTID state is *seeded* with the
   server's state at exactly that point (MariaDB ``BINLOG_GTID_POS`` of the start position;
   MySQL starts by GTID from ``@@gtid_executed`` / ``@@gtid_purged``), so the state it commits
   is complete from the first flush on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocol.binlog.model import BinlogPosition
from protocol.errors import GtidDiverged, ProtocolError, ServerChanged
from protocol.failover import (
    ServerIdentity,
    describe_mariadb_missing,
    mariadb_fork,
    mariadb_missing,
    mysql_fork,
    mysql_missing,
)
from protocol.gtid import GtidPosition, GtidSet
from protocol.replication import SERVER_VARIABLES_QUERY, ServerFacts, sql_string
from protocol.results import cell_text, cell_text_or_none
from replica.config import Config
from replica.core.connection import Connection
from replica.core.session import StartFrom, StartPoint, resolve_start
from sinks.contract import Sink

log = logging.getLogger("binlake.daemon")

__all__ = ["Resume", "plan_resume", "configured_start", "diverged_from_dump"]

#: How many GTIDs a divergence message lists before it says "and N more".
_NAMED = 400


@dataclass(frozen=True, slots=True)
class Resume:
    """Where one dump starts, and what was learnt about the server on the way."""

    start: StartPoint
    server: ServerIdentity
    #: The start is the lake's own GTID state (a dump error about it means divergence).
    from_lake_gtids: bool = False
    #: MariaDB: the server's ``@@gtid_binlog_pos`` and ``@@gtid_slave_pos`` (for a fork).
    server_binlog: GtidPosition = field(default_factory=GtidPosition)
    server_slave: GtidPosition = field(default_factory=GtidPosition)
    #: The server is not the one the lake last streamed from.
    changed: bool = False
    #: A new lake's ``latest``/``earliest``, resolved to ``start`` before the dump.
    resolved_from: StartFrom | None = None


def configured_start(config: Config, *, mariadb: bool) -> StartPoint:
    """A new lake's start point, as configured (``start.from``)."""
    start = config.start
    if start.from_ == "earliest":
        return StartFrom.EARLIEST
    if start.from_ == "file":
        if not start.file:
            raise ValueError("start.from = file needs start.file")
        return BinlogPosition(start.file, start.pos)
    if start.from_ == "gtid":
        text = start.gtid or ""
        return GtidPosition.parse(text) if mariadb else GtidSet.parse(text)
    return StartFrom.LATEST  # latest, and snapshot: the tables are read from that point on


async def plan_resume(conn: Connection, sink: Sink, config: Config,
                      address: str) -> Resume:
    """Decide the start of the dump on ``conn`` (see the module docstring).

    Raises:
        GtidDiverged: the server lacks transactions the lake holds (and the choice is stop).
        ServerChanged: a file/position resume on another server than the one recorded.
    """
    facts = ServerFacts.from_variables({cell_text(r[0]): cell_text_or_none(r[1]) for r in
                                        await conn.query(SERVER_VARIABLES_QUERY)})
    mariadb = conn.is_mariadb
    server = ServerIdentity(
        flavor="mariadb" if mariadb else "mysql", server_id=facts.server_id,
        server_uuid=None if mariadb else facts.server_uuid,
        gtid_domain_id=facts.gtid_domain_id if mariadb else None, address=address)
    binlog = slave = GtidPosition()
    executed = purged = GtidSet()
    if mariadb:
        row = (await conn.query("SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.gtid_slave_pos"))[0]
        binlog = GtidPosition.parse(cell_text_or_none(row[0]) or "")
        slave = GtidPosition.parse(cell_text_or_none(row[1]) or "")
    elif facts.has_gtids:
        row = (await conn.query("SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged"))[0]
        executed = GtidSet.parse(cell_text_or_none(row[0]) or "")
        purged = GtidSet.parse(cell_text_or_none(row[1]) or "")

    checkpoint = sink.durable_position
    if checkpoint is None and not sink.gtid_state_complete:
        configured = configured_start(config, mariadb=mariadb)
        start = configured
        if sink.seedable:
            start = await _new_lake(conn, sink, configured, facts, executed, purged)
        sink.note_server(server)
        return Resume(start, server, server_binlog=binlog, server_slave=slave,
                      resolved_from=configured if isinstance(configured, StartFrom)
                      and start is not configured else None)

    recorded = sink.server
    changed = recorded is not None and not recorded.same_server(server)
    if changed:
        log.warning("following a new primary: %s (the lake last streamed from %s)", server,
                    recorded)
    # The durable state, not the sink's: what is not committed yet is streamed again (and
    # the sink skips what it holds already).
    lake_state = checkpoint.gtid_state if checkpoint is not None else sink.gtid_seed
    flavor_ok = checkpoint is None or checkpoint.gtid_flavor in (None, server.flavor)
    if facts.has_gtids and sink.gtid_state_complete and lake_state is not None and flavor_ok:
        start = _lake_gtid_start(sink, config, server, lake_state, binlog, slave, executed)
        sink.note_server(server)
        return Resume(start, server, from_lake_gtids=True, server_binlog=binlog,
                      server_slave=slave, changed=changed)

    position = checkpoint.position if checkpoint is not None else None
    if position is None:  # nothing streamed yet (a snapshot's chunks only): as a new lake
        sink.note_server(server)
        return Resume(configured_start(config, mariadb=mariadb), server, changed=changed)
    if changed:
        why = ("the server has no GTIDs (gtid_mode is not ON)" if not facts.has_gtids else
               "the lake's GTID state does not cover its start (the lake began before binlake "
               "recorded that)")
        raise ServerChanged(
            f"the lake's checkpoint is binlog position {position} on {recorded}, but "
            f"{server} answered: a file/position means nothing in another server's binlog, "
            f"and {why}; land into a new lake (start.from = snapshot), or point server.host "
            "back at the recorded server")
    if (mariadb and checkpoint is not None and not sink.gtid_state_complete
            and checkpoint.gtid_flavor in (None, "mariadb")):
        await _complete_mariadb_state(conn, sink, position, lake_state)
    sink.note_server(server)
    return Resume(position, server, server_binlog=binlog, server_slave=slave)


async def _complete_mariadb_state(conn: Connection, sink: Sink, position: BinlogPosition,
                                  lake_state: str | None) -> None:
    """A MariaDB lake begun before binlake seeded GTID states resumes by position on its own
    server; the server's GTID state at that position (``BINLOG_GTID_POS``) completes the
    lake's, when it holds every GTID the lake's state names — from then on the lake resumes by
    GTID and can follow a failover."""
    rows = await conn.query(
        f"SELECT BINLOG_GTID_POS({sql_string(position.file)}, {int(position.pos)})")
    text = cell_text_or_none(rows[0][0]) if rows else None
    if text is None:
        return
    at = GtidPosition.parse(text)
    lake = GtidPosition.parse(lake_state or "")
    if any(at.get(gtid.domain) != gtid for gtid in lake):
        log.warning("the server's GTID state at the lake's position %s is %s, not the lake's "
                    "%s: the lake keeps resuming by position (and cannot follow a failover)",
                    position, at, lake)
        return
    sink.complete_gtid_state(str(at))
    log.info("the lake's GTID state now covers everything before it (%s): from here on it "
             "resumes by GTID and can follow a failover", at)


async def _new_lake(conn: Connection, sink: Sink, start: StartPoint, facts: ServerFacts,
                    executed: GtidSet, purged: GtidSet) -> StartPoint:
    """The configured ``start``, resolved, with the sink's GTID state seeded to match it."""
    mariadb = conn.is_mariadb
    if mariadb:
        if isinstance(start, GtidPosition):
            sink.seed_gtid_state(str(start), "mariadb")
            return start
        if isinstance(start, BinlogPosition):
            position = start
        else:
            assert isinstance(start, StartFrom)  # a MariaDB start is never a Gtid_set
            position = await resolve_start(conn, start)
        rows = await conn.query(
            f"SELECT BINLOG_GTID_POS({sql_string(position.file)}, {int(position.pos)})")
        state = cell_text_or_none(rows[0][0]) if rows else None
        if state is not None:
            sink.seed_gtid_state(state, "mariadb")
        else:
            log.warning("the server gives no GTID position for %s: this lake resumes by binlog "
                        "position and cannot follow a failover", position)
        return position
    if not facts.has_gtids:
        return start
    if start is StartFrom.LATEST:
        start = executed
    elif start is StartFrom.EARLIEST:
        start = purged
    if isinstance(start, GtidSet):
        sink.seed_gtid_state(start.to_text(","), "mysql")
    else:
        log.warning("start.from = file on a server with GTIDs: this lake resumes by binlog "
                    "position and cannot follow a failover (start.from = gtid, latest or "
                    "snapshot can)")
    return start


def _lake_gtid_start(sink: Sink, config: Config, server: ServerIdentity,
                     lake_state: str, binlog: GtidPosition, slave: GtidPosition,
                     executed: GtidSet) -> GtidPosition | GtidSet:
    """The lake's GTID state as the start, after the divergence check."""
    choice = config.start.on_divergence
    if server.flavor == "mariadb":
        lake = GtidPosition.parse(lake_state)
        missing = mariadb_missing(lake, binlog)
        if not missing:
            return lake
        named = describe_mariadb_missing(missing)
        fork = mariadb_fork(lake, binlog, slave)
        return _diverged(sink, choice, server, named, lake_state, fork, str(fork or ""))
    lake_set = GtidSet.parse(lake_state)
    lost = mysql_missing(lake_set, executed)
    if not lost:
        return lake_set
    named = _name_gtids(lost)
    fork_set = mysql_fork(lake_set, executed)
    return _diverged(sink, choice, server, named, lake_state, fork_set, fork_set.to_text(","))


def _diverged(sink: Sink, choice: str, server: ServerIdentity, named: str,
              lake_state: str, fork: GtidPosition | GtidSet | None,
              fork_text: str) -> GtidPosition | GtidSet:
    """Stop with GtidDiverged, or (the explicit choice) record the divergence and go on."""
    if choice != "continue" or fork is None:
        cannot = ("" if fork is not None or choice != "continue" else
                  " (start.on_divergence = continue cannot tell where the histories forked: "
                  "the server wrote other transactions at those sequence numbers and never "
                  "replicated them)")
        raise GtidDiverged(
            0, "", f"the server {server} lacks transactions the lake holds — {named}; the "
            f"lake's GTID state is {lake_state}: it was landed from a server whose history "
            "this one never received (a failover promoted a replica that was behind). The "
            f"lake is unchanged{cannot}. Land into a new lake (start.from = snapshot), or set "
            "start.on_divergence = \"continue\" to go on from where both histories agree "
            "(recorded in the lake)", missing=named)
    log.warning("the server %s lacks transactions the lake holds — %s; start.on_divergence = "
                "continue: going on from %s (where both histories agree), recorded in the "
                "lake's checkpoint", server, named, fork_text or "the server's first event")
    sink.diverge(fork_text, {"server": server.to_json(), "lost": named,
                             "lake_gtid_state": lake_state, "resumed_from": fork_text})
    return fork


def diverged_from_dump(exc: ProtocolError, resume: Resume, lake_state: str | None
                       ) -> GtidDiverged:
    """The dump refused the lake's GTID state (MariaDB: a GTID not in the server's binlog):
    the server never had a transaction the lake holds — said as a divergence."""
    return GtidDiverged(
        0, "", f"the server {resume.server} refused to stream after the lake's GTID state "
        f"{lake_state}: {exc} — its binlog lacks a transaction the lake holds (a failover "
        "promoted a replica that was behind, and it has written other transactions since). "
        "The lake is unchanged. Land into a new lake (start.from = snapshot), or set "
        "start.on_divergence = \"continue\" to go on from where both histories agree "
        "(recorded in the lake)", missing=lake_state or "")


def _name_gtids(gtids: GtidSet) -> str:
    text = gtids.to_text(",")
    if len(text) <= _NAMED:
        return text
    return f"{text[:_NAMED]}… ({gtids.count()} GTIDs)"
