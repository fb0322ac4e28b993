"""A flush's staged files, written side by side: the per-table cost of a flush over many tables.

A flush writes a Parquet file per table it touched (and a schema file per new table). Over
thousands of tables each file is small, and its fixed costs dominate: setting up the writer,
a compressor per column chunk, creating the file. Written one after the other they make a
backlog over thousands of tables take several times as long as the same rows over a few. Here
they are encoded and written in a few threads — pyarrow and the file system calls release the GIL, so
the machine's cores share them — and a file whose rows fit in one small row group is encoded in
memory and written with one call, and compressed with ``small_compression`` instead of zstd or
gzip: those set up a context per column chunk, which on a few KB of data costs about as much
CPU as the rest of the file and saves almost nothing. With no codec (``small_compression =
"none"``, the default) the native writer writes it (``small_file.py``, far cheaper than
pyarrow's writer), pyarrow when it does not cover a column.

The native writer's files go to C threads (:class:`NativeFiles`, ``_native_parquet.Pool``) that
encode and write each file without ever taking the GIL: in Python threads, the Python around
the native call (sizes, the Arrow export, the template and metadata, its system calls) took
the GIL back a few times per file, and the flush's thread, converting the next table's rows,
spent much of its time waiting for it over thousands of tables. The flush's schema files and DDL
logs are written there too, after the last part (their directories are made by then). Per
table version the template and the key-value metadata are made once on the flush's thread
(``small_file.constants``). A part converted whole as one exported batch (``rows.Exported``)
reaches them as the export's capsule, never imported into pyarrow (unless pyarrow writes it).

Crash safety is unchanged: every job — the native threads' too — ends before the flush goes on
to ``fsync`` the files (``commit.FileSystem.fsync_many``) and to write the manifest; a failed
job's ``OSError`` (naming its file) is raised by :func:`run_all` once all jobs have ended, and
the sink breaks on it as on any write.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from ..storage import Storage
from . import commit as C
from . import small_file
from .rows import Exported

__all__ = ["NativeFiles", "ParquetJob", "SMALL_FILE_BYTES", "SMALL_FILE_STATISTICS", "level_for",
           "open_writer", "run_all"]

#: Arrow bytes under which a one-row-group file is encoded in memory with the small codec.
SMALL_FILE_BYTES = 256 * 1024

#: The only columns whose footer statistics (min, max, null count) a small file keeps: ``_seq``,
#: which readers use — compaction's retention and ``_covered.json`` take a file's largest
#: ``_seq`` from them (``compact.max_seq``; without them a file counts as never covered) and
#: Spark skips row groups by them for its ``_seq`` filters (``sinks.spark.state``) — and
#: ``_commit_ts``, the usual time filter of a query. Statistics on every column chunk are a
#: noticeable share of a small file's CPU (each chunk's min/max kept, compared, encoded in the
#: footer), for files a reader can skip by their name or date anyway.
SMALL_FILE_STATISTICS = ("_seq", "_commit_ts")

#: Codecs whose set-up per column chunk outweighs what they save on a small file.
COSTLY_SET_UP = frozenset({"zstd", "gzip"})

#: Threads writing a flush's files: the machine's cores, plus one to cover file system waits.
THREADS = min(8, (os.cpu_count() or 1) + 1)

#: Jobs submitted and not ended, at most.
WINDOW = 2 * THREADS

#: Native jobs not ended, at most: more than :data:`WINDOW`, so that the flush's thread runs
#: ahead while the native threads catch up (on a busy machine they lag behind), each holding
#: less than :data:`SMALL_FILE_BYTES` of rows (8 MiB at most in all).
NATIVE_WINDOW = 32

_pool: ThreadPoolExecutor | None = None

#: The real file system and its ``write``, as at import: the native threads write as it does.
_REAL_FS = C.OS
_REAL_WRITE = type(C.OS).write


def level_for(compression: str, level: int | None) -> int | None:
    """``level`` for a codec that takes one, else None: pyarrow refuses any level for snappy
    and none (``lake.compression = "snappy"`` failed the daemon's first write)."""
    if compression == "none" or not pa.Codec.supports_compression_level(compression):
        return None
    return level


def open_writer(sink: pa.NativeFile, schema: pa.Schema, compression: str,
                compression_level: int | None,
                dictionary_pagesize_limit: int, *, small: bool = False) -> pq.ParquetWriter:
    """The sink's Parquet writer for a staged file (opened by ``Storage.open_output``, closed by
    the caller after the writer) or an in-memory ``sink``: the one set of writer options shared
    by files written whole here and files written by row groups.
    ``small``: a small file (see :class:`ParquetJob`), plain encoding only and statistics on
    :data:`SMALL_FILE_STATISTICS` only."""
    return pq.ParquetWriter(sink, schema, compression=compression,
                            compression_level=level_for(compression, compression_level),
                            use_dictionary=not small,
                            dictionary_pagesize_limit=dictionary_pagesize_limit,
                            write_statistics=list(SMALL_FILE_STATISTICS) if small else True)


class ParquetJob:
    """One staged Parquet file of a flush: ``batches`` (rows of ``schema``, a table version's;
    ``fields``, if given, its fields as an object shared by tables of the same fields) as a
    single row group at ``path``.

    The job lets go of its rows once written, so that a flush over thousands of tables frees
    each table's rows as it goes, as writing them one by one did (peak RSS).

    A small file (under :data:`SMALL_FILE_BYTES` of rows) is also written without dictionary
    encoding: trying a dictionary on each of its column chunks is a noticeable share of the
    file's CPU, and the file comes out no bigger (a few rows repeat few values; snappy takes
    the runs that repeat). Whether it is small is first asked of the buffers' total size
    (cheap, an upper bound of the rows' bytes: a slice counts its whole buffer), and only
    when that says no of ``nbytes`` (dearer: it walks and dedupes buffers). A small
    file without a codec is the native writer's (:meth:`native`, :class:`NativeFiles`).

    ``batches`` may be one :class:`rows.Exported` (a flush's small part, left in the C data
    interface): small when its size bound says so (the bound is at least ``nbytes``, so
    pyarrow's rows would be small too), else imported and decided as any batch; the native
    writer takes its capsule as it is; it is imported only if pyarrow writes the file."""

    __slots__ = ("batches", "codec", "compression", "compression_level",
                 "dictionary_pagesize_limit", "fields", "path", "schema", "small",
                 "small_compression", "storage")

    def __init__(self, path: str, batches: Sequence[pa.RecordBatch | Exported],
                 schema: pa.Schema,
                 compression: str, compression_level: int | None, small_compression: str | None,
                 dictionary_pagesize_limit: int, fields: pa.Schema | None = None,
                 storage: Storage = C.OS) -> None:
        self.path = path
        self.storage = storage
        self.batches = batches
        self.schema = schema
        self.fields = fields  # shared by the tables of the same fields (small_file.constants)
        self.compression = compression
        self.compression_level = compression_level
        self.small_compression = small_compression
        self.dictionary_pagesize_limit = dictionary_pagesize_limit
        self.small = False
        self.codec: str | None = None  # decided once (:meth:`_codec`)

    def _codec(self) -> str:
        """The file's codec (deciding whether it is small), decided once: a file the native
        writer does not take is asked again by :meth:`__call__`, and the second answer would
        cost the same (up to ``nbytes``' walk of the buffers) for the same rows."""
        if self.codec is None:
            self.codec = self._decide()
        return self.codec

    def _decide(self) -> str:
        """The codec from the rows' size (and whether the file is small)."""
        batches = self.batches
        if batches and isinstance(batches[0], Exported) and batches[0].size < SMALL_FILE_BYTES:
            self.small = True
        else:
            batches = self._imported()
            size = sum(batch.get_total_buffer_size() for batch in batches)
            self.small = (size < SMALL_FILE_BYTES
                          or sum(batch.nbytes for batch in batches) < SMALL_FILE_BYTES)
        if self.small and self.small_compression is not None and self.compression in COSTLY_SET_UP:
            return self.small_compression
        return self.compression

    def _imported(self) -> list[pa.RecordBatch]:
        """The rows as pyarrow batches (an :class:`Exported` imported, once)."""
        batches = self.batches
        if batches and isinstance(batches[0], Exported):
            self.batches = batches = [batches[0].batch()]
        return cast("list[pa.RecordBatch]", batches)

    def native(self) -> pa.RecordBatch | Exported | None:
        """The one batch of rows the native writer is to write, if the file is small and
        uncompressed (else None: pyarrow writes it, :meth:`__call__`)."""
        if self._codec() != "none" or not self.small:
            return None
        if self.batches and isinstance(self.batches[0], Exported):
            return self.batches[0] if self.batches[0].num_rows else None
        batches = self._imported()
        if len(batches) == 1:
            return batches[0] if batches[0].num_rows else None
        batch = pa.Table.from_batches(batches, schema=self.schema).combine_chunks().to_batches()
        return batch[0] if len(batch) == 1 else None

    def __call__(self) -> None:
        """pyarrow writes the file."""
        compression, small = self._codec(), self.small
        batches = self._imported()
        self.batches = []
        table = pa.Table.from_batches(batches, schema=self.schema)
        del batches
        if small:  # in memory, then written in one call
            sink = pa.BufferOutputStream()
            with open_writer(sink, table.schema, compression, self.compression_level,
                             self.dictionary_pagesize_limit, small=True) as writer:
                writer.write_table(table, row_group_size=max(1, table.num_rows))
            del table
            self.storage.write(self.path, sink.getvalue())
            return
        with self.storage.open_output(self.path) as out, \
                open_writer(out, table.schema, compression, self.compression_level,
                            self.dictionary_pagesize_limit) as writer:
            writer.write_table(table, row_group_size=max(1, table.num_rows))


class NativeFiles:
    """A flush's small files handed to the native writer's threads (``small_file.new_pool``): C
    threads that encode and write each file without ever taking the GIL, while the flush's
    thread converts the next table's rows. Holds each job until it is reaped (its rows, for
    pyarrow if the native writer does not cover them, and its path, for an error).

    Only over the real file system (``commit.OS`` as it is): a storage that is a model or a
    wrapper (the tests' faults), or not local, gets every file through its own ``write``."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._jobs: dict[int, ParquetJob | str] = {}  # a document: its path
        self._left: list[ParquetJob] = []
        self._error: OSError | None = None

    @classmethod
    def start(cls, storage: Storage) -> NativeFiles | None:
        """The flush's native files, or None when pyarrow writes every file (BINLAKE_NATIVE=0,
        the extension not built, a storage that is not the real file system)."""
        if storage is not _REAL_FS or type(storage).write is not _REAL_WRITE:
            return None
        pool = small_file.new_pool(THREADS, NATIVE_WINDOW)
        return None if pool is None else cls(pool)

    def take(self, job: ParquetJob) -> bool:
        """Hand ``job`` to the native threads if the native writer is to write it (waits, GIL
        released, while too many of their jobs are unfinished: memory). False: pyarrow's."""
        batch = job.native()
        if batch is None:
            return False
        template, kv = small_file.constants(job.schema, job.fields)
        if isinstance(batch, Exported):  # in job.schema, whose capsule is made per file: kept
            # per table version, thousands of them would each take memory newly
            schema_capsule, array_capsule = job.schema.__arrow_c_schema__(), batch.array
        else:
            schema_capsule, array_capsule = batch.__arrow_c_array__()
        del batch
        self._jobs[self._pool.submit(job.path, schema_capsule, array_capsule, template,
                                     SMALL_FILE_STATISTICS, kv)] = job
        if len(self._jobs) > NATIVE_WINDOW:
            self._reap(False)
        return True

    def write(self, documents: list[tuple[str, bytes]]) -> None:
        """Write ``documents`` (path, bytes) as they are, in the native threads, whenever no
        rows wait for them (queued at once: their bytes are in memory already)."""
        for path, data in documents:
            self._jobs[self._pool.write(path, data)] = path

    def _reap(self, wait_all: bool) -> None:
        for job_id, status, error in self._pool.reap(wait_all):
            job = self._jobs.pop(job_id)
            path = job if isinstance(job, str) else job.path
            if status == small_file.NOT_COVERED and isinstance(job, ParquetJob):
                self._left.append(job)
            elif status == small_file.OS_ERROR:
                self._error = self._error or OSError(error, os.strerror(error), path)
            elif status == small_file.NO_MEMORY:
                raise MemoryError(f"writing {path}")
            elif isinstance(job, ParquetJob):
                job.batches = []

    @property
    def failed(self) -> bool:
        """A job failed to write its file: the flush raises once all have ended, so its
        remaining files are not worth converting and writing."""
        return self._error is not None

    def finish(self) -> list[ParquetJob]:
        """Wait for every job; the jobs whose rows the native writer does not cover (for
        pyarrow). Raises the first job's ``OSError`` (naming its file), once all have ended."""
        try:
            self._reap(True)
        finally:  # also after a MemoryError: a flush ends with no thread left behind
            self._pool.close()
        if self._error is not None:
            raise self._error
        return self._left


def _write_jobs(documents: list[tuple[str, bytes]],
                storage: Storage) -> list[Callable[[], None]]:
    """Jobs writing ``documents`` (path, bytes), a share of them each: one job per document
    would cost more to hand over than the write itself."""
    shares = min(THREADS, len(documents))
    return [functools.partial(_write_all, documents[k::shares], storage) for k in range(shares)]


def _write_all(documents: list[tuple[str, bytes]], storage: Storage) -> None:
    for path, data in documents:
        storage.write(path, data)


def run_all(jobs: Iterable[Callable[[], None]],
            documents: list[tuple[str, bytes]] | None = None, storage: Storage = C.OS) -> None:
    """Run ``jobs``, then write ``documents`` (path, bytes: the flush's schema files and DDL
    logs, whose directories the last job waited for): the small files and the documents the
    native writer writes in its own threads (:class:`NativeFiles`), the rest in the writer
    threads, at most ``WINDOW`` at a time (the rows of a job not yet written
    are in memory: a window bounds what the threads add to it), taking the next job from the
    iterable only when there is room. Returns once every job submitted has ended; then raises
    the first exception of a job or of the iterable, if any (after all ended, so no job is
    still writing). After a writer thread's failure no further job is started, nor after a
    native thread's once seen — when its job is reaped (every few jobs, and at the end), so the
    files handed over meanwhile are still written — into staging, which the failed flush
    never commits."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="binlake-files")
    natives = NativeFiles.start(storage)
    in_flight: collections.deque[Future[None]] = collections.deque()
    error: BaseException | None = None
    try:
        if natives is None and documents:
            jobs = itertools.chain(jobs, _write_jobs(documents, storage))
        for job in jobs:
            if natives is not None and isinstance(job, ParquetJob) and natives.take(job):
                if natives.failed:  # seen as take reaped: the flush fails, so no further
                    break  # file of it is taken from the iterable (converted), nor written
                continue
            if len(in_flight) >= WINDOW:
                error = in_flight.popleft().exception()
                if error is not None:
                    break
            in_flight.append(_pool.submit(job))
        if natives is not None and error is None and not natives.failed:
            natives.write(documents or [])
    except BaseException as exc:  # the iterable's (a staged tree's OSError): nothing more
        error = exc  # is started below either
        raise
    finally:
        if natives is not None:
            try:
                left = natives.finish()  # waits for every native job, also after an error
            except BaseException as exc:  # an OSError: raised once the rest have ended
                error, left = error or exc, []
            if error is None:
                in_flight.extend(_pool.submit(job) for job in left)
        for future in in_flight:
            failed = future.exception()  # waits for it, also after an error
            error = error or failed
    if error is not None:
        raise error
