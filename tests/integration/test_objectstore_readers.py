"""Spark's readers on a lake on object storage read exactly what the commit log names.

A lake landed on disk is published into a store commit by commit, through the object-store
commit protocol (epoch-tagged keys, one record per data file), with an orphan beside it (an
object no record names: what an interrupted commit leaves). The store here keeps each object
as a file at its key (``tests/dirstore.py``), so its directory is also where Spark reads the
objects (``spark_root``) — as a FUSE mount of a bucket is. The readers must return exactly the
disk lake's rows, the orphan's never; a streaming query started before or after a compaction
record delivers each row once.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sinks.objectstore.store import ObjectStore
from sinks.spark.readers import read_changes, stream_changes
from sinks.spark.state import read_current_state
from tests.dirstore import DirectoryStore
from tests.objectlake import URL, Published
from tests.unit.test_compact import build_lake, build_more, data_files

pytestmark = pytest.mark.spark

DB, TABLE = "shop", "users"


def changes(df) -> list[tuple]:  # noqa: ANN001 - a DataFrame
    return sorted(tuple(r) for r in df.drop("commit_date").collect())


def test_batch_readers_read_exactly_the_committed_files(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the views' copies go
    lake = str(tmp_path / "disk")
    build_lake(lake, 12)
    published = Published(lake, directory_store(tmp_path / "store"))
    # an orphan: a data object at an epoch-tagged key that no record names
    first = data_files(lake)[0]
    orphan = os.path.relpath(first, lake).replace("part-", "part-9").replace(
        ".parquet", f"-w{published.committer.epoch + 1}.parquet")
    published.store.put(orphan, Path(first).read_bytes())
    published.close()
    store, root = published.store, str(tmp_path / "store")

    got = read_changes(spark, URL, DB, TABLE, spark_root=root, store=store)
    assert got.count() == 12 * 2 - 4  # an update is one row: 4 of the 12 transactions
    assert changes(got) == changes(read_changes(spark, lake, DB, TABLE))
    state = read_current_state(spark, URL, DB, TABLE, spark_root=root, store=store)
    expected = read_current_state(spark, lake, DB, TABLE, use_state=False)
    assert sorted(tuple(r) for r in state.collect()) == sorted(
        tuple(r) for r in expected.collect())
    assert not list(tmp_path.glob("binlake-view-*"))  # each view's local copy is removed


def directory_store(root: Path) -> DirectoryStore:
    root.mkdir(parents=True, exist_ok=True)
    return DirectoryStore(str(root))


def start(spark, tmp_path: Path, name: str, url: str = URL,  # noqa: ANN201 - a query
          open_store: Callable[[], ObjectStore] | None = None):
    checkpoint = str(tmp_path / f"{name}_ck")
    return (stream_changes(spark, url, DB, TABLE, open_store=open_store)
            .writeStream.format("parquet").option("path", str(tmp_path / name))
            .option("checkpointLocation", checkpoint).start())


def keys(df) -> list[tuple[int, int]]:  # noqa: ANN001 - a DataFrame
    """Each change row's ``(_seq, _row)``, sorted: a row read twice shows twice."""
    return sorted((r["_seq"], r["_row"]) for r in df.select("_seq", "_row").collect())


def delivered(spark, tmp_path: Path, name: str) -> list[tuple[int, int]]:
    return keys(spark.read.parquet(str(tmp_path / name)))


def test_a_stream_before_and_after_a_compaction_delivers_each_row_once(spark, tmp_path):
    lake = str(tmp_path / "disk")
    build_lake(lake, 10)
    store = directory_store(tmp_path / "store")
    published = Published(lake, store)
    opener = functools.partial(DirectoryStore, store.root)
    early = start(spark, tmp_path, "early", open_store=opener)
    early.processAllAvailable()
    assert len(delivered(spark, tmp_path, "early")) == 10 * 2 - 3
    assert published.compact(6) == 6 * 2 - 2  # 2 of the 6 transactions were updates
    build_more(lake, 3)
    published.more()
    early.processAllAvailable()
    late = start(spark, tmp_path, "late", open_store=opener)  # first batch: the compacted file
    late.processAllAvailable()
    build_more(lake, 2)
    published.more()
    early.processAllAvailable()
    late.processAllAvailable()
    early.stop()
    late.stop()
    published.close()
    everything = keys(read_changes(spark, lake, DB, TABLE))
    assert len(everything) == 10 * 2 - 3 + (3 + 2) * 2
    assert delivered(spark, tmp_path, "early") == everything  # each row exactly once
    assert delivered(spark, tmp_path, "late") == everything
