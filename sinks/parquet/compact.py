"""Compaction: rewrite a partition's many small files into a few large ones, atomically.

The daemon lands a file per table per flush; Spark pays for every file it lists and opens.
Compaction replaces the daemon's files (``part-*.parquet``) of one partition directory
(``schema_version=N/commit_date=D``) by files of about ``target_size`` bytes
(``compacted-g<generation>-<first _seq>-<k>.parquet``), with the very same rows — every column,
``_seq``/``_row``/``_before`` included — sorted by ``(_seq, _row)``.

The switch is one atomic step that readers and the daemon cannot observe half-done:

1. under ``<lake>/_compact.lock`` (one compaction at a time; never the daemon's writer lock),
   a new partition directory is built in ``<lake>/_compact_staging/g<gen>/…``: the compacted
   files (written, ``fsync``-ed) plus hard links to files it keeps (earlier compacted files);
2. ``<lake>/_compact.json`` (the commit record) is written, then
   ``<db>/<table>/_compacted/g<gen>-….json`` (kept: which daemon files the generation
   replaced, an account of the lake's history), its directory made durable with it: a recovery that finds
   the commit record and no swap drops the kept record, and a swapped partition always has it;
3. holding ``<lake>/_publish.lock`` exclusively (the daemon holds it shared while it renames
   files into partitions) the partition is checked to hold exactly the inputs, and the staged
   directory and the live one are exchanged (:meth:`~sinks.storage.Storage.exchange`, locally
   ``renameat2(RENAME_EXCHANGE)``): any listing of the partition sees either all the old files
   or all the new ones, never both, never neither;
4. the old directory is moved to ``<lake>/_compacted_trash/g<gen>/…`` (deleted after the grace
   period by a later run) and the record removed.

A compaction killed at any instant leaves every partition either old or new; the next run, the
daemon's background compaction, or the daemon's start (:func:`recover_if_idle`, which leaves
it to a compaction running at that moment) finishes the bookkeeping
(:func:`recover_compaction`).
A daemon starting meanwhile empties only ``_staging/``, never ``_compact_staging/``.
Only the daemon's files are inputs: a compacted file is never rewritten. Readers that follow
the commit order (``sinks/spark/localstream``) read ``part-*`` and compacted files alike by
their ``_seq``, so a switch changes nothing they deliver.

Every operation on the lake goes through its :class:`~sinks.storage.Storage` (``storage``, the
local file system unless told): the locks, the hard links, the exchange, the Parquet files read
and written, the records. A storage that cannot exchange two directories cannot be compacted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import SinkError
from ..storage import Storage
from . import layout as L
from .commit import OS, dumps, ensure_dir, fsync_path, publish_lock, replace_atomically
from .pins import PIN_LIFETIME, purge_pins
from .state import check_lake
from .status import table_dirs

log = logging.getLogger("binlake.compact")

__all__ = ["CompactError", "CompactOptions", "CompactStats", "CompactionRecord", "compact_lake",
           "drop_history", "dropped_upto", "partitions", "max_seq", "seq_bounds",
           "recover_compaction", "recover_if_idle"]

#: Arrow bytes buffered per row group of a compacted file (about the daemon's row groups).
ROW_GROUP_BYTES = 32 * 1024 * 1024


class CompactError(SinkError):
    """Compaction cannot proceed safely here (e.g. the filesystem cannot swap directories)."""


@dataclass(frozen=True, slots=True)
class CompactOptions:
    """``min_age``: a partition is rewritten only when all its daemon files are older (seconds).
    ``target_size``: bytes per compacted file. ``grace``: seconds replaced files stay in the
    trash. ``compression``: the lake's codec."""

    min_age: float = 3600.0
    target_size: int = 128 * 1024 * 1024
    grace: float = 3600.0
    compression: str = "zstd"


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """What one generation did to one partition: the daemon files it replaced (``inputs``) by
    its compacted files (``outputs``). Written twice, by :meth:`to_json` only: kept in the
    table's ``_compacted/`` (an account of what each generation replaced; no reader needs it),
    and as the commit record
    ``_compact.json`` with ``kept`` (the earlier compacted files linked along), which
    :func:`recover_compaction` reads back."""

    generation: int
    partition: str  # relative to the lake: <db>/<table>/schema_version=N/commit_date=D
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    kept: tuple[str, ...] | None = None  # the commit record only

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"generation": self.generation, "partition": self.partition,
                               "inputs": list(self.inputs), "outputs": list(self.outputs)}
        if self.kept is not None:
            doc["kept"] = list(self.kept)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CompactionRecord:
        kept = doc.get("kept")
        return cls(int(doc["generation"]), str(doc["partition"]),
                   tuple(doc["inputs"]), tuple(doc["outputs"]),
                   None if kept is None else tuple(kept))

    @classmethod
    def read(cls, path: str, storage: Storage = OS) -> CompactionRecord:
        return cls.from_json(json.loads(storage.read(path)))


@dataclass(slots=True)
class CompactStats:
    """What one run did: partitions rewritten, files before and after, rows moved."""

    partitions: int = 0
    files_in: int = 0
    files_out: int = 0
    rows: int = 0
    skipped_busy: int = 0
    tables: dict[str, int] = field(default_factory=dict)

    def count(self, partition: str, files_in: int, files_out: int, rows: int) -> None:
        """Count one rewritten partition (``<db>/<table>/…``) in the run's figures."""
        self.partitions += 1
        self.files_in += files_in
        self.files_out += files_out
        self.rows += rows
        table = "/".join(partition.split("/")[:2])
        self.tables[table] = self.tables.get(table, 0) + files_in - files_out


# --- locks and the directory swap ----------------------------------------------------------------


@contextlib.contextmanager
def compact_lock(lake: str, storage: Storage) -> Iterator[None]:
    """``<lake>/_compact.lock``, exclusive: a second compaction waits for the first."""
    with storage.lock(os.path.join(lake, L.COMPACT_LOCK), exclusive=True):
        yield


def exchange(a: str, b: str, storage: Storage) -> None:
    """Swap two directories atomically (:meth:`~sinks.storage.Storage.exchange`). No
    fallback: two plain renames would let a reader see the partition missing."""
    try:
        storage.exchange(a, b)
    except OSError as exc:
        raise CompactError(f"cannot swap {b} atomically ({exc.strerror}): the lake's "
                           "filesystem must support renameat2(RENAME_EXCHANGE)") from exc


# --- what to compact -----------------------------------------------------------------------------


def partitions(lake: str, storage: Storage = OS) -> Iterator[str]:
    """Every ``<db>/<table>/schema_version=N/commit_date=D`` directory, relative to the lake."""
    for db, table, table_path in table_dirs(lake, storage):
        for version in sorted(storage.listdir(table_path)):
            if not L.is_version_dir(version):
                continue
            version_path = os.path.join(table_path, version)
            for date in sorted(storage.listdir(version_path)):
                if L.is_date_dir(date):
                    yield "/".join((db, table, version, date))


def _next_generation(lake: str, storage: Storage) -> int:
    path = os.path.join(lake, L.COMPACT_GENERATION)
    current = 0
    if storage.exists(path):
        current = int(json.loads(storage.read(path))["generation"])
    replace_atomically(path, dumps({"generation": current + 1}), storage)
    return current + 1


# --- recovery and the trash ----------------------------------------------------------------------

#: What a compaction killed while replacing its commit record or the generation counter leaves.
_TEMPORARY = (L.COMPACT_MANIFEST + ".tmp", L.COMPACT_GENERATION + ".tmp")


def recover_compaction(lake: str, storage: Storage = OS) -> None:
    """Finish what a killed compaction left (call under the compaction lock).

    If the record's outputs are in the live partition, the swap happened: the old directory
    goes to the trash. Otherwise it did not: the staged files are simply dropped. Either way
    no reader ever saw both."""
    manifest = os.path.join(lake, L.COMPACT_MANIFEST)
    for tmp in _TEMPORARY:
        if storage.exists(os.path.join(lake, tmp)):
            storage.remove(os.path.join(lake, tmp))
    if storage.exists(manifest):
        record = CompactionRecord.read(manifest, storage)
        live = os.path.join(lake, record.partition)
        staged = _staged_dir(lake, record.generation, record.partition)
        names = set(storage.listdir(live)) if storage.isdir(live) else set()
        if set(record.outputs) <= names and storage.isdir(staged):
            _to_trash(lake, record.generation, record.partition, staged, storage)
            log.info("compaction of %s was swapped before a stop; its old files went to the "
                     "trash", record.partition)
        elif not set(record.outputs) <= names:
            _drop_record(lake, record.partition, record.generation, storage)
            log.info("compaction of %s stopped before its swap; dropped its staged files",
                     record.partition)
        storage.remove(manifest)
        fsync_path(lake, storage)
    staging = os.path.join(lake, L.COMPACT_STAGING)
    if storage.isdir(staging):
        storage.rmtree(staging)


def recover_if_idle(lake: str, storage: Storage = OS) -> bool | None:
    """At daemon start: finish what a killed compaction left, unless a compaction is running
    (it holds ``_compact.lock`` and finishes that itself). ``None``: nothing was left;
    ``True``: cleaned up; ``False``: left to the running compaction. Never waits."""
    lake = os.path.abspath(lake)
    leftovers = [p for p in (L.COMPACT_MANIFEST, L.COMPACT_STAGING, *_TEMPORARY)
                 if storage.exists(os.path.join(lake, p))]
    if not leftovers:
        return None
    try:
        with storage.lock(os.path.join(lake, L.COMPACT_LOCK), exclusive=True, wait=False):
            recover_compaction(lake, storage)
            return True
    except BlockingIOError:
        return False


def purge_trash(lake: str, grace: float, now: float, storage: Storage = OS) -> int:
    """Delete trash generations older than ``grace`` seconds; returns how many."""
    trash = os.path.join(lake, L.COMPACT_TRASH)
    if not storage.isdir(trash):
        return 0
    purged = 0
    for name in sorted(storage.listdir(trash)):
        path = os.path.join(trash, name)
        if now - storage.mtime(path) >= grace:
            storage.rmtree(path)
            purged += 1
    return purged


def _drop_record(lake: str, partition: str, generation: int, storage: Storage) -> None:
    """Forget the record of a compaction that did not swap (its inputs are still live), and
    its temporary file if it was being written."""
    path = os.path.join(lake, L.compaction_record(partition, generation))
    removed = False
    for leftover in (path, path + ".tmp"):
        if storage.exists(leftover):
            storage.remove(leftover)
            removed = True
    if removed:
        fsync_path(os.path.dirname(path), storage)


def _staged_dir(lake: str, generation: int, partition: str) -> str:
    return os.path.join(lake, L.compact_staged(generation, partition))


def _to_trash(lake: str, generation: int, partition: str, old: str, storage: Storage) -> None:
    target = os.path.join(lake, L.compact_trashed(generation, partition))
    storage.makedirs(os.path.dirname(target))
    storage.replace(old, target)
    fsync_path(os.path.dirname(target), storage)
    fsync_path(os.path.dirname(old), storage)


# --- one partition -------------------------------------------------------------------------------


def _read_schema(path: str, storage: Storage) -> pa.Schema:
    with storage.open_input(path) as source:
        return pq.read_schema(source)


def _write_outputs(lake: str, partition: str, inputs: list[str], staged: str, generation: int,
                   options: CompactOptions, storage: Storage) -> tuple[list[str], int] | None:
    """Write the compacted files of ``inputs`` into ``staged``; ``None`` if they cannot be
    merged (schemas differ, which the daemon never does within a partition)."""
    live = os.path.join(lake, partition)
    schema = _read_schema(os.path.join(live, inputs[0]), storage)
    for name in inputs:
        if not _read_schema(os.path.join(live, name), storage).equals(schema,
                                                                     check_metadata=False):
            log.warning("not compacting %s: %s has another schema than %s", partition, name,
                        inputs[0])
            return None
    outputs: list[str] = []
    rows = 0
    writer: pq.ParquetWriter | None = None
    sink: pa.NativeFile | None = None
    current: str | None = None
    buffered: list[pa.Table] = []
    buffered_bytes = 0

    def flush_group() -> None:
        nonlocal writer, sink, current, buffered_bytes, rows
        if not buffered:
            return
        group = pa.concat_tables(buffered).sort_by([("_seq", "ascending"),
                                                    ("_row", "ascending")])
        buffered.clear()
        buffered_bytes = 0
        if writer is None:
            first_seq = int(group.column("_seq")[0].as_py())
            name = os.path.basename(L.compacted_file(partition, generation, first_seq,
                                                     len(outputs)))
            current = os.path.join(staged, name)
            outputs.append(name)
            sink = storage.open_output(current)
            writer = pq.ParquetWriter(sink, schema, compression=options.compression,
                                      write_statistics=True)
        writer.write_table(group, row_group_size=max(1, group.num_rows))
        rows += group.num_rows
        if storage.size(current or "") >= options.target_size:
            close_file()

    def close_file() -> None:
        nonlocal writer, sink
        if writer is not None and sink is not None:
            writer.close()
            sink.close()  # a writer given a file leaves closing it to its owner
            writer = sink = None
            fsync_path(current or "", storage)

    for name in inputs:  # name order is _seq order: a part's name is its first _seq
        with storage.open_input(os.path.join(live, name)) as source:
            table = pq.read_table(source, schema=schema)
        buffered.append(table)
        buffered_bytes += table.nbytes
        if buffered_bytes >= min(ROW_GROUP_BYTES, options.target_size):
            flush_group()
    flush_group()
    close_file()
    return outputs, rows


def compact_partition(lake: str, partition: str, generation: int, options: CompactOptions,
                      now: float, stats: CompactStats, storage: Storage = OS) -> None:
    """Rewrite one partition if all its daemon files are older than ``min_age``."""
    live = os.path.join(lake, partition)
    names = sorted(storage.listdir(live))
    inputs = [n for n in names if L.is_original(n)]
    kept = [n for n in names if not L.is_original(n)]
    if len(inputs) < 2:
        return
    if any(now - storage.mtime(os.path.join(live, n)) < options.min_age for n in inputs):
        return
    staged = _staged_dir(lake, generation, partition)
    storage.makedirs(staged)
    result = _write_outputs(lake, partition, inputs, staged, generation, options, storage)
    if result is None:
        storage.rmtree(staged)
        return
    outputs, rows = result
    for name in kept:  # earlier compacted files stay, under the same path (hard links)
        storage.link(os.path.join(live, name), os.path.join(staged, name))
    fsync_path(staged, storage)
    record = CompactionRecord(generation, partition, tuple(inputs), tuple(outputs))
    # The commit record first: from here on a recovery knows this compaction, and drops its
    # record below if the swap did not happen. The record and its directory (new at a table's
    # first compaction) are durable before the swap, so a swapped partition never lacks it.
    manifest = os.path.join(lake, L.COMPACT_MANIFEST)
    replace_atomically(manifest, dumps(CompactionRecord(
        generation, partition, tuple(inputs), tuple(outputs), tuple(kept)).to_json()), storage)
    kept_path = os.path.join(lake, L.compaction_record(partition, generation))
    ensure_dir(os.path.dirname(kept_path), None, storage)
    replace_atomically(kept_path, dumps(record.to_json()), storage)
    with publish_lock(lake, exclusive=True, fs=storage):
        swapped = set(storage.listdir(live)) == set(names)
        if swapped:
            exchange(staged, live, storage)
    if swapped:
        fsync_path(os.path.dirname(live), storage)
        _to_trash(lake, generation, partition, staged, storage)
        stats.count(partition, len(inputs), len(outputs), rows)
    else:  # the daemon landed a file here meanwhile: the next run takes it too
        storage.rmtree(staged)
        _drop_record(lake, partition, generation, storage)
        stats.skipped_busy += 1
    storage.remove(manifest)
    fsync_path(lake, storage)


def compact_lake(lake: str, options: CompactOptions | None = None,
                 now: float | None = None, storage: Storage = OS) -> CompactStats:
    """Compact every partition of every table of ``lake`` that is old enough; see the module
    docstring. Safe beside a running (or starting) daemon and another compaction."""
    options = options or CompactOptions()
    lake = os.path.abspath(lake)
    stats = CompactStats()
    if not storage.isdir(lake):
        raise CompactError(f"no lake at {lake}")
    check_lake(lake, storage)  # a lake of a newer binlake: refused before anything is touched
    with compact_lock(lake, storage):
        recover_compaction(lake, storage)
        clock = time.time() if now is None else now
        purge_trash(lake, options.grace, clock, storage)
        purge_pins(lake, PIN_LIFETIME, clock, storage)
        generation = _next_generation(lake, storage)
        for partition in list(partitions(lake, storage)):
            compact_partition(lake, partition, generation, options, clock, stats, storage)
        staging = os.path.join(lake, L.COMPACT_STAGING)
        if storage.isdir(staging):
            storage.rmtree(staging)
    return stats


# --- retention ---------------------------------------------------------------------------------


#: The ``_seq`` bounds of a row group whose statistics are missing: it may hold any.
UNKNOWN_SEQS = (0, 2**63 - 1)


def seq_bounds(metadata: pq.FileMetaData) -> list[tuple[int, int]]:
    """Each row group's smallest and largest ``_seq``, from the footer's statistics
    (:data:`UNKNOWN_SEQS` where a group has none)."""
    index = metadata.schema.to_arrow_schema().get_field_index("_seq")
    bounds = []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        known = stats is not None and stats.has_min_max
        bounds.append((int(stats.min), int(stats.max)) if known else UNKNOWN_SEQS)
    return bounds


def max_seq(path: str, storage: Storage = OS) -> int:
    """The largest ``_seq`` in a data file, from its footer statistics (never its data);
    a file without them counts as holding every ``_seq`` (never covered)."""
    with storage.open_input(path) as source:
        metadata = pq.ParquetFile(source).metadata
    return max((high for _low, high in seq_bounds(metadata)), default=-1)


def dropped_upto(table_path: str, storage: Storage = OS) -> int:
    """The largest ``_seq`` retention has removed from the table's change log (0: none)."""
    try:
        doc = json.loads(storage.read(os.path.join(table_path, L.RETENTION_RECORD)))
    except FileNotFoundError:
        return 0
    return int(doc["dropped_upto"])


def _record_dropped(table_path: str, highest: int, storage: Storage) -> None:
    """Note, durably and before a partition goes, the largest ``_seq`` it holds: a streaming
    query that had not read that far fails instead of skipping rows (``sinks/spark/
    localstream.py``), and one that lists after the removal sees the note."""
    if highest > dropped_upto(table_path, storage):
        replace_atomically(os.path.join(table_path, L.RETENTION_RECORD),
                           dumps({"dropped_upto": highest}), storage)


def drop_history(lake: str, database: str, table: str, covered_seq: int, before: str,
                 now: float | None = None, storage: Storage = OS) -> int:
    """Retention: remove the table's change-log partitions dated before ``before``
    (``YYYY-MM-DD``) whose rows all have ``_seq <= covered_seq`` (a materialised state covers
    them). History is lost: ``read_changes`` no longer returns those rows, and a streaming
    query that had not read them fails (the table's ``_retention.json``, written first). Each partition goes
    to the trash in one rename under the publish lock; returns how many went."""
    lake = os.path.abspath(lake)
    prefix = L.table_dir(database, table) + "/"
    stamp = int(time.time() if now is None else now)
    dropped = 0
    with compact_lock(lake, storage):
        for partition in list(partitions(lake, storage)):
            if not partition.startswith(prefix) or L.date_of_dir(partition.rsplit("/", 1)[1]) >= before:
                continue
            live = os.path.join(lake, partition)
            names = set(storage.listdir(live))
            highest = max((max_seq(os.path.join(live, n), storage) for n in names
                           if L.is_data_file(n)), default=-1)
            if highest > covered_seq:
                continue
            _record_dropped(os.path.join(lake, L.table_dir(database, table)), highest, storage)
            target = os.path.join(lake, L.COMPACT_TRASH, L.retired_dir(stamp), partition)
            storage.makedirs(os.path.dirname(target))
            with publish_lock(lake, exclusive=True, fs=storage):
                if set(storage.listdir(live)) != names:
                    continue
                storage.replace(live, target)
            # a rename is durable once its destination's directory is (sinks/storage.py)
            fsync_path(os.path.dirname(target), storage)
            fsync_path(os.path.dirname(live), storage)
            dropped += 1
    return dropped
