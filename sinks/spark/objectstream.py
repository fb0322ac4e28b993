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

The source is a Python data source (``pyspark.sql.datasource``), registered per query under a
fresh name by :func:`stream_object_changes`; the store's settings travel with the pickled
source class to the workers, never through Spark's options (which Spark prints in plans).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as S
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from ..objectstore.commit import CommitLog
from ..objectstore.view import data_additions, is_data_name, layout_name, live_names, read_records
from ..parquet import layout as L

if TYPE_CHECKING:
    import pyarrow as pa

    from ..objectstore.store import ObjectStore

__all__ = ["FilePartition", "align_batch", "stream_object_changes"]

#: Rows per Arrow batch a worker hands Spark (bounds a worker's memory, not a file's size).
BATCH_ROWS = 65536


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


def align_batch(batch: pa.RecordBatch, target: pa.Schema, version: int,
                date: datetime.date) -> pa.RecordBatch:
    """``batch`` (one file's columns) as ``target`` (the union schema): columns by name, each
    cast to its union type, absent ones null, ``schema_version``/``commit_date`` filled."""
    import pyarrow as pa

    rows = batch.num_rows
    arrays: list[pa.Array] = []
    names = batch.schema.names
    for field in target:
        if field.name == "schema_version":
            arrays.append(pa.array([version] * rows, field.type))
        elif field.name == "commit_date":
            arrays.append(pa.array([date] * rows, field.type))
        elif field.name in names:
            arrays.append(_cast(batch.column(names.index(field.name)), field.type))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    import pyarrow as pa

    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        source = {array.type.field(i).name: i for i in range(array.type.num_fields)}
        children = [
            _cast(array.field(source[f.name]), f.type) if f.name in source
            else pa.nulls(len(array), f.type)
            for f in target
        ]
        return pa.StructArray.from_arrays(children, fields=list(target),
                                          mask=array.is_null())
    return array.cast(target)


def stream_object_changes(spark: SparkSession, open_store: Callable[[], ObjectStore],
                          database: str, table: str, schema: S.StructType,
                          **options: str) -> DataFrame:
    """A streaming DataFrame of the table's changes on the lake ``open_store()`` opens (module
    docstring). ``open_store`` must pickle (e.g. a ``functools.partial`` of
    ``sinks.objectstore.s3.open_store``); every worker calls it. ``schema``: the union schema.
    ``options``: ``maxFilesPerTrigger`` bounds a micro-batch's files."""
    from pyspark.sql.pandas.types import to_arrow_schema

    prefix = f"{L.table_dir(database, table)}/"
    target = to_arrow_schema(schema, timezone="UTC")
    name = f"binlake_changes_{uuid.uuid4().hex}"
    source = type(f"BinlakeChanges_{name}", (_ChangesSource,),
                  {"_open_store": staticmethod(open_store), "_prefix": prefix,
                   "_target": target, "_schema": schema, "_name": name})
    spark.dataSource.register(source)
    reader = spark.readStream.format(name)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class _ChangesSource(DataSource):
    """The source; :func:`stream_object_changes` makes a subclass per query with the store,
    the table and its schema as class attributes."""

    _open_store: Callable[[], ObjectStore]
    _prefix: str
    _target: Any
    _schema: S.StructType
    _name: str

    @classmethod
    def name(cls) -> str:
        return cls._name

    def schema(self) -> S.StructType:
        return self._schema

    def streamReader(self, schema: S.StructType) -> DataSourceStreamReader:
        limit = int(self.options.get("maxFilesPerTrigger", "0") or 0)
        return _ChangesReader(type(self)._open_store, self._prefix, self._target, limit)


class _ChangesReader(DataSourceStreamReader):
    """Offsets are log numbers; see the module docstring."""

    def __init__(self, open_store: Callable[[], ObjectStore], prefix: str, target: Any,
                 max_files: int) -> None:
        self._open_store = open_store
        self._prefix = prefix
        self._target = target
        self._max_files = max_files
        self._store: ObjectStore | None = None

    def _the_store(self) -> ObjectStore:
        if self._store is None:
            self._store = self._open_store()
        return self._store

    def initialOffset(self) -> dict[str, int]:
        return {"record": 0}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

        return ReadMaxFiles(self._max_files) if self._max_files > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        from pyspark.sql.streaming.datasource import ReadMaxFiles

        newest = CommitLog(self._the_store()).newest_number()
        if not isinstance(limit, ReadMaxFiles):
            return {"record": newest}
        # whole records until the files reach the limit (at least one record)
        files, end = 0, int(start["record"])
        for record in read_records(self._the_store(), after=end, upto=newest):
            files += len(data_additions([record], self._prefix))
            end = record.number
            if files >= limit.max_files:
                break
        return {"record": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin, upto = int(start["record"]), int(end["record"])
        if upto <= begin:
            return []
        records = read_records(self._the_store(), after=begin, upto=upto)
        if not records or records[-1].number != upto:
            raise RuntimeError(f"the lake's log ends before record {upto}, which this query "
                               "already planned: is this the lake the query started on?")
        if begin == 0:  # the first batch: the table as of `upto`, each live file once
            live = live_names(records)
            keys = [live[name] for name in sorted(live) if name.startswith(self._prefix)
                    and is_data_name(name)]
        else:
            keys = data_additions(records, self._prefix)
        return [_partition_of(key) for key in keys]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        assert isinstance(partition, FilePartition)
        date = datetime.date.fromisoformat(partition.date)
        with self._open_store().open_input(partition.key) as stream:
            parquet = pq.ParquetFile(stream)
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                yield align_batch(batch, self._target, partition.version, date)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the log is read, never held."""
