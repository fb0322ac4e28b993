"""Streaming a table's changes from a lake on object storage: a Spark source whose offsets are the commit log's numbers.

Spark's file source cannot read a lake on object storage correctly: it lists the prefix, so
it would read the objects of a commit whose record does not exist yet (or never will), and it
remembers paths, so a compaction's new files would look like new rows. This source reads the
log instead (``sinks/objectstore/view.py``):

* an offset is a log record number: ``{"record": n}`` means "the table's changes committed up
  to record ``n`` have been delivered". The first offset is 0. Record ``n`` carries the
  checkpoint of the writer's flush it published, so its ``seq`` — ``S(n)`` — says which rows
  that is: every row with ``_seq <= S(n)``, and no other (``docs/lake-format.md``, "Streaming a
  lake on disk": the sink numbers and flushes the same way whichever lake it publishes to;
  compaction and takeover records carry the checkpoint on unchanged);
* a micro-batch ``(start, end]`` is the rows with ``S(start) < _seq <= S(end)``, read from the
  files live as of the newest record *when the batch is planned*: those whose name's first
  ``_seq`` lies in the range, and compacted files that reach into it from below (a daemon's
  file holds one record's rows, so only a compaction's output can hold rows on both sides of
  ``S(start)``; its footer, read once per file, tells). Compaction keeps every row and its
  ``_seq``, so a range is read the same before, during or after any compaction, and a query
  restarted however far behind goes on where it stopped. Only a batch planned more than the
  lake's ``compact_grace`` before it is read can find a file gone (a compaction replaced it
  and a later run deleted it); it then fails and is planned again on restart, never skipping
  a row;
* files are read by the Python workers through the lake's own store (``open_input``, ranged
  reads), each keeping the rows of its range, aligned to the table's union schema as the batch
  reader aligns them (``schema_version`` and ``commit_date`` from the file's place in the
  layout).

This is the object-storage :class:`~sinks.spark.stream.Backend` of the one streaming source
(``sinks/spark/stream.py``: the data source, offsets, schema alignment); the store's settings
travel with it, pickled, to the workers, never through Spark's options.
"""

from __future__ import annotations

import datetime
import posixpath
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as S
from pyspark.sql.datasource import InputPartition

from ..objectstore.commit import CommitLog
from ..objectstore.logstate import LogState, read_state, snapshot_numbers
from ..objectstore.view import data_additions, is_data_name, layout_name, read_records
from ..parquet import layout as L
from ..parquet.compact import seq_bounds
from .stream import seq_range_batches, stream_source

if TYPE_CHECKING:
    import pyarrow as pa

    from ..objectstore.store import ObjectStore

__all__ = ["FilePartition", "ObjectBackend", "stream_object_changes"]


@dataclass(frozen=True)
class FilePartition(InputPartition):
    """The rows with ``low < _seq <= high`` of one data file: its key, schema version and
    commit date."""

    key: str
    version: int
    date: str
    low: int
    high: int


def _partition_of(key: str, low: int, high: int) -> FilePartition:
    """``<db>/<table>/schema_version=N/commit_date=D/name`` → its version and date."""
    parts = layout_name(key).split("/")
    version = int(parts[-3].split("=", 1)[1])
    date = parts[-2].split("=", 1)[1]
    return FilePartition(key, version, date, low, high)


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
        self._seqs: dict[int, int] = {}  # record number -> S(n) (records never change)
        self._tops: dict[str, int] = {}  # compacted file -> its largest _seq; keys never reused

    def __getstate__(self) -> dict[str, Any]:
        return {"_open_store": self._open_store, "_prefix": self._prefix, "_store": None,
                "_seqs": {}, "_tops": {}}

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
        store = self._the_store()
        state = read_state(store)
        if state.number < end:
            raise RuntimeError(f"the lake's log ends before record {end}, which this query "
                               "already planned: is this the lake the query started on?")
        low, high = self._seq_at(start, state), self._seq_at(end, state)
        self._seqs = {start: low, end: high}  # the next batch starts at this one's end
        if high <= low:  # no rows committed in (start, end]: takeover or compaction records
            return []
        planned: list[InputPartition] = []
        tops: dict[str, int] = {}
        for name, key in sorted(state.names.items()):
            if not name.startswith(self._prefix) or not is_data_name(name):
                continue
            base = posixpath.basename(name)
            first = L.first_seq_of(base)
            if first is not None and first > high:
                continue
            if first is None or first <= low:
                if first is not None and not base.startswith(L.COMPACTED_PREFIX):
                    continue  # a daemon's file: one record's rows, all at or below low
                top = self._tops.get(key)
                if top is None:
                    top = self._top(key)
                tops[key] = top
                if top <= low:
                    continue
            planned.append(_partition_of(key, low, high))
        self._tops = tops
        return planned

    def read(self, partition: InputPartition, target: pa.Schema) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        assert isinstance(partition, FilePartition)
        date = datetime.date.fromisoformat(partition.date)
        with self._open_store().open_input(partition.key) as stream:
            yield from seq_range_batches(pq.ParquetFile(stream), partition.low, partition.high,
                                         target, partition.version, date)

    def _seq_at(self, number: int, state: LogState) -> int:
        """``S(number)``: the ``seq`` of record ``number``'s checkpoint (0: none yet)."""
        if number == 0:
            return 0
        seq = self._seqs.get(number)
        if seq is None:
            if number == state.number:
                checkpoint = state.checkpoint
            else:
                record = CommitLog(self._the_store()).read(number)
                if record is None:
                    raise RuntimeError(f"the lake's log has no record {number}, which this "
                                       "query already read: is this the lake the query "
                                       "started on?")
                checkpoint = record.checkpoint
            seq = self._seqs[number] = int((checkpoint or {}).get("seq") or 0)
        return seq

    def _top(self, key: str) -> int:
        """The largest ``_seq`` in the file at ``key``, from its footer."""
        import pyarrow.parquet as pq

        with self._the_store().open_input(key) as stream:
            bounds = seq_bounds(pq.ParquetFile(stream).metadata)
        return max((high for _low, high in bounds), default=-1)
