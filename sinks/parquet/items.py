"""``TransactionItems``: each item of the transaction stream, through the sink's roles.

A BEGIN opens a transaction in the buffer, tagged by the stream's progress (or marked as one
the lake already has: a replayed stream); its rows pass the column rules and land in the
buffer under the table's schema version (spilled when the memory budget is exceeded); its DDL
waits for the commit; the COMMIT hands its rows to the part writer, logs its DDL and moves the
resume point past it. XA PREPARE keeps the rows durable but invisible in the XA store until the
XA COMMIT lands them or XA ROLLBACK drops them. A commit that passes a size or row threshold
flushes (``flush_in_handle``) or says the caller should (``FlushPolicy.wanted``).

Without ``flush_in_handle`` (the daemon: it runs the sink's lake work on a worker thread, and
hands items over on its event loop), an item never touches the disk itself: what would —
spilling the open transaction past the memory budget, staging an XA PREPARE's rows, reading
an XA COMMIT's prepared rows back, landing or dropping a transaction that spilled (or one
converted to batches, whose landing writes row groups), deleting an XA ROLLBACK's staged
files, writing the row groups a commit filled (``PartWriter.write_due``: a part's file opened,
the row group in flight waited for) — waits in :attr:`TransactionItems.io_wanted` for
:meth:`TransactionItems.run_io`, which the caller runs on its worker before it hands over the
next item. The bookkeeping (transaction numbers, GTID state, resume position, the DDL log)
is done at once, so what the sink reports between the two is already true.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from protocol.binlog.model import BinlogPosition, RowsEvent
from protocol.binlog.transactions import (
    Statement,
    TransactionBegin,
    TransactionCommit,
    TransactionPrepared,
    TransactionRollback,
)

from ..contract import CommitOutcome
from ..errors import SinkStateError
from ..transform import Transform
from .buffer import Transaction, TransactionBuffer
from .ddllog import DdlLog
from .flush_policy import FlushPolicy
from .parts import PartWriter
from .progress import StreamProgress
from .registry import SchemaRegistry
from .workspace import Workspace
from .xastore import XaStore

__all__ = ["TransactionItems"]

log = logging.getLogger("binlake.sinks.parquet")


class TransactionItems:
    """See the module docstring. ``flush()`` is the sink's flush (a threshold passed)."""

    def __init__(self, workspace: Workspace, progress: StreamProgress, buffer: TransactionBuffer,
                 registry: SchemaRegistry, parts: PartWriter, xa: XaStore, ddl: DdlLog,
                 policy: FlushPolicy, transform: Transform | None,
                 flush: Callable[[], object]) -> None:
        self._workspace = workspace
        self._stats = workspace.stats
        self._progress = progress
        self._buffer = buffer
        self._registry = registry
        self._parts = parts
        self._xa = xa
        self._ddl = ddl
        self._policy = policy
        self._transform = transform
        self._flush = flush
        self._defer = not workspace.options.flush_in_handle
        #: Lake work left for :meth:`run_io`, in order (shared with the sink, which reads it).
        self.io: list[Callable[[], None]] = []
        #: The item classes and what handles them (the sink dispatches by ``type(item)``).
        self.handlers: dict[type, Callable[[Any], CommitOutcome | None]] = {
            RowsEvent: self.rows, TransactionBegin: self._begin,
            TransactionCommit: self._commit, Statement: self._statement,
            TransactionRollback: self._rollback, TransactionPrepared: self._prepared,
        }

    def handler_for(self, kind: type) -> Callable[[Any], CommitOutcome | None]:
        """The handler of a subclass of an item class, remembered."""
        for base in kind.__mro__[1:]:
            handler = self.handlers.get(base)
            if handler is not None:
                self.handlers[kind] = handler
                return handler
        raise SinkStateError(f"not a transaction item: {kind.__name__}")

    @property
    def io_wanted(self) -> bool:
        """Lake work an item left for :meth:`run_io` (only without ``flush_in_handle``)."""
        return bool(self.io)

    def run_io(self) -> None:
        """Do the lake work items left, in the order they left it."""
        while self.io:
            self.io.pop(0)()

    def _lake(self, work: Callable[[], None]) -> None:
        """Lake work: left for :meth:`run_io`, or done now (``flush_in_handle``)."""
        if self._defer:
            self.io.append(work)
        else:
            work()

    def drop_open(self) -> Transaction | None:
        """Drop the open transaction, if any (it will be streamed again); it."""
        txn, self._buffer.txn = self._buffer.txn, None
        if txn is not None:
            if self._defer and txn.spilled:
                self.io.append(functools.partial(self._buffer.discard, txn))
            else:
                self._buffer.discard(txn)
        return txn

    def _begin(self, begin: TransactionBegin) -> None:
        buffer = self._buffer
        if buffer.txn is not None:
            txn = self.drop_open()
            assert txn is not None
            log.warning("transaction at %s never ended; dropping its rows", txn.begin.position)
        progress = self._progress
        buffer.txn = Transaction(progress.tags(begin), begin, progress.already_landed(begin))

    def rows(self, event: RowsEvent) -> None:
        """A rows event of the open transaction (a snapshot chunk's rows too)."""
        txn = self._buffer.txn
        if txn is None:
            raise SinkStateError("rows event outside a transaction")
        if txn.skip or event.row_count == 0:
            return
        if self._transform is not None:
            event = self._transform.rows(event)
        version = self._registry.version_for(event.table, txn.tags)
        if self._buffer.add(txn, version, event):
            self._lake(self._relieve)

    def _relieve(self) -> None:
        """The memory budget is exceeded: spill the open transaction, write row groups."""
        self._buffer.spill_open()
        self._parts.relieve()

    def _statement(self, statement: Statement) -> None:
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
            self._stats.statement_dml += 1
            if self._workspace.first_time("statement_dml"):
                log.warning("statement-based DML in the binlog cannot be landed as rows "
                            "(set binlog_format=ROW); first at %s", statement.position)

    def _rollback(self, rollback: TransactionRollback) -> None:
        txn = self.drop_open()
        self._stats.rollbacks += 1
        if rollback.xa is None or txn is None or txn.skip:
            return
        # XA ROLLBACK <xid>: its prepared rows go, and — unlike a plain ROLLBACK, which the
        # binlog never holds — the group itself is a logged transaction to resume after.
        self._lake(functools.partial(self._xa.rollback, rollback.xa))
        gtid = rollback.gtid if rollback.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, rollback.end, txn.begin.timestamp * 1_000_000,
                      txn.begin.server_id)

    def _prepared(self, prepared: TransactionPrepared) -> None:
        """XA PREPARE: keep the rows durable but invisible until the outcome (see xa.py)."""
        txn = self._end("XA PREPARE")
        if txn is None:
            return
        self._lake(functools.partial(self._prepare, prepared.xid, txn))
        gtid = prepared.gtid if prepared.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, prepared.end, txn.begin.timestamp * 1_000_000,
                      txn.begin.server_id)

    def _prepare(self, xid: str, txn: Transaction) -> None:
        self._xa.prepare(xid, txn.tags.seq, txn.tags.gtid, txn.tables.values(),
                         self._buffer.drain_all, txn.begin.position)
        txn.tables.clear()

    def _end(self, what: str) -> Transaction | None:
        """The transaction ``what`` ends; None when it is one the lake already has."""
        txn, self._buffer.txn = self._buffer.txn, None
        if txn is None:
            raise SinkStateError(f"{what} outside a transaction")
        if txn.skip:
            self._buffer.discard(txn)
            self._stats.skipped_transactions += 1
            return None
        return txn

    def _commit(self, commit: TransactionCommit) -> CommitOutcome:
        """The path every transaction takes: the helpers it shares with the other items
        (:meth:`_end`, :meth:`_land`, :meth:`_advance`) are called only off its common case,
        a plain commit landed at once — a one-row transaction is mostly this method."""
        buffer = self._buffer
        txn = buffer.txn
        if txn is None or txn.skip:
            self._end("commit")  # raises outside a transaction, drops one the lake has
            return CommitOutcome.ALREADY_LANDED
        buffer.txn = None
        tags = txn.tags
        seq = tags.seq
        commit_us = commit.commit_time_us
        parts = self._parts
        date = parts.date_of(commit_us)
        xa = commit.xa
        # (a transaction converted to batches appends them, and may write row groups, at once)
        deferred = self._defer and (xa is not None or txn.spilled or txn.converted)
        if deferred:
            rows = 0
        elif xa is None:
            rows = parts.add_transaction(txn.tables.values(), buffer.drain, seq, commit_us, date)
        else:
            rows = self._land(txn, xa, seq, commit_us, date)
        if txn.statements:
            for statement in txn.statements:
                self._ddl.log(statement, seq, tags.gtid, commit_us)
        begin = txn.begin
        gtid = commit.gtid if commit.gtid is not None else begin.gtid
        self._progress.advance(tags, begin, gtid, commit.end, commit_us, commit.server_id)
        policy = self._policy
        policy.commits += 1
        if deferred:
            self.io.append(functools.partial(self._land_deferred, txn, xa, seq, commit_us, date))
            return CommitOutcome.ACCEPTED
        # What _landed does, written out: two calls fewer on every transaction's path.
        policy.rows += rows
        stats = self._stats
        stats.transactions += 1
        stats.rows += rows
        if parts.disk_due or (parts.encoder.job is not None and parts.filling()):
            self._lake(self._settle)  # a row group to write, or one in flight to wait for
        elif policy.full(parts.flush_wanted):
            self._flush_full()
        return CommitOutcome.ACCEPTED

    def _land(self, txn: Transaction, xa: str | None, seq: int, commit_us: int,
              date: str) -> int:
        """A committed transaction's rows (an XA COMMIT's prepared ones first) into the
        parts; its rows."""
        parts = self._parts
        rows = 0
        if xa is not None:
            for version, batch in self._xa.commit(xa, txn.begin.position):
                rows += parts.append_prepared(version, batch, seq, commit_us, date)
        return rows + parts.add_transaction(txn.tables.values(), self._buffer.drain, seq,
                                            commit_us, date)

    def _land_deferred(self, txn: Transaction, xa: str | None, seq: int, commit_us: int,
                       date: str) -> None:
        self._landed(self._land(txn, xa, seq, commit_us, date))

    def _landed(self, rows: int) -> None:
        """A commit's rows are in the parts: count them, then :meth:`_settle`."""
        self.committed(rows)
        self._settle()

    def _settle(self) -> None:
        """After a commit's rows joined the parts: the disk work they left (the row groups
        they filled, memory relief: ``PartWriter.write_due``), the row group in flight waited
        for if it may fill its file; then whether a flush is due."""
        parts = self._parts
        if parts.disk_due:
            parts.write_due()
        if parts.encoder.job is not None:  # a row group in flight: may it fill its file?
            parts.wait_if_filling()
        if self._policy.full(parts.flush_wanted):
            self._flush_full()

    def _advance(self, txn: Transaction, gtid: Any, end: BinlogPosition, commit_us: int,
                 server_id: int) -> None:
        """Move the resume point past ``txn`` (landed at the next flush)."""
        self._progress.advance(txn.tags, txn.begin, gtid, end, commit_us, server_id)
        self._policy.commits += 1

    def committed(self, rows: int) -> None:
        """A transaction of ``rows`` rows joined the next flush."""
        self._policy.rows += rows
        stats = self._stats
        stats.transactions += 1
        stats.rows += rows

    def flush_if_full(self) -> None:
        """A size or row threshold passed: flush now, or have the caller do it."""
        if self._policy.full(self._parts.flush_wanted):
            self._flush_full()

    def _flush_full(self) -> None:
        """A threshold passed: flush now (``flush_in_handle``), or have the caller do it."""
        if self._defer:
            self._policy.wanted = True
        else:
            self._flush()
