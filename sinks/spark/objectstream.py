"""Streaming a table's changes from a lake on object storage: a Spark source whose offsets are the commit log's numbers.

Spark's file source cannot read a lake on object storage correctly: it lists the prefix, so
it would read the objects of a commit whose record does not exist yet (or never will), and it
remembers paths, so a compaction's new files would look like new rows. This source reads the
log instead (``sinks/objectstore/view.py``):

* an offset is a log record number: ``{"record": n}`` means "the table's rows as of record
  ``n`` have been delivered". The first offset is 0;
* the first micro-batch ``(0, end]`` is the table as of record ``end``: its live data files,
  each once (compacted files where a compaction replaced parts — the same rows);
* every later micro-batch ``(start, end]`` is the data files the records ``start+1..end``
  *added as new rows* for this table, one Spark partition per file. A compaction's record
  (``data_change`` false) is skipped: its files hold rows already delivered. So each row is
  delivered exactly once, whatever compactions happen before, during or after the query;
* files are read by the Python workers through the lake's own store (``open_input``, ranged
  reads), each file's columns aligned to the table's union schema as the batch reader aligns
  them (``schema_version`` and ``commit_date`` from the file's place in the layout). A file a
  compaction replaced stays readable at its key for the lake's retention
  (``docs/lake-format.md``); a query further behind than that fails rather than skip rows.

This is the object-storage :class:`~sinks.spark.stream.Backend` of the one streaming source
(``sinks/spark/stream.py``: the data source, offsets, schema alignment); the store's settings
travel with it, pickled, to the workers, never through Spark's options.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as S
from pyspark.sql.datasource import InputPartition

from ..objectstore.commit import CommitLog
from ..objectstore.logstate import read_state, snapshot_numbers
from ..objectstore.view import data_additions, is_data_name, layout_name, read_records
from ..parquet import layout as L
from .stream import BATCH_ROWS, align_batch, stream_source

if TYPE_CHECKING:
    import pyarrow as pa

    from ..objectstore.store import ObjectStore

__all__ = ["FilePartition", "ObjectBackend", "stream_object_changes"]


@dataclass(frozen=True)
class FilePartition(InputPartition):
    """One data file to deliver: its key, schema version and commit date."""

    key: str
    version: int
    date: str


def _partition_of(key: str) -> FilePartition:
    """``<db>/<table>/schema_version=N/commit_date=D/name`` → its version and date."""
    parts = layout_name(key).split("/")
    version = int(parts[-3].split("=", 1)[1])
    date = parts[-2].split("=", 1)[1]
    return FilePartition(key, version, date)


def stream_object_changes(spark: SparkSession, open_store: Callable[[], ObjectStore],
                          database: str, table: str, schema: S.StructType,
                          **options: str) -> DataFrame:
    """A streaming DataFrame of the table's changes on the lake ``open_store()`` opens (module
    docstring). ``open_store`` must pickle (e.g. a ``functools.partial`` of
    ``sinks.objectstore.s3.open_store``); every worker calls it. ``schema``: the union schema.
    ``options``: ``maxFilesPerTrigger`` bounds a micro-batch's files."""
    backend = ObjectBackend(open_store, f"{L.table_dir(database, table)}/")
    return stream_source(spark, backend, schema, **options)


def _live_data(names: dict[str, str], prefix: str) -> list[str]:
    """The keys of the live data files under ``prefix`` (a layout name prefix), by name."""
    return [names[name] for name in sorted(names) if name.startswith(prefix)
            and is_data_name(name)]


def _newest_snapshot(store: ObjectStore, upto: int) -> int:
    """The number of the newest log snapshot listed at or before ``upto`` (0: none)."""
    return max((n for n in snapshot_numbers(store) if n <= upto), default=0)


class ObjectBackend:
    """Positions are log record numbers; see the module docstring."""

    key = "record"

    def __init__(self, open_store: Callable[[], ObjectStore], prefix: str) -> None:
        self._open_store = open_store
        self._prefix = prefix
        self._store: ObjectStore | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_open_store": self._open_store, "_prefix": self._prefix, "_store": None}

    def _the_store(self) -> ObjectStore:
        if self._store is None:
            self._store = self._open_store()
        return self._store

    def latest(self, start: int, max_files: int) -> int:
        newest = CommitLog(self._the_store()).newest_number()
        if max_files <= 0:
            return newest
        # whole records until the files reach the limit (at least one record); the first
        # batch starts from the table as of the newest log snapshot, its live files counted
        files, end = 0, start
        if end == 0:
            state = read_state(self._the_store(), upto=_newest_snapshot(self._the_store(),
                                                                        newest))
            end = state.number
            files = len(_live_data(state.names, self._prefix))
            if end and files >= max_files:
                return end
        for record in read_records(self._the_store(), after=end, upto=newest):
            files += len(data_additions([record], self._prefix))
            end = record.number
            if files >= max_files:
                break
        return end

    def partitions(self, start: int, end: int) -> Sequence[InputPartition]:
        if start == 0:  # the first batch: the table as of `end`, each live file once
            state = read_state(self._the_store(), upto=end)
            reached = state.number
            keys = _live_data(state.names, self._prefix)
        else:
            records = read_records(self._the_store(), after=start, upto=end)
            reached = records[-1].number if records else start
            keys = data_additions(records, self._prefix)
        if reached != end:
            raise RuntimeError(f"the lake's log ends before record {end}, which this query "
                               "already planned: is this the lake the query started on?")
        return [_partition_of(key) for key in keys]

    def read(self, partition: InputPartition, target: pa.Schema) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        assert isinstance(partition, FilePartition)
        date = datetime.date.fromisoformat(partition.date)
        with self._open_store().open_input(partition.key) as stream:
            parquet = pq.ParquetFile(stream)
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                yield align_batch(batch, target, partition.version, date)
