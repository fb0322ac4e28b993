"""``PartWriter``: committed rows → staged Parquet files, named for their final place.

Committed rows join per-file *parts*, keyed by table, schema version and commit date. A part
that reaches ``row_group_bytes`` is written as one row group into its staged Parquet file (on
a background thread, ``encoder.py``; a commit leaves that disk work, its file's open
included, to :meth:`PartWriter.write_due`, which the daemon runs on its sink worker); a staged file that reaches ``file_size_bytes`` is closed
and the sink flushes after this commit (:attr:`PartWriter.flush_wanted`). Every other part is
written whole at the flush, one file per part, by the native pool (``files.run_all``).

A part's file is named ``part-<first seq>-<k>.parquet`` in its partition (``layout.part_file``)
and staged until the flush's commit renames it there: flat in ``_staging/``, or in a *staged
tree* when its directory is new to the lake (``trees.py``). Its first file — and a new schema
version's file — is made empty ahead, on the trees' thread, as soon as the part appears, while
this thread decodes on (*prepare-ahead*).
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from . import files as F
from . import layout as L
from . import trees as T
from .buffer import GROUP_EVENTS, GROUP_ROWS, HeldRows, TxnTable
from .encoder import RowGroupEncoder
from .rows import Exported, rows_batch, rows_export
from .schema import COMMIT_TS_FIELD, TableVersion
from .workspace import Workspace

__all__ = ["DICTIONARY_PAGE_LIMIT", "MAX_OPEN_FILES", "Part", "PartWriter", "commit_date"]

#: Files the sink may hold open between flushes to relieve memory by row groups. Relieving
#: memory that way opens a Parquet writer per table; over thousands of tables — a backlog, which
#: flushes by size, not time — those writers and their small row groups took the daemon to
#: 600 MB for 400k rows over 2,000 tables. With more files than this buffered, a full memory
#: budget flushes at the next commit instead: memory stays bounded, and a backlog costs a file
#: per table per ``memory_limit_bytes`` of rows.
MAX_OPEN_FILES = 256

#: Parquet tries dictionary encoding on every column until a column chunk's dictionary outgrows
#: this; the writer's default (1 MiB) spends much of its CPU on a wide table hashing
#: high-cardinality values only to fall back to plain encoding, making files bigger. 16 KiB keeps
#: dictionaries for the columns that benefit (metadata, ENUM/SET labels, codes, flags).
DICTIONARY_PAGE_LIMIT = 16 * 1024

_US_PER_DAY = 86_400 * 1_000_000
_EPOCH_DATE = _dt.date(1970, 1, 1)


@functools.lru_cache(maxsize=64)
def _day_text(day: int) -> str:
    return (_EPOCH_DATE + _dt.timedelta(days=day)).isoformat()


def commit_date(commit_time_us: int) -> str:
    """The UTC date of a commit, ``YYYY-MM-DD``: its partition (cached per day)."""
    return _day_text(commit_time_us // _US_PER_DAY)


@dataclass(slots=True)
class Part(HeldRows):
    """Committed rows bound for one data file (table, schema version, commit date)."""

    commit_date: str = ""
    first_seq: int = 0
    writer: pq.ParquetWriter | None = None
    sink: pa.NativeFile | None = None  # the writer's file (Storage.open_output), closed after it
    file_bytes: int = 0  # of the open file, as of its last row group accounted for
    staged: str = ""  # relative to the lake
    final: str = ""
    prepared: str = ""  # its first file, made ahead on the trees' thread (see _prepare)
    made_by: int = 0  # the trees' batch that makes it (StagedTrees.wait_for)


PartKey = tuple[str, str, int, str]  # database, table, version, commit date


class PartWriter:
    """See the module docstring. ``known_dirs``: the lake's directories known to exist
    (absolute), shared with the commit."""

    def __init__(self, workspace: Workspace, known_dirs: set[str]) -> None:
        self._workspace = workspace
        self.parts: dict[PartKey, Part] = {}
        self.closed_files: list[tuple[str, str]] = []  # (staged, final), fsync-ed at the flush
        self._name_index: dict[tuple[str, str, int, str, int], int] = {}
        self.encoder = RowGroupEncoder()
        #: Parquet bytes per Arrow byte of each table version's last row group (_may_fill).
        self._parquet_ratio: dict[tuple[str, str, int], float] = {}
        #: New directories staged whole, created ahead on a thread (see trees.py).
        self.trees = T.StagedTrees(workspace.lake, known_dirs, workspace.storage)
        self._version_staged: dict[int, str] = {}  # id(new version) -> its schema file, staged
        #: A file filled up, or too many are open: the sink flushes after this commit.
        self.flush_wanted = False
        #: :meth:`add_transaction` only takes rows in memory; the row groups they fill and the
        #: memory relief wait here for :meth:`write_due`, which the sink runs where its disk
        #: work runs (in the daemon, on the sink worker, not on the loop that hands rows over).
        self.due: list[Part] = []
        self.disk_due = False
        self._day = -1  # of the last commit (UTC days since the epoch), and its date's text
        self._day_text = ""

    def date_of(self, commit_us: int) -> str:
        """:func:`commit_date`, the last commit's day kept: asked per transaction."""
        day = commit_us // _US_PER_DAY
        if day != self._day:
            self._day, self._day_text = day, _day_text(day)
        return self._day_text

    # --- taking committed rows --------------------------------------------------------------

    def add_transaction(self, tables: Iterable[TxnTable],
                        drain: Callable[[TxnTable], Iterator[pa.RecordBatch]], seq: int,
                        commit_us: int, date: str) -> int:
        """Move a committed transaction's rows into the parts; returns the rows. The pending
        rows of a commit are taken in memory only: the row groups they fill, and the memory
        relief, are left for :meth:`write_due` (:attr:`disk_due`)."""
        rows = 0
        options = self._workspace.options
        for table in tables:
            version = table.version
            key = (version.database, version.table, version.version, date)
            for batch in drain(table) if table.batches or table.spill_writer else ():
                rows += batch.num_rows
                columns = batch.columns
                commit_ts = pa.scalar(commit_us, COMMIT_TS_FIELD.type)
                columns.insert(version.commit_ts_index, pa.repeat(commit_ts, batch.num_rows))
                self.append(key, version, date, seq,
                            pa.RecordBatch.from_arrays(columns, schema=version.schema))
            if table.pending:
                part = self._part(key, version, date, seq)
                for entry in table.pending:
                    entry.commit_time_us = commit_us
                    rows += entry.landed_rows
                part.pending += table.pending
                part.pending_rows += table.pending_rows
                estimated = table.pending_bytes
                part.pending_bytes += estimated
                part.nbytes += estimated
                table.nbytes -= estimated
                table.pending = []
                table.pending_rows = 0
                table.pending_bytes = 0
                if part.pending_rows >= GROUP_ROWS or len(part.pending) >= GROUP_EVENTS:
                    self._convert(part)
                if part.nbytes >= options.row_group_bytes:
                    self.due.append(part)
        if self.due or self._workspace.buffered > options.memory_limit_bytes:
            self.disk_due = True
        return rows

    def write_due(self) -> None:
        """The disk work :meth:`add_transaction` left (:attr:`disk_due`): the row groups its
        rows filled (each part's file opened if new, the row group in flight waited for), then
        memory relieved if over budget."""
        due, self.due = self.due, []
        self.disk_due = False
        for part in due:
            self._write_row_group(part)
        if self._workspace.buffered > self._workspace.options.memory_limit_bytes:
            self.relieve()

    def append(self, key: PartKey, version: TableVersion, date: str, seq: int,
               batch: pa.RecordBatch) -> None:
        """Add a committed batch (``version.schema``) to its part."""
        part = self._part(key, version, date, seq)
        if part.pending:
            self._convert(part)  # keep the file in commit order
        part.batches.append(batch)
        size = batch.nbytes
        part.nbytes += size
        workspace = self._workspace
        workspace.buffered += size
        if part.nbytes >= workspace.options.row_group_bytes:
            self._write_row_group(part)
        if workspace.buffered > workspace.options.memory_limit_bytes:
            self.relieve()

    def append_prepared(self, version: TableVersion, batch: pa.RecordBatch, seq: int,
                        commit_us: int, date: str) -> int:
        """Add a batch of rows prepared earlier (staging schema: an XA transaction's prepared
        part) as rows of transaction ``seq`` committed at ``commit_us``; returns its rows."""
        columns = batch.columns
        columns[version.staging_schema.get_field_index("_seq")] = pa.repeat(
            pa.scalar(seq, pa.int64()), batch.num_rows)
        columns.insert(version.commit_ts_index,
                       pa.repeat(pa.scalar(commit_us, COMMIT_TS_FIELD.type), batch.num_rows))
        self.append((version.database, version.table, version.version, date), version, date,
                    seq, pa.RecordBatch.from_arrays(columns, schema=version.schema))
        rows: int = batch.num_rows
        return rows

    def land_file(self, version: TableVersion, date: str, seq: int, table: pa.Table) -> None:
        """Write ``table`` (``version.schema``) as a file of its own, closed for the flush."""
        part = Part(version, commit_date=date, first_seq=seq)
        part.writer = self._open_file(part)
        part.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self._close_file(part)

    def _part(self, key: PartKey, version: TableVersion, date: str, seq: int) -> Part:
        part = self.parts.get(key)
        if part is None:
            part = self.parts[key] = Part(version, commit_date=date, first_seq=seq)
            self._prepare(part)
        elif part.writer is None and not part.batches and not part.pending:
            part.first_seq = seq
        return part

    def _convert(self, part: Part) -> None:
        self._workspace.buffered += part.convert(with_commit_time=True)

    def relieve(self) -> None:
        """Write the biggest parts as row groups until half the memory budget is free — or,
        over more than ``MAX_OPEN_FILES`` files, flush at the next commit instead."""
        if len(self.parts) > MAX_OPEN_FILES:
            self.flush_wanted = True  # the sink flushes at the commit: whole transactions only
            return
        workspace = self._workspace
        limit = workspace.options.memory_limit_bytes
        for part in sorted(self.parts.values(), key=lambda p: p.nbytes, reverse=True):
            # the row group being written is on its way out: not a reason to write another
            if (workspace.buffered - self.encoder.busy_bytes <= limit // 2
                    or not (part.batches or part.pending)):
                break
            self._write_row_group(part)

    # --- row groups -----------------------------------------------------------------------

    def _write_row_group(self, part: Part) -> None:
        version = part.version
        if part.pending:
            self._convert(part)
        if not self.encoder.idle:  # one at a time: a file's row groups stay in order
            self.finish_row_group()  # (it may close this part's file: it filled it)
        if part.writer is None:
            part.writer = self._open_file(part)
            part.file_bytes = 0
        path = self._workspace.io_path = self._workspace.path(part.staged)
        table = pa.Table.from_batches(part.batches, schema=version.schema)
        part.batches.clear()
        nbytes, part.nbytes = part.nbytes, 0  # in the buffered bytes until written
        writer = part.writer
        storage = self._workspace.storage

        def write() -> int:
            writer.write_table(table, row_group_size=max(1, table.num_rows))
            return storage.size(path)

        if self._workspace.options.background_encoding:
            self.encoder.start(write, part, path, nbytes)
        else:
            self.encoder.run(write, part, path, nbytes)
            if self.encoder.job is not None and self.encoder.job.future.exception():
                self.finish_row_group()  # raises it now, as the write itself did

    def filling(self) -> bool:
        """Whether the row group in flight may fill its file (:meth:`_may_fill`): then a
        commit waits for it (:meth:`wait_if_filling`)."""
        job = self.encoder.job
        return job is not None and self._may_fill(job.owner, job.nbytes)

    def wait_if_filling(self) -> None:
        """At a commit: wait for the row group in flight if it may fill its file
        (:meth:`_may_fill`), so a file it fills closes, and flushes, at this commit."""
        if self.filling():
            self.finish_row_group()

    def _may_fill(self, part: Part, nbytes: int) -> bool:
        """Whether a row group of ``nbytes`` Arrow bytes might take ``part``'s file to
        ``file_size_bytes``: at most twice what Parquet wrote per Arrow byte for the table's
        last row group (twice the Arrow bytes before its first), plus 64 KiB per column (a
        dictionary page beside plain ones, page headers, statistics).

        A commit waits for a background row group only then, so the flush that a full file
        calls for comes at that commit. The bound is a guess from accounted row groups only,
        so every decision is the same whatever the thread's speed; a file a row group fills
        against the guess closes when the sink next waits for a row group (see
        :meth:`finish_row_group`). With the writer's own bound (twice the Arrow bytes) a row
        group of half a file's size waited at every commit: no overlap at all."""
        version = part.version
        ratio = self._parquet_ratio.get((version.database, version.table, version.version), 1.0)
        bound = int(2 * ratio * nbytes) + 65_536 * len(version.schema)
        return part.file_bytes + bound >= self._workspace.options.file_size_bytes

    def finish_row_group(self) -> None:
        """Wait for the row group being written in the background (see encoder.py) and
        account for it; its error, if any, is raised here, naming its file.

        Called where the sink must wait anyway (before the next row group, at a flush) and at
        a commit whose row group may fill its file (:meth:`_may_fill`): points that do not
        depend on the thread's speed, so the foreground, which accounts for its row groups at
        the same points, lands the same lake."""
        job = self.encoder.finish()
        if job is None:
            return
        self._workspace.io_path = job.path
        try:
            size = job.future.result()
        except BaseException:
            self._workspace.buffered -= job.nbytes
            raise
        self._written(job.owner, job.nbytes, size)

    def _written(self, part: Part, nbytes: int, size: int) -> None:
        """A row group of ``nbytes`` Arrow bytes is in ``part``'s file, now ``size`` bytes."""
        self._workspace.buffered -= nbytes
        version = part.version
        self._parquet_ratio[version.database, version.table, version.version] = (
            (size - part.file_bytes) / max(1, nbytes))
        part.file_bytes = size
        if size >= self._workspace.options.file_size_bytes and part.writer is not None:
            self._close_file(part)
            self.flush_wanted = True

    # --- naming and prepare-ahead -----------------------------------------------------------

    def _prepare(self, part: Part) -> None:
        """A part first appears: have its first file made ahead (:meth:`_made_ahead`)."""
        version = part.version
        part.prepared = self._made_ahead(
            L.part_file(version.database, version.table, version.version, part.commit_date,
                        part.first_seq, 0), L.staged_file)
        part.made_by = self.trees.submitted

    def prepare_version(self, version: TableVersion) -> None:
        """:meth:`_prepare` for a new schema version's file (written at the flush)."""
        self._version_staged[id(version)] = self._made_ahead(
            L.schema_file(version.database, version.table, version.version), L.staged_schema)

    def _made_ahead(self, final: str, flat: Callable[[int], str]) -> str:
        """Where the file whose final path is ``final`` is staged: in a staged tree when its
        directory is new, else flat in staging as ``flat(n)``; either way made empty (with the
        tree's directories) on the trees' thread now, while this one decodes on (trees.py)."""
        staged = self.trees.place(final, create=True)
        if staged is None:
            staged = self._workspace.staged_name(flat)
            self.trees.submit([], [self._workspace.path(staged)])
        return staged

    def _name(self, part: Part) -> None:
        """Give ``part`` its staged and its final file name: the file made ahead for it if
        the name is the one foreseen, in a staged tree if its directory is new."""
        version = part.version
        name_key = (version.database, version.table, version.version, part.commit_date,
                    part.first_seq)  # the final directory and first seq, unspelled
        index = self._name_index.get(name_key, 0)
        self._name_index[name_key] = index + 1
        part.final = L.part_file(version.database, version.table, version.version,
                                 part.commit_date, part.first_seq, index)
        prepared, part.prepared = part.prepared, ""
        staged = self.trees.place(part.final, now=True)
        if staged is None and prepared and not T.in_tree(prepared):
            staged, prepared = prepared, ""
        elif staged is None:
            staged = self._workspace.staged_name(L.staged_file)
        elif staged == prepared:
            prepared = ""
        part.staged = staged
        self._workspace.io_path = self._workspace.path(staged)
        if prepared:
            self._drop_prepared(prepared)

    def _drop_prepared(self, staged: str) -> None:
        """Remove a file made ahead under a name its part did not take (another file of the
        partition took it first): in a staged tree it would become visible, empty."""
        self.trees.wait()
        self._workspace.storage.remove(self._workspace.path(staged))

    # --- files ------------------------------------------------------------------------------

    def _one_shot(self, part: Part) -> F.ParquetJob:
        """The job writing a part none of whose rows are written yet: its whole file, one row
        group (at most ``row_group_bytes``, or it would have been written already)."""
        batches: Sequence[pa.RecordBatch | Exported] = part.batches
        if part.pending:  # converted as _convert does, minus its nbytes walk:
            if not batches:  # the part whole: a small batch stays exported (rows.Exported)
                batches = [rows_export(part.version, part.pending)]
            else:
                part.batches.append(rows_batch(part.version, part.pending, with_commit_time=True))
            part.pending = []  # the whole part leaves the budget just below
            part.pending_rows = part.pending_bytes = 0
        self._name(part)
        part.batches = []
        self._workspace.buffered -= part.nbytes
        part.nbytes = 0
        self.closed_files.append((part.staged, part.final))
        version = part.version
        options = self._workspace.options
        return F.ParquetJob(self._workspace.path(part.staged), batches, version.schema,
                            options.compression, options.compression_level,
                            options.small_file_compression, DICTIONARY_PAGE_LIMIT,
                            version.fields_schema, self._workspace.storage)

    def _open_file(self, part: Part) -> pq.ParquetWriter:
        """A new staged Parquet file for ``part``, named for its final place."""
        self._name(part)
        self.trees.wait()  # its directory, if new, may still be in the making
        options = self._workspace.options
        part.sink = self._workspace.storage.open_output(self._workspace.path(part.staged))
        return F.open_writer(part.sink, part.version.schema, options.compression,
                             options.compression_level, DICTIONARY_PAGE_LIMIT)

    def _close_file(self, part: Part) -> None:
        assert part.writer is not None and part.sink is not None
        self._workspace.io_path = self._workspace.path(part.staged)
        part.writer.close()
        part.writer = None
        part.sink.close()  # a writer given a file leaves closing it to its owner
        part.sink = None
        self.closed_files.append((part.staged, part.final))  # fsync-ed together at the flush

    # --- the flush --------------------------------------------------------------------------

    def file_jobs(self) -> Iterator[Callable[[], None]]:
        """The flush's Parquet files: a file with row groups written already gets its last one
        (the caller then waits for it and closes the file, :meth:`close_all`); every other file
        is yielded as a job writing it whole (lazily, so that this thread converts the next
        table's rows while the writer threads encode the last), once the trees' thread has
        made its directory and file: the first tables' files are written while the last
        tables' directories are still being made. The last job comes once all are made (the
        flush's documents go in them next, ``files.run_all``)."""
        for part in self.parts.values():
            if part.writer is None and (part.batches or part.pending):
                job = self._one_shot(part)
                self.trees.wait_for(part.made_by)
                yield job
            elif part.batches or part.pending:
                self._write_row_group(part)  # in the background (encoder.py), in order
        self.trees.wait()

    def close_all(self) -> None:
        """After :meth:`file_jobs` ran: the last row group written, every file closed."""
        self.finish_row_group()
        for part in self.parts.values():
            if part.writer is not None:
                self._close_file(part)
            if part.prepared:  # never named (defensive): must not land empty
                self._drop_prepared(part.prepared)
                part.prepared = ""

    def version_documents(self, versions: Iterable[TableVersion]
                          ) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
        """The flush's new schema versions: (staged path, bytes) to write, and (staged, final)
        names relative to the lake for those not in a staged tree."""
        documents: list[tuple[str, bytes]] = []
        renames: list[tuple[str, str]] = []
        workspace = self._workspace
        for version in versions:
            staged = self._version_staged.pop(id(version), "")
            final = L.schema_file(version.database, version.table, version.version)
            if not staged:
                staged = self.trees.place(final, now=True) or ""
            if not staged:
                staged = workspace.staged_name(L.staged_schema)
            documents.append((workspace.path(staged), version.to_json_bytes()))
            if not T.in_tree(staged):  # else its tree's rename moves it
                renames.append((staged, final))
        return documents, renames

    def renames(self) -> list[tuple[str, str]]:
        """(staged, final) for the closed files outside staged trees, and the trees."""
        return ([(staged, final) for staged, final in self.closed_files
                 if not T.in_tree(staged)])

    def durable(self) -> list[str]:
        """What must be fsync-ed before the commit: the closed files (absolute)."""
        path = self._workspace.path
        return [path(staged) for staged, _ in self.closed_files]

    def committed(self) -> int:
        """The flush committed: the parts that fed it go. Returns the files it landed."""
        self.trees.committed()
        self.parts.clear()
        files = len(self.closed_files)
        self.closed_files.clear()
        self._name_index.clear()
        self.flush_wanted = False
        return files

    # --- the end ----------------------------------------------------------------------------

    def abandon(self) -> None:
        """Close what a broken sink holds open, quietly (its files are discarded at recovery)."""
        self.encoder.shutdown()  # a row group in flight ends first; its outcome no longer matters
        for part in self.parts.values():
            for opened in (part.writer, part.sink):
                if opened is not None:
                    try:
                        opened.close()
                    except Exception:  # the disk that broke the sink may refuse this too
                        pass
            part.writer = part.sink = None

    def close(self) -> None:
        """Stop the threads."""
        self.encoder.shutdown()
        self.trees.close()
