"""A flush's staged files, written side by side: the per-table cost of a flush over many tables.

A flush writes a Parquet file per table it touched (and a schema file per new table). Over
thousands of tables each file is small, and its fixed costs dominate: setting up the writer,
a compressor per column chunk, creating the file. Written one after the other they made a
backlog over 2,000 tables take 5.5x as long as the same rows over 20 (issue 17). Here they are
encoded and written in a few threads — pyarrow and the file system calls release the GIL, so
the machine's cores share them — and a file whose rows fit in one small row group is encoded in
memory and written with one call, and compressed with ``small_compression`` instead of zstd or
gzip: those set up a context per column chunk, which on a few KB of data costs more CPU than the
rest of the file (0.6 of 1.3 ms for 50 rows of eight columns) and saves almost nothing (5% of
the file). With no codec (``small_compression = "none"``, the default) the native writer writes
it (``small_file.py``: ~0.1 instead of ~0.55 ms of CPU), pyarrow when it does not cover a column.

Crash safety is unchanged: every job ends before the flush goes on to ``fsync`` the files
(``commit.FileSystem.fsync_many``) and to write the manifest; a failed job's ``OSError`` is
raised by :func:`run_all` once all jobs have ended, and the sink breaks on it as on any write.
"""

from __future__ import annotations

import collections
import functools
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from . import commit as C
from . import small_file

__all__ = ["ParquetJob", "SMALL_FILE_BYTES", "SMALL_FILE_STATISTICS", "level_for", "open_writer",
           "run_all", "write_jobs"]

#: Arrow bytes under which a one-row-group file is encoded in memory with the small codec.
SMALL_FILE_BYTES = 256 * 1024

#: The only columns whose footer statistics (min, max, null count) a small file keeps: ``_seq``,
#: which readers use — compaction's retention and ``_covered.json`` take a file's largest
#: ``_seq`` from them (``compact.max_seq``; without them a file counts as never covered) and
#: Spark skips row groups by them for its ``_seq`` filters (``sinks.spark.state``) — and
#: ``_commit_ts``, the usual time filter of a query. Statistics on all ~30 column chunks were
#: 40 of 530 us of CPU for a 50-row file of eight columns (each chunk's min/max kept, compared,
#: encoded in the footer), for files a reader can skip by their name or date anyway.
SMALL_FILE_STATISTICS = ("_seq", "_commit_ts")

#: Codecs whose set-up per column chunk outweighs what they save on a small file.
COSTLY_SET_UP = frozenset({"zstd", "gzip"})

#: Threads writing a flush's files: the machine's cores, plus one to cover file system waits.
THREADS = min(8, (os.cpu_count() or 1) + 1)

#: Jobs submitted and not ended, at most.
WINDOW = 2 * THREADS

_pool: ThreadPoolExecutor | None = None


def level_for(compression: str, level: int | None) -> int | None:
    """``level`` for a codec that takes one, else None: pyarrow refuses any level for snappy
    and none (``lake.compression = "snappy"`` failed the daemon's first write)."""
    if compression == "none" or not pa.Codec.supports_compression_level(compression):
        return None
    return level


def open_writer(sink: str | pa.NativeFile, schema: pa.Schema, compression: str,
                compression_level: int | None,
                dictionary_pagesize_limit: int, *, small: bool = False) -> pq.ParquetWriter:
    """The sink's Parquet writer for a staged file (or an in-memory ``sink``): the one set of
    writer options shared by files written whole here and files written by row groups.
    ``small``: a small file (see :class:`ParquetJob`), plain encoding only and statistics on
    :data:`SMALL_FILE_STATISTICS` only."""
    return pq.ParquetWriter(sink, schema, compression=compression,
                            compression_level=level_for(compression, compression_level),
                            use_dictionary=not small,
                            dictionary_pagesize_limit=dictionary_pagesize_limit,
                            write_statistics=list(SMALL_FILE_STATISTICS) if small else True)


class ParquetJob:
    """One staged Parquet file of a flush: ``table`` as a single row group at ``path``.

    The job lets go of its rows once written, so that a flush over thousands of tables frees
    each table's rows as it goes, as writing them one by one did (peak RSS).

    A small file (under :data:`SMALL_FILE_BYTES` of rows) is also written without dictionary
    encoding: trying a dictionary on each of its ~30 column chunks cost 80 of 600 us for 50
    rows of eight columns, and the file came out no bigger (a few rows repeat few values;
    snappy takes the runs that repeat). Whether it is small is first asked of the buffers'
    total size (2 us, an upper bound of the rows' bytes: a slice counts its whole buffer),
    and only when that says no of ``Table.nbytes`` (40 us: it walks and dedupes buffers)."""

    __slots__ = ("compression", "compression_level", "dictionary_pagesize_limit", "path",
                 "small_compression", "table")

    def __init__(self, path: str, table: pa.Table, compression: str,
                 compression_level: int | None, small_compression: str | None,
                 dictionary_pagesize_limit: int) -> None:
        self.path = path
        self.table: pa.Table | None = table
        self.compression = compression
        self.compression_level = compression_level
        self.small_compression = small_compression
        self.dictionary_pagesize_limit = dictionary_pagesize_limit

    def __call__(self) -> None:
        table, self.table = self.table, None
        assert table is not None, "a ParquetJob runs once"
        compression = self.compression
        small = (table.get_total_buffer_size() < SMALL_FILE_BYTES
                 or table.nbytes < SMALL_FILE_BYTES)
        if small and self.small_compression is not None and compression in COSTLY_SET_UP:
            compression = self.small_compression
        if small and compression == "none":
            data = small_file.write(table, SMALL_FILE_STATISTICS)  # None: pyarrow writes it
            if data is not None:
                del table
                C.OS.write(self.path, data)
                return
        sink: str | pa.BufferOutputStream = pa.BufferOutputStream() if small else self.path
        with open_writer(sink, table.schema, compression, self.compression_level,
                         self.dictionary_pagesize_limit, small=small) as writer:
            writer.write_table(table, row_group_size=max(1, table.num_rows))
        del table
        if isinstance(sink, pa.BufferOutputStream):
            C.OS.write(self.path, sink.getvalue())


def write_jobs(documents: list[tuple[str, bytes]]) -> list[Callable[[], None]]:
    """Jobs writing ``documents`` (path, bytes), a share of them each: one job per document
    would cost more to hand over than the write itself."""
    shares = min(THREADS, len(documents))
    return [functools.partial(_write_all, documents[k::shares]) for k in range(shares)]


def _write_all(documents: list[tuple[str, bytes]]) -> None:
    for path, data in documents:
        C.OS.write(path, data)


def run_all(jobs: Iterable[Callable[[], None]]) -> None:
    """Run ``jobs`` in the writer threads, at most ``WINDOW`` at a time (the rows of a job not
    yet written are in memory: a window bounds what the threads add to it), taking the next job
    from the iterable only when there is room. Returns once every job submitted has ended;
    then raises the first exception of a job or of the iterable, if any (after all ended, so
    no job is still writing). After a failure no further job is started."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="binlake-files")
    in_flight: collections.deque[Future[None]] = collections.deque()
    error: BaseException | None = None
    try:
        for job in jobs:
            if len(in_flight) >= WINDOW:
                error = in_flight.popleft().exception()
                if error is not None:
                    break
            in_flight.append(_pool.submit(job))
    finally:
        for future in in_flight:
            failed = future.exception()  # waits for it, also after an error
            error = error or failed
    if error is not None:
        raise error
