"""``SnapshotChunk``: a piece of a table's initial copy, handed to a sink to land.

A snapshot reads a table in chunks while the binlog streams on; each chunk is consistent with
one point of the stream (``position``) and lands there, between two streamed transactions, as
one transaction of its own: its rows get their own ``_seq``, no GTID, ``position`` as their
binlog file and position and the time they were read as ``_commit_ts``. The snapshot progress
(``progress``, a ``SnapshotProgress``) commits with it, so after a crash the lake says exactly which chunks
it holds. A chunk without rows and position carries the progress alone (a plan, a table given
up): it commits with the next flush.

The rows come one of two ways: in memory (``rows``, a READ rows event), or — a table read by
one SELECT, too big to hold — staged in pieces as they were read (``staged``, made by the sink's
``stage_piece``); the pieces land in one commit, every one visible or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.binlog.model import BinlogPosition, RowsEvent

if TYPE_CHECKING:
    from .parquet.pieces import StagedChunk
    from .parquet.snapshot_progress import SnapshotProgress

__all__ = ["SnapshotChunk"]


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """See the module docstring."""

    progress: SnapshotProgress  # the snapshot progress that commits with the chunk
    position: BinlogPosition | None = None  # the stream point it is consistent with
    read_time_us: int = 0  # when it was read (its rows' _commit_ts)
    rows: RowsEvent | None = None  # its rows, in memory
    staged: StagedChunk | None = None  # … or staged in pieces

    def __post_init__(self) -> None:
        if self.rows is not None and self.staged is not None:
            raise ValueError("a snapshot chunk's rows are in memory or staged, not both")
        if self.position is None and (self.rows is not None or self.staged is not None):
            raise ValueError("a snapshot chunk with rows needs the position it lands at")
