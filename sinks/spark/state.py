"""Reduce a change log to the table's present rows.

The latest change per primary key by the total order ``(_seq, _row)`` wins; keys whose latest
change is a delete disappear. A primary-key change was landed as D(old key) + I(new key), so
with full row images it needs no special case here.

Row images that lack columns (``binlog_row_image=MINIMAL``/``NOBLOB``: listed in ``_missing``)
are merged: each column takes its value from the latest change of the same source row that
carried it, and a key column absent from an UPDATE's after image comes from its before image.
"The same source row" follows primary-key changes (the I half carries the old key in
``_before``), so a moved row keeps the columns its new key's image left out. A MySQL partial
JSON update without a before image (``_json_diff``) is applied to the row's previous document.

:func:`read_current_state` also uses the DDL log: changes before a table's last TRUNCATE /
DROP / CREATE are left out, and a column added with a DEFAULT gets that default in rows last
changed before the ALTER (the server fills it in without logging row events).

What Python reads and writes of the lake here (the DDL log, states, their ``_covered.json``,
pins, footers) goes through its :class:`~sinks.storage.Storage` (``storage``, the local file
system unless told); Spark reads and writes the Parquet files by path.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as S

from ..objectstore.s3 import is_store_url
from ..objectstore.view import LakeView
from ..parquet import ddl as D
from ..parquet import layout as L
from ..parquet.commit import OS
from ..parquet.compact import max_seq
from ..parquet.pins import new_pin, pin_partition
from ..parquet.state import read_document
from ..storage import Storage
from .objectlake import object_view
from .readers import _aligned, read_changes_from
from .schema import load_versions

if TYPE_CHECKING:
    from ..objectstore.store import ObjectStore

log = logging.getLogger("binlake.spark")

METADATA_COLUMNS = ("_op", "_seq", "_row", "_gtid", "_gtid_domain", "_gtid_server_id",
                    "_gtid_uuid", "_gtid_tag", "_gtid_seq", "_binlog_file", "_binlog_pos",
                    "_commit_ts", "_missing", "_json_diff", "_before", "schema_version",
                    "commit_date")


def _is_missing(name: str) -> Column:
    return F.coalesce(F.array_contains(F.col("_missing"), F.lit(name)), F.lit(False))


def current_state(df: DataFrame, key_columns: Sequence[str] | None = None,
                  columns: Sequence[str] | None = None,
                  partial_images: bool | None = None, *,
                  keep_metadata: bool = False) -> DataFrame:
    """The present rows of the table whose change log is ``df``.

    Args:
        df: a change log, e.g. from :func:`read_changes`.
        key_columns: the primary key (or another unique, non-null key); by default the
            columns :func:`read_changes` marked ``binlake.primary_key``.
        columns: the data columns to return; by default those marked ``binlake.current``
            (the latest schema version's), else every non-metadata column.
        partial_images: merge rows that lack columns; ``None`` checks ``_missing`` to decide.
        keep_metadata: return each key's winning change row whole (every column of ``df``,
            merged, ``_missing`` null) instead of ``columns``: what a materialised state holds.
    """
    data = [f for f in df.schema.fields if f.name not in METADATA_COLUMNS]
    if key_columns is None:
        key_columns = [f.name for f in data if f.metadata.get("binlake.primary_key")]
    if not key_columns:
        raise ValueError("current_state needs the table's key columns (none recorded)")
    if columns is None:
        marked = [f.name for f in data if f.metadata.get("binlake.current")]
        columns = marked or [f.name for f in data]
    if partial_images is None:
        partial_images = bool(df.where(F.col("_missing").isNotNull()).limit(1).count())
    order = [F.col("_seq").desc(), F.col("_row").desc()]
    if keep_metadata:
        columns = [f.name for f in data]
    output = [F.col(f"`{c}`") for c in columns]
    if keep_metadata:
        output += [F.lit(None).cast(df.schema[m].dataType).alias(m)
                   if m in ("_missing", "_json_diff") else F.col(m)
                   for m in METADATA_COLUMNS if m in df.columns]
    if not partial_images:
        latest = Window.partitionBy(*[F.col(f"`{k}`") for k in key_columns]).orderBy(*order)
        return (df.withColumn("__rank", F.row_number().over(latest))
                .where((F.col("__rank") == 1) & (F.col("_op") != "D"))
                .select(*output))
    keyed = df
    for k in key_columns:
        keyed = keyed.withColumn(
            k, F.when(_is_missing(k), F.col("_before").getField(k)).otherwise(F.col(f"`{k}`")))
    keyed = _with_lineage(keyed, key_columns)
    history = (Window.partitionBy("__lineage").orderBy(F.col("_seq"), F.col("_row"))
               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    merged = keyed
    for c in columns:
        if c in key_columns:
            continue
        carried = F.when(~_is_missing(c), F.struct(F.col(f"`{c}`").alias("v")))
        merged = merged.withColumn(c, F.last(carried, ignorenulls=True).over(history)
                                   .getField("v"))
    latest = Window.partitionBy("__lineage").orderBy(*order)
    state = (merged.withColumn("__rank", F.row_number().over(latest))
             .where((F.col("__rank") == 1) & (F.col("_op") != "D")))
    state = _apply_json_diffs(keyed, state, [c for c in columns if c not in key_columns])
    return state.select(*output)


def _with_lineage(df: DataFrame, key_columns: Sequence[str]) -> DataFrame:
    """``__lineage``: which row of the source table each change belongs to, across primary-key
    changes.

    A key's history is cut into segments, each starting at an ``I``/``R`` (a row that did not
    exist before); a segment is ``struct(key…, start _seq, start _row)``. A key change landed
    as D(old key) + I(new key) in consecutive ``_row``s, the I carrying ``_before``: the I's
    segment continues the D's. Following those links back gives each segment its first one,
    the lineage — so the columns a MINIMAL/NOBLOB image left out of the new key's row are
    carried over from the old key's. Links are few (one per key change) and resolved on the
    driver.
    """
    keys = [F.col(f"`{k}`") for k in key_columns]
    by_key = (Window.partitionBy(*keys).orderBy(F.col("_seq"), F.col("_row"))
              .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    start = F.last(F.when(F.col("_op").isin("I", "R"), F.struct(
        F.col("_seq").alias("s"), F.col("_row").alias("r"))), ignorenulls=True).over(by_key)
    df = df.withColumn("__start", start).withColumn("__segment", F.struct(
        *[F.col(f"`{k}`").alias(f"k{i}") for i, k in enumerate(key_columns)],
        # -1: the key's changes before its first insert (a lake started mid-stream); no NULLs
        # in a join key
        F.coalesce(F.col("__start").getField("s"), F.lit(-1)).alias("s"),
        F.coalesce(F.col("__start").getField("r"), F.lit(-1)).alias("r")))
    moved_in = (df.where((F.col("_op") == "I") & F.col("_before").isNotNull())
                .select("_seq", "_row", F.col("__segment").alias("new")))
    moved_out = (df.where(F.col("_op") == "D")
                 .select("_seq", (F.col("_row") + 1).alias("_row"), F.col("__segment").alias("old")))
    links = moved_in.join(moved_out, ["_seq", "_row"]).select("new", "old").collect()
    if not links:
        return df.withColumn("__lineage", F.col("__segment"))
    parent = {row["new"]: row["old"] for row in links}

    def root(segment: Any) -> Any:
        seen = set()
        while segment in parent and segment not in seen:
            seen.add(segment)
            segment = parent[segment]
        return segment

    segment_type = df.schema["__segment"].dataType
    roots = df.sparkSession.createDataFrame(
        [(new, root(new)) for new in parent],
        S.StructType([S.StructField("__segment", segment_type),
                      S.StructField("__root", segment_type)]))
    return (df.join(F.broadcast(roots), ["__segment"], "left")
            .withColumn("__lineage", F.coalesce(F.col("__root"), F.col("__segment")))
            .drop("__root"))


def _apply_json_diffs(history: DataFrame, state: DataFrame, columns: Sequence[str]) -> DataFrame:
    """Columns whose history holds MySQL partial JSON updates without a before image
    (``_json_diff``): fold each lineage's changes — a full value, then the diffs after it —
    into the current document. Without a full value before a diff the column is NULL."""
    if "_json_diff" not in history.columns:
        return state
    named = (history.where(F.col("_json_diff").isNotNull())
             .select(F.explode(F.map_keys(F.from_json("_json_diff", "map<string,string>"))))
             .distinct().collect())  # one job: the columns that have diffs
    diffed = {row[0] for row in named}
    for c in [c for c in columns if c in diffed]:
        entries = (history.where(~_is_missing(c) | F.col("_json_diff").isNotNull())
                   .groupBy("__lineage").agg(F.sort_array(F.collect_list(F.struct(
                       "_seq", "_row", (~_is_missing(c)).alias("present"),
                       F.col(f"`{c}`").cast("string").alias("value"), "_json_diff"))).alias("h")))
        folded = entries.select("__lineage", _fold_json(F.col("h"), F.lit(c)).alias("__folded"))
        state = (state.join(folded, ["__lineage"], "left")
                 .withColumn(c, F.col("__folded").getField("v").cast(state.schema[c].dataType))
                 .drop("__folded"))
    return state


def _fold_json_history(history: list[Any], column: str) -> tuple[str | None]:
    from protocol.binlog.values import apply_json_diff_text

    document = None
    for entry in history:
        if entry["present"]:
            document = entry["value"]
            continue
        diff = json.loads(entry["_json_diff"]).get(column) if entry["_json_diff"] else None
        if diff is not None and document is not None:
            document = apply_json_diff_text(document, json.dumps(diff))
    return (document,)


# a lambda: pyspark would try to read a pandas UDF kind from the function's type hints
_fold_json = F.udf(lambda history, column: _fold_json_history(history, column),
                   S.StructType([S.StructField("v", S.StringType())]))


def _visible(storage: Storage, directory: str) -> list[str]:
    """The names in ``directory`` not starting with a dot, in name order; none if it is gone."""
    try:
        return sorted(n for n in storage.listdir(directory) if not n.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


def ddl_entries(lake: str, database: str, table: str,
                storage: Storage = OS) -> list[dict[str, Any]]:
    """The DDL log entries that name the table, in ``_seq`` order."""
    entries = []
    log_dir = os.path.join(lake, L.DDL_DIR)
    for directory in _visible(storage, log_dir):
        for name in _visible(storage, os.path.join(log_dir, directory)):
            if not name.endswith(".jsonl"):
                continue
            text = storage.read(os.path.join(log_dir, directory, name)).decode("utf-8")
            for line in text.splitlines():
                entry = json.loads(line)
                if [database, table] in entry.get("tables", []):
                    entries.append(entry)
    entries.sort(key=lambda e: int(e["seq"]))
    return entries


def last_reset_seq(lake: str, database: str, table: str, storage: Storage = OS) -> int:
    """The ``_seq`` of the last DDL that emptied or replaced the table (TRUNCATE, DROP, CREATE),
    from the DDL log; 0 if none. Changes at or before it do not describe present rows."""
    resets = [int(e["seq"]) for e in ddl_entries(lake, database, table, storage)
              if e.get("resets_table")]
    return max(resets, default=0)


def fill_added_defaults(changes: DataFrame, entries: list[dict[str, Any]]) -> DataFrame:
    """Give rows from before an ``ADD COLUMN … DEFAULT`` the default existing rows got.

    The server fills the new column of every existing row without logging a row event, so the
    change rows from before the ALTER (``_seq`` below it) are the ones that lack it.
    """
    for entry in entries:
        for name, value in D.added_column_defaults(entry["query"]).items():
            if name not in changes.columns:
                continue
            column_type = changes.schema[name].dataType
            changes = changes.withColumn(name, F.when(
                F.col("_seq") < int(entry["seq"]), F.lit(value).cast(column_type)
            ).otherwise(F.col(f"`{name}`")).alias(name, metadata=changes.schema[name].metadata))
    return changes


def read_current_state(spark: SparkSession, lake: str, database: str, table: str,
                       key_columns: Sequence[str] | None = None, *,
                       use_state: bool = True, storage: Storage = OS,
                       spark_root: str | None = None,
                       store: ObjectStore | None = None) -> DataFrame:
    """The table's present rows, with its current columns (those of its latest schema version).

    The key defaults to the primary key recorded in the latest ``_schema/v<N>.json``. With
    ``use_state`` (the default) it starts from the latest materialised state
    (:func:`materialize_state`) and replays only the changes after it.

    ``lake`` may be an ``s3://BUCKET/PREFIX`` URL: the change files are then those the lake's
    commit log names now, read by Spark at ``spark_root`` (:func:`~sinks.spark.readers.
    read_changes`); a lake on object storage keeps no materialised state.
    """
    if is_store_url(lake):
        with object_view(lake, spark_root, store) as view:
            return _current_state(spark, view.directory, database, table, key_columns,
                                  use_state=False, storage=OS, view=view)
    return _current_state(spark, lake, database, table, key_columns, use_state=use_state,
                          storage=storage)


def _current_state(spark: SparkSession, lake: str, database: str, table: str,
                   key_columns: Sequence[str] | None, *, use_state: bool, storage: Storage,
                   view: LakeView | None = None) -> DataFrame:
    versions = load_versions(lake, database, table, storage)
    if not versions:
        raise FileNotFoundError(f"no landed table {database}.{table} under "
                                f"{view.url if view is not None else lake}")
    latest = list(versions.values())[-1]
    keys = list(key_columns or latest["primary_key"])
    if not keys:
        raise ValueError(f"{database}.{table} has no primary key recorded; pass key_columns")
    changes, _base, _skip = _changes_for_state(spark, lake, database, table,
                                               use_state=use_state, storage=storage,
                                               view=view)
    return current_state(changes, keys, [c["name"] for c in latest["columns"]])


def _changes_for_state(spark: SparkSession, lake: str, database: str, table: str, *,
                       use_state: bool, storage: Storage, upto_seq: int | None = None,
                       view: LakeView | None = None,
                       ) -> tuple[DataFrame, str, frozenset[str]]:
    """The change rows current state is computed from: the latest materialised state's rows
    (if any, and if no TRUNCATE/DROP/CREATE came after it) plus the changes after it, reset
    and ADD COLUMN defaults applied. The change files the state covers (``_covered.json``) are
    not even listed for Spark: that, not the filter on ``_seq``, is what makes a state pay off
    on a lake of many files. Also returns the table directory read and the files skipped.
    ``view``: a lake on object storage (``lake`` is its local bookkeeping copy)."""
    entries = ddl_entries(lake, database, table, storage)
    reset = max((int(e["seq"]) for e in entries if e.get("resets_table")), default=0)
    state = pinned_state(lake, database, table, storage) if use_state else None
    if state is not None and not (state[0] >= reset
                                  and (upto_seq is None or state[0] <= upto_seq)):
        state = None
    skip = (covered_files(lake, database, table, state[0], storage) if state is not None
            else frozenset())
    changes, base = read_changes_from(spark, lake, database, table, skip, storage, view=view)
    if state is not None:
        seq, path = state
        rows = _aligned(spark.read.parquet(path), changes.schema, None)
        changes = rows.unionByName(changes.where(F.col("_seq") > seq))
    if upto_seq is not None:
        changes = changes.where(F.col("_seq") <= upto_seq)
    if reset:
        changes = changes.where(F.col("_seq") > reset)
    return fill_added_defaults(changes, [e for e in entries if int(e["seq"]) > reset]), base, skip


# --- materialised state ------------------------------------------------------------------------


def state_dirs(lake: str, database: str, table: str,
               storage: Storage = OS) -> list[tuple[int, str]]:
    """The table's complete materialised states ``(seq, directory)``, oldest first."""
    base = os.path.join(lake, L.table_dir(database, table), L.STATE_DIR)
    found = []
    for name in storage.listdir(base) if storage.isdir(base) else []:
        seq = L.state_seq_of(name)
        if seq is not None:
            found.append((seq, os.path.join(base, name)))
    return sorted(found)


def latest_state(lake: str, database: str, table: str,
                 storage: Storage = OS) -> tuple[int, str] | None:
    states = state_dirs(lake, database, table, storage)
    return states[-1] if states else None


_unreadable_covered: set[str] = set()  # ``_covered.json`` files already warned about


def covered_files(lake: str, database: str, table: str, seq: int,
                  storage: Storage = OS) -> frozenset[str]:
    """The change files state ``seq`` covers (``schema_version=N/commit_date=D/name``); empty
    when it does not say (a state from before ``_covered.json``, or one deleted meanwhile).

    An unreadable one (not JSON, no list of names) is not fatal — the state's rows are still
    right, and with no covered files every change file is read and filtered by ``_seq``, the
    same result, slower — but it is said, once per file: a reader silently slower than it
    should be is a lake problem nobody would find."""
    path = os.path.join(lake, L.state_dir(database, table, seq), L.STATE_COVERED)
    try:
        files = json.loads(storage.read(path))["files"]
        if not isinstance(files, list) or not all(isinstance(n, str) for n in files):
            raise TypeError(f"'files' is not a list of names but {type(files).__name__}")
        return frozenset(files)
    except FileNotFoundError:
        return frozenset()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if path not in _unreadable_covered:
            _unreadable_covered.add(path)
            detail = f"no key {exc}" if isinstance(exc, KeyError) else str(exc)
            log.warning("ignoring the unreadable %s (%s): %s.%s's current state is read from its "
                        "state as of _seq %d plus every change file filtered by _seq, the same "
                        "rows but slower (the next state `python -m sinks.spark.materialize` writes once "
                        "the lake has moved past _seq %d gets a new one)", path, detail,
                        database, table, seq, seq)
        return frozenset()


def _covered_now(lake: str, database: str, table: str, base: str, skipped: frozenset[str],
                 upto: int, storage: Storage) -> set[str]:
    """The change files a state as of ``upto`` covers: those the previous state covered that
    are still live (compaction replaces some), and those just read whose largest ``_seq``
    (footer statistics) is at most ``upto``."""
    live = os.path.join(lake, L.table_dir(database, table))
    covered = {f for f in skipped if storage.exists(os.path.join(live, f))}
    candidates = []
    for root, dirs, files in storage.walk(base):
        dirs[:] = [d for d in dirs if not L.is_hidden(d)]  # _state, _schema…: not changes
        relative = os.path.relpath(root, base)
        for name in files:
            first = L.first_seq_of(name)
            if first is not None and first <= upto:  # a later first _seq: surely not covered
                candidates.append(posixpath.join(*relative.split(os.sep), name))
    with ThreadPoolExecutor(max_workers=8) as pool:  # footers: mostly waiting on the disk
        highest = list(pool.map(lambda f: max_seq(os.path.join(base, f), storage), candidates))
    covered.update(f for f, top in zip(candidates, highest, strict=True) if top <= upto)
    return covered


def pinned_state(lake: str, database: str, table: str,
                 storage: Storage = OS) -> tuple[int, str] | None:
    """The latest state, read through a pin (``sinks/parquet/pins``): a newer materialisation
    deleting it before the DataFrame's action does not make that action fail."""
    pin: str | None = None
    while (state := latest_state(lake, database, table, storage)) is not None:
        pin = pin or new_pin(lake, storage)
        if pin is None:
            return state
        relative = L.state_dir(database, table, state[0])
        if pin_partition(lake, pin, relative, storage=storage):
            return state[0], os.path.join(pin, relative)
    return None


def materialize_state(spark: SparkSession, lake: str, database: str, table: str,
                      key_columns: Sequence[str] | None = None, *, keep: int = 2,
                      storage: Storage = OS) -> int | None:
    """Write the table's current state as of the lake's checkpoint ``_seq`` S to
    ``<table>/_state/seq=S/`` and return S (``None`` when the state is already that recent).

    Built from the previous state plus the changes after it, so each run reads little. The
    rows are the winning change row of each live key, whole (metadata included), so that
    later partial row images still merge onto them. Spark writes into ``<lake>/_state_staging``;
    one directory rename publishes the state (a reader sees all of it or none). The ``keep``
    latest states stay; older ones are deleted.
    """
    checkpoint = read_document(lake, storage)  # a newer lake format: refused
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint under {lake}")
    upto = int(checkpoint["seq"])
    previous = latest_state(lake, database, table, storage)
    if previous is not None and previous[0] >= upto:
        return None
    versions = load_versions(lake, database, table, storage)
    if not versions:
        raise FileNotFoundError(f"no landed table {database}.{table} under {lake}")
    keys = list(key_columns or list(versions.values())[-1]["primary_key"])
    if not keys:
        raise ValueError(f"{database}.{table} has no primary key recorded; pass key_columns")
    changes, base, skipped = _changes_for_state(spark, lake, database, table, use_state=True,
                                                storage=storage, upto_seq=upto)
    state = current_state(changes, keys, keep_metadata=True)
    staging = os.path.join(lake, L.STATE_STAGING, L.table_dir(database, table),
                           f"{L.state_dir_name(upto)}-{uuid.uuid4().hex}")
    saved = spark.conf.get("spark.sql.parquet.outputTimestampType")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        state.write.parquet(staging)
    finally:
        spark.conf.set("spark.sql.parquet.outputTimestampType", saved or "INT96")
    covered = _covered_now(lake, database, table, base, skipped, upto, storage)
    storage.write(os.path.join(staging, L.STATE_COVERED),
                  json.dumps({"seq": upto, "files": sorted(covered)}).encode())
    target = os.path.join(lake, L.state_dir(database, table, upto))
    storage.makedirs(os.path.dirname(target))
    storage.replace(staging, target)
    for _seq, old in state_dirs(lake, database, table, storage)[:-keep]:
        try:
            storage.rmtree(old)
        except OSError:  # a reader's pin keeps its own links; another run may delete it too
            pass
    return upto
