"""A table's changes as a Spark stream whose offsets are a position in the lake's commit order.

Spark's file source remembers the *paths* it has delivered and plans a micro-batch as a list of
paths. Both break on a lake that compacts: a compacted file is a new path holding rows already
delivered, and a path planned before a compaction's switch is gone when the batch reads it. So
``stream_changes`` uses this source instead, on either backend: an offset is one number in the
lake's commit order (``{"seq": n}`` on disk, ``{"record": n}`` on object storage), a
micro-batch is the changes committed in ``(start, end]``, and which files hold them is decided
when the batch is read, never remembered. A batch that Spark replays after a restart is the
same range, so it is read again exactly.

What differs between the backends is a :class:`Backend` (``sinks/spark/localstream.py`` on
disk, ``sinks/spark/objectstream.py`` on object storage): where the newest position comes from,
how a range is cut into input partitions and how one partition's rows are read. This module is
the rest: the Python data source Spark calls, its offsets and read limit, and the alignment of
a file's columns to the table's union schema (as the batch reader aligns them).

The source is a Python data source (``pyspark.sql.datasource``), registered per query under a
fresh name by :func:`stream_source`; the backend travels with the pickled source class to the
Python workers, never through Spark's options (which Spark prints in plans).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as S
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["BATCH_ROWS", "Backend", "align_batch", "seq_range_batches", "stream_source"]

#: Rows per Arrow batch a worker hands Spark (bounds a worker's memory, not a file's size).
BATCH_ROWS = 65536


class Backend(Protocol):
    """One lake's part of the stream. It is pickled to Spark's Python workers (keep caches out
    of its pickled state). Positions are integers that only grow in commit order; 0 is "before
    everything"."""

    #: The offset's key in Spark's checkpoint (``{key: n}``): fixed per backend, so a query's
    #: checkpoint is never read as another backend's.
    key: str

    def latest(self, start: int, max_files: int) -> int:
        """The newest position to read up to, from ``start``: everything committed, or less
        so that about ``max_files`` files are read (``max_files`` 0: no limit)."""
        ...

    def partitions(self, start: int, end: int) -> Sequence[InputPartition]:
        """The input partitions that together hold the changes in ``(start, end]``."""
        ...

    def read(self, partition: InputPartition, target: pa.Schema) -> Iterator[pa.RecordBatch]:
        """One partition's changes, aligned to ``target`` (:func:`align_batch`)."""
        ...


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


def seq_range_batches(parquet: pq.ParquetFile, start: int, end: int, target: pa.Schema,
                      version: int, date: datetime.date) -> Iterator[pa.RecordBatch]:
    """The rows of an open data file with ``start < _seq <= end``, aligned to ``target``
    (:func:`align_batch`); only the row groups whose ``_seq`` statistics meet the range are
    read."""
    import pyarrow.compute as pc

    from ..parquet.compact import seq_bounds

    groups = [i for i, (low, high) in enumerate(seq_bounds(parquet.metadata))
              if high > start and low <= end]
    if not groups:
        return
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=groups):
        seq = batch.column(batch.schema.get_field_index("_seq"))
        rows = batch.filter(pc.and_(pc.greater(seq, start), pc.less_equal(seq, end)))
        if rows.num_rows:
            yield align_batch(rows, target, version, date)


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


def stream_source(spark: SparkSession, backend: Backend, schema: S.StructType,
                  **options: str) -> DataFrame:
    """A streaming DataFrame of one table's changes read through ``backend`` (module
    docstring). ``schema``: the table's union schema. ``options``: ``maxFilesPerTrigger``
    bounds a micro-batch's files (about: a batch ends at a commit boundary)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    name = f"binlake_changes_{uuid.uuid4().hex}"
    source = type(f"BinlakeChanges_{name}", (_ChangesSource,),
                  {"_backend": backend, "_target": target, "_schema": schema, "_name": name})
    spark.dataSource.register(source)
    reader = spark.readStream.format(name)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class _ChangesSource(DataSource):
    """The source; :func:`stream_source` makes a subclass per query with the backend, the
    table's schema and the source's name as class attributes."""

    _backend: Backend
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
        return _ChangesReader(type(self)._backend, self._target, limit)


class _ChangesReader(DataSourceStreamReader):
    """Offsets are ``{backend.key: position}``; see the module docstring."""

    def __init__(self, backend: Backend, target: Any, max_files: int) -> None:
        self._backend = backend
        self._target = target
        self._max_files = max_files

    def _position(self, offset: dict[str, int]) -> int:
        return int(offset[self._backend.key])

    def initialOffset(self) -> dict[str, int]:
        return {self._backend.key: 0}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

        return ReadMaxFiles(self._max_files) if self._max_files > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        from pyspark.sql.streaming.datasource import ReadMaxFiles

        files = limit.max_files if isinstance(limit, ReadMaxFiles) else 0
        return {self._backend.key: self._backend.latest(self._position(start), files)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin, upto = self._position(start), self._position(end)
        return self._backend.partitions(begin, upto) if upto > begin else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._backend.read(partition, self._target)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the lake is read, never held."""
