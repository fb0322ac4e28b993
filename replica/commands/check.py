"""``binlake check``: is the server ready for binlake? A checklist, each failure with its fix.

Run before a first ``binlake run`` (and whenever replication stops with a permanent error). It
connects with the same configuration as the daemon and checks, in order:

==================  =====================================================================
connect             the server is reachable and the user can log in
binlog              ``log_bin`` is ON
binlog_format       ``ROW`` (STATEMENT/MIXED changes cannot land as rows)
binlog_row_image    ``FULL`` recommended; MINIMAL/NOBLOB land partial images (warning)
binlog_row_metadata ``FULL`` recommended: otherwise names, labels and keys come from
                    ``information_schema`` as the tables are now (warning)
binlog_checksum     ``CRC32`` recommended: damaged events are detected (warning)
privileges          REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB 10.5+),
                    from ``SHOW GRANTS``; SELECT recommended
server_id           ``replica.server_id`` differs from the server's and from every replica
                    registered on it (``SHOW SLAVE HOSTS`` / ``SHOW REPLICAS``; MariaDB needs
                    REPLICATION MASTER ADMIN for that, which the README's grants do not give:
                    then one ``info`` line says the replicas were not listed)
tls                 the channel is TLS or a unix socket
start position      the lake's checkpoint, else the ``start.*`` settings, is still in the
                    server's binlog (file in ``SHOW BINARY LOGS``; MariaDB GTIDs against
                    ``BINLOG_GTID_POS`` of the oldest file and ``@@gtid_binlog_state``; MySQL
                    Gtid_sets against ``@@gtid_purged``)
semi_sync           available and enabled on the server, when ``semi_sync.mode`` is not off
object_store        for a lake on S3 (``lake.path = "s3://..."``): the bucket answers with the
                    configured credentials, and honours ``If-None-Match`` and ``If-Match``
                    (the start-time probe the daemon runs too)
==================  =====================================================================

Exit status 0 when nothing failed (warnings allowed), 1 otherwise. The checks themselves are
pure functions of what the server answered (:func:`evaluate`), so they are tested without a
server; :func:`gather` asks the server.
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import trio

from protocol.errors import GtidError, ServerError
from protocol.gtid import GtidPosition, GtidSet
from replica.config import Config
from sinks.errors import LakeCorrupted, LakeFormatTooNew, StoreError, StoreRefused
from sinks.parquet.status import checkpoint_path, read_checkpoint

__all__ = [
    "Status",
    "CheckResult",
    "ServerReport",
    "VARIABLES",
    "parse_grants",
    "gather",
    "evaluate",
    "run_checks",
    "print_results",
    "run",
]


class Status(enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"
    SKIP = "skip"
    #: Worth knowing, nothing to fix (never counted as a warning).
    INFO = "info"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One line of the checklist: what was checked, how it went, what was seen, the fix."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


#: Server variables the checks read (absent ones are simply missing from the answer).
VARIABLES = (
    "server_id", "version", "log_bin", "binlog_format", "binlog_row_image",
    "binlog_row_metadata", "binlog_checksum", "have_ssl", "gtid_mode", "gtid_binlog_state",
    "gtid_binlog_pos", "gtid_purged", "gtid_executed", "rpl_semi_sync_master_enabled",
    "rpl_semi_sync_source_enabled",
)


@dataclass(slots=True)
class ServerReport:
    """Everything :func:`evaluate` needs, as the server answered it (None: could not ask)."""

    mariadb: bool
    variables: dict[str, str]
    grants: list[str] | None = None
    grants_error: str | None = None
    replica_ids: list[tuple[int, str]] | None = None  # (server_id, host:port)
    replicas_error: str | None = None
    replicas_denied: bool = False  # the listing needs a privilege the user does not have
    binary_logs: list[tuple[str, int]] | None = None  # (file, size), oldest first
    binary_logs_error: str | None = None
    earliest_gtid_state: str | None = None  # MariaDB BINLOG_GTID_POS(oldest file, 4)
    tls: bool = False
    unix_socket: bool = False
    tls_trust: str | None = None
    where: str = ""
    user: str = ""
    notes: list[str] = field(default_factory=list)


# --- SHOW GRANTS --------------------------------------------------------------------------------

_GRANT = re.compile(r"\s*GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<object>\S+)\s+TO\s", re.IGNORECASE)
_ROLE_GRANT = re.compile(r"\s*GRANT\s+[`'\"]?[^`'\"\s]+[`'\"]?(?:@\S+)?\s+TO\s", re.IGNORECASE)


def parse_grants(lines: Sequence[str]) -> tuple[frozenset[str], bool]:
    """The global (``*.*``) privileges in ``SHOW GRANTS`` lines, and whether roles are granted.

    Privilege names are upper-cased with single spaces (``REPLICATION SLAVE``); ``ALL`` and
    ``ALL PRIVILEGES`` become ``ALL PRIVILEGES``.
    """
    privileges: set[str] = set()
    roles = False
    for line in lines:
        match = _GRANT.match(line)
        if match is None:
            if _ROLE_GRANT.match(line):
                roles = True
            continue
        if match.group("object").replace("`", "") != "*.*":
            continue
        for part in match.group("privs").split(","):
            name = " ".join(part.split()).upper()
            if name in ("ALL", "ALL PRIVILEGES"):
                name = "ALL PRIVILEGES"
            if name:
                privileges.add(name)
    return frozenset(privileges), roles


# --- evaluating ---------------------------------------------------------------------------------


def _on(value: str | None) -> bool:
    return value is not None and value.upper() in ("ON", "1", "YES", "TRUE")


def _read_checkpoint(lake: str) -> tuple[dict[str, object] | None, CheckResult | None]:
    """The lake's ``_checkpoint.json`` (read only, never recovered here), or the failed
    ``lake`` check saying why not (a lake of a newer binlake among the reasons)."""
    try:
        return read_checkpoint(lake), None
    except LakeFormatTooNew as exc:
        return None, CheckResult("lake", Status.FAIL, str(exc), exc.fix)
    except (OSError, ValueError, LakeCorrupted) as exc:
        return None, CheckResult("lake", Status.FAIL, f"cannot read {checkpoint_path(lake)}: "
                                 f"{exc}", "check lake.path and the checkpoint file")


def evaluate(config: Config, report: ServerReport,
             checkpoint: Mapping[str, object] | None = None) -> list[CheckResult]:
    """The checklist for what the server answered (no I/O)."""
    v = report.variables
    results: list[CheckResult] = []
    add = results.append

    # binlog
    if _on(v.get("log_bin")):
        add(CheckResult("binlog", Status.OK, "log_bin=ON"))
    else:
        add(CheckResult("binlog", Status.FAIL, f"log_bin={v.get('log_bin', 'OFF')}: the "
                        "server writes no binlog, there is nothing to replicate",
                        "start the server with log_bin (e.g. --log-bin=mysql-bin) and "
                        "binlog_format=ROW; it needs a restart"))

    add(_setting(v, "binlog_format", "ROW", Status.FAIL,
                 "changes would arrive as SQL statements, not as rows binlake can land",
                 "SET GLOBAL binlog_format = 'ROW' (new sessions), and "
                 "binlog_format = ROW in the server's config so it stays"))
    if v.get("binlog_row_image"):
        add(_setting(v, "binlog_row_image", "FULL", Status.WARN,
                     "rows land with only the changed/key columns (the others are marked "
                     "missing, not NULL)",
                     "SET GLOBAL binlog_row_image = 'FULL' (and in the server's config) "
                     "for complete rows"))
    else:
        add(CheckResult("binlog_row_image", Status.WARN,
                        "unknown (the server does not report it)"))
    metadata = _setting(v, "binlog_row_metadata", "FULL", Status.WARN,
                        _metadata_consequence(report),
                        "SET GLOBAL binlog_row_metadata = 'FULL' (and in the server's config)",
                        missing="not supported")
    add(metadata)
    add(_setting(v, "binlog_checksum", "CRC32", Status.WARN,
                 "events carry no checksum, damage in the binlog or in transit goes unnoticed",
                 "SET GLOBAL binlog_checksum = 'CRC32' (and in the server's config)"))

    results.extend(_privileges(report, metadata.status is Status.OK,
                               snapshot=config.start.from_ == "snapshot" and checkpoint is None))
    results.append(_server_id(config, report))
    results.append(_tls(config, report))
    results.append(_start_position(config, report, checkpoint))
    results.append(_semi_sync(config, report))
    return results


def _metadata_consequence(report: ServerReport) -> str:
    """What happens to rows without FULL metadata — what the daemon's schema source does."""
    what = "the binlog names no columns and carries no ENUM/SET labels or keys"
    if (report.variables.get("binlog_row_metadata") or "").upper() in ("", "NO_LOG"):
        what = ("the binlog names no columns and carries no ENUM/SET labels, keys, "
                "signedness or charsets")
    select = report.grants is None or _has_select(report.grants)
    if not select:
        return (f"{what}; `binlake run` would read them from information_schema, where this "
                "user (no SELECT on any table) does not see the tables: columns land as col_1, "
                "col_2, …")
    return (f"{what}; `binlake run` reads them from information_schema as the tables are now, "
            "so only rows written before a later ALTER of their table land with unnamed "
            "columns (col_1, col_2, …, with a warning)")


def _has_select(grants: Sequence[str]) -> bool:
    """SELECT (or ALL) on anything: per database (``ON shop.*``) is enough for those tables."""
    for line in grants:
        match = _GRANT.match(line)
        if match is None:
            continue
        names = {" ".join(p.split()).upper() for p in match.group("privs").split(",")}
        if names & {"SELECT", "ALL", "ALL PRIVILEGES"}:
            return True
    return False


def _setting(variables: Mapping[str, str], name: str, wanted: str, otherwise: Status,
             consequence: str, fix: str, *, missing: str = "unknown") -> CheckResult:
    """A server variable that should be ``wanted``: OK, else ``otherwise`` with its cost and fix.

    ``missing`` stands for the value when the server does not report the variable.
    """
    value = (variables.get(name) or "").upper()
    if value == wanted:
        return CheckResult(name, Status.OK, wanted)
    return CheckResult(name, otherwise, f"{value or missing}: {consequence}", fix)


def _privileges(report: ServerReport, full_metadata: bool, *,
                snapshot: bool = False) -> list[CheckResult]:
    if report.grants is None:
        return [CheckResult("privileges", Status.WARN,
                            f"SHOW GRANTS failed ({report.grants_error}): cannot verify",
                            "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user")]
    privileges, roles = parse_grants(report.grants)
    everything = "ALL PRIVILEGES" in privileges
    client = "BINLOG MONITOR" if report.mariadb else "REPLICATION CLIENT"
    grant_names = ("REPLICATION SLAVE", client)
    missing = [p for p in grant_names
               if not everything and p not in privileges
               and not (p == "BINLOG MONITOR" and "REPLICATION CLIENT" in privileges)]
    via_roles = " (privileges granted through roles are not expanded here)" if roles else ""
    results = []
    if missing:
        why = {"REPLICATION SLAVE": "to read the binlog",
               client: "for SHOW BINARY LOGS and the current position"}
        results.append(CheckResult(
            "privileges", Status.FAIL,
            f"{report.user or 'the user'} lacks {' and '.join(missing)} on *.*{via_roles}",
            f"GRANT {', '.join(missing)} ON *.* TO the user "
            f"({'; '.join(f'{p} {why[p]}' for p in missing)})"))
    else:
        results.append(CheckResult("privileges", Status.OK,
                                   "ALL PRIVILEGES" if everything else " and ".join(grant_names)))
    if not everything and "SELECT" not in privileges:
        status = Status.FAIL if snapshot else Status.WARN
        results.append(CheckResult(
            "privilege SELECT", status,
            "not granted on *.*: snapshots read tables with it (start.from = snapshot, "
            "`binlake snapshot`, tables new in filter.include)"
            + ("" if full_metadata else ", and column names come from information_schema "
               "when binlog_row_metadata is not FULL")
            + (via_roles or ""),
            "GRANT SELECT ON *.* TO the user (or on each database binlake lands)"))
    else:
        results.append(CheckResult("privilege SELECT", Status.OK,
                                   "granted: snapshots can read the tables"))
    return results


def _server_id(config: Config, report: ServerReport) -> CheckResult:
    mine = config.replica.server_id
    theirs = report.variables.get("server_id")
    fix = ("set replica.server_id (BINLAKE_REPLICA_SERVER_ID) to a number no server or "
           "replica of this topology uses")
    if not mine:
        return CheckResult("server_id", Status.FAIL, "replica.server_id is not set", fix)
    if theirs is not None and theirs.strip() == str(mine):
        return CheckResult("server_id", Status.FAIL,
                           f"replica.server_id {mine} is the server's own @@server_id", fix)
    if report.replica_ids is None and report.replicas_denied:
        # MariaDB's SHOW SLAVE HOSTS needs REPLICATION MASTER ADMIN, which binlake needs for
        # nothing else (and no other query lists replicas): not a problem to warn about.
        need = "REPLICATION MASTER ADMIN" if report.mariadb else "REPLICATION SLAVE"
        return CheckResult("server_id", Status.INFO,
                           f"{mine} differs from the server's ({theirs}); other replicas' ids "
                           f"are not listed (that needs {need}): if one uses {mine}, the server "
                           "disconnects whichever of the two connected first with "
                           "DuplicateServerId (binlake then stops and says so)")
    if report.replica_ids is None:
        return CheckResult("server_id", Status.WARN,
                           f"{mine} differs from the server's ({theirs}); the registered "
                           f"replicas could not be listed ({report.replicas_error}): make sure "
                           f"no other replica uses {mine}")
    for server_id, where in report.replica_ids:
        if server_id == mine:
            return CheckResult("server_id", Status.FAIL,
                               f"replica.server_id {mine} is already registered by a replica "
                               f"at {where} (a second one would disconnect it; if that is this "
                               "binlake's running daemon, ignore this)", fix)
    return CheckResult("server_id", Status.OK,
                       f"{mine} (server: {theirs}; {len(report.replica_ids)} other "
                       "replica(s) registered)")


def _tls(config: Config, report: ServerReport) -> CheckResult:
    have_ssl = (report.variables.get("have_ssl") or "").upper()
    if report.tls:
        return CheckResult("tls", Status.OK, f"TLS in use (trust: {report.tls_trust})")
    if report.unix_socket:
        return CheckResult("tls", Status.OK, "unix socket: local, TLS not needed")
    from replica.core.connection import is_loopback

    offered = have_ssl == "YES"
    if is_loopback(config.server.host):
        return CheckResult(
            "tls", Status.WARN,
            "loopback TCP without TLS" + (" although the server offers it" if offered else ""),
            "fine on one host; server.tls_mode = preferred uses TLS when offered")
    return CheckResult(
        "tls", Status.FAIL,
        f"TCP to {config.server.host} without TLS" + (
            " (the server offers TLS)" if offered else f" (have_ssl={have_ssl or 'unknown'})"),
        "set server.tls_mode = verify-identity with server.tls_ca"
        + ("" if offered else ", and give the server a certificate (ssl_cert, ssl_key)"))


_START_FIX = ("use start.from = snapshot for a new lake (the tables' rows, then streaming), "
              "or earliest/latest, or point lake.path at an empty directory")


def _start_position(config: Config, report: ServerReport,
                    checkpoint: Mapping[str, object] | None) -> CheckResult:
    start = config.start
    if checkpoint is not None:
        file = checkpoint.get("binlog_file")
        pos = checkpoint.get("binlog_pos")
        what = f"the lake's checkpoint (transaction {checkpoint.get('seq')})"
        flavor = checkpoint.get("gtid_flavor")
        if flavor in ("mariadb", "mysql") and (flavor == "mariadb") != report.mariadb:
            return CheckResult("start position", Status.FAIL,
                               f"{what} comes from a {flavor} server, this one is not",
                               "check server.host and lake.path")
        if isinstance(file, str) and isinstance(pos, int):
            return _file_position(f"{what} {file}:{pos}", file, pos, report,
                                  "the lake cannot resume here: restore the binlogs, or "
                                  "re-seed: a new lake.path with start.from = snapshot")
        state = checkpoint.get("gtid_state")
        if isinstance(state, str) and state:
            return _gtid_position(f"{what} GTID {state}", state, report)
        return CheckResult("start position", Status.WARN, f"{what} has no position")
    if start.from_ == "latest":
        return CheckResult("start position", Status.OK,
                           "start.from = latest: the server's current end (new lake)")
    if start.from_ == "snapshot":
        return CheckResult("start position", Status.OK,
                           "start.from = snapshot: the included tables' rows, then streaming "
                           "from the server's current end (new lake)")
    if start.from_ == "earliest":
        first = report.binary_logs[0][0] if report.binary_logs else "?"
        return CheckResult("start position", Status.OK,
                           f"start.from = earliest: {first}:4, the oldest binlog kept")
    if start.from_ == "file":
        if not start.file:
            return CheckResult("start position", Status.FAIL,
                               "start.from = file but start.file is not set",
                               "set start.file (SHOW BINARY LOGS lists the files) and start.pos")
        return _file_position(f"start {start.file}:{start.pos}", start.file, start.pos, report,
                              _START_FIX)
    if not start.gtid:
        return CheckResult("start position", Status.FAIL,
                           "start.from = gtid but start.gtid is not set", "set start.gtid")
    return _gtid_position(f"start.gtid {start.gtid}", start.gtid, report)


def _file_position(what: str, file: str, pos: int, report: ServerReport,
                   fix: str) -> CheckResult:
    logs = report.binary_logs
    if logs is None:
        return CheckResult("start position", Status.WARN,
                           f"{what}: SHOW BINARY LOGS failed ({report.binary_logs_error})",
                           "GRANT REPLICATION CLIENT (BINLOG MONITOR) ON *.* TO the user")
    sizes = dict(logs)
    if file in sizes:
        if pos > sizes[file]:
            return CheckResult("start position", Status.FAIL,
                               f"{what}: beyond the end of {file} ({sizes[file]} bytes)", fix)
        return CheckResult("start position", Status.OK, f"{what} is in the server's binlog")
    if logs and file < logs[0][0]:
        return CheckResult("start position", Status.FAIL,
                           f"{what}: {file} was purged (the oldest binlog is {logs[0][0]})", fix)
    return CheckResult("start position", Status.FAIL,
                       f"{what}: the server has no binlog {file} "
                       f"({logs[0][0] if logs else 'none'} … {logs[-1][0] if logs else ''})",
                       "check server.host: is this the server the lake came from? " + fix)


def _gtid_position(what: str, text: str, report: ServerReport) -> CheckResult:
    try:
        if report.mariadb:
            return _mariadb_gtid(what, GtidPosition.parse(text), report)
        return _mysql_gtid(what, GtidSet.parse(text), report)
    except GtidError as exc:
        return CheckResult("start position", Status.FAIL, f"{what}: {exc}",
                           "a MariaDB position looks like 0-1-100; a MySQL set like "
                           "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77")


def _mariadb_gtid(what: str, position: GtidPosition, report: ServerReport) -> CheckResult:
    state = GtidPosition.parse(report.variables.get("gtid_binlog_state") or "")
    current = {g.domain: g for g in state}
    earliest = GtidPosition.parse(report.earliest_gtid_state or "")
    fix = _START_FIX
    for gtid in position:
        before = earliest.get(gtid.domain)
        if report.earliest_gtid_state is not None and before is not None and (
                gtid.seq < before.seq):
            return CheckResult("start position", Status.FAIL,
                               f"{what}: domain {gtid.domain} up to {before} was purged "
                               "from the binlog", fix)
        if gtid.domain not in current:
            return CheckResult("start position", Status.FAIL,
                               f"{what}: domain {gtid.domain} is not in the server's binlog "
                               f"(@@gtid_binlog_state {state or 'empty'})",
                               "check server.host and the GTID")
        if gtid.seq > current[gtid.domain].seq:
            return CheckResult("start position", Status.FAIL,
                               f"{what}: {gtid} is ahead of the server "
                               f"({current[gtid.domain]}): the lake has transactions this "
                               "server never had", "check server.host; " + fix)
    return CheckResult("start position", Status.OK,
                       f"{what} is in the server's binlog (@@gtid_binlog_state {state})")


def _mysql_gtid(what: str, wanted: GtidSet, report: ServerReport) -> CheckResult:
    purged = GtidSet.parse(report.variables.get("gtid_purged") or "")
    executed = GtidSet.parse(report.variables.get("gtid_executed") or "")
    lacking = purged.difference(wanted)
    if lacking:
        return CheckResult("start position", Status.FAIL,
                           f"{what}: the server purged {lacking.to_text(',')} which the start "
                           "set does not contain", _START_FIX)
    extra = wanted.difference(executed)
    if extra:
        return CheckResult("start position", Status.FAIL,
                           f"{what}: has {extra.to_text(',')} that this server never executed",
                           "check server.host and the GTID set")
    return CheckResult("start position", Status.OK, f"{what} is in the server's binlog")


def _semi_sync(config: Config, report: ServerReport) -> CheckResult:
    mode = config.semi_sync.mode
    if mode == "off":
        return CheckResult("semi_sync", Status.SKIP, "semi_sync.mode = off")
    name = "rpl_semi_sync_master_enabled" if report.mariadb else "rpl_semi_sync_source_enabled"
    value = report.variables.get(name)
    if value is None:
        return CheckResult("semi_sync", Status.FAIL,
                           f"semi_sync.mode = {mode} but the server has no semi-sync support",
                           "INSTALL PLUGIN rpl_semi_sync_source SONAME 'semisync_source.so'"
                           if not report.mariadb else "use a MariaDB with semi-sync built in")
    if not _on(value):
        return CheckResult("semi_sync", Status.WARN,
                           f"semi_sync.mode = {mode} but {name} = OFF: replication will be "
                           "asynchronous", f"SET GLOBAL {name} = ON (and in the server's config)")
    return CheckResult("semi_sync", Status.OK, f"{name} = ON, binlake will {mode}")


# --- asking the server --------------------------------------------------------------------------


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


async def gather(config: Config) -> ServerReport:
    """Connect and ask the server what the checks need.

    Raises:
        whatever connecting raises (refused, authentication, TLS): the caller reports it.
    """
    from replica.core.connection import Connection, ConnectOptions

    conn = await Connection.open(ConnectOptions.from_config(config.server))
    async with conn:
        names = ", ".join(f"'{n}'" for n in VARIABLES)
        rows = await conn.query(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        server = config.server
        report = ServerReport(
            mariadb=conn.is_mariadb,
            variables={_text(r[0]).lower(): _text(r[1]) for r in rows},
            tls=conn.is_tls, unix_socket=conn.is_unix_socket, tls_trust=conn.tls_trust,
            where=server.socket or f"{server.host}:{server.port}", user=server.user)
        try:
            report.grants = [_text(r[0]) for r in await conn.query("SHOW GRANTS")]
        except ServerError as exc:
            report.grants_error = exc.message
        try:
            replicas = await conn.query_result(
                "SHOW SLAVE HOSTS" if conn.is_mariadb else "SHOW REPLICAS")
            columns = [c.name.lower() for c in replicas.columns]
            report.replica_ids = [
                (int(_text(r[0])), _replica_where(columns, r)) for r in replicas.rows]
        except ServerError as exc:
            report.replicas_error = exc.message
            report.replicas_denied = exc.code in _DENIED
        try:
            report.binary_logs = [(_text(r[0]), int(_text(r[1])))
                                  for r in await conn.query("SHOW BINARY LOGS")]
        except ServerError as exc:
            report.binary_logs_error = exc.message
        if conn.is_mariadb and report.binary_logs:
            first = report.binary_logs[0][0].replace("'", "''")
            try:
                rows = await conn.query(f"SELECT BINLOG_GTID_POS('{first}', 4)")
                report.earliest_gtid_state = _text(rows[0][0]) if rows else None
            except ServerError as exc:
                report.notes.append(f"BINLOG_GTID_POS failed: {exc.message}")
    return report


#: ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR.
_DENIED = frozenset({1227, 1044, 1142})


def _replica_where(columns: list[str], row: Sequence[str | bytes | None]) -> str:
    values = dict(zip(columns, (_text(v) for v in row), strict=False))
    host = values.get("host") or "?"
    port = values.get("port") or "?"
    return f"{host}:{port}"


def check_object_store(config: Config) -> CheckResult:
    """The ``object_store`` check of a lake on S3: the conditional-write probe (blocking)."""
    from sinks.objectstore.probe import probe_conditional_writes
    from sinks.objectstore.s3 import open_store

    lake = config.lake
    store = open_store(lake.path, lake.s3.settings())
    try:
        probe_conditional_writes(store)
    except StoreRefused as exc:
        return CheckResult("object_store", Status.FAIL, str(exc), exc.fix)
    except StoreError as exc:
        return CheckResult("object_store", Status.FAIL, str(exc),
                           "the store did not answer: check lake.s3.endpoint and the network "
                           "to it")
    where = lake.s3.endpoint or "AWS S3"
    return CheckResult("object_store", Status.OK, f"{store.url()} at {where}: reachable, "
                       "If-None-Match and If-Match honoured")


async def run_checks(config: Config) -> tuple[list[CheckResult], ServerReport | None]:
    """The checklist; a server that cannot be reached gives one failed ``connect`` line."""
    store_check: list[CheckResult] = []
    if config.lake.on_object_store:
        store_check.append(await trio.to_thread.run_sync(check_object_store, config))
    checkpoint, problem = (None, None) if config.lake.on_object_store \
        else _read_checkpoint(config.lake.path)
    try:
        report = await gather(config)
    except Exception as exc:  # reported as the first (and only) check, with its fix
        from replica.cli import hint_for

        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return [CheckResult("connect", Status.FAIL, f"{type(exc).__name__}: {text}",
                            hint_for(exc)), *store_check], None
    flavor = "MariaDB" if report.mariadb else "MySQL"
    results = [CheckResult("connect", Status.OK,
                           f"{report.user}@{report.where}, {flavor} "
                           f"{report.variables.get('version', '')}".rstrip())]
    if problem is not None:
        results.append(problem)
    results.extend(evaluate(config, report, checkpoint))
    results.extend(store_check)
    return results, report


def print_results(results: Sequence[CheckResult], out: TextIO) -> None:
    width = max((len(r.name) for r in results), default=0)
    for r in results:
        out.write(f"  {r.status.value:<4}  {r.name:<{width}}  {r.detail}\n")
        if r.fix and r.status in (Status.FAIL, Status.WARN):
            out.write(f"  {'':<4}  {'':<{width}}  fix: {r.fix}\n")
    failed = sum(r.status is Status.FAIL for r in results)
    warned = sum(r.status is Status.WARN for r in results)
    if failed:
        out.write(f"{failed} check(s) failed, {warned} warning(s): fix the failures before "
                  "`binlake run`\n")
    else:
        out.write(f"ready: all required checks passed ({warned} warning(s))\n")


async def run(config: Config) -> int:
    """Entry point of ``binlake check`` (called by :mod:`replica.cli`): 0 ready, 1 not."""
    server = config.server
    where = server.socket or f"{server.host}:{server.port}"
    sys.stdout.write(f"binlake check: {server.user}@{where}\n")
    results, _report = await run_checks(config)
    print_results(results, sys.stdout)
    return 1 if any(r.status is Status.FAIL for r in results) else 0
