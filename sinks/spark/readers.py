"""Read a landed table's change log with Spark: batch (all versions) and streaming.

Batch reading pins the files it lists (hard links under ``<lake>/_pins/``, see
``sinks/parquet/pins``), so a compaction between making a DataFrame and acting on it neither
fails the action nor changes its rows. It goes version by version, each with its exact schema from ``_schema/v<N>.json``,
then casts every version to the union schema and unions by name: no ``mergeSchema`` guessing,
and a column that changed type between versions still reads.

Streaming (:func:`stream_changes`) is not Spark's file source, which remembers paths and plans
a batch as a list of them: a compacted file would look new, and a path planned before a
compaction's switch is gone when read. Its offsets are positions in the lake's commit order
(``sinks/spark/stream``, with ``localstream`` on disk and ``objectstream`` on object storage).

What Python reads of the lake (schema files, listings, compaction records, pins) goes through
the lake's :class:`~sinks.storage.Storage` (``storage``, the local file system unless told);
Spark reads the Parquet files by path (the streaming source's workers read them through the
storage too).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as S

from ..objectstore.s3 import is_store_url
from ..objectstore.view import LakeView, spark_url
from ..parquet import layout as L
from ..parquet.commit import OS
from ..parquet.pins import pin_table
from ..storage import Storage
from .localstream import LocalBackend
from .objectlake import object_view, store_opener
from .objectstream import stream_object_changes
from .schema import load_versions, union_schema, version_schema
from .stream import stream_source

if TYPE_CHECKING:
    from ..objectstore.store import ObjectStore


def table_path(lake: str, database: str, table: str) -> str:
    return os.path.join(lake, L.table_dir(database, table))


def _aligned(df: DataFrame, target: S.StructType, version: int | None) -> DataFrame:
    """``df`` cast to ``target`` by column name (absent columns null); ``version`` fills
    ``schema_version`` (``None``: ``df`` has its own, as a materialised state does)."""
    present = set(df.columns)
    columns: list[Column] = []
    for f in target.fields:
        if f.name == "schema_version" and version is not None:
            columns.append(F.lit(version).cast(f.dataType).alias(f.name))
        elif f.name == "_before":
            columns.append(_aligned_struct(df, f.dataType).alias(f.name))
        elif f.name in present:
            columns.append(F.col(f"`{f.name}`").cast(f.dataType).alias(f.name,
                                                                      metadata=f.metadata))
        else:
            columns.append(F.lit(None).cast(f.dataType).alias(f.name, metadata=f.metadata))
    return df.select(*columns)


def _aligned_struct(df: DataFrame, target: Any) -> Column:
    source = cast(S.StructType, df.schema["_before"].dataType)  # binlake always writes a struct
    present = set(source.names)
    fields = [
        (F.col("_before").getField(f.name).cast(f.dataType) if f.name in present
         else F.lit(None).cast(f.dataType)).alias(f.name)
        for f in target.fields
    ]
    return F.when(F.col("_before").isNull(), F.lit(None).cast(target)).otherwise(
        F.struct(*fields))


def read_changes(spark: SparkSession, lake: str, database: str, table: str,
                 storage: Storage = OS, *, spark_root: str | None = None,
                 store: ObjectStore | None = None) -> DataFrame:
    """The table's whole change log, every schema version, with the union schema.

    Columns: the table's columns, ``_op``, ``_seq``, ``_row``, ``_gtid*``, ``_binlog_file``,
    ``_binlog_pos``, ``_commit_ts``, ``_missing``, ``_before``, ``schema_version``,
    ``commit_date``. Order rows by ``(_seq, _row)`` for the source's commit order.
    The DataFrame reads a pin of the files listed now (``sinks/parquet/pins``): a compaction
    before its action does not make it fail, and it sees the rows as of this call.
    Data columns carry Spark field metadata ``binlake.primary_key`` and ``binlake.current``
    (the column exists in the latest schema version), which :func:`current_state` uses.

    ``lake`` is a directory or an ``s3://BUCKET/PREFIX`` URL. On object storage the files are
    those the lake's commit log names as of this call (never an object of an unfinished
    commit), read by Spark at ``spark_root`` + key (default ``s3a://BUCKET/PREFIX``,
    ``sinks/spark/objectlake``); ``store`` overrides the store the log is read from.
    """
    if is_store_url(lake):
        with object_view(lake, spark_root, store) as view:
            return read_changes_from(spark, view.directory, database, table, view=view)[0]
    return read_changes_from(spark, lake, database, table, storage=storage)[0]


def read_changes_from(spark: SparkSession, lake: str, database: str, table: str,
                      skip: Collection[str] = (), storage: Storage = OS, *,
                      view: LakeView | None = None) -> tuple[DataFrame, str]:
    """:func:`read_changes` without the files in ``skip`` (``schema_version=N/commit_date=D/
    name``, those a materialised state covers); also returns the table directory read (the pin,
    or the live one when the lake cannot be pinned — then ``skip`` is not applied).

    With ``view`` (a lake on object storage), ``lake`` is the view's bookkeeping copy (local)
    and the data files are the ones the view names, at their Spark URLs; ``skip`` does not
    apply (no materialised state is kept on object storage)."""
    versions = load_versions(lake, database, table, storage)
    if not versions:
        raise FileNotFoundError(f"no landed table {database}.{table} under "
                                f"{view.url if view is not None else lake}")
    target = union_schema(versions)
    if view is not None:
        base = spark_url(view.spark_root, L.table_dir(database, table))
    else:  # read through a pin: compaction switching a partition cannot take a file away
        base = (pin_table(lake, database, table, skip=skip, storage=storage)
                or table_path(lake, database, table))
    frames = []
    for number, doc in versions.items():
        reader = spark.read.schema(version_schema(doc))
        if view is not None:
            version = f"{L.table_dir(database, table)}/{L.version_dir(number)}"
            paths = view.spark_paths(version + "/")
            if not paths:
                continue  # a version whose rows have not landed yet
            df = reader.option("basePath", spark_url(view.spark_root, version)).parquet(*paths)
        else:
            directory = os.path.join(base, L.version_dir(number))
            if not storage.isdir(directory):
                continue
            df = reader.option("basePath", directory).parquet(directory)
        frames.append(_aligned(df, target, number))
    if not frames:
        return spark.createDataFrame([], target), base
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result, base


def stream_changes(spark: SparkSession, lake: str, database: str, table: str,
                   checkpoint_location: str | None = None, storage: Storage = OS, *,
                   open_store: Callable[[], ObjectStore] | None = None,
                   **options: str) -> DataFrame:
    """A Structured Streaming DataFrame over the table's change log, with the union schema
    known when the query starts (a schema version created later is read with it: new columns
    are not seen until the query is restarted).

    Every row is delivered once, whatever compactions run before, during or after the query
    (any ``--min-age``), and a query restarted from its checkpoint location goes on where it
    stopped: its offsets are positions in the lake's commit order, not files
    (``sinks/spark/stream``). On disk a position is the checkpoint's ``_seq``
    (``sinks/spark/localstream``); on an ``s3://BUCKET/PREFIX`` lake it is a record number of
    the lake's commit log (``sinks/spark/objectstream``). The offsets live in the checkpoint
    location given to ``writeStream``; ``checkpoint_location`` is still accepted, for callers
    written when the source kept a position of its own, and warns that it is not used (a
    caller relying on it to resume would otherwise restart from the beginning without a word).
    ``options``: ``maxFilesPerTrigger`` bounds a micro-batch.
    ``open_store`` (picklable) overrides the object store, which is otherwise configured from
    the environment (``sinks/spark/objectlake``).
    """
    if checkpoint_location is not None:
        warnings.warn(f"stream_changes ignores checkpoint_location={checkpoint_location!r}: the "
                      "stream resumes from the checkpointLocation option of writeStream; pass "
                      "it there", FutureWarning, stacklevel=2)
    if is_store_url(lake):
        opener = open_store or store_opener(lake)
        with object_view(lake, store=opener()) as view:
            found = load_versions(view.directory, database, table)
        if not found:
            raise FileNotFoundError(f"no landed table {database}.{table} under {lake}")
        return stream_object_changes(spark, opener, database, table, union_schema(found),
                                     **options)
    versions = load_versions(lake, database, table, storage)
    if not versions:
        raise FileNotFoundError(f"no landed table {database}.{table} under {lake}")
    backend = LocalBackend(os.path.abspath(lake), database, table, storage)
    return stream_source(spark, backend, union_schema(versions), **options)
