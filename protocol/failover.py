"""Which server a replica follows, and whether its history still holds what the replica has.

A replica that lands the binlog (the lake) must resume on whichever server is the primary now:
after a switchover or a crash the primary is another server, whose binlog has its own file
names and offsets but the same GTIDs. Two questions decide whether and how it can resume there,
and both are answered here from plain values (sans I/O):

* **Is it the same server?** :class:`ServerIdentity` is what the replica records about the
  server it streamed from: MySQL's ``server_uuid``; MariaDB's ``server_id`` (unique within a
  replication topology), its ``gtid_domain_id``; and the address it was reached at. A
  file/position means something on that server only.
* **Does the server hold every transaction the replica holds?** When it does not, the server's
  history diverged from the replica's (a crash failover promoted a replica that was behind):
  :func:`mariadb_missing` / :func:`mysql_missing` name what the server lacks, and
  :func:`mariadb_fork` / :func:`mysql_fork` say where both histories agree, for an explicit
  choice to go on from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .gtid import GtidPosition, GtidSet, MariadbGtid
from .replication import ServerFacts

__all__ = ["ServerIdentity", "mariadb_missing", "mariadb_fork", "mysql_missing", "mysql_fork",
           "describe_mariadb_missing"]


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """The server a replica streamed from, as recorded beside its resume point.

    ``flavor`` is ``"mariadb"`` or ``"mysql"``; ``server_uuid`` is MySQL's (None on MariaDB);
    ``address`` is ``host:port`` or the socket path, for people (one server can be reached
    under several names, so it is not part of the identity).
    """

    flavor: str
    server_id: int
    server_uuid: str | None = None
    gtid_domain_id: int | None = None
    address: str = ""

    def same_server(self, other: ServerIdentity) -> bool:
        """Whether both describe one server: equal ``server_uuid`` (MySQL), or equal
        ``server_id`` (MariaDB, where it must be unique among the servers of a topology)."""
        if self.flavor != other.flavor:
            return False
        if self.server_uuid is not None or other.server_uuid is not None:
            return self.server_uuid == other.server_uuid
        return self.server_id == other.server_id

    def describes(self, facts: ServerFacts) -> bool:
        """Whether the server that said ``facts`` about itself is this one."""
        if self.server_uuid is not None:
            return facts.server_uuid == self.server_uuid
        return facts.server_id == self.server_id

    def __str__(self) -> str:
        who = (f"server_uuid {self.server_uuid}" if self.server_uuid
               else f"server_id {self.server_id}")
        domain = (f", gtid_domain_id {self.gtid_domain_id}"
                  if self.gtid_domain_id is not None else "")
        at = f" at {self.address}" if self.address else ""
        return f"{self.flavor} {who}{domain}{at}"

    def to_json(self) -> dict[str, Any]:
        return {"flavor": self.flavor, "server_id": self.server_id,
                "server_uuid": self.server_uuid, "gtid_domain_id": self.gtid_domain_id,
                "address": self.address}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ServerIdentity:
        domain = doc.get("gtid_domain_id")
        return cls(flavor=str(doc["flavor"]), server_id=int(doc["server_id"]),
                   server_uuid=doc.get("server_uuid"),
                   gtid_domain_id=int(domain) if domain is not None else None,
                   address=str(doc.get("address") or ""))


# --- MariaDB: one GTID per domain ----------------------------------------------------------------


def mariadb_missing(lake: GtidPosition, server: GtidPosition
                    ) -> dict[int, tuple[MariadbGtid, MariadbGtid | None]]:
    """Domains whose last GTID in ``lake`` is beyond the server's binlog (``@@gtid_binlog_pos``):
    domain -> (the lake's GTID, the server's GTID of that domain or None).

    Within a domain sequence numbers only grow, so a server whose last sequence number is lower
    than the lake's never had the lake's later transactions. (A server with a higher number
    may still lack them — another server wrote those numbers; the dump itself refuses that
    case, and the caller maps its error.)
    """
    missing: dict[int, tuple[MariadbGtid, MariadbGtid | None]] = {}
    for gtid in lake:
        theirs = server.get(gtid.domain)
        if theirs is None or theirs.seq < gtid.seq:
            missing[gtid.domain] = (gtid, theirs)
    return missing


def describe_mariadb_missing(missing: dict[int, tuple[MariadbGtid, MariadbGtid | None]]) -> str:
    """``domain 0: sequence numbers 101..105 (the lake's last is 0-1-105; the server's 0-1-100)``
    for each domain, joined by ``; ``."""
    parts = []
    for domain, (mine, theirs) in sorted(missing.items()):
        first = theirs.seq + 1 if theirs is not None else 1
        numbers = str(mine.seq) if first == mine.seq else f"{first}..{mine.seq}"
        server = str(theirs) if theirs is not None else "nothing in that domain"
        parts.append(f"domain {domain}: sequence numbers {numbers} (the lake's last is {mine}; "
                     f"the server's {server})")
    return "; ".join(parts)


def mariadb_fork(lake: GtidPosition, server_binlog: GtidPosition, server_slave: GtidPosition,
                 refused: frozenset[int] = frozenset()) -> GtidPosition | None:
    """Where the lake's and the server's histories agree, per domain the lake has.

    A domain the server holds (its last sequence number is at least the lake's, and the dump
    did not refuse it: ``refused``) keeps the lake's GTID. A domain where the server is behind
    forks at the server's own last GTID (everything it has comes before the lake's). A domain
    the dump refused although the server's numbers are higher (the server wrote other
    transactions at the lake's numbers) forks at the last GTID the server applied as a replica
    (``@@gtid_slave_pos``), when that is at or below the lake's. None when no fork can be told.
    A domain the server never had is left out: the server has nothing of it to send.
    """
    fork: list[MariadbGtid] = []
    for gtid in lake:
        binlog = server_binlog.get(gtid.domain)
        applied = server_slave.get(gtid.domain)
        if binlog is None and applied is None:
            continue
        if binlog is not None and binlog.seq >= gtid.seq and gtid.domain not in refused:
            fork.append(gtid)
        elif binlog is not None and binlog.seq < gtid.seq:
            fork.append(binlog)
        elif applied is not None and applied.seq <= gtid.seq and applied != gtid:
            fork.append(applied)
        else:
            return None
    return GtidPosition(fork)


# --- MySQL: sets ---------------------------------------------------------------------------------


def mysql_missing(lake: GtidSet, executed: GtidSet) -> GtidSet:
    """The lake's GTIDs the server never executed (``lake - @@gtid_executed``)."""
    return lake - executed


def mysql_fork(lake: GtidSet, executed: GtidSet) -> GtidSet:
    """What both histories share (``lake & @@gtid_executed``): a dump asking for everything
    not in it streams every transaction of the server that the lake lacks."""
    return lake & executed
