"""Read a landed table's change log with Spark: batch (all versions) and streaming.

Batch reading goes version by version, each with its exact schema from ``_schema/v<N>.json``,
then casts every version to the union schema and unions by name: no ``mergeSchema`` guessing,
and a column that changed type between versions still reads.

Streaming reads the whole table directory with the union schema known when the query starts.
Files appear atomically (renamed from staging) and are never rewritten, which is what Spark's
file source requires. A schema version created after the query started is read with the
start-time schema: new columns are not seen until the query is restarted.
"""

from __future__ import annotations

import os
from typing import Any, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as S

from ..parquet import layout as L
from .schema import load_versions, union_schema, version_schema


def table_path(lake: str, database: str, table: str) -> str:
    return os.path.join(lake, L.table_dir(database, table))


def _aligned(df: DataFrame, target: S.StructType, version: int) -> DataFrame:
    present = set(df.columns)
    columns: list[Column] = []
    for f in target.fields:
        if f.name == "schema_version":
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


def read_changes(spark: SparkSession, lake: str, database: str, table: str) -> DataFrame:
    """The table's whole change log, every schema version, with the union schema.

    Columns: the table's columns, ``_op``, ``_seq``, ``_row``, ``_gtid*``, ``_binlog_file``,
    ``_binlog_pos``, ``_commit_ts``, ``_missing``, ``_before``, ``schema_version``,
    ``commit_date``. Order rows by ``(_seq, _row)`` for the source's commit order.
    Data columns carry Spark field metadata ``binlake.primary_key`` and ``binlake.current``
    (the column exists in the latest schema version), which :func:`current_state` uses.
    """
    versions = load_versions(lake, database, table)
    if not versions:
        raise FileNotFoundError(f"no landed table {database}.{table} under {lake}")
    target = union_schema(versions)
    base = table_path(lake, database, table)
    frames = []
    for number, doc in versions.items():
        directory = os.path.join(base, f"schema_version={number}")
        if not os.path.isdir(directory):
            continue  # a version whose rows have not landed yet
        df = (spark.read.schema(version_schema(doc)).option("basePath", directory)
              .parquet(directory))
        frames.append(_aligned(df, target, number))
    if not frames:
        return spark.createDataFrame([], target)
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def stream_changes(spark: SparkSession, lake: str, database: str, table: str,
                   **options: str) -> DataFrame:
    """A Structured Streaming DataFrame over the table's change log (explicit schema).

    ``options`` go to the file source (``maxFilesPerTrigger``, ``latestFirst``…).
    """
    versions = load_versions(lake, database, table)
    if not versions:
        raise FileNotFoundError(f"no landed table {database}.{table} under {lake}")
    reader = spark.readStream.schema(union_schema(versions))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.parquet(table_path(lake, database, table))
