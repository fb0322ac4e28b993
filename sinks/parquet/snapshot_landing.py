"""``SnapshotLanding``: snapshot chunks into the lake, as transactions of their own.

A chunk (``sinks.chunks.SnapshotChunk``) lands between two streamed transactions, at the
stream's position there, and takes the next ``_seq``. Its rows come one of two ways:

* in memory — they take the streamed transaction's path (the orchestrator's rows handler:
  column rules, schema version, buffer), under tags of their own (no GTID, ``position`` as
  binlog file and position, the read time as ``_commit_ts``), and land with the next flush;
* staged in pieces (a table read whole by one SELECT, too big to hold) — each piece was
  converted and written to staging as it was read (:meth:`SnapshotLanding.stage_piece`); at
  the landing every piece becomes a part file of the chunk's ``_seq``, and the caller commits
  them at once: every piece visible, or (a crash before) none.

It also keeps the snapshot progress (``snapshot_progress.SnapshotProgress``) that the next
flush commits in the checkpoint with the chunks it describes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from protocol.binlog.model import BinlogPosition, RowsEvent
from protocol.binlog.transactions import TransactionBegin

from ..chunks import SnapshotChunk
from ..transform import Transform
from . import layout as L
from . import pieces as P
from .buffer import Transaction, TransactionBuffer
from .flush_policy import FlushPolicy
from .parts import PartWriter, commit_date
from .progress import StreamProgress
from .registry import SchemaRegistry
from .rows import PendingRows, rows_batch
from .snapshot_progress import SnapshotProgress
from .workspace import Workspace

__all__ = ["Landed", "SnapshotLanding"]


class Landed(NamedTuple):
    """A chunk handed to the part writer: its ``_seq`` and rows."""

    seq: int
    rows: int


class SnapshotLanding:
    """See the module docstring. ``add_rows(event)`` is the orchestrator's handler of a rows
    event of the open transaction."""

    def __init__(self, workspace: Workspace, progress: StreamProgress,
                 buffer: TransactionBuffer, parts: PartWriter, registry: SchemaRegistry,
                 transform: Transform | None, add_rows: Callable[[RowsEvent], None],
                 policy: FlushPolicy) -> None:
        self._workspace = workspace
        self._progress = progress
        self._buffer = buffer
        self._parts = parts
        self._registry = registry
        self._transform = transform
        self._add_rows = add_rows
        self._policy = policy
        #: The snapshot progress as of the last chunk handed over (committed by the next flush).
        self.state = SnapshotProgress()

    def land(self, chunk: SnapshotChunk, checkpointed: bool) -> Landed | None:
        """Take ``chunk``'s progress, and hand its rows to the part writer at its position
        (None: it has none). ``checkpointed``: the lake has a checkpoint (a new lake's plan
        alone writes none: it comes along with the first flush)."""
        self.state = chunk.progress
        policy, position = self._policy, chunk.position
        if position is None:
            if checkpointed or policy.commits:
                policy.commits += 1
            return None
        policy.commits += 1  # at least the progress must reach the checkpoint
        self._progress.reach(position)
        if chunk.staged is not None:
            landed = self._land_staged(chunk.staged, position, chunk.read_time_us)
        elif chunk.rows is not None and chunk.rows.row_count:
            landed = self._land_rows(chunk.rows, position, chunk.read_time_us)
        else:
            return None
        if landed is not None:
            policy.chunks += 1
            stats = self._workspace.stats
            stats.snapshot_rows += landed.rows
            stats.snapshot_chunks += 1
        return landed

    def _land_rows(self, event: RowsEvent, position: BinlogPosition, read_time_us: int
                   ) -> Landed:
        """A chunk in memory, buffered for the next flush."""
        progress = self._progress
        seq = progress.seq + 1
        txn = Transaction(StreamProgress.untagged(seq, position), TransactionBegin(
            gtid=None, position=position, timestamp=read_time_us // 1_000_000, server_id=0))
        buffer = self._buffer
        buffer.txn = txn
        try:
            self._add_rows(event)
        finally:
            buffer.txn = None
        rows = self._parts.add_transaction(txn.tables.values(), buffer.drain, seq,
                                           read_time_us, commit_date(read_time_us))
        progress.seq = seq
        return Landed(seq, rows)

    def _land_staged(self, staged: P.StagedChunk, position: BinlogPosition,
                     read_time_us: int) -> Landed | None:
        """A chunk staged in pieces: a part file per piece (read back one at a time), which
        the caller commits at once (None: a chunk of no rows)."""
        if not staged.rows:
            P.remove_pieces(staged)
            return None
        seq = self._progress.seq + 1
        version = staged.version
        date = commit_date(read_time_us)
        for path in staged.pieces:
            table = P.landed_piece(path, version, seq, position, read_time_us, staged.storage)
            self._parts.land_file(version, date, seq, table)
            del table
            staged.storage.remove(path)
        staged.pieces.clear()
        self._progress.seq = seq
        return Landed(seq, staged.rows)

    def stage_piece(self, staged: P.StagedChunk | None, event: RowsEvent) -> P.StagedChunk:
        """Convert a piece of a chunk (a ``READ`` rows event) and write it to staging,
        invisible; the chunk's staged pieces (``staged``, or new ones when None). It touches
        nothing a transaction or a flush uses, so it may run inside a transaction."""
        workspace = self._workspace
        if self._transform is not None:
            event = self._transform.rows(event)
        if staged is None:
            tags = StreamProgress.untagged(self._progress.seq + 1, None)
            staged = P.StagedChunk(self._registry.version_for(event.table, tags),
                                   workspace.storage)
        version = staged.version
        # _seq and the position are placeholders until the landing (pieces.landed_piece).
        batch = rows_batch(version, [PendingRows(event, StreamProgress.untagged(0, None),
                                                 staged.rows, ())], with_commit_time=False)
        path = workspace.io_path = workspace.path(workspace.staged_name(L.staged_piece))
        P.write_piece(path, version, batch, workspace.options.spill_compression,
                      workspace.storage)
        staged.pieces.append(path)
        staged.rows += event.row_count
        staged.peak_rows = max(staged.peak_rows, event.row_count)
        return staged
