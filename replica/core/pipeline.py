"""From a replication session to the lake: decode, group into transactions, filter, land, ACK.

One :class:`Pipeline` owns the sink for the daemon's whole life; each (re)connection streams
through :meth:`Pipeline.stream` with a fresh decoder, because a new dump starts with its own
fake ROTATE and FORMAT_DESCRIPTION. Two tasks share the sink, cooperatively (trio runs one at a
time and neither awaits while it is inside the sink, so no lock is needed):

* the reader decodes each packet and hands its transaction items to the sink; when the master
  waits for a semi-sync ACK and the mode is ack-after-land, it flushes at once and ACKs the
  durable position;
* the ticker wakes every ``tick`` seconds so that time-based flushes happen on an idle stream
  too (the reader is then parked in a read), and ACKs whatever became durable.

Backpressure is the reader itself: it does not read the next packet until the sink has taken
the previous one, so a slow lake slows the TCP stream down instead of filling memory.

Filtering keeps the resume position exact: a skipped transaction (by origin server_id or GTID
domain — loop prevention) still reaches the sink as an empty begin/commit pair, so the
checkpoint moves past it; rows of excluded tables are dropped but their transaction commits.
DDL follows the same filters (see :meth:`Pipeline._ddl_accepted`): the DDL log of a lake that
lands one database does not fill with every other database's schema changes.

Without binlog_row_metadata=FULL a session may come with a
:class:`~replica.core.schema_source.SchemaSource`: the tables an event maps are described (awaited)
before the event is decoded, the decoder completes each TABLE_MAP from that description, and
DDL statements invalidate it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import trio

from protocol.binlog.ddl import classify, redact_secrets
from protocol.binlog.events import HeartbeatEvent, IncidentEvent
from protocol.binlog.model import RowsEvent
from protocol.binlog.stream import EventStream
from protocol.binlog.transactions import (
    Statement,
    TransactionAssembler,
    TransactionBegin,
    TransactionCommit,
    TransactionItem,
    TransactionPrepared,
    TransactionRollback,
)
from protocol.gtid import MariadbGtid
from replica.core.schema_source import SchemaSource
from replica.core.session import ReplicationSession, SemiSyncMode
from replica.core.snapshot import SnapshotCoordinator
from replica.errors import sole_exception
from replica.observe.metrics import Metrics
from sinks.parquet import Checkpoint, ParquetSink

log = logging.getLogger("binlake.pipeline")


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """What to land and when to ACK; the daemon builds it from the configuration."""

    accepts: Callable[[str, str], bool] | None = None  # (database, table) → land its rows?
    accepts_database: Callable[[str], bool] | None = None  # may some table of it land?
    skip_server_ids: frozenset[int] = frozenset()
    skip_gtid_domains: frozenset[int] = frozenset()
    semi_sync: SemiSyncMode = SemiSyncMode.OFF
    tick: float = 0.5  # seconds between time-based flush checks
    verify_checksums: bool = True


@dataclass(slots=True)
class PipelineStats:
    transactions: int = 0
    skipped_transactions: int = 0
    rows: int = 0
    filtered_rows: int = 0
    filtered_ddl: int = 0
    events: int = 0
    bytes: int = 0
    acks: int = 0
    last_commit_time_us: int | None = None
    tables: set[tuple[str, str]] = field(default_factory=set)


class Pipeline:
    """Lands what sessions stream into one :class:`~sinks.parquet.ParquetSink`."""

    def __init__(self, sink: ParquetSink, options: PipelineOptions | None = None,
                 metrics: Metrics | None = None) -> None:
        self.sink = sink
        self.options = options or PipelineOptions()
        self.metrics = metrics
        self.stats = PipelineStats()
        self._skipping = False
        self._clock_offset = 0.0
        self._landed: Checkpoint | None = None
        self._schema_source: SchemaSource | None = None
        #: Set by the daemon when snapshots may run: sees every landed rows event and DDL,
        #: and lands snapshot chunks between transactions.
        self.snapshots: SnapshotCoordinator | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> Checkpoint | None:
        """Recover the lake; return the checkpoint to resume from (None: a new lake)."""
        checkpoint = self.sink.open()
        self._landed = checkpoint
        return checkpoint

    def close(self) -> Checkpoint | None:
        """Land every complete transaction and return the final checkpoint.

        An open transaction is dropped: it is not in the checkpoint, so the next run streams it
        again from its beginning.
        """
        self.sink.close()
        self._note_landed()
        return self.sink.durable_position

    @property
    def durable(self) -> Checkpoint | None:
        return self.sink.durable_position

    # --- streaming -----------------------------------------------------------------------------

    async def stream(self, session: ReplicationSession,
                     schema_source: SchemaSource | None = None) -> None:
        """Land the session's events until the stream ends (NON_BLOCK dump) or fails.

        Errors propagate (network, stall, server errors); what was landed stays landed and the
        sink keeps its state, so the caller may reconnect and call :meth:`stream` again with a
        session that starts at :attr:`durable`. ``schema_source`` names the columns of
        TABLE_MAPs that do not (binlog_row_metadata other than FULL).
        """
        self._clock_offset = session.clock_offset
        self._schema_source = schema_source
        if self.metrics is not None:
            self.metrics.set_connected(True)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._tick, session)
                await self._read(session)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise sole_exception(group) from None
        finally:
            if self.snapshots is not None:
                self.snapshots.stream_stopped()
            if self.metrics is not None:
                self.metrics.set_connected(False)
        self.sink.flush()
        await self.ack_durable(session)

    async def _read(self, session: ReplicationSession) -> None:
        source = self._schema_source
        decoder = EventStream(verify_checksums=self.options.verify_checksums,
                              table_map_hook=source.enrich if source is not None else None)
        assembler = TransactionAssembler()
        after_land = self.options.semi_sync is SemiSyncMode.ACK_AFTER_LAND
        metrics = self.metrics
        stats = self.stats
        while True:
            packet = await session.next_event()
            if packet is None:
                return
            data = packet.data
            stats.bytes += len(data)
            if source is not None:  # describe the tables it maps before its rows are decoded
                await source.prepare(decoder.tables_mapped_by(data))
            for event in decoder.feed(data):
                stats.events += 1
                if metrics is not None:
                    metrics.count_event(type(event).__name__, event.header.event_size)
                if isinstance(event, HeartbeatEvent):
                    if not assembler.in_transaction and metrics is not None:
                        metrics.set_lag(0.0, 0)  # heartbeats come only at the binlog's end
                    continue
                if isinstance(event, IncidentEvent):
                    log.error("the server logged an incident at %s:%d: %s — changes around "
                              "it may be missing from the binlog", event.header.file,
                              event.header.position, event)
                for item in assembler.feed(event):
                    self._handle(item)
            snapshots = self.snapshots
            if snapshots is not None:
                if assembler.in_transaction:
                    snapshots.between_transactions = False
                else:  # a snapshot chunk may land here, between two transactions
                    snapshots.at_boundary(session.position)
            if packet.ack_requested and after_land:
                self.sink.flush()
                self._note_landed()
                await self.ack_durable(session)

    async def _tick(self, session: ReplicationSession) -> None:
        while True:
            await trio.sleep(self.options.tick)
            if self.sink.maybe_flush(time.monotonic()):
                self._note_landed()
                await self.ack_durable(session)

    async def ack_durable(self, session: ReplicationSession) -> None:
        if not session.semi_sync or self.options.semi_sync is not SemiSyncMode.ACK_AFTER_LAND:
            return
        durable = self.sink.durable_position
        if durable is None or durable.position is None:
            return
        if await session.ack(durable.position):
            self.stats.acks += 1

    # --- items ---------------------------------------------------------------------------------

    def _handle(self, item: TransactionItem) -> None:
        if isinstance(item, RowsEvent):
            table = item.table
            accepts = self.options.accepts
            if self.snapshots is not None and not self._skipping:
                self.snapshots.observe(item)  # excluded tables too: one-time copies need them
            if self._skipping or (accepts is not None and not accepts(table.schema, table.table)):
                self.stats.filtered_rows += item.row_count
                return
            self.sink.handle(item)
            self.stats.rows += item.row_count
            self.stats.tables.add((table.schema, table.table))
            if self.metrics is not None:
                self.metrics.count_rows(table.schema, table.table, item.kind.name.lower(),
                                        item.row_count)
            return
        if isinstance(item, TransactionBegin):
            self._skipping = self._skips(item)
            if self._skipping:
                self.stats.skipped_transactions += 1
        elif isinstance(item, Statement):
            if self._schema_source is not None:  # even in a skipped transaction
                self._schema_source.note_statement(item)
            if self.snapshots is not None:
                self.snapshots.observe_statement(item)
            if self._skipping:
                return
            if item.is_ddl and not self._ddl_accepted(item):
                self.stats.filtered_ddl += 1
                return
            # Account-management statements carry passwords; the lake never gets them.
            redacted = redact_secrets(item.query)
            if redacted is not item.query:
                item = replace(item, query=redacted)
            log.debug("%s at %s (db %s): %s", "DDL" if item.is_ddl else "statement",
                      item.position, item.schema or "-", item.query)
        # TransactionPrepared (XA PREPARE) goes to the sink as it is: the sink keeps the rows
        # durable but invisible until XA COMMIT (TransactionCommit.xa) lands them or XA
        # ROLLBACK (TransactionRollback.xa) drops them — see sinks/parquet/xa.py.
        if isinstance(item, TransactionCommit):
            self.stats.transactions += 1
            self.stats.last_commit_time_us = item.commit_time_us
            if self.metrics is not None and item.commit_time_us:
                server_now = time.time() + self._clock_offset
                self.metrics.set_lag(server_now - item.commit_time_us / 1e6)
        self.sink.handle(item)
        if (isinstance(item, TransactionCommit | TransactionPrepared | TransactionRollback)
                and self.sink.durable_position is not self._landed):
            self._note_landed()

    def _ddl_accepted(self, statement: Statement) -> bool:
        """Whether a DDL statement follows the filters into the lake's DDL log: it names an
        accepted table; or, naming no table, its database (the statement's, else the session's
        default) may hold accepted tables; or it has no database at all (CREATE USER run without
        a default database: server-wide, logged under ``_ddl/_no_database/``)."""
        accepts = self.options.accepts
        if accepts is None:
            return True
        info = classify(statement.query, statement.schema)
        if info is None:
            return True
        if info.tables:
            return any(accepts(database, table) for database, table in info.tables)
        if info.table:  # a view or sequence: table-like names
            return accepts(info.schema, info.table)
        accepts_database = self.options.accepts_database
        return not info.schema or accepts_database is None or accepts_database(info.schema)

    def _skips(self, begin: TransactionBegin) -> bool:
        if begin.server_id in self.options.skip_server_ids:
            return True
        gtid = begin.gtid
        return isinstance(gtid, MariadbGtid) and gtid.domain in self.options.skip_gtid_domains

    def _note_landed(self) -> None:
        durable = self.sink.durable_position
        if durable is None or durable is self._landed:
            return
        self._landed = durable
        if self.metrics is not None:
            position = durable.position
            self.metrics.landed(
                gtid=durable.gtid, file=position.file if position else "",
                position=position.pos if position else 0,
                commit_time=durable.commit_time_us / 1e6 if durable.commit_time_us else None,
            )
