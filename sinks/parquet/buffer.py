"""``TransactionBuffer``: the open transaction's rows, held until its COMMIT, spilled if big.

Rows of the *open* transaction are converted per ``RowsEvent`` into record batches and held
per table version. They cannot be written to their final files yet: the commit time
(``_commit_ts`` and the ``commit_date`` partition) is only known at COMMIT, and a ROLLBACK must
leave no trace. Events are first kept as they are (:class:`~sinks.parquet.rows.PendingRows`)
and converted in groups (:data:`GROUP_ROWS`, :data:`GROUP_EVENTS`); when the sink's memory
budget is exceeded the batches are *spilled* to an Arrow IPC file in staging, so a transaction
of millions of rows costs disk, not memory. At COMMIT the part writer drains them in order
(spilled ones first, read back one at a time).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from protocol.binlog.events import EventType
from protocol.binlog.model import RowsEvent, RowsKind
from protocol.binlog.transactions import Statement, TransactionBegin
from protocol.binlog.values import JsonDiff

from . import layout as L
from . import native_batch as _native_batch
from .rows import PendingRows, TransactionTags, key_changed_rows, rows_batch
from .schema import TableVersion
from .workspace import Workspace

__all__ = ["GROUP_EVENTS", "GROUP_ROWS", "METADATA_ROW_BYTES", "HeldRows", "VALUE_BYTES", "Transaction",
           "TransactionBuffer", "TxnTable", "estimate"]

log = logging.getLogger("binlake.sinks.parquet")

_UPDATE = RowsKind.UPDATE
_PARTIAL_UPDATE_ROWS = EventType.PARTIAL_UPDATE_ROWS

#: Rows events are converted to Arrow in groups of about this many rows (see rows.py)…
GROUP_ROWS = 4096
#: … or of this many events: a group's conversion reads every event's Arrow chunks again and
#: then frees the events, so small groups of small events are converted while their chunks are
#: likely still in the CPU's caches, and keep fewer objects alive for the cyclic GC to scan
#: (which matters with the default GC thresholds, far less with the daemon's: replica/cli.py).
#: 256 keeps the per-batch work (~20 Arrow calls) small per row.
GROUP_EVENTS = 256

#: Arrow bytes per row of the metadata columns (``_op`` … ``_commit_ts``, ``_missing``,
#: ``_json_diff``, ``_before`` when absent): 8 per integer, 4 per string offset, ~1 per op
#: letter and validity bit, rounded up; the GTID's and binlog file's text come on top.
METADATA_ROW_BYTES = 112

#: Arrow bytes per value, metadata columns included (14 of them), assumed for an event decoded
#: into Python values (no Arrow chunks: a type the native decoder leaves to Python, or
#: BINLAKE_NATIVE_ARROW=0).
VALUE_BYTES = 12


def estimate(version: TableVersion, event: RowsEvent, tags: TransactionTags) -> int:
    """Arrow bytes that the rows of ``event`` will take once converted, for the memory budget.

    Events decoded into Arrow chunks (the native decoder's, ``RowsEvent.arrow``) count their
    chunks' buffers — validity, data and offsets, the very bytes gathered into the batch, so
    text and binary columns count at their real size — plus the metadata columns, and
    :data:`VALUE_BYTES` per value of a column without a chunk (one a column rule made, one the
    decoder leaves to Python). Events without chunks count :data:`VALUE_BYTES` per value,
    metadata included.
    """
    rows = event.row_count
    images = event.arrow
    if images is None:
        return rows * (len(version.names) + 14) * VALUE_BYTES
    size = rows * (METADATA_ROW_BYTES + len(tags.gtid or "") + len(tags.file or ""))
    for chunks in images:  # columns landing from Python values
        if chunks is not None and None in chunks:
            size += rows * VALUE_BYTES * chunks.count(None)
    arrow_bytes = _native_batch.arrow_bytes
    if arrow_bytes is not None:  # the same sum in C: the loop below showed in profiles
        return size + arrow_bytes(images)
    for chunks in images:
        if chunks is not None:
            for chunk in chunks:
                if chunk is not None:  # (tag, nulls, validity, data, offsets)
                    size += len(chunk[3])
                    if chunk[2] is not None:
                        size += len(chunk[2])
                    if chunk[4] is not None:
                        size += len(chunk[4])
    return size


@dataclass(slots=True)
class HeldRows:
    """Rows of one table version held in memory: converted batches, then the events not
    converted yet (converted in groups: :data:`GROUP_ROWS`, :data:`GROUP_EVENTS`)."""

    version: TableVersion
    batches: list[pa.RecordBatch] = field(default_factory=list)
    nbytes: int = 0  # of batches and pending (estimated)
    pending: list[PendingRows] = field(default_factory=list)  # newer than batches
    pending_rows: int = 0
    pending_bytes: int = 0  # estimated (estimate)

    def convert(self, with_commit_time: bool) -> int:
        """Convert the pending events into one batch; returns how far the estimate was off
        (the batch's real size minus the estimate), for the memory budget."""
        batch = rows_batch(self.version, self.pending, with_commit_time=with_commit_time)
        estimated = self.pending_bytes
        self.pending = []
        self.pending_rows = 0
        self.pending_bytes = 0
        self.batches.append(batch)
        change: int = batch.nbytes - estimated  # nbytes walks every buffer: asked once
        self.nbytes += change
        return change


@dataclass(slots=True)
class TxnTable(HeldRows):
    """The open transaction's rows of one table version (staging schema: no commit time
    yet), in memory and/or spilled."""

    spill_path: str | None = None
    spill_file: Any = None
    spill_writer: Any = None


@dataclass(slots=True)
class Transaction:
    """A transaction being received: its tags, and its rows and DDL so far."""

    tags: TransactionTags
    begin: TransactionBegin
    skip: bool = False  # the lake has it already (a replayed stream)
    next_row: int = 0
    tables: dict[int, TxnTable] = field(default_factory=dict)  # by id(version)
    statements: list[Statement] = field(default_factory=list)
    spilled: bool = False  # some of its rows are in spill files
    converted: bool = False  # some of its rows are converted batches (a big transaction)


class TransactionBuffer:
    """The open transaction (:attr:`txn`) and its rows; see the module docstring."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._limit = workspace.options.memory_limit_bytes  # (asked at every rows event)
        self.txn: Transaction | None = None

    def add(self, txn: Transaction, version: TableVersion, event: RowsEvent) -> bool:
        """Hold ``event``'s rows under ``version``; True when the memory budget is exceeded."""
        table = txn.tables.get(id(version))  # a transaction's versions live as long as it does
        if table is None:
            table = txn.tables[id(version)] = TxnTable(version)
        moved: tuple[int, ...] = ()
        if event.kind is _UPDATE:  # only an UPDATE changes keys, or has partial JSON
            if event.header.type_code == _PARTIAL_UPDATE_ROWS:
                self._note_json_diffs(event)
            moved = key_changed_rows(version, event)
        rows = event.row_count
        table.pending.append(PendingRows(event, txn.tags, txn.next_row, moved))
        txn.next_row += rows + len(moved)  # its landed rows (PendingRows.landed_rows)
        table.pending_rows += rows
        size = estimate(version, event, txn.tags)
        table.pending_bytes += size
        table.nbytes += size
        workspace = self._workspace
        workspace.buffered += size
        if table.pending_rows >= GROUP_ROWS or len(table.pending) >= GROUP_EVENTS:
            self.convert(table)
            txn.converted = True
        return workspace.buffered > self._limit

    def _note_json_diffs(self, event: RowsEvent) -> None:
        """Count rows whose JSON column landed as ``_json_diff`` (no before value to apply a
        MySQL partial update to), and say once per table why the column is in ``_missing``."""
        rows = {i for values in event.after or () for i, v in enumerate(values)
                if isinstance(v, JsonDiff)}
        if not rows:
            return
        self._workspace.stats.json_diff_rows += len(rows)
        if self._workspace.first_time(f"json_diff {event.table.schema}.{event.table.table}"):
            log.warning("%s.%s: partial JSON updates without a before image "
                        "(binlog_row_image=MINIMAL with binlog_row_value_options=PARTIAL_JSON) "
                        "land as _json_diff operations, the column listed in _missing; "
                        "read_current_state applies them (first at %s:%d)",
                        event.table.schema, event.table.table, event.header.file,
                        event.header.position)

    def convert(self, table: TxnTable) -> None:
        """Convert ``table``'s pending events into one batch."""
        self._workspace.buffered += table.convert(with_commit_time=False)

    def spill_open(self) -> None:
        """Move the open transaction's batches to disk (the memory budget is exceeded)."""
        if self.txn is None:
            return
        for table in self.txn.tables.values():
            if table.pending:
                self.convert(table)
            if table.batches:
                self.txn.spilled = True
                self._spill(table)

    def _spill(self, table: TxnTable) -> None:
        workspace = self._workspace
        if table.spill_writer is None:
            table.spill_path = workspace.path(workspace.staged_name(L.staged_spill))
            workspace.io_path = table.spill_path
            table.spill_file = self._workspace.storage.open_output(table.spill_path)
            ipc_options = pa.ipc.IpcWriteOptions(compression=workspace.options.spill_compression)
            table.spill_writer = pa.ipc.new_stream(table.spill_file,
                                                   table.version.staging_schema,
                                                   options=ipc_options)
        for batch in table.batches:
            table.spill_writer.write_batch(batch)
            workspace.stats.spilled_batches += 1
            table.nbytes -= batch.nbytes
            workspace.buffered -= batch.nbytes
        table.batches.clear()

    def drain(self, table: TxnTable) -> Iterator[pa.RecordBatch]:
        """Yield a committed transaction's batches in order: spilled ones, then in-memory.
        Pending events stay (the part writer takes them as they are)."""
        if table.spill_writer is not None:
            table.spill_writer.close()
            table.spill_file.close()
            table.spill_writer = table.spill_file = None
            assert table.spill_path is not None
            with self._workspace.storage.open_input(table.spill_path) as source:
                reader = pa.ipc.open_stream(source)
                yield from reader
            self._workspace.storage.remove(table.spill_path)
            table.spill_path = None
        batches, table.batches = table.batches, []
        for batch in batches:
            table.nbytes -= batch.nbytes
            self._workspace.buffered -= batch.nbytes
        yield from batches

    def drain_all(self, table: TxnTable) -> Iterator[pa.RecordBatch]:
        """:meth:`drain`, pending events converted first (an XA transaction's prepared part)."""
        if table.pending:
            self.convert(table)
        return self.drain(table)

    def discard(self, txn: Transaction) -> None:
        """Drop a transaction's rows (rolled back, replayed, or never ended)."""
        for table in txn.tables.values():
            if table.spill_writer is not None:
                table.spill_writer.close()
                table.spill_file.close()
            storage = self._workspace.storage
            if table.spill_path is not None and storage.exists(table.spill_path):
                storage.remove(table.spill_path)
            self._workspace.buffered -= table.nbytes
        txn.tables.clear()

    def abandon(self) -> None:
        """Close the open transaction's spill files quietly (a broken sink: recovery empties
        staging)."""
        if self.txn is None:
            return
        for table in self.txn.tables.values():
            for closer in (table.spill_writer, table.spill_file):
                try:
                    if closer is not None:
                        closer.close()
                except Exception:
                    pass
            table.spill_writer = table.spill_file = None
        self.txn = None
