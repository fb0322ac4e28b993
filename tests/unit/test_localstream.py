"""The disk backend of stream_changes without a Spark session: a micro-batch is a ``_seq``
range read from whatever files hold it when it is read — before, during (a switch between a
task's listing and its opens) or after a compaction — and retention fails a query behind it."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from sinks.errors import StreamBehindRetention
from sinks.parquet import compact as K
from sinks.parquet import layout as L
from sinks.parquet.commit import OS
from sinks.parquet.status import read_checkpoint
from tests.unit.test_compact import build_lake, build_more, data_files

pytest.importorskip("pyspark")
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from sinks.spark.localstream import LocalBackend  # noqa: E402
from sinks.spark.schema import load_versions, union_schema  # noqa: E402

NOW = K.CompactOptions(min_age=0, grace=0)


def target(lake: str) -> pa.Schema:
    return to_arrow_schema(union_schema(load_versions(lake, "shop", "users")), timezone="UTC")


def read(backend: LocalBackend, lake: str, start: int, end: int) -> list[tuple[int, int]]:
    rows: list[tuple[int, int]] = []
    for partition in backend.partitions(start, end):
        for batch in backend.read(partition, target(lake)):
            rows += zip(batch.column("_seq").to_pylist(), batch.column("_row").to_pylist(),
                        strict=True)
    return sorted(rows)


def landed(lake: str) -> list[tuple[int, int]]:
    import pyarrow.parquet as pq

    table = pa.concat_tables(pq.read_table(f, columns=["_seq", "_row"]) for f in data_files(lake))
    return sorted(zip(table.column("_seq").to_pylist(), table.column("_row").to_pylist(),
                      strict=True))


def test_a_range_reads_the_same_rows_before_and_after_a_compaction(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 10)
    backend = LocalBackend(lake, "shop", "users", OS)
    newest = backend.latest(0, 0)
    assert newest == read_checkpoint(lake)["seq"] == 10
    everything = landed(lake)
    first, second = read(backend, lake, 0, 4), read(backend, lake, 4, newest)
    assert first + second == everything and all(seq <= 4 for seq, _ in first)
    planned = backend.partitions(4, newest)  # planned over part-* files, read after the switch
    K.compact_lake(lake, NOW)
    assert all("compacted-" in f for f in data_files(lake))
    rows = sorted(r for p in planned for b in backend.read(p, target(lake))
                  for r in zip(b.column("_seq").to_pylist(), b.column("_row").to_pylist(),
                               strict=True))
    assert rows == second
    assert read(backend, lake, 0, 4) == first  # a replayed batch: the compacted file, cut


def test_a_switch_between_a_tasks_listing_and_its_opens_lists_again(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 8)
    everything = landed(lake)

    class SwitchingStorage(type(OS)):  # type: ignore[misc]
        """Compacts the lake at the first open of a daemon file: the task listed part-*."""

        switched = False
        opened: list[Any] = []

        def open_input(self, path: str) -> Any:
            if not self.switched and os.path.basename(path).startswith(L.ORIGINAL_PREFIX):
                self.switched = True
                K.compact_lake(lake, NOW)
            self.opened.append(super().open_input(path))
            return self.opened[-1]

    storage = SwitchingStorage()
    backend = LocalBackend(lake, "shop", "users", OS)
    [partition] = backend.partitions(0, 8)
    reader = LocalBackend(lake, "shop", "users", storage)
    schema = target(lake)
    rows = sorted(r for b in reader.read(partition, schema)
                  for r in zip(b.column("_seq").to_pylist(), b.column("_row").to_pylist(),
                               strict=True))
    assert storage.switched and rows == everything
    # every file the task opened is closed, whatever else the process has open meanwhile
    assert storage.opened and all(source.closed for source in storage.opened)


def test_a_task_opens_only_the_files_its_range_needs(tmp_path):
    """Older files of a directory are left unopened (by name and the driver's footers): a
    partition of many small files costs a later batch only its new ones."""
    lake = str(tmp_path / "lake")
    build_lake(lake, 10)

    class CountingStorage(type(OS)):  # type: ignore[misc]
        opened: list[str] = []

        def open_input(self, path: str) -> Any:
            self.opened.append(os.path.basename(path))
            return super().open_input(path)

    storage = CountingStorage()
    backend = LocalBackend(lake, "shop", "users", OS)
    reader = LocalBackend(lake, "shop", "users", storage)
    [partition] = backend.partitions(8, 10)
    rows = [r for b in reader.read(partition, target(lake)) for r in b.column("_seq").to_pylist()]
    assert rows == [9, 10, 10]  # transaction 9 updates one row, 10 inserts two
    assert sorted(storage.opened) == ["part-0000000000000009-000.parquet",
                                      "part-0000000000000010-000.parquet"]


def test_max_files_ends_a_batch_at_a_file_boundary(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 6)
    backend = LocalBackend(lake, "shop", "users", OS)
    assert backend.latest(0, 2) == 2 and backend.latest(2, 2) == 4 and backend.latest(4, 2) == 6
    assert backend.latest(6, 2) == 6
    assert read(backend, lake, 0, 2) + read(backend, lake, 2, 4) + read(backend, lake, 4, 6) \
        == landed(lake)


def test_retention_fails_a_query_that_had_not_read_what_it_removed(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 6)  # commit_date 2026-01-01
    backend = LocalBackend(lake, "shop", "users", OS)
    assert K.drop_history(lake, "shop", "users", covered_seq=6, before="2026-01-02") == 1
    with pytest.raises(StreamBehindRetention, match="up to _seq 6, and this streaming query "
                                                    "has read only up to 3"):
        backend.partitions(3, 6)
    assert backend.partitions(6, 6) == []  # a query that had read it all goes on
    assert read(backend, lake, 0, 6) == []  # a new query starts from the change log as it is
    build_more(lake, 1)
    assert read(backend, lake, 6, 7) == [(7, 0), (7, 1)]


def test_a_checkpoint_location_given_to_stream_changes_is_not_silently_dropped(
        tmp_path: Any) -> None:
    """Offsets live in writeStream's checkpointLocation: the argument kept for older callers
    warns that it is unused, and says where to pass it."""
    from sinks.spark.readers import stream_changes

    with pytest.warns(FutureWarning, match="checkpointLocation option of writeStream"), \
            pytest.raises(FileNotFoundError, match="no landed table shop.users"):
        stream_changes(None, str(tmp_path), "shop", "users", str(tmp_path / "chk"))  # type: ignore[arg-type]
