"""Streaming a table's changes from a lake on disk: positions are the checkpoint's ``_seq``.

This is the local :class:`~sinks.spark.stream.Backend` of the one streaming source
(``sinks/spark/stream.py``). Why a ``_seq`` is a position in commit order on disk
(``docs/lake-format.md``, "Streaming"): the writer numbers transactions one after the other and
never goes back (a snapshot chunk and an XA transaction take their number when they land), a
flush makes visible only rows numbered above everything visible before it, and it moves
``_checkpoint.json`` to its last number only after its files are in place (I4, I5). So:

* the newest position is the checkpoint's ``seq``; every row at or below it is in a file that
  a listing made afterwards sees, and rows above it (a commit in progress) are left for later;
* a micro-batch ``(start, end]`` is every row of the table with ``start < _seq <= end``,
  found by listing the table's partitions *when the batch is read* and keeping the files whose
  ``_seq`` statistics meet the range — ``part-*`` and ``compacted-*`` alike. Compaction keeps
  every row and its ``_seq``, and switches a partition whole (a listing sees all old files or
  all new ones), so a range reads the same rows before, during or after any compaction, with no
  fence, no window and no clock;
* a worker lists its partition directory, then opens every file it will read before reading
  any: an open file's bytes stay readable whatever happens to its name, and a name that
  vanished between the listing and the open (a compaction's switch) means list again. Nothing
  has been handed to Spark by then, so the retry is exact;
* a partition that retention removed (``python -m sinks.spark.materialize --retain-days``)
  while a query had not read it yet fails the batch with an error naming it; rows are never
  skipped in silence.

Each partition directory is split into tasks by ``_seq`` sub-ranges at file boundaries, so a
large first batch is read in parallel; a file across a boundary is read by both tasks, each
keeping its own rows. A file's name gives its first ``_seq``, so a task opens only the files
named inside its range, those the driver found (by their footers, read once per file and kept)
to reach into it from below, and compacted files new since the driver listed: a later batch over
a directory of thousands of small files opens its new ones, not all of them.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from ..errors import StreamBehindRetention
from ..parquet import layout as L
from ..parquet.compact import dropped_upto, seq_bounds
from ..parquet.status import read_checkpoint
from ..storage import Storage
from .stream import seq_range_batches

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["LocalBackend", "RangePartition"]

#: Files one task reads, about (a partition directory's range is split at file boundaries).
FILES_PER_TASK = 64

#: Listings one task makes before it gives up: each retry follows a compaction's switch of
#: the partition while the task listed it, which a run does once per partition.
RELISTS = 100


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """The rows with ``start < _seq <= end`` of one partition directory. ``spanning``: the
    files named with a first ``_seq`` at or below ``start`` that hold rows above it, as the
    driver listed them; ``compacted``: every compacted file it listed there. With them the
    task reads a footer only where the name cannot tell (module docstring)."""

    directory: str
    version: int
    date: str
    start: int
    end: int
    spanning: frozenset[str]
    compacted: frozenset[str]


class LocalBackend:
    """Positions are ``_seq`` values; see the module docstring."""

    key = "seq"

    def __init__(self, lake: str, database: str, table: str, storage: Storage) -> None:
        self._lake = lake
        self._table = f"{database}.{table}"
        self._path = os.path.join(lake, L.table_dir(database, table))
        self._storage = storage
        self._maxima: dict[str, int] = {}  # a file's largest _seq; a name is never reused

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maxima": {}}

    def latest(self, start: int, max_files: int) -> int:
        document = read_checkpoint(self._lake, self._storage)
        newest = int(document["seq"]) if document is not None else 0
        if newest < start:
            raise RuntimeError(f"the lake's checkpoint is at _seq {newest}, before {start} "
                               f"which this query already read: is {self._lake} the lake "
                               "the query started on?")
        if max_files <= 0:
            return newest
        firsts = sorted({first for _d, _v, _dt, names in self._directories() for name in names
                         if (first := L.first_seq_of(name)) is not None
                         and start < first <= newest})
        # end just before the first file over the limit (at least one file)
        return firsts[max_files] - 1 if len(firsts) > max_files else newest

    def partitions(self, start: int, end: int) -> Sequence[InputPartition]:
        planned: list[InputPartition] = []
        maxima: dict[str, int] = {}
        for directory, version, date, names in self._directories():
            files: list[tuple[int, str, int]] = []
            for name in names:
                first = L.first_seq_of(name)
                if first is None or first > end:
                    continue
                path = os.path.join(directory, name)
                top = self._maxima.get(path)
                if top is None:
                    try:
                        top = self._max_seq(path)
                    except FileNotFoundError:  # switched since the listing: the task lists again
                        top = end
                maxima[path] = top
                if top > start:
                    files.append((first, name, top))
            compacted = frozenset(n for n in names if n.startswith(L.COMPACTED_PREFIX))
            planned += _split(directory, version, date, start, end, sorted(files), compacted)
        self._maxima = maxima
        self._check_retention(start)
        return planned

    def read(self, partition: InputPartition, target: pa.Schema) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        date = datetime.date.fromisoformat(partition.date)
        files = self._open_all(partition)
        try:
            for _source, parquet in files:
                yield from seq_range_batches(parquet, partition.start, partition.end, target,
                                             partition.version, date)
        finally:
            _close(files)

    # --- what the driver and the workers list and open ----------------------------------------

    def _directories(self) -> Iterator[tuple[str, int, str, list[str]]]:
        """Each partition directory of the table: its path, version, date and data names."""
        storage = self._storage
        for version_name in sorted(_listdir(storage, self._path)):
            if not L.is_version_dir(version_name):
                continue
            version = int(version_name[len(L.VERSION_PREFIX):])
            version_path = os.path.join(self._path, version_name)
            for date_name in sorted(_listdir(storage, version_path)):
                if not L.is_date_dir(date_name):
                    continue
                directory = os.path.join(version_path, date_name)
                names = [n for n in _listdir(storage, directory) if L.is_data_file(n)]
                yield directory, version, L.date_of_dir(date_name), names

    def _max_seq(self, path: str) -> int:
        import pyarrow.parquet as pq

        with self._storage.open_input(path) as source:
            bounds = seq_bounds(pq.ParquetFile(source).metadata)
        return max((high for _low, high in bounds), default=-1)

    def _open_all(self, partition: RangePartition) -> list[tuple[Any, pq.ParquetFile]]:
        """Every file of the partition directory that holds rows of the task's range, open
        (module docstring: list, open all, list again if a name vanished)."""
        import pyarrow.parquet as pq

        start, end = partition.start, partition.end
        for _attempt in range(RELISTS):
            try:
                names = sorted(self._storage.listdir(partition.directory))
            except FileNotFoundError:
                if partition.start == 0 and dropped_upto(self._path, self._storage) > 0:
                    return []  # a new query reads the change log as retention leaves it
                raise self._gone(partition) from None
            opened: list[tuple[Any, pq.ParquetFile]] = []
            try:
                for name in names:
                    first = L.first_seq_of(name) if L.is_data_file(name) else None
                    if first is None or first > end or first <= start and not _may_span(
                            name, partition):
                        continue
                    source = self._storage.open_input(os.path.join(partition.directory, name))
                    opened.append((source, pq.ParquetFile(source)))
                    if first <= start and max((h for _l, h in seq_bounds(
                            opened[-1][1].metadata)), default=-1) <= start:
                        _close([opened.pop()])
            except FileNotFoundError:  # a compaction switched the directory: list it again
                _close(opened)
                continue
            except BaseException:
                _close(opened)
                raise
            return opened
        raise RuntimeError(f"{partition.directory}: its files changed under {RELISTS} "
                           "listings in a row; the batch fails and is read again on restart")

    def _check_retention(self, start: int) -> None:
        """Fail, never skip: rows after ``start`` that retention removed (its record is
        written before the partitions go, so a listing that missed one sees it). A new query
        (``start`` 0) reads the change log as retention left it, as the batch readers do."""
        dropped = dropped_upto(self._path, self._storage)
        if 0 < start < dropped:
            raise StreamBehindRetention(
                f"{self._table}: retention removed change-log partitions holding rows up to "
                f"_seq {dropped}, and this streaming query has read only up to {start}: those "
                "rows are gone from the change log. Start the query afresh (a new checkpoint "
                "location: it reads the change log as it is now, and the materialised state "
                "holds what was removed), or keep the change log longer than queries fall "
                "behind.")

    def _gone(self, partition: RangePartition) -> Exception:
        self._check_retention(partition.start)
        return RuntimeError(f"{partition.directory}: the partition directory is gone while "
                            "this query reads it")


def _close(files: list[tuple[Any, pq.ParquetFile]]) -> None:
    """Close each file's reader and the file itself (a reader does not own what it is given)."""
    for source, parquet in files:
        parquet.close()
        source.close()


def _listdir(storage: Storage, path: str) -> list[str]:
    try:
        return storage.listdir(path)
    except FileNotFoundError:  # a table without rows yet, or a partition retention removed
        return []


def _may_span(name: str, partition: RangePartition) -> bool:
    """Whether a file named with a first ``_seq`` at or below the task's ``start`` may hold
    rows above it. The driver's listing, made after the checkpoint the range ends at was read,
    saw every daemon file holding rows of the range (I5); only a compaction's output can be
    new since, and only the footer tells its rows."""
    if name in partition.spanning:
        return True
    return name.startswith(L.COMPACTED_PREFIX) and name not in partition.compacted


def _split(directory: str, version: int, date: str, start: int, end: int,
           files: list[tuple[int, str, int]], compacted: frozenset[str]) -> list[RangePartition]:
    """``(start, end]`` of one directory as tasks of about :data:`FILES_PER_TASK` files each,
    cut just before a file's first ``_seq``; none when no file meets the range. ``files``:
    ``(first _seq, name, largest _seq)`` of those that do, sorted."""
    if not files:
        return []
    firsts = [first for first, _name, _top in files]
    cuts = sorted({f - 1 for f in firsts[FILES_PER_TASK::FILES_PER_TASK] if start < f - 1 < end})
    bounds = [start, *cuts, end]
    return [RangePartition(directory, version, date, low, high,
                           frozenset(n for first, n, top in files if first <= low < top),
                           compacted)
            for low, high in zip(bounds, bounds[1:], strict=False)]
