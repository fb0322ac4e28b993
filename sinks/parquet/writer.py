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
* ``items.TransactionItems`` — each item of the stream (BEGIN … COMMIT, XA) through them;
* ``snapshot_landing.SnapshotLanding`` — snapshot chunks, and the snapshot progress;
* ``flush_policy.FlushPolicy`` — when to flush (size, row count, time);
* ``committer.Committer`` — a flush: files durable, then committed with the checkpoint;
* ``recovery`` — taking the lake: its lock, its format, a half-done commit finished.

Only whole transactions ever become visible, and the checkpoint says exactly which (see
``commit.py``). The sink never reads a clock: ``maybe_flush(now)`` takes the caller's time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from protocol.binlog.model import RowsEvent
from protocol.binlog.transactions import TransactionItem
from protocol.failover import ServerIdentity
from protocol.gtid import GtidSet

from ..chunks import SnapshotChunk
from ..contract import CommitOutcome, Flushed, Pending
from ..errors import LakeError, SinkError, SinkStateError
from ..stats import SinkStats
from ..storage import Storage
from ..transform import TypeOptions
from . import commit as C
from . import pieces as P
from . import recovery
from .buffer import GROUP_EVENTS, GROUP_ROWS, TransactionBuffer
from .committer import Committer
from .ddllog import MAX_PENDING_DDL, DdlLog
from .flush_policy import FlushPolicy
from .items import TransactionItems
from .lock import LakeLock
from .options import MiB, SinkOptions
from .parts import DICTIONARY_PAGE_LIMIT, MAX_OPEN_FILES, PartWriter
from .progress import StreamProgress
from .registry import SchemaRegistry
from .snapshot_landing import SnapshotLanding
from .snapshot_progress import SnapshotProgress
from .types import new_counter
from .workspace import LakeMirror, Workspace
from .xastore import XaStore

__all__ = ["DICTIONARY_PAGE_LIMIT", "GROUP_EVENTS", "GROUP_ROWS", "MAX_OPEN_FILES",
           "MAX_PENDING_DDL", "MiB", "ParquetSink", "SinkOptions"]

log = logging.getLogger("binlake.sinks.parquet")


class ParquetSink:
    """Lands a transaction item stream under ``lake_dir`` (``sinks.contract.Sink``, whose
    docstrings say what each method promises); see the module docstring."""

    def __init__(self, lake_dir: str, options: SinkOptions | None = None,
                 storage: Storage = C.OS, mirror: LakeMirror | None = None) -> None:
        self.lake = os.path.abspath(lake_dir)
        self.options = options or SinkOptions()
        rules = self.options.transform
        self._types = rules.types if rules is not None else TypeOptions()
        transform = rules if rules is not None and rules.active else None
        workspace = self._workspace = Workspace(self.lake, self.options, storage,
                                                mirror=mirror)
        self._counter = new_counter()
        self._progress = StreamProgress()
        self._ddl = DdlLog(workspace)
        self._parts = PartWriter(workspace, set())
        self._registry = SchemaRegistry(workspace, self._counter, self._ddl.take_pending,
                                        self._parts.prepare_version)
        self._buffer = TransactionBuffer(workspace)
        self._xa = XaStore(workspace, self._registry.stored)
        self._policy = FlushPolicy(self.options)
        self._items = TransactionItems(workspace, self._progress, self._buffer, self._registry,
                                       self._parts, self._xa, self._ddl, self._policy,
                                       transform, self.flush)
        self._snapshots = SnapshotLanding(workspace, self._progress, self._buffer, self._parts,
                                          self._registry, transform, self._items.rows,
                                          self._policy)
        self._committer = Committer(workspace, self._parts, self._registry, self._ddl,
                                    self._xa, self._progress)
        self._lock = LakeLock(self.lake, storage)
        self._opened = False
        self._checkpoint: C.Checkpoint | None = None
        #: Set by a LakeError: buffers and disk may disagree, so nothing more is landed.
        self._broken: SinkError | None = None
        self._handlers = self._items.handlers  # by item class; a subclass finds its base's
        self._io = self._items.io  # lake work items left (flush_in_handle=False): run_io
        #: The last call left lake work for :meth:`run_io` (``flush_in_handle=False``).
        #: ``io_wanted`` and ``flush_wanted`` are plain attributes, set again at the end of
        #: every call that may change them (:meth:`_note_wants`): the caller reads both after
        #: every item, three times per one-row transaction, and a property is a Python call.
        self.io_wanted = False
        #: A size or row threshold passed (``flush_in_handle=False``): the caller flushes.
        self.flush_wanted = False
        self.on_flush: Callable[[Flushed], None] | None = None  # (in the flush's thread)
        self.clock: Callable[[], float] | None = None  # lent by the caller: Flushed.seconds

    @property
    def stats(self) -> SinkStats:
        """Counters since the sink was made: transactions, rows, flushes, files, …"""
        return self._workspace.stats.copy()

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> C.Checkpoint | None:
        """Take and recover the lake (``recovery.take``); where to resume (None: a new lake)."""
        state = recovery.take(self.lake, self._lock, self._types, self._workspace.storage,
                              self._workspace.mirror)
        self._opened = True
        if state is None:
            return None
        checkpoint = self._checkpoint = state.checkpoint
        self._progress.restore(checkpoint)
        self._snapshots.state = state.snapshot
        self._ddl.restore(state.pending_ddl)
        self._xa.restore(state.xa_prepared)
        return checkpoint

    @property
    def durable_position(self) -> C.Checkpoint | None:
        return self._checkpoint

    @property
    def unlanded(self) -> bool:
        return self._buffer.txn is not None or self._policy.commits > 0 or bool(self._io)

    @property
    def invalid_temporal_count(self) -> int:
        """Zero dates (and other unrepresentable temporals) landed as NULL so far."""
        return self._counter.invalid_temporal

    def close(self) -> None:
        """Land every committed transaction, drop an unfinished one (it will be streamed again),
        and release the lake. A broken sink (see :meth:`_failed`) lands nothing more."""
        if not self._opened:
            return
        try:
            if self._broken is None:
                self._items.drop_open()
                self._items.run_io()
                self.flush()
        finally:
            if self._broken is not None:
                self._parts.abandon()
                self._buffer.abandon()
            self._parts.close()
            self._opened = False
            recovery.release(self.lake, self._lock, self._workspace.storage,
                             self._workspace.mirror)

    def _failed(self, exc: OSError, operation: str) -> LakeError:
        """Turn an ``OSError`` of the lake into a :class:`LakeError` and break the sink: a write
        that failed half-way leaves buffers that no longer match the disk, and writing them
        again could land rows twice. The durable checkpoint stands; the next :meth:`open`
        rolls forward or discards whatever the failure left."""
        error = LakeError.from_os_error(exc, self._workspace.io_path or self.lake, operation)
        self._broken = error
        return error

    def _check_usable(self, what: str, *, opened: bool = True) -> None:
        """Refuse ``what`` on a broken sink (or, ``opened``, one not open)."""
        if self._broken is not None:
            raise SinkStateError(f"the sink stopped after a lake error ({self._broken}); "
                                 "open a new one to recover")
        if opened and not self._opened:
            raise SinkStateError(f"ParquetSink.{what} before open() or after close()")

    # --- the item stream -----------------------------------------------------------------------

    def handle(self, item: TransactionItem) -> CommitOutcome | None:
        """One item of the transaction stream: a commit's outcome, else None. Lake work the
        previous item left and the caller did not run (:meth:`run_io`) is done first."""
        if not self._opened or self._broken is not None:
            self._check_usable("handle()")
        handler = self._handlers.get(type(item))
        if handler is None:
            handler = self._items.handler_for(type(item))
        io = self._io
        try:  # free in CPython 3.11+ while nothing is raised
            if io:
                self._items.run_io()
            return handler(item)
        except OSError as exc:
            raise self._failed(exc, "landing a transaction") from exc
        finally:  # _note_wants, inline: this runs for every item
            self.io_wanted = bool(io)
            self.flush_wanted = self._policy.wanted

    def _note_wants(self) -> None:
        """Set :attr:`io_wanted` and :attr:`flush_wanted` from the items' lake work and the
        flush policy (after any call that may have changed either)."""
        self.io_wanted = bool(self._io)
        self.flush_wanted = self._policy.wanted

    def run_io(self) -> None:
        """The lake work items left: spills, XA files, transactions that spilled."""
        self._check_usable("run_io()")
        try:
            self._items.run_io()
        except OSError as exc:
            raise self._failed(exc, "landing a transaction") from exc
        finally:
            self._note_wants()

    @property
    def handled_gtids(self) -> GtidSet | None:
        return self._progress.gtid_set

    def prepared_tables(self, xid: str) -> frozenset[tuple[str, str]] | None:
        return self._xa.tables(xid)

    # --- the source server and the GTID state (failover; see StreamProgress) ----------------

    @property
    def gtid_state_complete(self) -> bool:
        return self._progress.gtid_complete

    @property
    def gtid_seed(self) -> str | None:
        return self._progress.gtid_seed

    @property
    def seedable(self) -> bool:
        return (self._checkpoint is None and not self._progress.seq
                and self._buffer.txn is None and not self._progress.gtid_complete)

    @property
    def server(self) -> ServerIdentity | None:
        return self._progress.server

    def note_server(self, server: ServerIdentity) -> None:
        """Recorded by the next flush (promptly: a checkpoint that still named the old server
        would make the next start warn again)."""
        self._check_usable("note_server()", opened=False)
        if server == self._progress.server:
            return
        self._progress.note_server(server)
        if self._checkpoint is not None or self._policy.commits:
            self._policy.commits += 1

    def seed_gtid_state(self, state: str, flavor: str) -> None:
        self._check_usable("seed_gtid_state()", opened=False)
        if not self.seedable:
            raise SinkStateError("seed_gtid_state() after transactions were landed")
        self._progress.seed(state, flavor)

    def complete_gtid_state(self, state: str) -> None:
        """Per domain the newer GTID wins (what is handed over but not flushed yet may be
        ahead); committed with the next flush."""
        self._check_usable("complete_gtid_state()", opened=False)
        self._progress.complete(state)
        self._policy.commits += 1

    def diverge(self, state: str, record: dict[str, Any]) -> None:
        """Committed at once (``flush_in_handle=False``: :attr:`flush_wanted` asks the caller)."""
        self._check_usable("diverge()", opened=False)
        if self._buffer.txn is not None:
            raise SinkStateError("diverge() inside a transaction")
        self._progress.diverge(state, record)
        self._policy.commits += 1
        if self.options.flush_in_handle:
            self.flush()
        else:
            self._policy.wanted = self.flush_wanted = True

    # --- snapshots (see snapshot_landing) --------------------------------------------------------

    @property
    def snapshot_state(self) -> SnapshotProgress:
        """The snapshot progress as of the last chunk handed over (a frozen record)."""
        return self._snapshots.state

    def land_chunk(self, chunk: SnapshotChunk) -> int:
        """A chunk with rows comes between transactions (at ``chunk.position``, which the resume
        position moves to if later); the GTID state and last commit are untouched. A chunk in
        memory lands with the next flush, one staged in pieces at once; one without rows or
        position records the progress alone."""
        self._check_usable("land_chunk()")
        position = chunk.position
        if position is not None and self._buffer.txn is not None:
            raise SinkStateError("land_chunk() inside a transaction")
        if position is not None and self._io:
            self.run_io()  # the transactions before the chunk's _seq land first
        try:
            landed = self._snapshots.land(chunk, self._checkpoint is not None)
            if landed is None:
                return self._progress.seq
            self._items.committed(landed.rows)
            if self._parts.disk_due:  # (this runs where the sink's disk work does)
                self._parts.write_due()
            if chunk.staged is not None:
                self.flush()  # the pieces' one commit
            else:
                self._items.flush_if_full()
            return landed.seq
        except OSError as exc:
            raise self._failed(exc, "landing a snapshot chunk") from exc
        finally:
            self._note_wants()

    def stage_piece(self, staged: P.StagedChunk | None, event: RowsEvent) -> P.StagedChunk:
        """See ``SnapshotLanding.stage_piece``."""
        self._check_usable("stage_piece()")
        try:
            return self._snapshots.stage_piece(staged, event)
        except OSError as exc:
            raise self._failed(exc, "staging a snapshot chunk") from exc

    # --- flushing (see flush_policy) -------------------------------------------------------------

    def maybe_flush(self, now: float, *, behind: bool = False) -> bool:
        if not self.flush_due(now, behind=behind):
            return False
        self.flush()
        return True

    def flush_due(self, now: float, *, behind: bool = False) -> bool:
        return self._opened and self._policy.due(now, behind)

    def pending(self, now: float, *, behind: bool = False) -> Pending:
        lands_in = self._policy.lands_in(now, behind) if self._opened else None
        return Pending(self._policy.commits, self._workspace.buffered, lands_in,
                       self.options.file_size_bytes)

    def flush(self) -> C.Checkpoint | None:
        """Make every committed transaction durable and visible; the new checkpoint. A
        :class:`~sinks.errors.LakeError` breaks the sink; the checkpoint stays where it was."""
        self._check_usable("flush()", opened=False)
        if self._policy.commits == 0 and not self._parts.closed_files:
            return self._checkpoint
        clock = self.clock
        started = clock() if clock is not None else 0.0
        try:
            self._items.run_io()
            checkpoint = self._committer.flush(self._snapshots.state)
        except OSError as exc:
            raise self._failed(exc, "committing to the lake") from exc
        except SinkError as exc:
            # The lake's store refused the commit, or another writer took the lake (a mirror's
            # publish): the local commit happened, so the buffers no longer match the spool, as
            # after an OSError. Broken, the sink lands nothing more (close() does not flush
            # again), and this error, not a later one, is what stops the daemon.
            self._broken = exc
            raise
        finally:
            self._note_wants()
        self._checkpoint = checkpoint
        chunks = self._policy.flushed()
        self.flush_wanted = False  # (flushed() cleared the policy's)
        if self.on_flush is not None:
            self.on_flush(Flushed(checkpoint, clock() - started if clock is not None else None,
                                  chunks))
        return checkpoint
