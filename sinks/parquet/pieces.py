"""A snapshot chunk landed in pieces: rows staged as they are read, landed in one commit.

Why: a table without a usable key is read by one SELECT (one consistent read view: it cannot
be paged), so its one chunk is the whole table. Held whole, it needs memory for every row. So
the rows are converted and written to staging as they come off the socket, a piece of at most
``snapshot.chunk_rows`` rows at a time, and only the decision to land them waits for the end
of the read. Their transaction number (``_seq``) and stream position (``_binlog_file``/
``_binlog_pos``) are only known when the chunk lands, between two streamed transactions, so a
piece is staged as an Arrow IPC file with placeholders (as an XA transaction's prepared rows
are, ``xa.py``); at the landing each piece is read back alone, given those values and written as
one Parquet file, and all of them commit together with the checkpoint that says the table is
done. Staged pieces live in ``<lake>/_staging/``, which no reader lists and every start empties
(``commit.recover``): a crash before the commit leaves nothing visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from protocol.binlog.model import BinlogPosition

from ..storage import Storage
from .schema import COMMIT_TS_FIELD, TableVersion


@dataclass(slots=True)
class StagedChunk:
    """The pieces of one snapshot chunk staged so far (paths absolute, in staging order, on
    ``storage``)."""

    version: TableVersion
    storage: Storage
    pieces: list[str] = field(default_factory=list)
    rows: int = 0
    peak_rows: int = 0  # the most rows one piece held

    def discard(self) -> None:
        """Drop the staged pieces (the chunk was discarded; nothing of it is visible)."""
        remove_pieces(self)


def write_piece(path: str, version: TableVersion, batch: pa.RecordBatch,
                compression: str | None, storage: Storage) -> None:
    """Stage one piece (``version.staging_schema``). Not ``fsync``-ed: until its landing rewrites
    it as Parquet (made durable by that commit), a crash discards it anyway."""
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with storage.open_output(path) as sink, pa.ipc.new_stream(
            sink, version.staging_schema, options=options) as out:
        out.write_batch(batch)


def landed_piece(path: str, version: TableVersion, seq: int, position: BinlogPosition,
                 commit_us: int, storage: Storage) -> pa.Table:
    """A staged piece read back, in ``version.schema``, with the landing's ``_seq``, position
    and ``_commit_ts``."""
    with storage.open_input(path) as source:
        batches = list(pa.ipc.open_stream(source))
    table = pa.Table.from_batches(batches, schema=version.staging_schema)
    n = table.num_rows
    staging = version.staging_schema
    for name, value in (("_seq", seq), ("_binlog_file", position.file),
                        ("_binlog_pos", position.pos)):
        index = staging.get_field_index(name)
        table = table.set_column(index, staging.field(index),
                                 pa.repeat(pa.scalar(value, staging.field(index).type), n))
    return table.add_column(version.commit_ts_index, COMMIT_TS_FIELD,
                            pa.repeat(pa.scalar(commit_us, COMMIT_TS_FIELD.type), n))


def remove_pieces(chunk: StagedChunk) -> None:
    """Drop a chunk's staged pieces (discarded: the table is read again)."""
    for path in chunk.pieces:
        try:
            chunk.storage.remove(path)
        except FileNotFoundError:
            pass
    chunk.pieces.clear()
    chunk.rows = 0
