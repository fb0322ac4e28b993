"""Read a landed table's change log with Spark: batch (all versions) and streaming.

Batch reading pins the files it lists (hard links under ``<lake>/_pins/``, see
``sinks/parquet/pins``), so a compaction between making a DataFrame and acting on it neither
fails the action nor changes its rows. It goes version by version, each with its exact schema from ``_schema/v<N>.json``,
then casts every version to the union schema and unions by name: no ``mergeSchema`` guessing,
and a column that changed type between versions still reads.

Streaming reads the whole table directory with the union schema known when the query starts.
Files appear atomically (renamed from staging) and are never rewritten, which is what Spark's
file source requires. A schema version created after the query started is read with the
start-time schema: new columns are not seen until the query is restarted.

Compaction (``sinks/parquet/compact.py``) replaces the daemon's ``part-*`` files by
``compacted-g<generation>-*`` files holding the same rows. Spark's file source remembers the
paths it has delivered, so a compacted file would look new. :func:`stream_changes` therefore
reads the daemon's files from one source, and from a second source only the compacted files
of generations that existed when the query *first* started (its *fence*, kept in the query's
checkpoint directory): those rows were no longer in ``part-*`` files, so nothing delivers them
twice; every later compaction only rewrites files the query had already delivered as
``part-*`` files — provided the query is never more than ``lake.compact_min_age`` behind. A
restart of a query that was further behind is refused (:class:`StreamBehindCompaction`): the
compaction records in ``<table>/_compacted/`` name files its checkpoint never delivered.

What Python reads of the lake (schema files, listings, compaction records, pins) goes through
the lake's :class:`~sinks.storage.Storage` (``storage``, the local file system unless told);
Spark reads the Parquet files by path. A streaming query's checkpoint location (its fence, and
Spark's own log read back) is a local directory, read and written through the local storage.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as S

from ..errors import StreamBehindCompaction
from ..objectstore.s3 import is_store_url
from ..objectstore.view import LakeView, spark_url
from ..parquet import layout as L
from ..parquet.commit import OS
from ..parquet.compact import CompactionRecord
from ..parquet.pins import pin_table
from ..storage import Storage
from .objectlake import object_view, store_opener
from .objectstream import stream_object_changes
from .schema import load_versions, union_schema, version_schema

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
    """A Structured Streaming DataFrame over the table's change log (explicit schema).

    Pass the query's ``checkpoint_location`` (the one given to ``writeStream``) so that a
    restarted query keeps the compaction fence it started with (``_binlake_fence.json`` in that
    directory); without it the fence is taken afresh at every call, which is right only for a
    query that is never restarted. ``options`` go to the file source (``maxFilesPerTrigger``…).

    On an ``s3://BUCKET/PREFIX`` lake the stream follows the lake's commit log instead
    (``sinks/spark/objectstream``): each file a commit added is delivered once, compactions
    never re-deliver a row, and no fence is needed. ``open_store`` (picklable) overrides the
    store, which is otherwise configured from the environment (``sinks/spark/objectlake``).
    """
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
    path = table_path(lake, database, table)
    fence = stream_fence(lake, database, table, checkpoint_location, storage)

    def source(glob: str) -> DataFrame:
        reader = spark.readStream.schema(union_schema(versions))
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.option("pathGlobFilter", glob).parquet(path)

    landed = source(f"{L.ORIGINAL_PREFIX}*{L.DATA_SUFFIX}")
    if fence == 0:
        return landed
    generation = F.regexp_extract(F.input_file_name(), rf"{L.COMPACTED_PREFIX}(\d+)-", 1)
    compacted = (source(f"{L.COMPACTED_PREFIX}*{L.DATA_SUFFIX}")
                 .where(generation.cast("long") <= F.lit(fence)))
    return landed.unionByName(compacted)


def compacted_generations(lake: str, database: str, table: str,
                          storage: Storage = OS) -> int:
    """The highest compaction generation among the table's files (0: never compacted)."""
    highest = 0
    for root, _dirs, files in storage.walk(table_path(lake, database, table)):
        if os.sep + "_" in root:
            continue
        for name in files:
            generation = L.compacted_generation(name)
            if generation is not None and generation > highest:
                highest = generation
    return highest


def stream_fence(lake: str, database: str, table: str, checkpoint_location: str | None,
                 storage: Storage = OS) -> int:
    """The compaction generation a streaming query reads compacted files up to (see the module
    docstring): fixed at its first start, remembered in its checkpoint directory (local)."""
    if checkpoint_location is None or "://" in checkpoint_location \
            and not checkpoint_location.startswith("file:"):
        return compacted_generations(lake, database, table, storage)
    local = OS  # the query's checkpoint location, not the lake
    directory = checkpoint_location.removeprefix("file://").removeprefix("file:")
    record = os.path.join(directory, "_binlake_fence.json")
    seen = _delivered_files(directory, local)
    if local.exists(record) and seen is not None:
        fence = int(json.loads(local.read(record))["generation"])
        _check_not_behind(lake, database, table, fence, seen, storage)
        _check_replay_readable(directory, database, table, local, storage)
        return fence
    fence = compacted_generations(lake, database, table, storage)
    local.makedirs(directory)
    local.write(record + ".tmp", json.dumps({"generation": fence,
                                             "table": f"{database}.{table}"}).encode())
    local.replace(record + ".tmp", record)
    return fence


def _log_entries(local: Storage, log_dir: str, name: str) -> list[dict[str, Any]]:
    """The JSON lines of one file of Spark's file source log (its version line left out)."""
    text = local.read(os.path.join(log_dir, name)).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _delivered_files(checkpoint: str, local: Storage) -> set[str] | None:
    """``schema_version=N/commit_date=D/name`` of every daemon file the query's first source
    has delivered (Spark's file source log in ``sources/0``); ``None`` before its first batch."""
    log_dir = os.path.join(checkpoint, "sources", "0")
    if not local.isdir(log_dir) or not local.listdir(log_dir):
        return None
    seen: set[str] = set()
    for name in local.listdir(log_dir):
        if name.startswith(".") or name.endswith(".tmp"):
            continue
        for entry in _log_entries(local, log_dir, name):
            path = str(entry["path"])
            seen.add("/".join(path.rsplit("/", 3)[-3:]))
    return seen


def _check_replay_readable(checkpoint: str, database: str, table: str,
                           local: Storage, storage: Storage) -> None:
    """Refuse a restart Spark could never complete: a batch planned but not committed (Spark
    replays it with the very files it listed) whose files compaction has replaced since —
    every restart would fail with FileNotFoundException. Only a query more than min-age behind,
    or a first batch over old files, can be caught like this."""
    commits = os.path.join(checkpoint, "commits")
    done = [int(n) for n in local.listdir(commits) if n.isdigit()] \
        if local.isdir(commits) else []
    committed = max(done, default=-1)
    log_dir = os.path.join(checkpoint, "sources", "0")
    gone: list[tuple[int, str]] = []
    for name in local.listdir(log_dir) if local.isdir(log_dir) else []:
        if name.startswith(".") or name.endswith(".tmp"):
            continue
        for entry in _log_entries(local, log_dir, name):
            path = str(entry["path"])
            listed = unquote(urlparse(path).path) if path.startswith("file:") else path
            if int(entry.get("batchId", -1)) > committed and not storage.exists(listed):
                gone.append((int(entry["batchId"]), listed))
    if gone:
        batch, path = min(gone)
        first = ("nothing of it was delivered and no batch before it, so a new checkpoint "
                 "location loses and repeats nothing" if committed < 0 else
                 "a new checkpoint location delivers the earlier batches again")
        raise StreamBehindCompaction(
            f"{database}.{table}: batch {batch} of this streaming query listed {len(gone)} "
            f"files that compaction replaced before the batch was committed (e.g. {path}); "
            f"Spark would replay it with those files and fail at every restart. Start it with "
            f"a new checkpoint location ({first}), and keep queries less than "
            "lake.compact_min_age behind.")


def _check_not_behind(lake: str, database: str, table: str, fence: int,
                      seen: set[str], storage: Storage) -> None:
    """Refuse a restart that would skip rows: a compaction after the query's fence replaced
    daemon files the query had not delivered yet (it was more than min-age behind)."""
    log_dir = os.path.join(table_path(lake, database, table), L.COMPACTION_LOG)
    missed: list[str] = []
    for name in sorted(storage.listdir(log_dir)) if storage.isdir(log_dir) else []:
        if not name.endswith(".json") or int(name[1:9]) <= fence:
            continue
        record = CompactionRecord.read(os.path.join(log_dir, name), storage)
        where = "/".join(record.partition.split("/")[-2:])
        missed += [f"{where}/{n}" for n in record.inputs if f"{where}/{n}" not in seen]
    if missed:
        raise StreamBehindCompaction(
            f"{database}.{table}: this streaming query had not read {len(missed)} files that "
            f"compaction has since replaced (e.g. {missed[0]}); restarting it would skip their "
            "rows. Start it with a new checkpoint location (it then reads the compacted "
            "files), and keep queries less than lake.compact_min_age behind.")
