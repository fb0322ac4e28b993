"""The replica side of the replication protocol, sans I/O.

Registration, dump requests, the dump stream's packet framing, semi-sync ACKs, and the server's
replication errors.

A replica session is, on the wire::

    queries that declare what the replica understands        (registration_statements)
    COM_REGISTER_SLAVE                                       (register_slave)
    [SET @rpl_semi_sync_slave=1 ...]                         (semi_sync_statements)
    COM_BINLOG_DUMP or COM_BINLOG_DUMP_GTID                  (binlog_dump / binlog_dump_gtid)
    then packets from the server until an error or EOF       (parse_dump_packet)
    [with semi-sync, an ACK for each event that asks for one] (semi_sync_ack)

Everything the server can refuse arrives as an ERR packet; MariaDB and MySQL report almost every
start-position problem as error 1236 and only the message says which. :func:`dump_error` turns
code and message into the specific :mod:`protocol.errors` class, so that the daemon can tell the
user what to do (and whether reconnecting can help) instead of repeating the server's words.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from collections.abc import Mapping
from dataclasses import dataclass

from .capabilities import Command
from .errors import (
    BinlogDumpError,
    BinlogFormatNotRow,
    BinlogNotEnabled,
    BinlogPositionError,
    ChecksumUnsupported,
    DuplicateServerId,
    EventTooLarge,
    GtidDiverged,
    GtidNotInBinlog,
    GtidPurged,
    GtidStrictModeHole,
    MalformedPacket,
    MissingPrivilege,
    ProtocolError,
    ReplicationError,
    SemiSyncError,
    ServerError,
    ServerIdConflict,
    TruncatedData,
)
from .frozen import fast_init
from .gtid import GtidPosition, GtidSet

__all__ = [
    "DUMP_NON_BLOCK",
    "DUMP_SEND_ANNOTATE_ROWS",
    "DUMP_GTID_NON_BLOCK",
    "DUMP_GTID_HEARTBEAT_V2",
    "MARIADB_SLAVE_CAPABILITY_GTID",
    "SERVER_VARIABLES_QUERY",
    "ServerFacts",
    "DumpEvent",
    "DumpEnd",
    "DUMP_END",
    "register_slave",
    "binlog_dump",
    "binlog_dump_gtid",
    "semi_sync_ack",
    "registration_statements",
    "sql_string",
    "semi_sync_statements",
    "replica_uuid_for",
    "parse_dump_packet",
    "dump_error",
    "error_from_packet",
    "check_server",
]

#: COM_BINLOG_DUMP flags: end with EOF at the end of the binlog instead of waiting for more.
DUMP_NON_BLOCK = 0x01
#: COM_BINLOG_DUMP flags (MariaDB): also send ANNOTATE_ROWS events (the statement text).
DUMP_SEND_ANNOTATE_ROWS = 0x02
#: COM_BINLOG_DUMP_GTID flags (MySQL).
DUMP_GTID_NON_BLOCK = 0x01
DUMP_GTID_HEARTBEAT_V2 = 0x02

#: ``@mariadb_slave_capability``: 4 = understands GTID events (the value a modern replica sends;
#: lower values make the server rewrite GTID events into BEGIN queries and drop GTID_LIST).
MARIADB_SLAVE_CAPABILITY_GTID = 4

_SEMI_SYNC_MAGIC = 0xEF
_SEMI_SYNC_ACK_FLAG = 0x01

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_REGISTER_TAIL = struct.Struct("<HII")  # report port, rank, master id
_DUMP_HEAD = struct.Struct("<BIHI")  # command, position, flags, server id
_DUMP_GTID_HEAD = struct.Struct("<BHII")  # command, flags, server id, file name length
_ACK_HEAD = struct.Struct("<BQ")  # magic, position

_U32_MAX = (1 << 32) - 1


# --- command builders ----------------------------------------------------------------------------


def _short_string(value: str, what: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"{what} is longer than 255 bytes")
    return bytes((len(raw),)) + raw


def register_slave(server_id: int, *, host: str = "", user: str = "", password: str = "",
                   port: int = 0, rank: int = 0, master_id: int = 0) -> bytes:
    """COM_REGISTER_SLAVE: announce this replica (it shows in SHOW REPLICA HOSTS).

    ``host``/``port`` are the report_host/report_port a replica chooses to show; ``user`` and
    ``password`` are the report_user/report_password of old servers — leave them empty (the
    password would be stored in clear on the server).
    """
    if not 1 <= server_id <= _U32_MAX:
        raise ValueError(f"server_id {server_id} is out of range (1..{_U32_MAX})")
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"report port {port} is out of range")
    return b"".join((
        bytes((Command.REGISTER_SLAVE,)),
        _U32.pack(server_id),
        _short_string(host, "report host"),
        _short_string(user, "report user"),
        _short_string(password, "report password"),
        _REGISTER_TAIL.pack(port, rank, master_id),
    ))


def binlog_dump(server_id: int, filename: str, position: int, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP: stream from ``filename`` at ``position``.

    In MariaDB GTID mode (``@slave_connect_state`` set) the server ignores file and position;
    send ``""`` and 4. ``server_id`` 0 makes the server end the dump like NON_BLOCK.
    """
    if not 0 <= position <= _U32_MAX:
        raise ValueError(f"binlog position {position} does not fit COM_BINLOG_DUMP (u32)")
    if not 0 <= server_id <= _U32_MAX:
        raise ValueError(f"server_id {server_id} is out of range")
    return _DUMP_HEAD.pack(Command.BINLOG_DUMP, position, flags, server_id) + filename.encode()


def binlog_dump_gtid(server_id: int, gtid_set: GtidSet, *, filename: str = "",
                     position: int = 4, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP_GTID (MySQL): stream every transaction not in ``gtid_set``.

    The set travels in Binary v0 unless it has tags (v1 needs MySQL 8.3+), as the server's own
    encoder does; the server finds the first binlog file holding a missing transaction.
    """
    name = filename.encode()
    data = gtid_set.encode()
    return b"".join((
        _DUMP_GTID_HEAD.pack(Command.BINLOG_DUMP_GTID, flags, server_id, len(name)),
        name,
        _U64.pack(position),
        _U32.pack(len(data)),
        data,
    ))


def semi_sync_ack(filename: str, position: int) -> bytes:
    """The semi-sync ACK payload: magic 0xEF, the acknowledged end position (u64), file name.

    Sent with sequence id 0, no NUL after the name, never a CRC.
    """
    return _ACK_HEAD.pack(_SEMI_SYNC_MAGIC, position) + filename.encode()


# --- registration statements ---------------------------------------------------------------------


def replica_uuid_for(server_id: int) -> _uuid.UUID:
    """A stable UUID for a replica without one (MySQL identifies dump threads by it).

    Derived from the server id so that a reconnecting binlake replaces its own previous dump
    thread on the server instead of appearing as a second replica.
    """
    return _uuid.uuid5(_uuid.NAMESPACE_OID, f"binlake-replica-{server_id}")


def sql_string(value: str) -> str:
    """``value`` as a quoted SQL string literal (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def registration_statements(*, mariadb: bool, heartbeat_period: float,
                            gtid_position: GtidPosition | None = None,
                            gtid_strict_mode: bool = False,
                            gtid_ignore_duplicates: bool = False,
                            replica_uuid: _uuid.UUID | None = None) -> list[str]:
    """The SET statements a replica runs before COM_REGISTER_SLAVE, in order.

    Args:
        mariadb: the server flavour.
        heartbeat_period: seconds; sent in nanoseconds (0 disables heartbeats).
        gtid_position: MariaDB only: start in GTID mode after this position (``""`` for an
            empty position means "from the first event of every domain").
        gtid_strict_mode, gtid_ignore_duplicates: MariaDB GTID-mode options.
        replica_uuid: MySQL only: this replica's UUID.
    """
    if heartbeat_period < 0:
        raise ValueError("heartbeat_period must be >= 0")
    period_ns = int(heartbeat_period * 1_000_000_000)
    # The *presence* of @master_binlog_checksum tells the server that the replica handles
    # checksums; its value sets the CRC of the fake events the dump thread makes up.
    statements = [
        f"SET @master_heartbeat_period={period_ns}",
        "SET @master_binlog_checksum=@@global.binlog_checksum",
    ]
    if mariadb:
        statements.append(f"SET @mariadb_slave_capability={MARIADB_SLAVE_CAPABILITY_GTID}")
        if gtid_position is not None:
            statements += [
                f"SET @slave_connect_state={sql_string(str(gtid_position))}",
                f"SET @slave_gtid_strict_mode={int(gtid_strict_mode)}",
                f"SET @slave_gtid_ignore_duplicates={int(gtid_ignore_duplicates)}",
            ]
    else:
        # MySQL 8.0.26+ looks up the source_/replica_ spelling first, older ones the master_/
        # slave_ one: set both.
        statements += [
            f"SET @source_heartbeat_period={period_ns}",
            "SET @source_binlog_checksum=@@global.binlog_checksum",
        ]
        if replica_uuid is not None:
            text = sql_string(str(replica_uuid))
            statements += [f"SET @replica_uuid={text}", f"SET @slave_uuid={text}"]
    return statements


def semi_sync_statements(*, mariadb: bool) -> list[str]:
    """What turns semi-sync on for this dump: from then on every packet has the 0xEF header."""
    if mariadb:
        return ["SET @rpl_semi_sync_slave=1"]
    # The 8.0.26+ source plugin reads @rpl_semi_sync_replica, the legacy one the other.
    return ["SET @rpl_semi_sync_replica=1", "SET @rpl_semi_sync_slave=1"]


# --- checking the server before the dump -----------------------------------------------------------

#: One round trip for what the replica must know before it registers; a variable the server
#: does not have (e.g. the semi-sync one without the plugin) is simply absent from the rows.
SERVER_VARIABLES_QUERY = (
    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_id', 'server_uuid', 'log_bin', "
    "'binlog_format', 'binlog_checksum', 'gtid_mode', 'gtid_binlog_pos', 'max_allowed_packet', "
    "'rpl_semi_sync_master_enabled', 'rpl_semi_sync_source_enabled', 'gtid_domain_id', "
    "'read_only')"
)


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _on(value: str | None) -> bool:
    return value is not None and value.upper() in ("ON", "1", "YES", "TRUE")


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the server said about itself (from :data:`SERVER_VARIABLES_QUERY`)."""

    server_id: int
    log_bin: bool
    binlog_format: str | None
    binlog_checksum: str | None
    gtid_mode: str | None  # MySQL
    gtid_binlog_pos: str | None  # MariaDB
    semi_sync_enabled: bool | None  # None: the server has no semi-sync master/source support
    server_uuid: str | None = None
    gtid_domain_id: int | None = None  # MariaDB
    read_only: bool = False

    @classmethod
    def from_variables(cls, variables: Mapping[str, str | None]) -> ServerFacts:
        v = {k.lower(): val for k, val in variables.items()}
        semi = v.get("rpl_semi_sync_master_enabled", v.get("rpl_semi_sync_source_enabled"))
        server_id = v.get("server_id")
        try:
            sid = int(server_id) if server_id is not None else 0
        except ValueError:
            raise MalformedPacket(f"server_id {server_id!r} is not a number") from None
        return cls(
            server_id=sid,
            log_bin=_on(v.get("log_bin")),
            binlog_format=v.get("binlog_format"),
            binlog_checksum=v.get("binlog_checksum"),
            gtid_mode=v.get("gtid_mode"),
            gtid_binlog_pos=v.get("gtid_binlog_pos"),
            semi_sync_enabled=None if semi is None else _on(semi),
            server_uuid=v.get("server_uuid"),
            gtid_domain_id=_int_or_none(v.get("gtid_domain_id")),
            read_only=_on(v.get("read_only")),
        )

    @property
    def has_gtids(self) -> bool:
        """Whether a dump can start from GTIDs: MariaDB always, MySQL with gtid_mode=ON."""
        if self.gtid_binlog_pos is not None:
            return True  # MariaDB: every transaction has a GTID
        return (self.gtid_mode or "").upper() == "ON"


def check_server(facts: ServerFacts, *, replica_server_id: int,
                 allow_statement_format: bool = False) -> None:
    """Refuse, with an actionable error, a server binlake cannot replicate from as configured."""
    if not facts.log_bin:
        raise BinlogNotEnabled(
            "the server's binary log is off (log_bin=OFF): start it with --log-bin "
            "(and --binlog-format=ROW) so that binlake has changes to read"
        )
    fmt = (facts.binlog_format or "ROW").upper()
    if fmt != "ROW" and not allow_statement_format:
        raise BinlogFormatNotRow(
            f"the server's binlog_format is {fmt}: set binlog_format=ROW on the server "
            "(SET GLOBAL binlog_format=ROW, and in its config) so that changes arrive as rows; "
            "statement-logged changes cannot be landed as data"
        )
    if facts.server_id == replica_server_id:
        raise ServerIdConflict(
            f"the replica's server_id {replica_server_id} equals the server's own server_id: "
            "configure binlake with a server_id no server or replica of this topology uses"
        )


# --- the dump stream -------------------------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class DumpEvent:
    """One binlog event from the dump stream: its bytes (header, body and CRC, if any), and
    whether the master waits for a semi-sync ACK of it (acknowledge its end position)."""

    data: memoryview
    ack_requested: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class DumpEnd:
    """EOF: the server reached the end of its binlog in a NON_BLOCK dump and ended the stream."""


DUMP_END = DumpEnd()


def parse_dump_packet(payload: bytes | bytearray | memoryview, *, semi_sync: bool) -> DumpEvent | DumpEnd:
    """Classify one (joined) packet of the dump stream.

    Args:
        payload: the packet payload, all chunks of a >16 MB event joined.
        semi_sync: whether ``@rpl_semi_sync_slave`` was set for this dump. The 2-byte header is
            then on *every* event packet, so it is stripped by that knowledge, never guessed.
    Returns:
        :class:`DumpEvent` (a view into ``payload``, no copy) or :data:`DUMP_END`.
    Raises:
        BinlogDumpError (or a subclass): the server sent an ERR packet.
        SemiSyncError: the semi-sync header is missing or has unknown flags.
        MalformedPacket: anything else.
    """
    view = memoryview(payload)
    if not view:
        raise TruncatedData("empty packet in the binlog dump stream")
    status = view[0]
    if status == 0x00:
        if semi_sync:
            if len(view) < 3:
                raise SemiSyncError("dump packet too short for its semi-sync header")
            if view[1] != _SEMI_SYNC_MAGIC:
                raise SemiSyncError(
                    f"dump packet without the semi-sync header (byte {view[1]:#04x}, not 0xef)"
                )
            flags = view[2]
            if flags & ~_SEMI_SYNC_ACK_FLAG:
                raise SemiSyncError(f"unknown semi-sync flags {flags:#04x}")
            return DumpEvent(view[3:], bool(flags & _SEMI_SYNC_ACK_FLAG))
        return DumpEvent(view[1:])
    if status == 0xFF:
        raise error_from_packet(view)
    if status == 0xFE and len(view) < 9:
        return DUMP_END
    raise MalformedPacket(f"dump stream packet with status byte {status:#04x}")


def error_from_packet(payload: bytes | bytearray | memoryview) -> ProtocolError:
    """The typed exception (see :func:`dump_error`) for an ERR packet of the replication
    commands (COM_REGISTER_SLAVE, the dump)."""
    view = memoryview(payload)
    if len(view) < 3 or view[0] != 0xFF:
        raise TruncatedData("ERR packet truncated")
    (code,) = _U16.unpack_from(view, 1)
    offset = 3
    sqlstate = ""
    if len(view) >= 9 and view[3] == 0x23:  # '#'
        sqlstate = bytes(view[4:9]).decode("ascii", "replace")
        offset = 9
    message = bytes(view[offset:]).decode("utf-8", "replace")
    return dump_error(code, sqlstate, message)


# --- the server's replication errors ---------------------------------------------------------------

# (substring of the lowercased message, class, what to do). Order matters: the diverged variant
# of "not in the master's binlog" must win over the plain one. Messages are matched without the
# words master/source and slave/replica, which changed between versions.
_DUMP_1236: tuple[tuple[str, type[ServerError] | type[ReplicationError], str], ...] = (
    ("contains gtids with higher sequence numbers", GtidDiverged,
     "the replica diverged: the server has newer transactions in that domain than the "
     "requested GTID, which it never had; re-seed the lake or start from a GTID the server has"),
    ("has more gtids than the", GtidDiverged,
     "the requested GTID set contains transactions the server never had; start from a set "
     "that is a subset of the server's @@gtid_executed"),
    ("which is not in the", GtidNotInBinlog,
     "the requested GTID was never in this server's binlog: check the start GTID (or use "
     "gtid_ignore_duplicates for multi-source setups)"),
    ("could not find gtid state requested", GtidPurged,
     "the binlogs holding the requested GTID position were purged: re-seed the lake from a "
     "snapshot, and keep binlogs longer (expire_logs_days / binlog_expire_logs_seconds)"),
    ("purged required binary logs", GtidPurged,
     "the binlogs holding transactions missing from the requested GTID set were purged: "
     "re-seed the lake and keep binlogs longer (binlog_expire_logs_seconds)"),
    ("has purged binary logs containing gtids", GtidPurged,
     "the binlogs holding transactions missing from the requested GTID set were purged: "
     "re-seed the lake and keep binlogs longer (binlog_expire_logs_seconds)"),
    ("gtid strict mode is enabled", GtidStrictModeHole,
     "the requested GTID falls into a hole of the server's binlog and strict mode is on: "
     "start from a GTID the server has, or turn gtid_strict_mode off for binlake"),
    ("same server_uuid/server_id", DuplicateServerId,
     "another replica connected with binlake's server_id: give every replica its own"),
    ("can not handle replication events with the checksum", ChecksumUnsupported,
     "the server logs checksums the replica did not declare; this is a binlake bug"),
    ("exceeded max_allowed_packet", EventTooLarge,
     "raise max_allowed_packet on the server (up to 1G) so that it can send the event"),
    ("could not find first log file name", BinlogPositionError,
     "the requested binlog file does not exist on the server (purged?): check SHOW BINARY LOGS"),
    ("start replication from position >", BinlogPositionError,
     "the requested position is past the end of the binlog file"),
    ("impossible position", BinlogPositionError,
     "the requested position is not the start of an event: use a position from "
     "SHOW BINLOG EVENTS or a checkpoint"),
    ("bogus data in log event", BinlogPositionError,
     "the requested position is not the start of an event: use a position from "
     "SHOW BINLOG EVENTS or a checkpoint"),
    ("binlog truncated in the middle of event", BinlogPositionError,
     "the requested position is not the start of an event, or the binlog is damaged"),
    ("binary log is not open", BinlogNotEnabled,
     "the server's binary log is off: start it with --log-bin"),
)


def dump_error(code: int, sqlstate: str, message: str) -> ProtocolError:
    """The typed exception for an ERR packet received during registration or the dump.

    Returns it (the caller raises), with the server's message followed by what to do.
    """
    lowered = message.lower()
    if code == 4052:  # ER_SLAVE_SAME_ID (MariaDB)
        return DuplicateServerId(code, sqlstate, message + " — another replica connected "
                                 "with binlake's server_id: give every replica its own")
    # 1227 ER_SPECIFIC_ACCESS_DENIED; and 1045: replication commands run on an authenticated
    # connection, so "access denied" there is COM_REGISTER_SLAVE/COM_BINLOG_DUMP refused for
    # lack of REPLICATION SLAVE (seen on MariaDB 10.11, 11.8 and MySQL 9.7), not bad credentials.
    if code in (1227, 1142, 1044, 1045):
        return MissingPrivilege(code, sqlstate, message + " — grant the replication user "
                                "REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on "
                                "MariaDB)")
    if code == 1381:  # ER_NO_BINARY_LOGGING
        return BinlogNotEnabled(f"({code}) {message} — start the server with --log-bin")
    for needle, cls, advice in _DUMP_1236:
        if needle in lowered:
            if issubclass(cls, ServerError):
                return cls(code, sqlstate, f"{message} — {advice}")
            return cls(f"({code}) {message} — {advice}")  # raised by the server, no code field
    return BinlogDumpError(code, sqlstate, message)
