"""From a replication session to the lake: decode, group into transactions, filter, land, ACK.

One :class:`Pipeline` owns the sink for the daemon's whole life; each (re)connection streams
through :meth:`Pipeline.stream` with a fresh decoder, because a new dump starts with its own
fake ROTATE and FORMAT_DESCRIPTION. Two tasks share the sink, cooperatively: each hands it items
and asks it questions on the event loop, and has it flush on the pipeline's
:class:`~replica.core.sink_worker.SinkWorker` (a thread), never touching it while a worker call
is queued or running (see that module):

* the reader decodes each packet and hands its transaction items to the sink; when the sink
  says a size or row threshold was passed (``flush_wanted``, after the batch of events that
  passed it), or the master waits for a semi-sync ACK and the mode is ack-after-land, it has the
  worker flush, and ACKs the durable position;
* the ticker wakes every ``tick`` seconds (half of ``lake.flush_interval``, at most 0.5 s) so
  that time-based flushes happen on an idle stream too (the reader is then parked in a read),
  and ACKs whatever became durable. It skips a tick while the worker is busy. While the stream is behind the server's end
  (:meth:`~replica.observe.lag.LagTracker.stream_behind`: a backlog), time flushes wait
  ``lake.catch_up_flush_interval`` instead: every flush writes a file per table it touched, and
  the next changes are already waiting anyway. Size and row count flush as always, and semi-sync
  ack-after-land flushes at once whatever the stream's position.

What the operator sees follows the lake, not the stream: rows per table and operation and
source transactions are counted when their flush made them durable (a transaction abandoned by
a reconnect and streamed again counts once), each flush's duration goes to the land-duration
histogram, and the :class:`~replica.observe.lag.LagTracker` learns the landed position. Decode
time, CRC failures and semi-sync ACKs are counted where they happen.

Backpressure is the reader itself: it does not read the next packet until the sink has taken
the previous one (and a flush the sink wanted is done), so a slow lake slows the TCP stream down
instead of filling memory; the event loop meanwhile answers /healthz, /metrics and signals.

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
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import cast

import trio

from protocol.binlog.ddl import classify, redact_secrets
from protocol.binlog.events import HeartbeatEvent, IncidentEvent
from protocol.binlog.model import BinlogPosition, RowsEvent, RowsKind
from protocol.binlog.stream import Event, EventStream
from protocol.binlog.transactions import (
    Statement,
    TransactionAssembler,
    TransactionBegin,
    TransactionCommit,
    TransactionItem,
    TransactionPrepared,
    TransactionRollback,
)
from protocol.errors import ChecksumMismatch
from protocol.gtid import MariadbGtid
from replica.core.schema_source import SchemaSource
from replica.core.session import ReplicationSession, SemiSyncMode
from replica.core.signals import Signal, signals_in
from replica.core.sink_worker import SinkWorker
from replica.core.snapshot import SnapshotCoordinator
from replica.errors import sole_exception
from replica.observe.lag import LagTracker
from replica.observe.metrics import Metrics
from sinks.contract import Checkpoint, CommitOutcome, Flushed, Pending, Sink

log = logging.getLogger("binlake.pipeline")

#: The metrics' ``op`` label of each kind of rows event.
_OP_NAMES = {kind: kind.name.lower() for kind in RowsKind}
_INSERT = RowsKind.INSERT
_ALREADY_LANDED = CommitOutcome.ALREADY_LANDED


def _op_name(kind: RowsKind) -> str:
    """``_OP_NAMES[kind]``, INSERT first by identity: an Enum hashes in Python, and this is
    asked for every rows event."""
    return "insert" if kind is _INSERT else _OP_NAMES[kind]


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
    #: ``snapshot.signal_table`` as (database, table): its INSERTs are read as snapshot
    #: signals (``signals.py``), handed to ``Pipeline.on_signal`` when their transaction commits.
    signal_table: tuple[str, str] | None = None

    @staticmethod
    def tick_for(flush_interval: float) -> float:
        """The ticker's period for ``lake.flush_interval``: half of it (a flush is due one
        interval after the first unflushed commit, and is noticed within one tick), at most
        0.5 s, at least 10 ms."""
        return max(0.01, min(0.5, flush_interval / 2))


@dataclass(slots=True)
class PipelineStats:
    """Counts of this process's life (all sessions), for progress lines and tests.

    ``transactions``, ``rows`` and ``tables`` count what was handed to the sink;
    ``landed_transactions`` and ``landed_rows`` what a flush made durable.
    """

    transactions: int = 0
    skipped_transactions: int = 0
    rows: int = 0
    filtered_rows: int = 0
    filtered_ddl: int = 0
    events: int = 0
    bytes: int = 0
    acks: int = 0
    landed_transactions: int = 0
    landed_rows: int = 0
    crc_failures: int = 0
    decode_seconds: float = 0.0
    land_seconds: float = 0.0
    last_commit_time_us: int | None = None
    tables: set[tuple[str, str]] = field(default_factory=set)


class Pipeline:
    """Lands what sessions stream into one :class:`~sinks.contract.Sink`."""

    def __init__(self, sink: Sink, options: PipelineOptions | None = None,
                 metrics: Metrics | None = None) -> None:
        self.sink = sink
        self.options = options or PipelineOptions()
        self.metrics = metrics
        self.stats = PipelineStats()
        #: Where the sink's lake work runs (flushes, snapshot landings, open and close).
        self.worker = SinkWorker(after=self._count_flushes)
        self._durable: Checkpoint | None = None
        self._pending: Pending | None = None  # the sink's last answer (see pending)
        self._flushed: list[Flushed] = []  # reported by flushes in the worker, not counted yet
        #: The lag, fed with what lands and with heartbeats; asked by /readyz, /metrics and
        #: the progress lines.
        self.lag = LagTracker(self.stream_state)
        self._skipping = False
        self._landed_seq = 0
        self._schema_source: SchemaSource | None = None
        #: Set by the daemon when snapshots may run: sees every landed rows event and DDL,
        #: and lands snapshot chunks between transactions.
        self.snapshots: SnapshotCoordinator | None = None
        #: Set by the daemon: called with each snapshot signal of a committed transaction.
        self.on_signal: Callable[[Signal], None] | None = None
        self._signals: list[Signal] = []  # of the open transaction
        self._begin_at = ""  # the open transaction's GTID or position (signal request ids)
        self._session: ReplicationSession | None = None
        self._assembler: TransactionAssembler | None = None
        # Rows per (database, table, op) of the open transaction, and of committed ones not
        # durable yet: counted in the metrics when a flush lands them.
        self._txn_rows: Counter[tuple[str, str, str]] = Counter()
        self._unlanded_rows: Counter[tuple[str, str, str]] = Counter()
        self._xa_rows: dict[str, Counter[tuple[str, str, str]]] = {}  # prepared, by XA id
        self._accepted: dict[tuple[str, str], bool] = {}  # options.accepts, remembered
        self._decode_pending = 0.0  # decode seconds not yet in the metrics
        self._events_pending: Counter[type] = Counter()  # events by class not yet in metrics
        self._event_bytes_pending = 0
        sink.clock = time.perf_counter
        sink.on_flush = self._flushed.append  # (in the worker thread: counted on the loop)

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> Checkpoint | None:
        """Recover the lake; return the checkpoint to resume from (None: a new lake)."""
        checkpoint = await self.worker.run(self.sink.open)
        self._durable = checkpoint
        if checkpoint is not None:
            self._landed_seq = checkpoint.seq
            self.lag.landed(checkpoint.position, checkpoint.commit_time_us,
                            checkpoint.gtid_state)
        return checkpoint

    async def close(self) -> Checkpoint | None:
        """Land every complete transaction and return the final checkpoint.

        An open transaction is dropped: it is not in the checkpoint, so the next run streams it
        again from its beginning.
        """
        await self.worker.run(self.sink.close)
        self._txn_rows.clear()
        return self._durable

    async def flush(self) -> None:
        """Make every complete transaction durable (on the worker), and count what landed."""
        await self.worker.run(self.sink.flush)

    async def run_io(self) -> None:
        """The lake work the last item left (a spill, an XA PREPARE's files, a transaction
        that spilled: ``Sink.io_wanted``), on the worker, before the next item is handed over.
        Mid-transaction or mid-batch: the snapshot coordinator must not take the position it
        knows for a boundary meanwhile (the caller notes the next boundary)."""
        if self.snapshots is not None:
            self.snapshots.between_transactions = False
        await self.worker.run(self.sink.run_io)
        await self.worker.idle()  # a call another task queued meanwhile: the sink is its first

    @property
    def durable(self) -> Checkpoint | None:
        """The lake's resume position, as of the last flush."""
        return self._durable

    def pending(self, now: float, *, behind: bool = False) -> Pending:
        """What the sink holds that is not durable yet (``Sink.pending``), for progress lines;
        while a worker call runs, the answer from before it (the sink is not asked then)."""
        if not self.worker.busy or self._pending is None:
            if self.worker.busy:  # nothing asked yet: nothing known to wait
                return Pending(0, 0, None, 0)
            self._pending = self.sink.pending(now, behind=behind)
        return self._pending

    def stream_state(self) -> tuple[BinlogPosition | None, bool]:
        """(the position the stream received up to, whether anything received is not landed)
        — for the lag: a stream at the server's end with nothing unlanded is caught up."""
        session, assembler = self._session, self._assembler
        if session is None or assembler is None:
            return None, True
        if assembler.in_transaction or self.worker.busy:  # (a flush: something to land)
            return session.position, True
        return session.position, self.sink.unlanded

    # --- streaming -----------------------------------------------------------------------------

    async def stream(self, session: ReplicationSession,
                     schema_source: SchemaSource | None = None) -> None:
        """Land the session's events until the stream ends (NON_BLOCK dump) or fails.

        Errors propagate (network, stall, server errors); what was landed stays landed and the
        sink keeps its state, so the caller may reconnect and call :meth:`stream` again with a
        session that starts at :attr:`durable`. ``schema_source`` names the columns of
        TABLE_MAPs that do not (binlog_row_metadata other than FULL).
        """
        self._schema_source = schema_source
        self._txn_rows.clear()  # an open transaction of an earlier session is streamed again
        self._assembler = TransactionAssembler()
        self._session = session
        self.lag.set_connected(True, clock_offset=session.clock_offset,
                               start=session.start_position)
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
            self.lag.set_connected(False)
            self._session = None
            if self.metrics is not None:
                self.metrics.set_connected(False)
        await self.flush()
        await self.ack_durable(session)

    async def _read(self, session: ReplicationSession) -> None:
        source = self._schema_source
        decoder = EventStream(verify_checksums=self.options.verify_checksums,
                              table_map_hook=source.enrich if source is not None else None,
                              arrow=True)  # the Parquet sink lands the Arrow chunks as they are
        assembler = self._assembler
        assert assembler is not None
        after_land = self.options.semi_sync is SemiSyncMode.ACK_AFTER_LAND
        on_receive = self.options.semi_sync is SemiSyncMode.ACK_ON_RECEIVE
        metrics = self.metrics
        stats = self.stats
        clock = time.perf_counter
        counts = self._events_pending
        worker = self.worker
        sink = self.sink
        try:
            while True:
                if worker.busy:  # a flush or a snapshot landing: the sink is not ours yet
                    await worker.idle()
                # Events already received go in one batch, without awaiting: possible unless
                # something must happen between two events (a schema source describing tables,
                # snapshot boundaries; semi-sync: the session then gives none).
                snapshots = self.snapshots
                if source is None and (snapshots is None or snapshots.idle):
                    batch = session.buffered_events()
                    if batch:
                        await self._land_batch(decoder, batch, session)
                        if snapshots is not None:  # as after each event: the last one counts
                            if assembler.in_transaction:
                                snapshots.between_transactions = False
                            else:
                                snapshots.at_boundary(session.position)
                                if snapshots.landing_due:
                                    await snapshots.land_due()
                        if sink.flush_wanted:
                            await self.flush()
                            await self.ack_durable(session)
                        continue
                # Else one at a time, without awaiting while there is one (two coroutines).
                packet = session.next_buffered_event()
                if packet is None:
                    packet = await session.next_event()
                    if packet is None:
                        return
                data = packet.data
                stats.bytes += len(data)
                if packet.ack_requested and on_receive:  # the session ACKed it on arrival
                    stats.acks += 1
                    if metrics is not None:
                        metrics.count_ack()
                if source is not None:  # describe the tables it maps before its rows are decoded
                    await source.prepare(decoder.tables_mapped_by(data))
                started = clock()
                try:
                    events = decoder.feed(data)
                except ChecksumMismatch:
                    stats.crc_failures += 1
                    if metrics is not None:
                        metrics.count_crc_failure()
                    raise
                self._decode_pending += clock() - started
                if worker.busy:  # (one started while this task awaited the packet)
                    await worker.idle()
                for event in events:
                    kind = type(event)
                    counts[kind] += 1
                    self._event_bytes_pending += event.header.event_size
                    if (kind is HeartbeatEvent or kind is IncidentEvent) and self._notable(
                            event, assembler):
                        continue
                    for item in assembler.feed(event):
                        self._handle(item)
                        if sink.io_wanted:
                            await self.run_io()
                snapshots = self.snapshots
                if snapshots is not None:
                    if assembler.in_transaction:
                        snapshots.between_transactions = False
                    else:  # a snapshot chunk may land here, between two transactions
                        snapshots.at_boundary(session.position)
                        if snapshots.landing_due:
                            await snapshots.land_due()
                if (packet.ack_requested and after_land) or sink.flush_wanted:
                    await self.flush()
                    await self.ack_durable(session)
        finally:
            self._count_decode()

    async def _land_batch(self, decoder: EventStream, batch: list[bytes],
                          session: ReplicationSession) -> None:
        """Decode the events of ``batch`` (received whole, in order, nothing to await between
        them), then hand their items over: what the one-at-a-time loop of :meth:`_read` does,
        with the clock read, the counts and the calls once per batch, not per event. A commit
        that passes a flush threshold is flushed (and ACKed) before the next item is handed over,
        as one at a time: the thresholds bound what is buffered whatever the batch's size.

        A decoding error is raised after the events before the bad one are handled, as
        they would have been one at a time.
        """
        stats = self.stats
        events: list[Event] = []
        failure: Exception | None = None
        started = time.perf_counter()
        try:
            decoder.feed_into(batch, events)
        except ChecksumMismatch as exc:
            stats.crc_failures += 1
            if self.metrics is not None:
                self.metrics.count_crc_failure()
            failure = exc
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the good events
            failure = exc
        self._decode_pending += time.perf_counter() - started
        size = sum(map(len, batch))  # received, the events after a bad one included
        stats.bytes += size
        kinds = Counter(map(type, events))
        self._events_pending.update(kinds)
        if failure is None and len(events) == len(batch):  # one event each: size is theirs
            self._event_bytes_pending += size
        else:
            self._event_bytes_pending += sum(event.header.event_size for event in events)
        assembler = self._assembler
        assert assembler is not None
        handle = self._handle
        sink = self.sink
        if HeartbeatEvent in kinds or IncidentEvent in kinds:
            items: Iterable[TransactionItem] = (
                item for event in events if not self._notable(event, assembler)
                for item in assembler.feed(event))
        else:
            items = assembler.feed_many(events)
        for item in items:
            handle(item)
            if sink.io_wanted:  # lake work: on the worker, before the next item
                await self.run_io()
            if sink.flush_wanted:  # a commit passed a threshold: land it before the next one
                if self.snapshots is not None:
                    # The coordinator may run during the flush: the position it knows is the
                    # batch's start, so it must not count the stream as at a boundary there
                    # (the caller notes the batch's end as the boundary afterwards).
                    self.snapshots.between_transactions = False
                await self.flush()
                await self.ack_durable(session)
        if failure is not None:
            raise failure

    def _notable(self, event: Event, assembler: TransactionAssembler) -> bool:
        """Say what a heartbeat or an incident means; True for a heartbeat (no item)."""
        kind = type(event)
        if kind is HeartbeatEvent:
            # The server sends one only when it has nothing more: the stream is at its end
            # (caught up, once what was received is landed).
            session = self._session
            if not assembler.in_transaction and session is not None:
                heartbeat = cast(HeartbeatEvent, event)
                session.note_heartbeat(heartbeat.file, heartbeat.position)
                self.lag.heartbeat(session.position)
            return True
        if kind is IncidentEvent:
            log.error("the server logged an incident at %s:%d: %s — changes around it may be "
                      "missing from the binlog", event.header.file, event.header.position, event)
        return False

    def _count_decode(self) -> None:
        """Decode time and received events to the counters, in slices (each tick, each flush,
        the end of a stream), not per event."""
        seconds, self._decode_pending = self._decode_pending, 0.0
        self.stats.decode_seconds += seconds
        counts, size = self._events_pending, self._event_bytes_pending
        self._event_bytes_pending = 0
        if counts:
            self.stats.events += sum(counts.values())
            if self.metrics is not None:
                self.metrics.count_events({kind.__name__: n for kind, n in counts.items()}, size)
            counts.clear()
        if self.metrics is not None and seconds > 0:
            self.metrics.count_decode_seconds(seconds)

    async def _tick(self, session: ReplicationSession) -> None:
        while True:
            await trio.sleep(self.options.tick)
            self._count_decode()
            if self.worker.busy:  # a flush runs already: the next tick looks again
                continue
            if self.sink.flush_due(time.monotonic(), behind=self.lag.stream_behind()):
                await self.flush()
                await self.ack_durable(session)

    async def ack_durable(self, session: ReplicationSession) -> None:
        if not session.semi_sync or self.options.semi_sync is not SemiSyncMode.ACK_AFTER_LAND:
            return
        durable = self._durable
        if durable is None or durable.position is None:
            return
        if durable.server is not None and session.facts is not None and \
                not durable.server.describes(session.facts):
            return  # a position in the old primary's binlog: nothing to ACK on this one yet
        if await session.ack(durable.position):
            self.stats.acks += 1
            if self.metrics is not None:
                self.metrics.count_ack()

    # --- items ---------------------------------------------------------------------------------

    def _handle(self, item: TransactionItem) -> None:
        """One item to the sink, with the filters, counts and snapshot bookkeeping it needs.

        The three items of every transaction (begin, rows, commit) go by their exact class
        straight to a method of their own: a one-row transaction is three items, and a chain of
        isinstance tests per item showed in profiles. Anything else (statements, XA, rollbacks)
        takes :meth:`_handle_other`.
        """
        kind = type(item)
        if kind is RowsEvent:
            self._handle_rows(item)  # type: ignore[arg-type]
        elif kind is TransactionBegin:
            self._handle_begin(item)  # type: ignore[arg-type]
        elif kind is TransactionCommit:
            self._handle_commit(item)  # type: ignore[arg-type]
        else:
            self._handle_other(item)

    def _handle_rows(self, item: RowsEvent) -> None:
        table = item.table
        key = (table.schema, table.table)
        signal_table = self.options.signal_table  # (None mostly: no tuple comparison then)
        if signal_table is not None and key == signal_table and not self._skipping:
            self._read_signals(item)
        snapshots = self.snapshots  # (tracking: see _handle_begin)
        if snapshots is not None and snapshots.tracking and not self._skipping:
            snapshots.observe(item)  # excluded tables too: one-time copies need them
        if self._skipping or not self._accepts(key):
            self.stats.filtered_rows += item.row_count
            return
        self.sink.handle(item)
        stats = self.stats
        stats.rows += item.row_count
        stats.tables.add(key)
        counter = (key[0], key[1], _op_name(item.kind))
        rows = self._txn_rows
        rows[counter] = rows.get(counter, 0) + item.row_count

    def _read_signals(self, item: RowsEvent) -> None:
        if item.kind is not RowsKind.INSERT:
            return
        signals, problems = signals_in(item, self._begin_at)
        for problem in problems:
            log.warning("snapshot signal ignored: %s", problem)
        self._signals.extend(signals)

    def _accepts(self, key: tuple[str, str]) -> bool:
        """``options.accepts`` of a table, remembered: it matches patterns, and the same few
        tables come back in every transaction."""
        accepted = self._accepted.get(key)
        if accepted is None:
            accepts = self.options.accepts
            accepted = accepts is None or accepts(*key)
            if len(self._accepted) >= 10_000:
                self._accepted.clear()
            self._accepted[key] = accepted
        return accepted

    def _handle_begin(self, item: TransactionBegin) -> None:
        self._txn_rows.clear()
        if self.options.signal_table is not None:
            self._signals.clear()
            self._begin_at = str(item.gtid) if item.gtid is not None else str(item.position)
        self._skipping = self._skips(item)
        if self._skipping:
            self.stats.skipped_transactions += 1
        # The coordinator's begin/observe/end change nothing while it is not tracking (no key
        # log, nothing held for a transaction): skipped then, as they would be on every
        # transaction. A key log started mid-transaction turns tracking on for the rest of it.
        snapshots = self.snapshots
        if snapshots is not None and snapshots.tracking:
            snapshots.begin()
        self.sink.handle(item)

    def _handle_commit(self, item: TransactionCommit) -> None:
        if self._signals:  # planned before the commit lands: the same flush records both
            signals, self._signals = self._signals, []
            if self.on_signal is not None and item.xa is None:
                for signal in signals:
                    self.on_signal(signal)
        snapshots = self.snapshots  # XA COMMIT always: it ends a prepared part (see end)
        if snapshots is not None and (snapshots.tracking or item.xa is not None):
            snapshots.end(item)
        self.stats.transactions += 1
        self.stats.last_commit_time_us = item.commit_time_us
        rows = self._txn_rows
        if item.xa is not None:  # XA COMMIT: the prepared part's rows land now
            rows.update(self._xa_rows.pop(item.xa, ()))
        if rows:
            # by hand, not Counter.update/subtract: those cost more than a one-row
            # transaction's whole landing bookkeeping
            unlanded = self._unlanded_rows
            for counter, n in rows.items():
                unlanded[counter] = unlanded.get(counter, 0) + n
            if self.sink.handle(item) is _ALREADY_LANDED:
                self._unlanded_rows.subtract(rows)
            rows.clear()
            return
        self.sink.handle(item)

    def _handle_other(self, item: TransactionItem) -> None:
        """Statements, XA PREPARE/ROLLBACK, rollbacks — and subclasses of the three fast
        kinds, which go to their method after the same isinstance tests as ever."""
        if isinstance(item, RowsEvent):
            self._handle_rows(item)
            return
        if isinstance(item, TransactionBegin):
            self._handle_begin(item)
            return
        if isinstance(item, TransactionCommit):
            self._handle_commit(item)
            return
        if isinstance(item, Statement):
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
        snapshots = self.snapshots
        if snapshots is not None and isinstance(item, TransactionPrepared | TransactionRollback):
            snapshots.end(item)
        if isinstance(item, TransactionPrepared):
            # its rows count when XA COMMIT lands them (and never after XA ROLLBACK)
            self._xa_rows[item.xid] = self._txn_rows.copy()
            self._txn_rows.clear()
        elif isinstance(item, TransactionRollback):
            self._txn_rows.clear()
            if item.xa is not None:
                self._xa_rows.pop(item.xa, None)
        self.sink.handle(item)

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
        options = self.options
        if begin.server_id in options.skip_server_ids:
            return True
        if not options.skip_gtid_domains:
            return False
        gtid = begin.gtid
        return isinstance(gtid, MariadbGtid) and gtid.domain in options.skip_gtid_domains

    def _count_flushes(self) -> None:
        """Count what the worker's flushes landed (they report in its thread; counted here,
        on the loop that owns the metrics and the lag, after each worker call)."""
        flushed, self._flushed[:] = self._flushed[:], []
        for one in flushed:
            self._landed_flush(one)

    def _landed_flush(self, flushed: Flushed) -> None:
        """The sink made everything committed durable: count it, and tell the lag."""
        durable, seconds = flushed.checkpoint, flushed.seconds
        self._durable = durable
        # _seq numbers snapshot chunks too; they are not source transactions
        landed = durable.seq - self._landed_seq - flushed.snapshot_chunks
        self._landed_seq = durable.seq
        stats = self.stats
        stats.landed_transactions += landed
        self._count_decode()
        stats.land_seconds += seconds or 0.0
        rows = self._unlanded_rows
        stats.landed_rows += sum(rows.values())
        metrics = self.metrics
        if metrics is not None:
            for (database, table, op), n in rows.items():
                if n > 0:
                    metrics.count_rows(database, table, op, n)
            position = durable.position
            metrics.landed(
                gtid=durable.gtid, file=position.file if position else "",
                position=position.pos if position else 0,
                commit_time=durable.commit_time_us / 1e6 if durable.commit_time_us else None,
                transactions=landed, seconds=seconds)
        rows.clear()
        self.lag.landed(durable.position, durable.commit_time_us, durable.gtid_state)
