"""Every binlog event that is not a row image: typed, frozen events and their decoders.

Each decoder has the signature ``decode(header, body, fde) -> BinlogEvent``, where ``body`` is
the event's bytes after the 19-byte header with the CRC32 trailer already removed, and ``fde``
is the FORMAT_DESCRIPTION_EVENT in force (``None`` before the first one; decoders then assume
the v4 post-header lengths). :data:`DECODERS` maps type codes to decoders, in the manner of
hyperframe's ``FRAMES`` table.

TABLE_MAP and the rows events are decoded by :mod:`protocol.binlog.tablemap` and
:mod:`protocol.binlog.rows` (they need the table-id map the stream keeps), compressed events
are unwrapped by :mod:`protocol.binlog.compression`; :mod:`protocol.binlog.stream` ties it all
together. Decoders raise :class:`~protocol.errors.MalformedPacket` subclasses; the stream adds
the event type, file and position to them.

Text fields (schema names, queries) are decoded with the charset the server says they are in
where the event tells (QUERY's client charset), else as UTF-8; undecodable bytes become U+FFFD
rather than an exception, because a statement text is informational while row values, which
must be lossless, never pass through here.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import EventDecodeError, MalformedPacket, UnknownEventType
from ..frozen import fast_init, positional_maker
from ._cursor import Cursor
from .compression import MAX_DECOMPRESSED_SIZE, decompress_block
from .model import EventHeader

__all__ = [
    "EventType",
    "ChecksumAlg",
    "BinlogEvent",
    "FormatDescriptionEvent",
    "RotateEvent",
    "StopEvent",
    "QueryStatus",
    "QueryEvent",
    "ExecuteLoadQueryEvent",
    "XidEvent",
    "IntvarEvent",
    "RandEvent",
    "UserVarEvent",
    "BeginLoadQueryEvent",
    "AppendBlockEvent",
    "DeleteFileEvent",
    "IncidentEvent",
    "HeartbeatEvent",
    "AnnotateRowsEvent",
    "RowsQueryEvent",
    "BinlogCheckpointEvent",
    "XaXid",
    "MariadbGtidEvent",
    "GtidListEvent",
    "StartEncryptionEvent",
    "XaPrepareEvent",
    "MysqlGtidEvent",
    "PreviousGtidsEvent",
    "TransactionPayloadEvent",
    "IgnorableEvent",
    "OpaqueEvent",
    "DECODERS",
    "decode_event",
    "ROWS_EVENT_TYPES",
    "COMPRESSED_ROWS_EVENT_TYPES",
]


class EventType(enum.IntEnum):
    """Binlog event type codes (MySQL below 0xA0, MariaDB from 0xA0)."""

    UNKNOWN = 0
    START_V3 = 1
    QUERY = 2
    STOP = 3
    ROTATE = 4
    INTVAR = 5
    LOAD = 6
    SLAVE = 7
    CREATE_FILE = 8
    APPEND_BLOCK = 9
    EXEC_LOAD = 10
    DELETE_FILE = 11
    NEW_LOAD = 12
    RAND = 13
    USER_VAR = 14
    FORMAT_DESCRIPTION = 15
    XID = 16
    BEGIN_LOAD_QUERY = 17
    EXECUTE_LOAD_QUERY = 18
    TABLE_MAP = 19
    PRE_GA_WRITE_ROWS = 20
    PRE_GA_UPDATE_ROWS = 21
    PRE_GA_DELETE_ROWS = 22
    WRITE_ROWS_V1 = 23
    UPDATE_ROWS_V1 = 24
    DELETE_ROWS_V1 = 25
    INCIDENT = 26
    HEARTBEAT = 27
    IGNORABLE = 28
    ROWS_QUERY = 29
    WRITE_ROWS = 30
    UPDATE_ROWS = 31
    DELETE_ROWS = 32
    GTID = 33
    ANONYMOUS_GTID = 34
    PREVIOUS_GTIDS = 35
    TRANSACTION_CONTEXT = 36
    VIEW_CHANGE = 37
    XA_PREPARE = 38
    PARTIAL_UPDATE_ROWS = 39
    TRANSACTION_PAYLOAD = 40
    HEARTBEAT_V2 = 41
    GTID_TAGGED = 42
    ANNOTATE_ROWS = 160
    BINLOG_CHECKPOINT = 161
    MARIADB_GTID = 162
    GTID_LIST = 163
    START_ENCRYPTION = 164
    QUERY_COMPRESSED = 165
    WRITE_ROWS_COMPRESSED_V1 = 166
    UPDATE_ROWS_COMPRESSED_V1 = 167
    DELETE_ROWS_COMPRESSED_V1 = 168
    WRITE_ROWS_COMPRESSED = 169
    UPDATE_ROWS_COMPRESSED = 170
    DELETE_ROWS_COMPRESSED = 171


ROWS_EVENT_TYPES = frozenset({23, 24, 25, 30, 31, 32, 39})
COMPRESSED_ROWS_EVENT_TYPES = frozenset(range(166, 172))


class ChecksumAlg(enum.IntEnum):
    OFF = 0
    CRC32 = 1
    UNDEF = 255


# Post-header lengths of a v4 binlog, used before any FORMAT_DESCRIPTION_EVENT is seen (the
# fake ROTATE that opens a dump) and for type codes an FDE does not list.
_DEFAULT_POST_HEADER = {2: 13, 4: 8, 17: 4, 18: 26, 19: 8, 23: 8, 24: 8, 25: 8, 30: 10, 31: 10,
                        32: 10, 39: 10, 162: 19, 163: 4, 161: 4, 165: 13}


@dataclass(frozen=True, slots=True)
class BinlogEvent:
    """Base of every decoded non-row event: it keeps its header (with computed positions)."""

    header: EventHeader

    @property
    def type_code(self) -> int:
        return self.header.type_code


# --- format, rotation, stop ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FormatDescriptionEvent(BinlogEvent):
    """FORMAT_DESCRIPTION_EVENT (15): the binlog version, server version, and how to read events.

    ``post_header_lengths[t - 1]`` is the post-header length of type ``t``. ``checksum_alg``
    says whether the events of this binlog file (and this event) carry a CRC32 trailer.
    """

    binlog_version: int
    server_version: str
    create_timestamp: int
    header_length: int
    post_header_lengths: bytes
    checksum_alg: int

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return _version_split(self.server_version)

    def post_header_len(self, type_code: int) -> int:
        if 1 <= type_code <= len(self.post_header_lengths):
            return self.post_header_lengths[type_code - 1]
        return _DEFAULT_POST_HEADER.get(type_code, 0)


@dataclass(frozen=True, slots=True)
class RotateEvent(BinlogEvent):
    """ROTATE_EVENT (4): the following events are in ``next_file`` starting at ``position``.

    A *fake* rotate (timestamp 0 / log_pos 0 / ARTIFICIAL flag) opens every dump and names the
    file being sent; it is not in the binlog.
    """

    position: int
    next_file: str

    @property
    def is_fake(self) -> bool:
        return self.header.log_pos == 0 or self.header.timestamp == 0


@dataclass(frozen=True, slots=True)
class StopEvent(BinlogEvent):
    """STOP_EVENT (3): the server shut down; the next binlog file follows without a ROTATE."""


# --- statements ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryStatus:
    """The status variables of a QUERY event (MySQL codes 0–20, MariaDB 128–131).

    Absent variables are ``None``. Parsing stops at the first code binlake does not know,
    exactly as the servers do (codes are written in increasing order); the bytes from there on
    are kept in ``unparsed``.
    """

    flags2: int | None = None
    sql_mode: int | None = None
    catalog: str | None = None
    auto_increment_increment: int | None = None
    auto_increment_offset: int | None = None
    charset_client: int | None = None
    collation_connection: int | None = None
    collation_server: int | None = None
    time_zone: str | None = None
    lc_time_names: int | None = None
    charset_database: int | None = None
    table_map_for_update: int | None = None
    master_data_written: int | None = None
    invoker_user: str | None = None
    invoker_host: str | None = None
    updated_db_names: tuple[str, ...] | None = None
    microseconds: int | None = None  # MySQL Q_MICROSECONDS (13)
    explicit_defaults_for_timestamp: int | None = None
    ddl_logged_with_xid: int | None = None  # MySQL 8: the DDL's XID (no XID event follows)
    default_collation_for_utf8mb4: int | None = None
    sql_require_primary_key: int | None = None
    default_table_encryption: int | None = None
    hrnow: int | None = None  # MariaDB Q_HRNOW (128): microseconds of the statement's start
    xid: int | None = None  # MariaDB Q_XID (129)
    gtid_flags3: int | None = None  # MariaDB Q_GTID_FLAGS3 (130): GTID flags_extra
    sa_seq_no: int | None = None  # with gtid_flags3 COMMIT/ROLLBACK_ALTER
    character_set_collations: tuple[tuple[int, int], ...] | None = None  # MariaDB 131
    unparsed: bytes = b""

    @property
    def microsecond(self) -> int | None:
        """Sub-second part of the event's timestamp, from whichever server variable has it."""
        return self.hrnow if self.hrnow is not None else self.microseconds


@dataclass(frozen=True, slots=True)
class QueryEvent(BinlogEvent):
    """QUERY_EVENT (2) / QUERY_COMPRESSED_EVENT (165): a statement, DDL, BEGIN or COMMIT.

    ``schema`` is the default database of the session (may be empty); ``query`` the text.
    """

    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    query: str
    status: QueryStatus
    compressed: bool = False


@dataclass(frozen=True, slots=True)
class ExecuteLoadQueryEvent(BinlogEvent):
    """EXECUTE_LOAD_QUERY_EVENT (18): the LOAD DATA statement whose file came in blocks."""

    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    query: str
    status: QueryStatus
    file_id: int
    filename_start: int
    filename_end: int
    dup_handling: int


@dataclass(frozen=True, slots=True)
class XidEvent(BinlogEvent):
    """XID_EVENT (16): commit of a transaction on an XA-capable engine."""

    xid: int


@dataclass(frozen=True, slots=True)
class IntvarEvent(BinlogEvent):
    """INTVAR_EVENT (5): LAST_INSERT_ID (1) or INSERT_ID (2) for the next statement."""

    kind: int
    value: int


@dataclass(frozen=True, slots=True)
class RandEvent(BinlogEvent):
    """RAND_EVENT (13): RAND() seeds for the next statement."""

    seed1: int
    seed2: int


@dataclass(frozen=True, slots=True)
class UserVarEvent(BinlogEvent):
    """USER_VAR_EVENT (14): a user variable the next statement uses.

    ``value`` is ``None`` for NULL, an ``int`` for INT_RESULT (signedness from ``flags`` bit 1),
    a ``float`` for REAL_RESULT, and the raw bytes otherwise (STRING in ``charset``; DECIMAL
    as precision, scale and the binary decimal).
    """

    name: str
    is_null: bool
    value_type: int | None
    charset: int | None
    value: int | float | bytes | None
    flags: int


@dataclass(frozen=True, slots=True)
class AppendBlockEvent(BinlogEvent):
    """APPEND_BLOCK_EVENT (9): a further block of a LOAD DATA file."""

    file_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class BeginLoadQueryEvent(AppendBlockEvent):
    """BEGIN_LOAD_QUERY_EVENT (17): the first block of a LOAD DATA file (same layout)."""


@dataclass(frozen=True, slots=True)
class DeleteFileEvent(BinlogEvent):
    """DELETE_FILE_EVENT (11): the LOAD DATA file is no longer needed."""

    file_id: int


@dataclass(frozen=True, slots=True)
class IncidentEvent(BinlogEvent):
    """INCIDENT_EVENT (26): something happened on the source the binlog cannot show (gap)."""

    incident: int
    message: str


@dataclass(frozen=True, slots=True)
class HeartbeatEvent(BinlogEvent):
    """HEARTBEAT (27) / HEARTBEAT_V2 (41): the source is alive; no new events.

    ``position`` is the source's position in ``file`` (v1: the header's log_pos). Heartbeats
    are not in the binlog and never move the stream position.
    """

    file: str
    position: int


@dataclass(frozen=True, slots=True)
class AnnotateRowsEvent(BinlogEvent):
    """ANNOTATE_ROWS_EVENT (160, MariaDB): the statement that produced the following rows.

    The statement's bytes are kept as logged and decoded when :attr:`query` is asked for:
    the daemon receives one per transaction (MariaDB 11.4+, or when asked for) and reads none.
    """

    text: bytes

    @property
    def query(self) -> str:
        """The statement (UTF-8; bytes that are not, as U+FFFD)."""
        return self.text.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class RowsQueryEvent(BinlogEvent):
    """ROWS_QUERY_LOG_EVENT (29, MySQL): the statement that produced the following rows."""

    query: str


@dataclass(frozen=True, slots=True)
class BinlogCheckpointEvent(BinlogEvent):
    """BINLOG_CHECKPOINT_EVENT (161, MariaDB): XA crash recovery may start from ``file``."""

    file: str


# --- GTIDs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class XaXid:
    """An XA transaction id: format id, global transaction id and branch qualifier."""

    format_id: int
    gtrid: bytes
    bqual: bytes

    def __str__(self) -> str:
        return f"X'{self.gtrid.hex()}',X'{self.bqual.hex()}',{self.format_id}"


@dataclass(frozen=True, slots=True)
class MariadbGtidEvent(BinlogEvent):
    """GTID_EVENT (162, MariaDB): starts an event group; ``domain-server-seq``.

    ``server_id`` is the header's. Flags: see the ``FL_*`` constants. ``flags_extra`` and what
    follows it are present from MariaDB 10.8 (multi-engine, ALTER phases, thread id).
    """

    FL_STANDALONE = 0x01
    FL_GROUP_COMMIT_ID = 0x02
    FL_TRANSACTIONAL = 0x04
    FL_ALLOW_PARALLEL = 0x08
    FL_WAITED = 0x10
    FL_DDL = 0x20
    FL_PREPARED_XA = 0x40
    FL_COMPLETED_XA = 0x80

    FL_EXTRA_MULTI_ENGINE = 0x01
    FL_START_ALTER = 0x02
    FL_COMMIT_ALTER = 0x04
    FL_ROLLBACK_ALTER = 0x08
    FL_EXTRA_THREAD_ID = 0x10

    domain_id: int
    server_id: int
    seq_no: int
    flags: int
    commit_id: int | None = None
    xid: XaXid | None = None
    flags_extra: int = 0
    extra_engines: int | None = None
    sa_seq_no: int | None = None
    thread_id: int | None = None

    @property
    def standalone(self) -> bool:
        return bool(self.flags & self.FL_STANDALONE)

    @property
    def is_ddl(self) -> bool:
        return bool(self.flags & self.FL_DDL)

    @property
    def is_xa(self) -> bool:
        return bool(self.flags & (self.FL_PREPARED_XA | self.FL_COMPLETED_XA))

    def __str__(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"


@dataclass(frozen=True, slots=True)
class GtidListEvent(BinlogEvent):
    """GTID_LIST_EVENT (163, MariaDB): the binlog state (last GTID per domain and server)."""

    gtids: tuple[tuple[int, int, int], ...]  # (domain_id, server_id, seq_no)
    flags: int  # the top 4 bits of the count word (UNTIL_REACHED 1, IGN_GTIDS 2)


@dataclass(frozen=True, slots=True)
class StartEncryptionEvent(BinlogEvent):
    """START_ENCRYPTION_EVENT (164, MariaDB): the following events of the file are encrypted."""

    scheme: int
    key_version: int
    nonce: bytes


@dataclass(frozen=True, slots=True)
class XaPrepareEvent(BinlogEvent):
    """XA_PREPARE_LOG_EVENT (38): ``XA PREPARE`` (or ``XA COMMIT … ONE PHASE``) of ``xid``."""

    one_phase: bool
    xid: XaXid


@dataclass(frozen=True, slots=True)
class MysqlGtidEvent(BinlogEvent):
    """GTID (33), ANONYMOUS_GTID (34) and GTID_TAGGED (42) of MySQL: starts a transaction.

    Commit timestamps are microseconds since the epoch (UTC), ``None`` from servers older than
    8.0. ``uuid`` is the source's server uuid (all zeros for anonymous transactions).
    """

    FLAG_MAY_HAVE_SBR = 0x01

    anonymous: bool
    tagged: bool
    flags: int
    uuid: uuid.UUID
    tag: str
    gno: int
    last_committed: int | None = None
    sequence_number: int | None = None
    immediate_commit_timestamp: int | None = None
    original_commit_timestamp: int | None = None
    transaction_length: int | None = None
    immediate_server_version: int | None = None
    original_server_version: int | None = None
    commit_group_ticket: int | None = None

    def __str__(self) -> str:
        if self.anonymous:
            return "ANONYMOUS"
        return f"{self.uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.uuid}:{self.gno}"


@dataclass(frozen=True, slots=True)
class PreviousGtidsEvent(BinlogEvent):
    """PREVIOUS_GTIDS_LOG_EVENT (35): the GTIDs of all earlier binlog files.

    ``sids`` lists ``(uuid, tag, intervals)`` with inclusive ``(first, last)`` intervals;
    ``encoded`` is the server's Gtid_set encoding verbatim.
    """

    sids: tuple[tuple[uuid.UUID, str, tuple[tuple[int, int], ...]], ...]
    encoded: bytes


@dataclass(frozen=True, slots=True)
class TransactionPayloadEvent(BinlogEvent):
    """TRANSACTION_PAYLOAD_EVENT (40, MySQL): a compressed run of the transaction's events.

    ``payload`` is still compressed (``compression`` 0 = zstd, 255 = none); the stream unwraps
    it with :func:`protocol.binlog.compression.unwrap_transaction_payload` and decodes the inner
    events, which follow this event in the stream output.
    """

    compression: int
    payload_size: int
    uncompressed_size: int | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class IgnorableEvent(BinlogEvent):
    """An event binlake does not interpret but that its server flagged LOG_EVENT_IGNORABLE_F
    (or MySQL's IGNORABLE_LOG_EVENT). Surfaced, never dropped."""

    body: bytes


@dataclass(frozen=True, slots=True)
class OpaqueEvent(BinlogEvent):
    """A known event kept as raw bytes: group replication bookkeeping (TRANSACTION_CONTEXT,
    VIEW_CHANGE) that carries no row data."""

    body: bytes


# Every event above is built once per binlog event: give each the faster __init__ (same
# instances; see protocol/frozen.py).
for _event_class in list(globals().values()):
    if (isinstance(_event_class, type) and _event_class.__module__ == __name__
            and dataclasses.is_dataclass(_event_class)):
        fast_init(_event_class)

# The three built once per transaction, with every field: in C when the extension is there.
_make_gtid = positional_maker(MariadbGtidEvent)
_make_xid = positional_maker(XidEvent)
_make_annotate = positional_maker(AnnotateRowsEvent)


# --- helpers -------------------------------------------------------------------------------------

_LATIN1_COLLATIONS = frozenset({5, 8, 15, 31, 47, 48, 49, 94})
_ASCII_COLLATIONS = frozenset({11, 65})


def _text(raw: bytes, collation: int | None = None) -> str:
    if collation in _LATIN1_COLLATIONS:
        # MySQL's latin1 is Windows-1252; five bytes cp1252 leaves undefined map 1:1 in latin-1.
        return raw.decode("cp1252", errors="replace")
    if collation in _ASCII_COLLATIONS:
        return raw.decode("ascii", errors="replace")
    return raw.decode("utf-8", errors="replace")


def _version_split(version: str) -> tuple[int, int, int]:
    parts: list[int] = []
    for piece in version.split("-", 1)[0].split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def _post_header_len(fde: FormatDescriptionEvent | None, type_code: int) -> int:
    if fde is None:
        return _DEFAULT_POST_HEADER.get(type_code, 0)
    return fde.post_header_len(type_code)


# --- decoders --------------------------------------------------------------------------------

_FDE_FIXED = 2 + 50 + 4 + 1  # binlog version, server version, create time, header length
# Servers that write the checksum algorithm byte in the FDE: MariaDB 5.3+, MySQL 5.6.1+.
_CHECKSUM_VERSION_MYSQL = (5, 6, 1)
_CHECKSUM_VERSION_MARIADB = (5, 3, 0)


def decode_format_description(header: EventHeader, body: bytes | memoryview,
                              fde: FormatDescriptionEvent | None = None) -> FormatDescriptionEvent:
    """FDE body: fixed part, post-header lengths, then (modern servers) alg byte + CRC room.

    ``body`` is the whole body *including* the 4 trailing checksum bytes: an FDE of a
    checksum-aware server always has them, whatever the algorithm, and the algorithm is only
    known once this body is parsed. The caller verifies the CRC when ``checksum_alg`` is CRC32.
    """
    cur = Cursor(body)
    binlog_version = cur.u16("binlog version")
    server_version = cur.take(50, "server version").split(b"\0", 1)[0].decode("ascii", "replace")
    create_timestamp = cur.u32("create timestamp")
    header_length = cur.u8("header length")
    if binlog_version != 4:
        raise MalformedPacket(f"binlog version {binlog_version} is not supported (only 4)")
    if header_length < 19:
        raise MalformedPacket(f"FORMAT_DESCRIPTION header length {header_length} < 19")
    version = _version_split(server_version)
    floor = (_CHECKSUM_VERSION_MARIADB if "mariadb" in server_version.lower()
             else _CHECKSUM_VERSION_MYSQL)
    if version >= floor:
        if cur.remaining < 5:
            raise MalformedPacket("FORMAT_DESCRIPTION too short for its checksum algorithm")
        post = cur.take(cur.remaining - 5, "post-header lengths")
        alg = cur.u8("checksum algorithm")
        if alg not in (0, 1, 255):
            raise MalformedPacket(f"unknown binlog checksum algorithm {alg}")
    else:
        post = cur.rest()
        alg = ChecksumAlg.UNDEF
    return FormatDescriptionEvent(header, binlog_version, server_version, create_timestamp,
                                  header_length, post, alg)


def decode_rotate(header: EventHeader, body: bytes | memoryview,
                  fde: FormatDescriptionEvent | None = None) -> RotateEvent:
    cur = Cursor(body)
    if _post_header_len(fde, 4):
        position = cur.u64("rotate position")
        cur.skip(_post_header_len(fde, 4) - 8)
    else:
        position = 4
    name = cur.rest()
    if not name:
        raise MalformedPacket("ROTATE without a file name")
    return RotateEvent(header, position, _text(name))


def decode_stop(header: EventHeader, body: bytes | memoryview,
                fde: FormatDescriptionEvent | None = None) -> StopEvent:
    return StopEvent(header)


def _parse_status_vars(cur: Cursor) -> QueryStatus:
    """Status variables from ``cur`` up to its end (the caller bounds it by status_vars_len)."""
    values: dict[str, object] = {}
    while cur.remaining:
        start = cur.pos
        code = cur.u8("status variable code")
        if code == 0:
            values["flags2"] = cur.u32("Q_FLAGS2")
        elif code == 1:
            values["sql_mode"] = cur.u64("Q_SQL_MODE")
        elif code == 2:  # Q_CATALOG_CODE (5.0.0-3): length, text, NUL
            length = cur.u8("Q_CATALOG")
            values["catalog"] = _text(cur.take(length, "Q_CATALOG"))
            cur.skip(1, "Q_CATALOG terminator")
        elif code == 3:
            values["auto_increment_increment"] = cur.u16("Q_AUTO_INCREMENT")
            values["auto_increment_offset"] = cur.u16("Q_AUTO_INCREMENT")
        elif code == 4:
            values["charset_client"] = cur.u16("Q_CHARSET")
            values["collation_connection"] = cur.u16("Q_CHARSET")
            values["collation_server"] = cur.u16("Q_CHARSET")
        elif code == 5:
            values["time_zone"] = _text(cur.take(cur.u8("Q_TIME_ZONE"), "Q_TIME_ZONE"))
        elif code == 6:
            values["catalog"] = _text(cur.take(cur.u8("Q_CATALOG_NZ"), "Q_CATALOG_NZ"))
        elif code == 7:
            values["lc_time_names"] = cur.u16("Q_LC_TIME_NAMES")
        elif code == 8:
            values["charset_database"] = cur.u16("Q_CHARSET_DATABASE")
        elif code == 9:
            values["table_map_for_update"] = cur.u64("Q_TABLE_MAP_FOR_UPDATE")
        elif code == 10:
            values["master_data_written"] = cur.u32("Q_MASTER_DATA_WRITTEN")
        elif code == 11:
            values["invoker_user"] = _text(cur.take(cur.u8("Q_INVOKER"), "Q_INVOKER user"))
            values["invoker_host"] = _text(cur.take(cur.u8("Q_INVOKER"), "Q_INVOKER host"))
        elif code == 12:
            count = cur.u8("Q_UPDATED_DB_NAMES")
            names: list[str] = []
            if count != 254:  # OVER_MAX_DBS_IN_EVENT_MTS: no names follow
                for _ in range(count):
                    names.append(_text(cur.nul_terminated("Q_UPDATED_DB_NAMES")))
            values["updated_db_names"] = tuple(names)
        elif code == 13:
            values["microseconds"] = cur.uint(3, "Q_MICROSECONDS")
        elif code == 16:
            values["explicit_defaults_for_timestamp"] = cur.u8("Q_EXPLICIT_DEFAULTS")
        elif code == 17:
            values["ddl_logged_with_xid"] = cur.u64("Q_DDL_LOGGED_WITH_XID")
        elif code == 18:
            values["default_collation_for_utf8mb4"] = cur.u16("Q_DEFAULT_COLLATION")
        elif code == 19:
            values["sql_require_primary_key"] = cur.u8("Q_SQL_REQUIRE_PRIMARY_KEY")
        elif code == 20:
            values["default_table_encryption"] = cur.u8("Q_DEFAULT_TABLE_ENCRYPTION")
        elif code == 128:
            values["hrnow"] = cur.uint(3, "Q_HRNOW")
        elif code == 129:
            values["xid"] = cur.u64("Q_XID")
        elif code == 130:
            flags3 = cur.u8("Q_GTID_FLAGS3")
            values["gtid_flags3"] = flags3
            if flags3 & (MariadbGtidEvent.FL_COMMIT_ALTER | MariadbGtidEvent.FL_ROLLBACK_ALTER):
                values["sa_seq_no"] = cur.u64("Q_GTID_FLAGS3 sa_seq_no")
        elif code == 131:
            count = cur.u8("Q_CHARACTER_SET_COLLATIONS")
            values["character_set_collations"] = tuple(
                (cur.u16("Q_CHARACTER_SET_COLLATIONS"), cur.u16("Q_CHARACTER_SET_COLLATIONS"))
                for _ in range(count))
        else:
            cur.pos = start
            values["unparsed"] = cur.rest()
            break
    return QueryStatus(**values)  # type: ignore[arg-type]


def _query_common(body: bytes | memoryview, post_header_len: int
                  ) -> tuple[int, int, int, QueryStatus, Cursor, int, Cursor]:
    cur = Cursor(body)
    thread_id = cur.u32("thread id")
    exec_time = cur.u32("exec time")
    schema_len = cur.u8("schema length")
    error_code = cur.u16("error code")
    status_len = cur.u16("status vars length")
    fixed = Cursor(body, cur.pos, max(cur.pos, min(post_header_len, len(body))))
    cur.pos = max(post_header_len, cur.pos)
    if cur.pos > cur.end:
        raise MalformedPacket("QUERY post-header longer than the event")
    status_end = cur.pos + status_len
    if status_end > cur.end:
        raise MalformedPacket(
            f"QUERY status vars length {status_len} exceeds the event ({cur.remaining} left)")
    status = _parse_status_vars(Cursor(body, cur.pos, status_end))
    cur.pos = status_end
    return thread_id, exec_time, error_code, status, cur, schema_len, fixed


def _schema_and_query(cur: Cursor, schema_len: int, status: QueryStatus
                      ) -> tuple[str, memoryview]:
    schema = _text(cur.take(schema_len, "schema name"))
    if cur.u8("schema terminator") != 0:
        raise MalformedPacket("QUERY schema name is not NUL-terminated")
    return schema, cur.view(cur.remaining, "query")


def decode_query(header: EventHeader, body: bytes | memoryview,
                 fde: FormatDescriptionEvent | None = None,
                 max_decompressed_size: int = MAX_DECOMPRESSED_SIZE) -> QueryEvent:
    """QUERY / QUERY_COMPRESSED; the latter's text inflates to at most
    ``max_decompressed_size`` bytes."""
    thread_id, exec_time, error_code, status, cur, schema_len, _ = _query_common(
        body, _post_header_len(fde, header.type_code))
    schema, raw = _schema_and_query(cur, schema_len, status)
    compressed = header.type_code == EventType.QUERY_COMPRESSED
    if compressed:
        query_bytes = decompress_block(raw, max_decompressed_size)
    else:
        query_bytes = bytes(raw)
    return QueryEvent(header, thread_id, exec_time, error_code, schema,
                      _text(query_bytes, status.charset_client), status, compressed)


def decode_execute_load_query(header: EventHeader, body: bytes | memoryview,
                              fde: FormatDescriptionEvent | None = None
                              ) -> ExecuteLoadQueryEvent:
    post = _post_header_len(fde, 18)
    thread_id, exec_time, error_code, status, cur, schema_len, fixed = _query_common(body, post)
    file_id = fixed.u32("file id")
    fn_start = fixed.u32("filename start")
    fn_end = fixed.u32("filename end")
    dup = fixed.u8("duplicate handling")
    schema, raw = _schema_and_query(cur, schema_len, status)
    return ExecuteLoadQueryEvent(header, thread_id, exec_time, error_code, schema,
                                 _text(bytes(raw), status.charset_client), status, file_id,
                                 fn_start, fn_end, dup)


def decode_xid(header: EventHeader, body: bytes | memoryview,
               fde: FormatDescriptionEvent | None = None) -> XidEvent:
    if len(body) >= 8:  # one per transaction: the 8 bytes at once
        xid: int = _U64.unpack_from(body)[0]
        return _make_xid(header, xid)
    return XidEvent(header, Cursor(body).u64("xid"))


def decode_intvar(header: EventHeader, body: bytes | memoryview,
                  fde: FormatDescriptionEvent | None = None) -> IntvarEvent:
    cur = Cursor(body)
    return IntvarEvent(header, cur.u8("intvar type"), cur.u64("intvar value"))


def decode_rand(header: EventHeader, body: bytes | memoryview,
                fde: FormatDescriptionEvent | None = None) -> RandEvent:
    cur = Cursor(body)
    return RandEvent(header, cur.u64("rand seed1"), cur.u64("rand seed2"))


def decode_user_var(header: EventHeader, body: bytes | memoryview,
                    fde: FormatDescriptionEvent | None = None) -> UserVarEvent:
    cur = Cursor(body)
    name = _text(cur.take(cur.u32("user var name length"), "user var name"))
    is_null = bool(cur.u8("user var null flag"))
    if is_null:
        return UserVarEvent(header, name, True, None, None, None, 0)
    value_type = cur.u8("user var type")
    charset = cur.u32("user var charset")
    raw = cur.take(cur.u32("user var value length"), "user var value")
    flags = cur.u8("user var flags") if cur.remaining else 0
    value: int | float | bytes = raw
    if value_type == 2 and len(raw) == 8:  # INT_RESULT
        value = int.from_bytes(raw, "little", signed=not flags & 1)
    elif value_type == 1 and len(raw) == 8:  # REAL_RESULT
        value = Cursor(raw).f64()
    return UserVarEvent(header, name, False, value_type, charset, value, flags)


def decode_append_block(header: EventHeader, body: bytes | memoryview,
                        fde: FormatDescriptionEvent | None = None) -> AppendBlockEvent:
    """APPEND_BLOCK and BEGIN_LOAD_QUERY: a file id, then the block."""
    cur = Cursor(body)
    cls = BeginLoadQueryEvent if header.type_code == EventType.BEGIN_LOAD_QUERY else AppendBlockEvent
    return cls(header, cur.u32("file id"), cur.rest())


def decode_delete_file(header: EventHeader, body: bytes | memoryview,
                       fde: FormatDescriptionEvent | None = None) -> DeleteFileEvent:
    return DeleteFileEvent(header, Cursor(body).u32("file id"))


def decode_incident(header: EventHeader, body: bytes | memoryview,
                    fde: FormatDescriptionEvent | None = None) -> IncidentEvent:
    cur = Cursor(body)
    incident = cur.u16("incident number")
    message = _text(cur.take(cur.u8("incident message length"), "incident message"))
    return IncidentEvent(header, incident, message)


def decode_heartbeat(header: EventHeader, body: bytes | memoryview,
                     fde: FormatDescriptionEvent | None = None) -> HeartbeatEvent:
    return HeartbeatEvent(header, _text(bytes(body)), header.log_pos)


def decode_heartbeat_v2(header: EventHeader, body: bytes | memoryview,
                        fde: FormatDescriptionEvent | None = None) -> HeartbeatEvent:
    cur = Cursor(body)
    file, position = "", header.log_pos
    while cur.remaining:
        field = cur.lenenc("heartbeat field type")
        if field == 0:  # end of the TLV header
            break
        length = cur.lenenc("heartbeat field length")
        if field == 1:
            file = _text(cur.take(length, "heartbeat log filename"))
        elif field == 2:
            position = Cursor(cur.view(length, "heartbeat log position")).lenenc()
        else:
            cur.skip(length, "heartbeat field")
    return HeartbeatEvent(header, file, position)


def decode_annotate_rows(header: EventHeader, body: bytes | memoryview,
                         fde: FormatDescriptionEvent | None = None) -> AnnotateRowsEvent:
    return _make_annotate(header, bytes(body))


def decode_rows_query(header: EventHeader, body: bytes | memoryview,
                      fde: FormatDescriptionEvent | None = None) -> RowsQueryEvent:
    cur = Cursor(body)
    cur.skip(1, "rows query length")  # a 1-byte length, truncated at 255: the rest is the text
    return RowsQueryEvent(header, _text(cur.rest()))


def decode_binlog_checkpoint(header: EventHeader, body: bytes | memoryview,
                             fde: FormatDescriptionEvent | None = None) -> BinlogCheckpointEvent:
    cur = Cursor(body)
    return BinlogCheckpointEvent(header, _text(cur.take(cur.u32("file name length"), "file name")))


def _xa_xid(cur: Cursor, gtrid_len: int, bqual_len: int, format_id: int) -> XaXid:
    if gtrid_len > 64 or bqual_len > 64:
        raise MalformedPacket(f"XA xid lengths {gtrid_len}/{bqual_len} exceed 64")
    return XaXid(format_id, cur.take(gtrid_len, "XA gtrid"), cur.take(bqual_len, "XA bqual"))


_GTID_HEAD = struct.Struct("<QIB")  # seq_no, domain_id, flags
_U64 = struct.Struct("<Q")
_GTID_PLAIN_MAX = 19  # the zero-padded fixed part: no commit id, XA id or flags_extra
_GTID_HAS_MORE = (MariadbGtidEvent.FL_GROUP_COMMIT_ID | MariadbGtidEvent.FL_PREPARED_XA
                  | MariadbGtidEvent.FL_COMPLETED_XA)


def decode_mariadb_gtid(header: EventHeader, body: bytes | memoryview,
                        fde: FormatDescriptionEvent | None = None) -> MariadbGtidEvent:
    if _GTID_HEAD.size <= len(body) <= _GTID_PLAIN_MAX:
        # One per transaction: the common plain GTID in one unpack rather than field by field.
        seq_no, domain_id, flags = _GTID_HEAD.unpack_from(body)
        if not flags & _GTID_HAS_MORE:
            return _make_gtid(header, domain_id, header.server_id, seq_no, flags, None, None,
                              0, None, None, None)
    cur = Cursor(body)
    seq_no = cur.u64("GTID seq_no")
    domain_id = cur.u32("GTID domain id")
    flags = cur.u8("GTID flags")
    commit_id = xid = extra_engines = sa_seq_no = thread_id = None
    if flags & MariadbGtidEvent.FL_GROUP_COMMIT_ID:
        commit_id = cur.u64("GTID commit id")
    if flags & (MariadbGtidEvent.FL_PREPARED_XA | MariadbGtidEvent.FL_COMPLETED_XA):
        format_id = cur.u32("XA format id")
        gtrid_len = cur.u8("XA gtrid length")
        bqual_len = cur.u8("XA bqual length")
        xid = _xa_xid(cur, gtrid_len, bqual_len, format_id)
    # Without commit id / XA the fixed part is zero-padded to 19 bytes, so the padding reads as
    # flags_extra = 0; with them, flags_extra is present only if bytes remain (10.8+).
    if commit_id is None and xid is None:
        cur.skip(min(6, cur.remaining))
    flags_extra = cur.u8("GTID flags_extra") if cur.remaining else 0
    if flags_extra & MariadbGtidEvent.FL_EXTRA_MULTI_ENGINE:
        extra_engines = cur.u8("GTID extra engines")
    if flags_extra & (MariadbGtidEvent.FL_COMMIT_ALTER | MariadbGtidEvent.FL_ROLLBACK_ALTER):
        sa_seq_no = cur.u64("GTID sa_seq_no")
    if flags_extra & MariadbGtidEvent.FL_EXTRA_THREAD_ID:
        thread_id = cur.u32("GTID thread id")  # 4 bytes, as MariaDB 11.8 writes it
    return MariadbGtidEvent(header, domain_id, header.server_id, seq_no, flags, commit_id, xid,
                            flags_extra, extra_engines, sa_seq_no, thread_id)


def decode_gtid_list(header: EventHeader, body: bytes | memoryview,
                     fde: FormatDescriptionEvent | None = None) -> GtidListEvent:
    cur = Cursor(body)
    word = cur.u32("GTID list count")
    count, flags = word & 0x0FFFFFFF, word >> 28
    if count * 16 > cur.remaining:
        raise MalformedPacket(f"GTID list of {count} entries exceeds the event")
    gtids = tuple((cur.u32(), cur.u32(), cur.u64()) for _ in range(count))
    return GtidListEvent(header, gtids, flags)


def decode_start_encryption(header: EventHeader, body: bytes | memoryview,
                            fde: FormatDescriptionEvent | None = None) -> StartEncryptionEvent:
    cur = Cursor(body)
    return StartEncryptionEvent(header, cur.u8("encryption scheme"), cur.u32("key version"),
                                cur.take(12, "nonce"))


def decode_xa_prepare(header: EventHeader, body: bytes | memoryview,
                      fde: FormatDescriptionEvent | None = None) -> XaPrepareEvent:
    cur = Cursor(body)
    one_phase = bool(cur.u8("XA one phase"))
    format_id = cur.u32("XA format id")
    gtrid_len = cur.u32("XA gtrid length")
    bqual_len = cur.u32("XA bqual length")
    return XaPrepareEvent(header, one_phase, _xa_xid(cur, gtrid_len, bqual_len, format_id))


# MySQL GTID events: fixed fields, then optional groups that older servers omit.
_LOGICAL_TIMESTAMP_TYPECODE = 2


def decode_mysql_gtid(header: EventHeader, body: bytes | memoryview,
                      fde: FormatDescriptionEvent | None = None) -> MysqlGtidEvent:
    if header.type_code == EventType.GTID_TAGGED:
        return _decode_gtid_tagged(header, body)
    cur = Cursor(body)
    flags = cur.u8("GTID flags")
    sid = uuid.UUID(bytes=cur.take(16, "GTID uuid"))
    gno = cur.i64("GTID gno")
    anonymous = header.type_code == EventType.ANONYMOUS_GTID
    fields: dict[str, int | None] = {}
    if cur.remaining >= 17 and cur.u8("logical clock type") == _LOGICAL_TIMESTAMP_TYPECODE:
        fields["last_committed"] = cur.i64("last_committed")
        fields["sequence_number"] = cur.i64("sequence_number")
        if cur.remaining >= 7:
            immediate = cur.uint(7, "immediate commit timestamp")
            original = immediate
            if immediate & (1 << 55):
                immediate &= ~(1 << 55)
                original = cur.uint(7, "original commit timestamp")
            fields["immediate_commit_timestamp"] = immediate
            fields["original_commit_timestamp"] = original
            if cur.remaining >= 1:
                fields["transaction_length"] = cur.lenenc("transaction length")
            if cur.remaining >= 4:
                immediate_version = cur.u32("immediate server version")
                original_version = immediate_version
                if immediate_version & (1 << 31):
                    immediate_version &= ~(1 << 31)
                    original_version = cur.u32("original server version")
                fields["immediate_server_version"] = immediate_version
                fields["original_server_version"] = original_version
                if cur.remaining >= 8:
                    fields["commit_group_ticket"] = cur.u64("commit group ticket")
    return MysqlGtidEvent(header, anonymous, False, flags, sid, "", gno, **fields)


def _read_varlen(cur: Cursor, what: str) -> int:
    """mysql::serialization unsigned variable-length integer (1–9 bytes, little-endian).

    The number of trailing one bits in the first byte, plus one, is the byte count.
    """
    first = cur.u8(what)
    size = 1
    while size < 9 and first & (1 << (size - 1)):
        size += 1
    if size == 1:
        return first >> 1
    rest = cur.uint(size - 1, what)
    if size == 9:
        return rest
    return (first >> size) | (rest << (8 - size))


def _read_varlen_signed(cur: Cursor, what: str) -> int:
    raw = _read_varlen(cur, what)
    return -(raw >> 1) - 1 if raw & 1 else raw >> 1


def _decode_gtid_tagged(header: EventHeader, body: bytes | memoryview) -> MysqlGtidEvent:
    """GTID_TAGGED_LOG_EVENT (42): a mysql::serialization message.

    Message: format version (varlen id), total size, last non-ignorable field id, then fields
    as (field id, value) in id order; optional fields may be missing. Field ids: 0 flags,
    1 uuid (16 varlen bytes), 2 gno (signed), 3 tag (string), 4 last_committed, 5
    sequence_number, 6 immediate commit ts, 7 original commit ts, 8 transaction length,
    9 immediate server version, 10 original server version, 11 commit group ticket.
    """
    cur = Cursor(body)
    _read_varlen(cur, "serialization version")
    size = _read_varlen(cur, "message size")
    if size > len(body):
        raise MalformedPacket(f"GTID_TAGGED message size {size} exceeds the event")
    cur.end = size
    last_non_ignorable = _read_varlen(cur, "last non-ignorable field")
    if last_non_ignorable > 12:
        raise MalformedPacket(f"GTID_TAGGED has unknown non-ignorable field {last_non_ignorable}")
    values: dict[int, object] = {}
    while cur.remaining:
        field_id = _read_varlen(cur, "field id")
        if field_id == 1:
            values[1] = bytes(_read_varlen(cur, "uuid byte") & 0xFF for _ in range(16))
        elif field_id == 3:
            values[3] = _text(cur.take(_read_varlen(cur, "tag length"), "tag"))
        elif field_id in (2, 4, 5):
            values[field_id] = _read_varlen_signed(cur, "signed field")
        elif field_id <= 11:
            values[field_id] = _read_varlen(cur, "field")
        else:
            break  # ignorable fields of a newer server: skip to the end of the message
    if 1 not in values or 2 not in values:
        raise MalformedPacket("GTID_TAGGED without uuid or gno")

    def num(field_id: int) -> int | None:
        value = values.get(field_id)
        return value if isinstance(value, int) else None

    immediate = num(6)
    original = num(7) if 7 in values else immediate
    immediate_version = num(9)
    original_version = num(10) if 10 in values else immediate_version
    tag = values.get(3, "")
    uuid_bytes = values[1]
    if not isinstance(uuid_bytes, bytes) or not isinstance(tag, str):  # pragma: no cover
        raise MalformedPacket("GTID_TAGGED uuid or tag of the wrong type")
    return MysqlGtidEvent(header, False, True, num(0) or 0, uuid.UUID(bytes=uuid_bytes), tag,
                          num(2) or 0, num(4), num(5), immediate, original, num(8),
                          immediate_version, original_version, num(11))


def decode_previous_gtids(header: EventHeader, body: bytes | memoryview,
                          fde: FormatDescriptionEvent | None = None) -> PreviousGtidsEvent:
    """Gtid_set binary v0 (untagged) or v1 (tagged: first byte 1, 6-byte count, byte 1)."""
    cur = Cursor(body)
    word = cur.u64("GTID set header")
    tagged = (word & 0xFF) == 1 and (word >> 56) == 1
    count = (word >> 8) & 0xFFFFFFFFFFFF if tagged else word & 0xFFFFFFFFFFFFFF
    if count * 24 > cur.remaining:
        raise MalformedPacket(f"GTID set of {count} sids exceeds the event")
    sids = []
    for _ in range(count):
        sid = uuid.UUID(bytes=cur.take(16, "sid"))
        tag = _text(cur.take(_read_varlen(cur, "tag length"), "tag")) if tagged else ""
        n_intervals = cur.u64("interval count")
        if n_intervals * 16 > cur.remaining:
            raise MalformedPacket(f"GTID set of {n_intervals} intervals exceeds the event")
        intervals = tuple((cur.i64("interval start"), cur.i64("interval end") - 1)
                          for _ in range(n_intervals))
        sids.append((sid, tag, intervals))
    return PreviousGtidsEvent(header, tuple(sids), bytes(body))


def decode_transaction_payload(header: EventHeader, body: bytes | memoryview,
                               fde: FormatDescriptionEvent | None = None
                               ) -> TransactionPayloadEvent:
    """TLV header (lenenc type, lenenc length, value) until type 0, then the payload."""
    cur = Cursor(body)
    compression = payload_size = None
    uncompressed_size = None
    while True:
        field = cur.lenenc("payload field type")
        if field == 0:
            break
        length = cur.lenenc("payload field length")
        value_cur = Cursor(cur.view(length, "payload field"))
        if field == 1:
            payload_size = value_cur.lenenc("payload size")
        elif field == 2:
            compression = value_cur.lenenc("compression type")
        elif field == 3:
            uncompressed_size = value_cur.lenenc("uncompressed size")
    if payload_size is None or compression is None:
        raise MalformedPacket("TRANSACTION_PAYLOAD without payload size or compression type")
    if payload_size > cur.remaining:
        raise MalformedPacket(
            f"TRANSACTION_PAYLOAD size {payload_size} exceeds the event ({cur.remaining} left)")
    return TransactionPayloadEvent(header, compression, payload_size, uncompressed_size,
                                   cur.take(payload_size, "payload"))


def decode_ignorable(header: EventHeader, body: bytes | memoryview,
                     fde: FormatDescriptionEvent | None = None) -> IgnorableEvent:
    return IgnorableEvent(header, bytes(body))


def decode_opaque(header: EventHeader, body: bytes | memoryview,
                  fde: FormatDescriptionEvent | None = None) -> OpaqueEvent:
    return OpaqueEvent(header, bytes(body))


Decoder = Callable[[EventHeader, bytes | memoryview, "FormatDescriptionEvent | None"],
                   BinlogEvent]

DECODERS: dict[int, Decoder] = {
    EventType.QUERY: decode_query,
    EventType.STOP: decode_stop,
    EventType.ROTATE: decode_rotate,
    EventType.INTVAR: decode_intvar,
    EventType.APPEND_BLOCK: decode_append_block,
    EventType.DELETE_FILE: decode_delete_file,
    EventType.RAND: decode_rand,
    EventType.USER_VAR: decode_user_var,
    EventType.FORMAT_DESCRIPTION: decode_format_description,
    EventType.XID: decode_xid,
    EventType.BEGIN_LOAD_QUERY: decode_append_block,
    EventType.EXECUTE_LOAD_QUERY: decode_execute_load_query,
    EventType.INCIDENT: decode_incident,
    EventType.HEARTBEAT: decode_heartbeat,
    EventType.IGNORABLE: decode_ignorable,
    EventType.ROWS_QUERY: decode_rows_query,
    EventType.GTID: decode_mysql_gtid,
    EventType.ANONYMOUS_GTID: decode_mysql_gtid,
    EventType.PREVIOUS_GTIDS: decode_previous_gtids,
    EventType.TRANSACTION_CONTEXT: decode_opaque,
    EventType.VIEW_CHANGE: decode_opaque,
    EventType.XA_PREPARE: decode_xa_prepare,
    EventType.TRANSACTION_PAYLOAD: decode_transaction_payload,
    EventType.HEARTBEAT_V2: decode_heartbeat_v2,
    EventType.GTID_TAGGED: decode_mysql_gtid,
    EventType.ANNOTATE_ROWS: decode_annotate_rows,
    EventType.BINLOG_CHECKPOINT: decode_binlog_checkpoint,
    EventType.MARIADB_GTID: decode_mariadb_gtid,
    EventType.GTID_LIST: decode_gtid_list,
    EventType.START_ENCRYPTION: decode_start_encryption,
    EventType.QUERY_COMPRESSED: decode_query,
}


_QUERY_COMPRESSED = int(EventType.QUERY_COMPRESSED)


def decode_event(header: EventHeader, body: bytes | memoryview,
                 fde: FormatDescriptionEvent | None = None,
                 max_decompressed_size: int = MAX_DECOMPRESSED_SIZE) -> BinlogEvent:
    """Decode a non-row event by its type code; a compressed one (QUERY_COMPRESSED) inflates to
    at most ``max_decompressed_size`` bytes.

    Raises:
        UnknownEventType: a type with no decoder and without LOG_EVENT_IGNORABLE_F.
        EventDecodeError: the body does not match the type's layout (names type, file, pos).
    """
    type_code = header.type_code
    decoder = DECODERS.get(type_code)
    if decoder is None:
        if header.flags & 0x80:  # LOG_EVENT_IGNORABLE_F
            return decode_ignorable(header, body)
        raise UnknownEventType("unknown binlog event type", type_code=type_code,
                               file=header.file, position=header.position)
    try:
        if type_code == _QUERY_COMPRESSED:  # a plain int: IntEnum comparisons cost more
            return decode_query(header, body, fde, max_decompressed_size)
        return decoder(header, body, fde)
    except EventDecodeError:
        raise
    except MalformedPacket as exc:
        raise EventDecodeError(str(exc), type_code=header.type_code, file=header.file,
                               position=header.position) from exc
