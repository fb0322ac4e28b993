"""stream_changes across compactions: exactly once, and a query left behind is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sinks.errors import StreamBehindCompaction
from sinks.parquet import compact as K
from sinks.spark.readers import read_changes, stream_changes
from tests.unit.test_compact import build_lake, build_more

pytestmark = pytest.mark.spark

NOW = K.CompactOptions(min_age=0, grace=0)


def start(spark, lake: str, tmp_path: Path, name: str):  # noqa: ANN201 - a StreamingQuery
    checkpoint = str(tmp_path / f"{name}_ck")
    return (stream_changes(spark, lake, "shop", "users", checkpoint_location=checkpoint)
            .writeStream.format("parquet").option("path", str(tmp_path / name))
            .option("checkpointLocation", checkpoint).start())


def delivered(spark, tmp_path: Path, name: str) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(tmp_path / name)).select("_seq", "_row").collect()
    return sorted((r["_seq"], r["_row"]) for r in rows)


def landed(spark, lake: str) -> list[tuple[int, int]]:
    rows = read_changes(spark, lake, "shop", "users").select("_seq", "_row").collect()
    return sorted((r["_seq"], r["_row"]) for r in rows)


def test_streams_across_compactions_and_refuses_a_query_left_behind(spark, tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 20)
    early = start(spark, lake, tmp_path, "early")  # before any compaction
    early.processAllAvailable()
    K.compact_lake(lake, NOW)
    build_more(lake, 4)
    early.processAllAvailable()
    late = start(spark, lake, tmp_path, "late")  # after one: reads the compacted file
    late.processAllAvailable()
    late.stop()
    K.compact_lake(lake, NOW)  # late had read those 4 daemon files: its restart is fine
    early.processAllAvailable()
    early.stop()
    late = start(spark, lake, tmp_path, "late")
    build_more(lake, 3)  # early is stopped: these land and are compacted before it returns
    late.processAllAvailable()
    build_more(lake, 2)
    late.processAllAvailable()
    K.compact_lake(lake, NOW)
    late.processAllAvailable()
    late.stop()
    everything = landed(spark, lake)
    assert len(everything) == 20 * 2 - 6 + (4 + 3 + 2) * 2
    assert delivered(spark, tmp_path, "early") == landed(spark, lake)[:len(
        delivered(spark, tmp_path, "early"))]
    assert len(delivered(spark, tmp_path, "early")) == 20 * 2 - 6 + 4 * 2
    with pytest.raises(StreamBehindCompaction, match="had not read 5 files"):
        start(spark, lake, tmp_path, "early")  # stopped while 5 flushes landed and were compacted
    assert delivered(spark, tmp_path, "late") == everything  # each row exactly once


def test_materialize_job_with_retention(spark, tmp_path, capsys):
    """The job writes a state, drops the (old) change log it covers, and current state is
    unchanged — from the state alone, then with later changes replayed on top."""
    from sinks.spark import materialize
    from sinks.spark.state import read_current_state

    lake = str(tmp_path / "lake")
    build_lake(lake, 15)  # commit_date 2026-01-01: older than any retention of 1 day

    def state() -> list[tuple]:
        return sorted(tuple(r) for r in read_current_state(spark, lake, "shop", "users",
                                                           use_state=False).collect())

    before = state()
    assert materialize.main(["--lake", lake, "--retain-days", "1"]) == 0
    out = capsys.readouterr().out
    assert "shop.users: state as of _seq 15" in out
    assert "shop.users: dropped 1 change-log partitions" in out
    assert read_changes(spark, lake, "shop", "users").count() == 0  # history is gone
    got = sorted(tuple(r) for r in read_current_state(spark, lake, "shop", "users").collect())
    assert got == before
    build_more(lake, 2)
    got = sorted(tuple(r) for r in read_current_state(spark, lake, "shop", "users").collect())
    assert got == sorted(before + [(10_000, "n"), (20_000, "m"), (10_001, "n"), (20_001, "m")])


def test_a_batch_compacted_before_its_commit_is_refused_not_replayed_forever(spark, tmp_path):
    """A crash after Spark planned a batch (its files in the source log) and before it
    committed, then a compaction of those files: Spark would replay the batch with the gone
    files and fail at every restart; stream_changes says so, with the fix, instead."""
    lake = str(tmp_path / "lake")
    build_lake(lake, 6)
    query = start(spark, lake, tmp_path, "first")
    query.processAllAvailable()
    query.stop()
    commits = tmp_path / "first_ck" / "commits"
    for name in os.listdir(commits):  # as if killed between planning batch 0 and committing it
        os.remove(commits / name)
    K.compact_lake(lake, NOW)
    with pytest.raises(StreamBehindCompaction,
                       match="batch 0 of this streaming query listed 6 files .* loses and "
                             "repeats nothing"):
        start(spark, lake, tmp_path, "first")
