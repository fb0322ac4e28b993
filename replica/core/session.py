"""One replication session: register on the server as a replica and stream its binlog.

:meth:`ReplicationSession.start` takes an open :class:`~replica.core.connection.Connection` and does
what a MariaDB replica does, in the same order (see ``protocol.replication``):

1. ``SELECT UNIX_TIMESTAMP()`` (clock offset) and the server's variables, refusing servers that
   cannot work (no binlog, not ROW, our server_id is theirs) with actionable errors;
2. the registration statements (heartbeat period, checksum awareness, GTID capability and, for
   a MariaDB GTID start, ``@slave_connect_state``);
3. ``COM_REGISTER_SLAVE``; semi-sync negotiation if asked for and the master has it enabled;
4. the dump request for the start point: a file/position, a MariaDB GTID position, a MySQL
   Gtid_set, or the conveniences "the server's current end" and "the oldest binlog kept".

Then the session is an async iterator of :class:`~protocol.replication.DumpEvent` — raw event
bytes plus the semi-sync ``ack_requested`` bit. Decoding is the business of ``protocol.binlog``.
No packet for twice the heartbeat period raises :class:`~replica.errors.HeartbeatTimeout` (a
stalled stream: the daemon reconnects).

Semi-sync: the master waits for an ACK of each transaction it flagged. With
``SemiSyncMode.ACK_AFTER_LAND`` the layer above calls :meth:`ReplicationSession.ack` with the
transaction's end position once the lake has it durably; with ``ACK_ON_RECEIVE`` the session ACKs
on arrival, as a stock replica does. The session tracks the file and end position of flagged
events itself (rotations, and MariaDB 11.4+ where ``log_pos`` is 0 inside transactions), so it
only sends ACKs the master is waiting for.
"""

from __future__ import annotations

import collections
import enum
import struct
import time
import uuid as _uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from protocol.binlog.model import BinlogPosition
from protocol.errors import BinlogDumpError, ProtocolError, ServerError
from protocol.gtid import GtidPosition, GtidSet
from protocol.native_frames import end_positions as _native_end_positions
from protocol.replication import (
    DUMP_GTID_NON_BLOCK,
    DUMP_NON_BLOCK,
    DUMP_SEND_ANNOTATE_ROWS,
    SERVER_VARIABLES_QUERY,
    DumpEnd,
    DumpEvent,
    ServerFacts,
    binlog_dump,
    binlog_dump_gtid,
    check_server,
    dump_error,
    error_from_packet,
    parse_dump_packet,
    register_slave,
    registration_statements,
    replica_uuid_for,
    semi_sync_ack,
    semi_sync_statements,
)
from protocol.results import cell_text, cell_text_or_none
from replica.errors import HeartbeatTimeout

if TYPE_CHECKING:
    from replica.core.connection import Connection

__all__ = ["StartFrom", "StartPoint", "SemiSyncMode", "SessionOptions", "ReplicationSession",
           "resolve_start"]


class StartFrom(enum.Enum):
    """Start points that the session resolves on the server."""

    #: The server's current end (SHOW MASTER STATUS / SHOW BINARY LOG STATUS): only new changes.
    LATEST = "latest"
    #: The oldest binlog the server still has, from its first event.
    EARLIEST = "earliest"


#: Where to start: a file/position, a MariaDB GTID position (stream what follows it, per
#: domain), a MySQL Gtid_set (stream every transaction not in it), or a :class:`StartFrom`.
StartPoint = BinlogPosition | GtidPosition | GtidSet | StartFrom


class SemiSyncMode(enum.Enum):
    OFF = "off"
    #: ACK when the layer above says the transaction is durable (:meth:`ReplicationSession.ack`).
    ACK_AFTER_LAND = "ack-after-land"
    #: ACK as soon as the flagged event arrives, like a stock replica.
    ACK_ON_RECEIVE = "ack-on-receive"


@dataclass(frozen=True, slots=True)
class SessionOptions:
    server_id: int
    start: StartPoint = StartFrom.LATEST
    heartbeat_period: float = 5.0  # seconds; 0 disables heartbeats and the stall check
    semi_sync: SemiSyncMode = SemiSyncMode.OFF
    report_host: str = ""
    report_port: int = 0
    gtid_strict_mode: bool = False
    gtid_ignore_duplicates: bool = False
    #: Catch up and stop: the server ends the stream with EOF at the end of its binlog.
    non_blocking: bool = False
    #: MariaDB: also receive ANNOTATE_ROWS events (the SQL text of row events).
    send_annotate_rows: bool = False
    replica_uuid: _uuid.UUID | None = None  # MySQL; derived from server_id when None
    #: Accept binlog_format STATEMENT/MIXED (statements then surface as such, not as rows).
    allow_statement_format: bool = False


# Event header fields the session needs for position tracking (the decoder does the rest).
_HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_size, log_pos, flags
_HEADER_SIZE = 19
_U64 = struct.Struct("<Q")
_ROTATE_EVENT = 4
_FORMAT_DESCRIPTION_EVENT = 15
_HEARTBEAT_EVENTS = (27, 41)
_LOG_EVENT_ARTIFICIAL_F = 0x20


class _PositionTracker:
    """Follows the file name and the end position of the last event, for semi-sync ACKs.

    Rotations name the file; ``log_pos`` is the end position when non-zero; when it is 0 the
    event is either artificial (made up by the dump thread: no position of its own) or, on
    MariaDB 11.4+, inside a transaction, where the end is the previous end plus the size.
    """

    __slots__ = ("file", "pos", "crc")

    def __init__(self, file: str, pos: int, crc: bool) -> None:
        self.file = file
        self.pos = pos
        self.crc = crc

    def feed(self, data: memoryview) -> None:
        if len(data) < _HEADER_SIZE:
            return
        _, type_code, _, size, log_pos, flags = _HEADER.unpack_from(data, 0)
        if type_code == _ROTATE_EVENT and len(data) >= _HEADER_SIZE + 8:
            (self.pos,) = _U64.unpack_from(data, _HEADER_SIZE)
            end = len(data) - (4 if self.crc else 0)
            self.file = bytes(data[_HEADER_SIZE + 8:end]).decode("utf-8", "replace")
            return
        if type_code == _FORMAT_DESCRIPTION_EVENT and len(data) >= 5:
            # The checksum algorithm byte sits before the 4-byte checksum field of every FDE.
            self.crc = data[len(data) - 5] == 1
        if type_code in _HEARTBEAT_EVENTS:
            return
        if log_pos:
            self.pos = log_pos
        elif not flags & _LOG_EVENT_ARTIFICIAL_F and type_code != _FORMAT_DESCRIPTION_EVENT:
            self.pos += size

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition(self.file, self.pos)


class ReplicationSession:
    """A registered replica streaming the binlog. Create with :meth:`start`."""

    def __init__(self, conn: Connection, options: SessionOptions) -> None:
        self.conn = conn
        self.options = options
        self.facts: ServerFacts | None = None
        #: The server's clock minus ours, in seconds (from SELECT UNIX_TIMESTAMP()).
        self.clock_offset = 0.0
        #: Semi-sync was negotiated: packets carry the 0xEF header.
        self.semi_sync = False
        #: The file/position the dump was asked for (None for GTID starts).
        self.start_position: BinlogPosition | None = None
        self._tracker = _PositionTracker("", 4, True)
        self._received: collections.deque[bytes] = collections.deque()  # whole, not yet taken
        self._pending_acks: list[BinlogPosition] = []
        self._ended = False
        #: Statistics, for metrics and tests.
        self.acks_sent = 0
        self.packets = 0

    # --- starting ------------------------------------------------------------------------------

    @classmethod
    async def start(cls, conn: Connection, options: SessionOptions) -> ReplicationSession:
        """Register and request the dump; return the session ready to iterate.

        Raises:
            BinlogNotEnabled, BinlogFormatNotRow, ServerIdConflict: the server cannot be used.
            MissingPrivilege, DuplicateServerId, GtidPurged, ... (see protocol.replication).
        """
        session = cls(conn, options)
        await session._register()
        await session._request_dump()
        return session

    async def _register(self) -> None:
        conn, options = self.conn, self.options
        rows = await self._query("SELECT UNIX_TIMESTAMP()")
        if rows and rows[0][0] is not None:
            self.clock_offset = float(cell_text(rows[0][0])) - time.time()
        variables = {cell_text(r[0]): cell_text_or_none(r[1]) for r in await self._query(
            SERVER_VARIABLES_QUERY)}
        facts = ServerFacts.from_variables(variables)
        self.facts = facts
        check_server(facts, replica_server_id=options.server_id,
                     allow_statement_format=options.allow_statement_format)
        self._tracker.crc = (facts.binlog_checksum or "CRC32").upper() != "NONE"

        start = options.start
        gtid_position = start if isinstance(start, GtidPosition) else None
        if isinstance(start, GtidSet) and conn.is_mariadb:
            raise ValueError("a MySQL Gtid_set start point was given for a MariaDB server")
        if isinstance(start, GtidPosition) and not conn.is_mariadb:
            raise ValueError("a MariaDB GTID position start point was given for a MySQL server")
        replica_uuid = options.replica_uuid or replica_uuid_for(options.server_id)
        for statement in registration_statements(
            mariadb=conn.is_mariadb, heartbeat_period=options.heartbeat_period,
            gtid_position=gtid_position, gtid_strict_mode=options.gtid_strict_mode,
            gtid_ignore_duplicates=options.gtid_ignore_duplicates,
            replica_uuid=None if conn.is_mariadb else replica_uuid,
        ):
            await self._execute(statement)

        await self._command(register_slave(options.server_id, host=options.report_host,
                                           port=options.report_port))

        if options.semi_sync is not SemiSyncMode.OFF and facts.semi_sync_enabled:
            for statement in semi_sync_statements(mariadb=conn.is_mariadb):
                await self._execute(statement)
            self.semi_sync = True

    async def _request_dump(self) -> None:
        conn, options = self.conn, self.options
        start = options.start
        if isinstance(start, StartFrom):
            start = await self._resolve(start)
        flags = DUMP_NON_BLOCK if options.non_blocking else 0
        if isinstance(start, GtidSet):
            payload = binlog_dump_gtid(
                options.server_id, start,
                flags=DUMP_GTID_NON_BLOCK if options.non_blocking else 0)
        elif isinstance(start, GtidPosition):
            if self._wants_annotate_rows():
                flags |= DUMP_SEND_ANNOTATE_ROWS
            payload = binlog_dump(options.server_id, "", 4, flags)
        else:
            if self._wants_annotate_rows():
                flags |= DUMP_SEND_ANNOTATE_ROWS
            self.start_position = start
            self._tracker.file, self._tracker.pos = start.file, start.pos
            payload = binlog_dump(options.server_id, start.file, start.pos, flags)
        conn.reset_sequence()
        await conn.send_packet(payload)

    def _wants_annotate_rows(self) -> bool:
        """Ask for ANNOTATE_ROWS events when asked to, and always on MariaDB 11.4+.

        From 11.4 on, events inside a transaction carry ``log_pos`` 0 and a receiver computes
        positions by adding event sizes; the server leaves ANNOTATE_ROWS out of the dump unless
        flag 2 is set, so without them every later event's position would fall short by the
        size of the annotations skipped.
        """
        if not self.conn.is_mariadb:
            return False
        return self.options.send_annotate_rows or _version_at_least(
            self.conn.server_version, (11, 4))

    async def _resolve(self, start: StartFrom) -> BinlogPosition:
        try:
            return await resolve_start(self.conn, start)
        except ServerError as exc:
            raise _retype(exc) from None

    # --- commands with typed errors ------------------------------------------------------------

    async def _query(self, sql: str) -> list[tuple[str | bytes | None, ...]]:
        try:
            return await self.conn.query(sql)
        except ServerError as exc:
            raise _retype(exc) from None

    async def _execute(self, sql: str) -> None:
        try:
            await self.conn.execute(sql)
        except ServerError as exc:
            raise _retype(exc) from None

    async def _command(self, payload: bytes) -> None:
        """Send a command answered by OK or ERR (COM_REGISTER_SLAVE)."""
        self.conn.reset_sequence()
        await self.conn.send_packet(payload)
        reply = await self.conn.read_packet()
        if reply[:1] == b"\xff":
            raise error_from_packet(reply)

    # --- streaming -----------------------------------------------------------------------------

    @property
    def stall_timeout(self) -> float | None:
        """No packet for this long is a stall (None: heartbeats are off, no check)."""
        period = self.options.heartbeat_period
        return 2 * period if period > 0 else None

    async def next_event(self) -> DumpEvent | None:
        """The next event of the stream; None once a NON_BLOCK dump reached the end.

        Raises:
            HeartbeatTimeout: nothing arrived within twice the heartbeat period.
            BinlogDumpError (and subclasses): the server ended the dump with an error.
        """
        if self._ended:
            return None
        if self._received:  # split off by next_buffered_event already
            return self._take(self._received.popleft())
        limit = self.stall_timeout
        try:
            payload = await self.conn.read_packet(timeout=None if limit is None else limit)
        except TimeoutError:
            raise HeartbeatTimeout(
                f"no event or heartbeat from the server for {limit:.1f} s (twice the heartbeat "
                "period): the stream stalled"
            ) from None
        item = self._take(payload)
        if (item is not None and item.ack_requested
                and self.options.semi_sync is SemiSyncMode.ACK_ON_RECEIVE):
            await self._send_ack(self._tracker.position)
        return item

    def next_buffered_event(self) -> DumpEvent | None:
        """The next event if it is already received whole and taking it needs nothing awaited;
        else None (then :meth:`next_event`, which waits, and tells the end of the dump).

        The same event :meth:`next_event` would return, without the two coroutines it costs:
        a stream of small transactions is mostly events that arrived in the same read. Off
        while semi-sync ACKs on receipt (those are sent before the event is returned).
        """
        if self._ended or (self.semi_sync
                           and self.options.semi_sync is SemiSyncMode.ACK_ON_RECEIVE):
            return None
        received = self._received
        if not received:
            if self.semi_sync:  # one at a time: an ACK request restarts the packet numbering
                payload = self.conn.buffered_packet()
                return None if payload is None else self._take(payload)
            received.extend(self.conn.buffered_packets())  # all of them in one call
            if not received:
                return None
        return self._take(received.popleft())

    def buffered_events(self) -> list[bytes]:
        """The bytes of every event already received whole, in order, as
        :meth:`next_buffered_event` would return them one by one (``DumpEvent.data``); ``[]``
        when there are none, and always when semi-sync was negotiated (one at a time there).

        One call per read of the socket instead of one per event: a stream of one-row
        transactions is five events per transaction, and the per-event :class:`DumpEvent`,
        :func:`parse_dump_packet` and calls showed in profiles. The batch stops before any
        packet that is not a plain event (the end of the dump, an ERR: :meth:`next_event`
        then says what it is) and after a heartbeat, so that :attr:`position` is the
        heartbeat's when the caller meets it as the batch's last event.
        """
        if self._ended or self.semi_sync or self._received:
            return []  # packets split off already go one at a time first
        events = self.conn.buffered_payloads_after(0)  # each event after its OK byte
        if not events:
            return []
        tracker = self._tracker
        file, pos, crc = tracker.file, tracker.pos, tracker.crc
        unpack = _HEADER.unpack_from
        native = _native_end_positions if type(events) is list else None  # in C when built
        taken, count = 0, len(events)
        while taken < count:
            if native is not None:
                taken, pos = native(events, taken, pos)
                if taken >= count:
                    break
            data = events[taken]
            if len(data) < _HEADER_SIZE:  # next_event's parse_dump_packet says what it is
                break
            taken += 1
            _, type_code, _, size, log_pos, flags = unpack(data)
            if type_code == _ROTATE_EVENT or type_code == _FORMAT_DESCRIPTION_EVENT:
                tracker.file, tracker.pos, tracker.crc = file, pos, crc
                tracker.feed(memoryview(data))
                file, pos, crc = tracker.file, tracker.pos, tracker.crc
            elif type_code in _HEARTBEAT_EVENTS:
                break
            elif log_pos:
                pos = log_pos
            elif not flags & _LOG_EVENT_ARTIFICIAL_F:
                pos += size
        tracker.file, tracker.pos, tracker.crc = file, pos, crc
        self.packets += taken
        if taken < len(events):  # back as the packets they came in, for next_event
            self._received.extend(b"\x00" + data for data in events[taken:])
            del events[taken:]
        return events

    def _take(self, payload: bytes) -> DumpEvent | None:
        """Account for a received packet; None for the end of the dump."""
        self.packets += 1
        item = parse_dump_packet(payload, semi_sync=self.semi_sync)
        if isinstance(item, DumpEnd):
            self._ended = True
            return None
        self._tracker.feed(item.data)
        if item.ack_requested:
            # The master restarts its packet numbering after a flagged event.
            self.conn.reset_sequence(1)
            if self.options.semi_sync is not SemiSyncMode.ACK_ON_RECEIVE:
                self._pending_acks.append(self._tracker.position)
        return item

    def __aiter__(self) -> ReplicationSession:
        return self

    async def __anext__(self) -> DumpEvent:
        item = await self.next_event()
        if item is None:
            raise StopAsyncIteration
        return item

    @property
    def position(self) -> BinlogPosition:
        """File and end position of the last event received (as tracked for ACKs)."""
        return self._tracker.position

    def note_heartbeat(self, file: str, position: int) -> None:
        """A heartbeat said the server's dump thread has read its binlog up to ``position`` in
        ``file`` and has nothing more: the stream is there. After a dump by GTID no event says
        so — the transactions the server skipped (the start set has them) were never sent —
        so without this an idle stream's position would stay where the dump began."""
        if not file or not position:
            return
        heard = BinlogPosition(file, position)
        if heard > self._tracker.position:
            self._tracker.file, self._tracker.pos = file, position

    @property
    def pending_acks(self) -> tuple[BinlogPosition, ...]:
        """End positions of flagged events not yet acknowledged, oldest first."""
        return tuple(self._pending_acks)

    async def ack(self, position: BinlogPosition) -> bool:
        """Acknowledge (semi-sync) everything up to ``position``, a transaction's end position.

        Call after the transaction is durably landed. Sends one ACK if the master waits for a
        flagged event at or before ``position`` (an ACK covers all earlier ones) and returns
        True; otherwise does nothing and returns False.
        """
        covered = [p for p in self._pending_acks if p <= position]
        if not covered:
            await trio.lowlevel.checkpoint()
            return False
        self._pending_acks = [p for p in self._pending_acks if not p <= position]
        await self._send_ack(position)
        return True

    async def _send_ack(self, position: BinlogPosition) -> None:
        # The ACK goes out with id 0, out of band: the master's numbering goes on unchanged.
        expected = self.conn.sequence
        await self.conn.send_packet(semi_sync_ack(position.file, position.pos), seq=0)
        self.conn.reset_sequence(expected)
        self.acks_sent += 1

    async def close(self) -> None:
        await self.conn.close()


async def resolve_start(conn: Connection, start: StartFrom) -> BinlogPosition:
    """The binlog position ``start`` names on the server now."""
    if start is StartFrom.EARLIEST:
        rows = await conn.query("SHOW BINARY LOGS")
        if not rows:
            raise ProtocolError("SHOW BINARY LOGS returned no binlog files")
        return BinlogPosition(cell_text(rows[0][0]), 4)
    rows = await conn.query("SHOW MASTER STATUS" if conn.is_mariadb else
                            "SHOW BINARY LOG STATUS")
    if not rows:
        raise ProtocolError("the server reports no current binlog position")
    return BinlogPosition(cell_text(rows[0][0]), int(cell_text(rows[0][1])))


def _version_at_least(version: str, wanted: tuple[int, int]) -> bool:
    """``'11.8.6-MariaDB-log'`` (or ``'5.5.5-11.8.6-MariaDB'``) is at least ``(11, 4)``."""
    text = version[len("5.5.5-"):] if version.startswith("5.5.5-") else version
    numbers = []
    for part in text.split("-", 1)[0].split(".")[:2]:
        if not part.isdigit():
            return False
        numbers.append(int(part))
    return tuple(numbers) >= wanted


def _retype(exc: ServerError) -> ProtocolError:
    """A more specific class for a plain ServerError of a registration step, when there is one."""
    if type(exc) is not ServerError:
        return exc
    typed = dump_error(exc.code, exc.sqlstate, exc.message)
    return exc if type(typed) is BinlogDumpError else typed
