"""``ParquetSink``: the transaction item stream → crash-safe, schema-versioned Parquet change logs.

The sink is a short orchestrator over modules with one job each:

* ``progress.StreamProgress`` — the transaction numbers, the GTID state and position to resume
  from, and replay detection (a transaction the lake already has is skipped);
* ``registry.SchemaRegistry`` — each table's schema version, from its TABLE_MAP;
* ``buffer.TransactionBuffer`` — the open transaction's rows until COMMIT, spilled when big;
* ``parts.PartWriter`` — committed rows into staged Parquet files (row groups in the
  background, file naming, files made ahead);
* ``xastore.XaStore`` — XA transactions in doubt, from PREPARE to their outcome;
* ``ddllog.DdlLog`` — the DDL log, and the DDL a table's next version names;
* ``committer.Committer`` — a flush: files durable, then committed with the checkpoint.

Flushes happen by size (a file reached ``file_size_bytes``, or over ``MAX_OPEN_FILES`` parts
the memory budget is full), by row count (``flush_rows``), by time (``maybe_flush``: after
``flush_interval_s``, or ``catch_up_interval_s`` while the caller says the source is behind),
on request (``flush``) and at ``close``. A flush writes a file per table it touched, so a
backlog over thousands of tables is landed in few, big flushes. Only whole transactions ever
become visible, and the checkpoint says exactly which (see ``commit.py``).

Snapshot chunks (``sinks.chunks.SnapshotChunk``) land through the same path as a streamed
transaction: their rows are buffered and committed as a transaction of their own.

The sink never reads a clock: ``maybe_flush(now)`` takes the caller's monotonic time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NoReturn

from protocol.binlog.model import BinlogPosition, RowsEvent
from protocol.binlog.transactions import (
    Statement,
    TransactionBegin,
    TransactionCommit,
    TransactionItem,
    TransactionPrepared,
    TransactionRollback,
)
from protocol.failover import ServerIdentity
from protocol.gtid import GtidSet

from ..chunks import SnapshotChunk
from ..contract import CommitOutcome, Flushed, Pending
from ..errors import LakeError, SinkStateError
from ..stats import SinkStats
from ..transform import TypeOptions
from . import commit as C
from . import layout as L
from . import pieces as P
from . import small_file
from . import state as S
from . import trees as T
from .buffer import GROUP_EVENTS, GROUP_ROWS, Transaction, TransactionBuffer
from .committer import Committer
from .ddllog import MAX_PENDING_DDL, DdlLog
from .lock import LakeLock
from .options import MiB, SinkOptions
from .parts import DICTIONARY_PAGE_LIMIT, MAX_OPEN_FILES, PartWriter, commit_date
from .progress import StreamProgress
from .registry import SchemaRegistry
from .rows import PendingRows, rows_batch
from .snapshot_progress import SnapshotProgress
from .type_record import check_types
from .types import new_counter
from .workspace import Workspace
from .xastore import XaStore

__all__ = ["DICTIONARY_PAGE_LIMIT", "GROUP_EVENTS", "GROUP_ROWS", "MAX_OPEN_FILES",
           "MAX_PENDING_DDL", "MiB", "ParquetSink", "SinkOptions"]

log = logging.getLogger("binlake.sinks.parquet")

_ACCEPTED = CommitOutcome.ACCEPTED
_ALREADY_LANDED = CommitOutcome.ALREADY_LANDED


class ParquetSink:
    """Lands a transaction item stream under ``lake_dir``; see the module docstring.

    Usage: ``checkpoint = sink.open()`` (resume from it), then ``sink.handle(item)`` for every
    item, ``sink.maybe_flush(now)`` now and then, ``sink.close()`` at the end.
    ``sink.durable_position`` is the last transaction whose rows are durable and visible.
    """

    def __init__(self, lake_dir: str, options: SinkOptions | None = None) -> None:
        self.lake = os.path.abspath(lake_dir)
        self.options = options or SinkOptions()
        transform = self.options.transform
        self._transform = transform if transform is not None and transform.active else None
        self._types = transform.types if transform is not None else TypeOptions()
        workspace = self._workspace = Workspace(self.lake, self.options)
        self._counter = new_counter()
        self._progress = StreamProgress()
        self._ddl = DdlLog(workspace)
        self._parts = PartWriter(workspace, set())
        self._registry = SchemaRegistry(workspace, self._counter, self._ddl.take_pending,
                                        self._parts.prepare_version)
        self._buffer = TransactionBuffer(workspace)
        self._xa = XaStore(workspace, self._registry.stored)
        self._committer = Committer(workspace, self._parts, self._registry, self._ddl,
                                    self._xa, self._progress)
        self._lock = LakeLock(self.lake)
        self._opened = False
        self._checkpoint: C.Checkpoint | None = None
        self._snapshot_state = SnapshotProgress()
        #: Set by a LakeError: buffers and disk may disagree, so nothing more is landed.
        self._broken: LakeError | None = None
        self._unflushed_commits = 0
        self._unflushed_rows = 0
        self._unflushed_chunks = 0  # snapshot chunks the next flush lands (Flushed)
        self._dirty_since: float | None = None
        self._flush_wanted = False  # a threshold passed, the flush left to the caller
        #: The item classes and what handles them; a subclass finds its base's (handle).
        self._handlers: dict[type, Callable[[Any], CommitOutcome | None]] = {
            RowsEvent: self._on_rows, TransactionBegin: self._on_begin,
            TransactionCommit: self._on_commit, Statement: self._on_statement,
            TransactionRollback: self._on_rollback, TransactionPrepared: self._on_prepared,
        }
        #: Called after each flush that landed something (the new checkpoint, the seconds the
        #: flush took by ``clock``, the snapshot chunks it landed): the daemon's metrics and lag
        #: follow it. The sink reads no clock of its own; the caller lends one.
        self.on_flush: Callable[[Flushed], None] | None = None
        self.clock: Callable[[], float] | None = None

    @property
    def stats(self) -> SinkStats:
        """Counters since the sink was made: transactions, rows, flushes, files, …"""
        return self._workspace.stats.copy()

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> C.Checkpoint | None:
        """Take the lake's writer lock, recover the lake (finish or discard a half-done commit)
        and return where to resume.

        Raises :class:`~sinks.errors.LakeLocked` (another writer holds the lake; nothing was
        touched) or :class:`~sinks.errors.LakeError`.
        """
        self._lock.acquire()
        try:
            S.check_lake(self.lake)  # a lake of a newer binlake: refused before recovery
            doc = C.recover(self.lake)
            check_types(self.lake, self._types, new_lake=doc is None)  # before anything lands
        except OSError as exc:
            self._lock.release()
            raise LakeError.from_os_error(exc, self.lake, "recovering the lake") from exc
        except BaseException:
            self._lock.release()
            raise
        T.warn_once(log.warning)
        small_file.warn_once(log.warning)
        try:  # before the sink writes anything: see commit._OsFileSystem
            C.OS.watch(self.lake)
        except OSError:
            pass  # then every flush fsyncs path by path, as on any other filesystem
        self._opened = True
        if doc is None:
            return None
        state = S.LakeState.from_json(doc, self.lake)
        checkpoint = self._checkpoint = state.checkpoint
        self._progress.restore(checkpoint)
        self._snapshot_state = state.snapshot
        self._ddl.restore(state.pending_ddl)
        self._xa.restore(state.xa_prepared)
        return checkpoint

    @property
    def durable_position(self) -> C.Checkpoint | None:
        """The last landed transaction: resume after it, and ACK (semi-sync) up to it."""
        return self._checkpoint

    @property
    def unlanded(self) -> bool:
        """Whether anything handled is not durable yet (an open transaction, unflushed
        commits)."""
        return self._buffer.txn is not None or self._unflushed_commits > 0

    @property
    def invalid_temporal_count(self) -> int:
        """Zero dates (and other unrepresentable temporals) landed as NULL so far."""
        return self._counter.invalid_temporal

    def close(self) -> None:
        """Land every committed transaction, drop an unfinished one (it will be streamed again),
        and release the lake's lock.

        A broken sink (see :meth:`_failed`) lands nothing more: its last checkpoint stands.
        """
        if not self._opened:
            return
        try:
            if self._broken is None:
                txn = self._buffer.txn
                if txn is not None:
                    self._buffer.txn = None
                    self._buffer.discard(txn)
                self.flush()
        finally:
            if self._broken is not None:
                self._parts.abandon()
                self._buffer.abandon()
            self._parts.close()
            self._opened = False
            C.OS.unwatch(self.lake)
            self._lock.release()

    def _failed(self, exc: OSError, operation: str) -> LakeError:
        """Turn an ``OSError`` of the lake into a :class:`LakeError` and break the sink.

        A write that failed half-way (a row group cut short by ENOSPC, a commit stopped between
        renames) leaves buffers that no longer match the disk; writing them again could land
        rows twice. So nothing more is landed: the durable checkpoint stands, and the next
        :meth:`open` (a restart) rolls forward or discards whatever the failure left.
        """
        error = LakeError.from_os_error(exc, self._workspace.io_path or self.lake, operation)
        self._broken = error
        return error

    def _check_unbroken(self) -> None:
        """Refuse anything more of a broken sink."""
        if self._broken is not None:
            raise SinkStateError(f"the sink stopped after a lake error ({self._broken}); "
                                 "open a new one to recover")

    def _check_usable(self, what: str) -> None:
        """Refuse ``what`` on a broken sink, or one not open."""
        self._check_unbroken()
        if not self._opened:
            raise SinkStateError(f"ParquetSink.{what} before open() or after close()")

    def _refuse(self) -> NoReturn:
        self._check_usable("handle()")
        raise AssertionError("unreachable: the sink is usable")

    # --- the item stream -----------------------------------------------------------------------

    def handle(self, item: TransactionItem) -> CommitOutcome | None:
        """Consume one item of the transaction stream (see ``protocol.binlog.transactions``).

        A commit returns ALREADY_LANDED for a transaction the checkpoint covers (a replayed
        stream), else ACCEPTED; other items return None."""
        if not self._opened or self._broken is not None:
            self._refuse()
        handler = self._handlers.get(type(item))
        if handler is None:
            handler = self._handler_for(type(item))
        try:  # free in CPython 3.11+ while nothing is raised
            return handler(item)
        except OSError as exc:
            raise self._failed(exc, "landing a transaction") from exc

    def _handler_for(self, kind: type) -> Callable[[Any], CommitOutcome | None]:
        """The handler of a subclass of an item class, remembered."""
        for base in kind.__mro__[1:]:
            handler = self._handlers.get(base)
            if handler is not None:
                self._handlers[kind] = handler
                return handler
        raise SinkStateError(f"not a transaction item: {kind.__name__}")

    def _on_begin(self, begin: TransactionBegin) -> None:
        buffer = self._buffer
        if buffer.txn is not None:
            log.warning("transaction at %s never ended; dropping its rows",
                        buffer.txn.begin.position)
            buffer.discard(buffer.txn)
        progress = self._progress
        buffer.txn = Transaction(progress.tags(begin), begin, progress.already_landed(begin))

    def _on_rows(self, event: RowsEvent) -> None:
        txn = self._buffer.txn
        if txn is None:
            raise SinkStateError("rows event outside a transaction")
        if txn.skip or event.row_count == 0:
            return
        if self._transform is not None:
            event = self._transform.rows(event)
        version = self._registry.version_for(event.table, txn.tags)
        if self._buffer.add(txn, version, event):
            self._buffer.spill_open()
            self._parts.relieve()

    def _on_statement(self, statement: Statement) -> None:
        txn = self._buffer.txn
        if txn is None:
            raise SinkStateError("statement outside a transaction")
        if txn.skip:
            return
        if statement.is_ddl:
            txn.statements.append(statement)
        elif statement.query.lstrip()[:3].upper() == "XA ":
            pass  # XA COMMIT/ROLLBACK <xid>: the outcome arrives as the group's commit/rollback
        else:
            self._workspace.stats.statement_dml += 1
            if self._workspace.first_time("statement_dml"):
                log.warning("statement-based DML in the binlog cannot be landed as rows "
                            "(set binlog_format=ROW); first at %s", statement.position)

    def _on_rollback(self, rollback: TransactionRollback) -> None:
        txn = self._buffer.txn
        if txn is not None:
            self._buffer.txn = None
            self._buffer.discard(txn)
        self._workspace.stats.rollbacks += 1
        if rollback.xa is None or txn is None or txn.skip:
            return
        # XA ROLLBACK <xid>: its prepared rows go, and — unlike a plain ROLLBACK, which the
        # binlog never holds — the group itself is a logged transaction to resume after.
        self._xa.rollback(rollback.xa)
        gtid = rollback.gtid if rollback.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, rollback.end, txn.begin.timestamp * 1_000_000,
                      txn.begin.server_id)

    def _on_prepared(self, prepared: TransactionPrepared) -> None:
        """XA PREPARE: keep the rows durable but invisible until the outcome (see xa.py)."""
        txn = self._end_transaction("XA PREPARE")
        if txn is None:
            return
        self._xa.prepare(prepared.xid, txn.tags.seq, txn.tags.gtid, txn.tables.values(),
                         self._buffer.drain_all, txn.begin.position)
        txn.tables.clear()
        gtid = prepared.gtid if prepared.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, prepared.end, txn.begin.timestamp * 1_000_000,
                      txn.begin.server_id)

    def _end_transaction(self, what: str) -> Transaction | None:
        """The transaction ``what`` ends; None when it is one the lake already has."""
        txn = self._buffer.txn
        if txn is None:
            raise SinkStateError(f"{what} outside a transaction")
        self._buffer.txn = None
        if txn.skip:
            self._buffer.discard(txn)
            self._workspace.stats.skipped_transactions += 1
            return None
        return txn

    def _on_commit(self, commit: TransactionCommit) -> CommitOutcome:
        txn = self._end_transaction("commit")
        if txn is None:
            return _ALREADY_LANDED
        seq = txn.tags.seq
        commit_us = commit.commit_time_us
        parts = self._parts
        date = parts.date_of(commit_us)
        rows = 0
        if commit.xa is not None:
            for version, batch in self._xa.commit(commit.xa, txn.begin.position):
                rows += parts.append_prepared(version, batch, seq, commit_us, date)
        rows += parts.add_transaction(txn.tables.values(), self._buffer.drain, seq, commit_us,
                                      date)
        for statement in txn.statements:
            self._ddl.log(statement, seq, txn.tags.gtid, commit_us)
        gtid = commit.gtid if commit.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, commit.end, commit_us, commit.server_id)
        self._committed(rows)
        parts.wait_if_filling()
        self._flush_if_full()
        return _ACCEPTED

    def _advance(self, txn: Transaction, gtid: Any, end: BinlogPosition, commit_us: int,
                 server_id: int) -> None:
        """Move the resume point past ``txn`` (landed at the next flush)."""
        self._progress.advance(txn.tags, txn.begin, gtid, end, commit_us, server_id)
        self._unflushed_commits += 1

    def _committed(self, rows: int) -> None:
        """A transaction of ``rows`` rows joined the next flush."""
        self._unflushed_rows += rows
        stats = self._workspace.stats
        stats.transactions += 1
        stats.rows += rows

    def _flush_if_full(self) -> None:
        """A size or row threshold passed: flush now, or have the caller do it."""
        if self._parts.flush_wanted or self._unflushed_rows >= self.options.flush_rows:
            if self.options.flush_in_handle:
                self.flush()
            else:
                self._flush_wanted = True

    @property
    def handled_gtids(self) -> GtidSet | None:
        """MySQL: the checkpoint's GTID set plus every transaction handled since."""
        return self._progress.gtid_set

    def prepared_tables(self, xid: str) -> frozenset[tuple[str, str]] | None:
        """The ``(database, table)`` pairs an in-doubt XA transaction's prepared part changed,
        as the lake holds it (also after a restart); None when no prepared part of ``xid`` is
        in the lake."""
        return self._xa.tables(xid)

    # --- the source server and the GTID state (failover) -----------------------------------

    @property
    def gtid_state_complete(self) -> bool:
        """Whether the GTID state covers everything before the lake's start (see
        :class:`~sinks.parquet.commit.Checkpoint`): only then may a dump start from it."""
        return self._progress.gtid_complete

    @property
    def gtid_seed(self) -> str | None:
        """The GTID state a new lake was seeded with (see :meth:`seed_gtid_state`)."""
        return self._progress.gtid_seed

    @property
    def seedable(self) -> bool:
        """A new lake, nothing landed or seeded yet: :meth:`seed_gtid_state` may be called."""
        return (self._checkpoint is None and not self._progress.seq
                and self._buffer.txn is None and not self._progress.gtid_complete)

    @property
    def server(self) -> ServerIdentity | None:
        """The server the stream comes from (recorded in the checkpoint), if known."""
        return self._progress.server

    def note_server(self, server: ServerIdentity) -> None:
        """The server the stream comes from now; the next flush records it (promptly: a
        checkpoint that still named the old server would make the next start warn again).
        Another server than the recorded one makes the binlog position void."""
        self._check_unbroken()
        if server == self._progress.server:
            return
        self._progress.note_server(server)
        if self._checkpoint is not None or self._unflushed_commits:
            self._unflushed_commits += 1

    def seed_gtid_state(self, state: str, flavor: str) -> None:
        """A new lake's GTID state before its first transaction: the server's state at the
        start point, so that the state covers everything before the lake (a dump by GTID then
        sends exactly what follows). Refused once anything is landed."""
        self._check_unbroken()
        if not self.seedable:
            raise SinkStateError("seed_gtid_state() after transactions were landed")
        self._progress.seed(state, flavor)

    def complete_gtid_state(self, state: str) -> None:
        """A MariaDB lake begun before its GTID state was seeded: ``state`` is the server's
        at the checkpoint's binlog position (the caller checked it holds the lake's GTIDs), so
        it adds the domains no landed transaction named; per domain the newer GTID wins (what
        is handed over but not flushed yet may be ahead). Committed with the next flush."""
        self._check_unbroken()
        self._progress.complete(state)
        self._unflushed_commits += 1

    def diverge(self, state: str, record: dict[str, Any]) -> None:
        """Go on from ``state`` (where the lake's and the server's histories agree) although
        the lake holds transactions the server lacks — an explicit choice, kept in the
        checkpoint's ``divergences`` as ``record`` (JSON data) and committed at once."""
        self._check_unbroken()
        if self._buffer.txn is not None:
            raise SinkStateError("diverge() inside a transaction")
        self._progress.diverge(state, record)
        self._unflushed_commits += 1
        self.flush()

    # --- snapshots -------------------------------------------------------------------------------

    @property
    def snapshot_state(self) -> dict[str, Any]:
        """The snapshot progress as of the last landed chunk (a copy; JSON data).

        It is committed in the checkpoint (key ``snapshot``) together with the chunks it
        describes, so after a crash it says exactly which chunks are in the lake.
        """
        return self._snapshot_state.to_json()

    def land_chunk(self, chunk: SnapshotChunk) -> int:
        """Land a snapshot chunk (see ``sinks.chunks``) and make its progress the snapshot's;
        returns the chunk's ``_seq`` (unchanged when it has no rows).

        A chunk with rows must come between transactions, with ``chunk.position`` the stream's
        position there: the chunk is consistent with it. The GTID state and last commit are
        untouched (a chunk is not a binlog transaction); the resume position moves to
        ``position`` if that is later. A chunk staged in pieces is committed at once; one in
        memory with the next flush. A chunk without rows or position records the progress
        alone (a new lake's plan writes no checkpoint by itself).
        """
        self._check_usable("land_chunk()")
        position = chunk.position
        if position is not None and self._buffer.txn is not None:
            raise SinkStateError("land_chunk() inside a transaction")
        self._snapshot_state = SnapshotProgress.from_json(chunk.progress)
        if position is None:
            if self._checkpoint is not None or self._unflushed_commits:
                self._unflushed_commits += 1  # a new lake's first flush brings it along
            return self._progress.seq
        self._unflushed_commits += 1  # at least the progress must reach the checkpoint
        self._progress.reach(position)
        try:
            if chunk.staged is not None:
                return self._land_staged(chunk.staged, position, chunk.read_time_us)
            if chunk.rows is None or chunk.rows.row_count == 0:
                return self._progress.seq
            return self._land_rows(chunk.rows, position, chunk.read_time_us)
        except OSError as exc:
            raise self._failed(exc, "landing a snapshot chunk") from exc

    def _land_rows(self, event: RowsEvent, position: BinlogPosition, read_time_us: int) -> int:
        """A chunk in memory: the transaction path, with tags of its own."""
        progress = self._progress
        seq = progress.seq + 1
        txn = Transaction(StreamProgress.untagged(seq, position), TransactionBegin(
            gtid=None, position=position, timestamp=read_time_us // 1_000_000, server_id=0))
        self._buffer.txn = txn
        try:
            self._on_rows(event)
        finally:
            self._buffer.txn = None
        rows = self._parts.add_transaction(txn.tables.values(), self._buffer.drain, seq,
                                           read_time_us, commit_date(read_time_us))
        progress.seq = seq
        self._landed_chunk(rows)
        self._flush_if_full()
        return seq

    def _land_staged(self, staged: P.StagedChunk, position: BinlogPosition,
                     read_time_us: int) -> int:
        """A chunk staged in pieces: a file per piece (read back one at a time), committed at
        once — every piece visible, or (a crash before) none."""
        if not staged.rows:
            P.remove_pieces(staged)
            return self._progress.seq
        seq = self._progress.seq + 1
        version = staged.version
        date = commit_date(read_time_us)
        for path in staged.pieces:
            table = P.landed_piece(path, version, seq, position, read_time_us)
            self._parts.land_file(version, date, seq, table)
            del table
            C.OS.remove(path)
        staged.pieces.clear()
        self._progress.seq = seq
        self._landed_chunk(staged.rows)
        self.flush()  # the pieces' one commit
        return seq

    def _landed_chunk(self, rows: int) -> None:
        self._committed(rows)
        self._unflushed_chunks += 1
        stats = self._workspace.stats
        stats.snapshot_rows += rows
        stats.snapshot_chunks += 1

    def stage_piece(self, staged: P.StagedChunk | None, event: RowsEvent) -> P.StagedChunk:
        """Convert a piece of a snapshot chunk too big to hold (a ``READ`` rows event) and write
        it to staging, invisible; returns the chunk's staged pieces (``staged``, or new ones
        when None), to land with :meth:`land_chunk` or drop with ``StagedChunk.discard``
        (see ``pieces.py``). May run while the stream is inside a transaction: it touches
        nothing a transaction or a flush uses."""
        self._check_usable("stage_piece()")
        workspace = self._workspace
        try:
            if self._transform is not None:
                event = self._transform.rows(event)
            if staged is None:
                tags = StreamProgress.untagged(self._progress.seq + 1, None)
                staged = P.StagedChunk(self._registry.version_for(event.table, tags))
            version = staged.version
            # _seq and the position are placeholders until the landing (pieces.landed_piece).
            batch = rows_batch(version, [PendingRows(event, StreamProgress.untagged(0, None),
                                                     staged.rows, ())],
                               with_commit_time=False)
            path = workspace.io_path = workspace.path(workspace.staged_name(L.staged_piece))
            P.write_piece(path, version, batch, self.options.spill_compression)
        except OSError as exc:
            raise self._failed(exc, "staging a snapshot chunk") from exc
        staged.pieces.append(path)
        staged.rows += event.row_count
        staged.peak_rows = max(staged.peak_rows, event.row_count)
        return staged

    # --- flushing ----------------------------------------------------------------------------------

    @property
    def flush_wanted(self) -> bool:
        """A commit passed a size or row threshold (``flush_in_handle=False``): flush next."""
        return self._flush_wanted

    def maybe_flush(self, now: float, *, behind: bool = False) -> bool:
        """:meth:`flush` if :meth:`flush_due`; whether it flushed."""
        if not self.flush_due(now, behind=behind):
            return False
        self.flush()
        return True

    def flush_due(self, now: float, *, behind: bool = False) -> bool:
        """Whether committed data has waited ``flush_interval_s`` (``now``: a monotonic clock).

        ``behind``: the caller knows more changes are already waiting at the source (a backlog
        being caught up). Then freshness buys nothing — the next changes are there already —
        and every flush costs a file per table it touched, so only ``catch_up_interval_s``
        (the longer wait) flushes by time; size (``file_size_bytes``) and ``flush_rows`` still
        flush as always. Once the caller is no longer behind, data older than
        ``flush_interval_s`` flushes at the next call.
        """
        if not self._opened or self._unflushed_commits == 0:
            self._dirty_since = None
            return False
        if self._dirty_since is None:
            self._dirty_since = now
            return False
        interval = self.options.flush_interval_s
        if behind:
            interval = max(interval, self.options.catch_up_interval_s)
        return now - self._dirty_since >= interval

    def pending(self, now: float, *, behind: bool = False) -> Pending:
        """What the next flush lands, and when :meth:`flush_due` will want it by time."""
        lands_in = None
        if self._opened and self._unflushed_commits:
            interval = self.options.flush_interval_s
            if behind:
                interval = max(interval, self.options.catch_up_interval_s)
            since = self._dirty_since if self._dirty_since is not None else now
            lands_in = max(0.0, since + interval - now)
        return Pending(self._unflushed_commits, self._workspace.buffered, lands_in,
                       self.options.file_size_bytes)

    def flush(self) -> C.Checkpoint | None:
        """Make every committed transaction durable and visible; returns the new checkpoint.

        Raises :class:`~sinks.errors.LakeError` (and breaks the sink) when the lake refuses a
        write; the checkpoint then stays where it was.
        """
        self._check_unbroken()
        if self._unflushed_commits == 0 and not self._parts.closed_files:
            return self._checkpoint
        clock = self.clock
        started = clock() if clock is not None else 0.0
        try:
            checkpoint = self._committer.flush(self._snapshot_state)
        except OSError as exc:
            raise self._failed(exc, "committing to the lake") from exc
        self._checkpoint = checkpoint
        self._unflushed_commits = 0
        self._unflushed_rows = 0
        self._dirty_since = None
        self._flush_wanted = False
        chunks, self._unflushed_chunks = self._unflushed_chunks, 0
        if self.on_flush is not None:
            self.on_flush(Flushed(checkpoint, clock() - started if clock is not None else None,
                                  chunks))
        return checkpoint
