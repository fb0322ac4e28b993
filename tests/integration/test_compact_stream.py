"""stream_changes across compactions: exactly once — streams started before, during and after
``binlake compact --min-age 0`` beside a writer that keeps committing, a query restarted across
compactions (also far behind), a batch Spark replays after a crash."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sinks.parquet import compact as K
from sinks.spark.readers import read_changes, stream_changes
from tests.unit.test_compact import build_lake, build_more, data_files

pytestmark = pytest.mark.spark

NOW = K.CompactOptions(min_age=0, grace=0)

#: Transactions (one file each) in the lake before the streams start.
FILES = int(os.environ.get("BINLAKE_DISK_STREAM_FILES", "12"))


def start(spark, lake: str, tmp_path: Path, name: str,  # noqa: ANN201 - a StreamingQuery
          **options: str):
    checkpoint = str(tmp_path / f"{name}_ck")
    return (stream_changes(spark, lake, "shop", "users", **options)
            .writeStream.format("parquet").option("path", str(tmp_path / name))
            .option("checkpointLocation", checkpoint).start())


def delivered(spark, tmp_path: Path, name: str) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(tmp_path / name)).select("_seq", "_row").collect()
    return sorted((r["_seq"], r["_row"]) for r in rows)


def landed(spark, lake: str) -> list[tuple[int, int]]:
    rows = read_changes(spark, lake, "shop", "users").select("_seq", "_row").collect()
    return sorted((r["_seq"], r["_row"]) for r in rows)


def test_streams_across_compactions_even_a_query_left_behind(spark, tmp_path):
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
    K.compact_lake(lake, NOW)
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
    assert len(delivered(spark, tmp_path, "early")) == 20 * 2 - 6 + 4 * 2
    early = start(spark, lake, tmp_path, "early")  # 5 flushes behind, all of them compacted
    early.processAllAvailable()
    early.stop()
    assert delivered(spark, tmp_path, "early") == everything  # each row exactly once
    assert delivered(spark, tmp_path, "late") == everything


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


def test_a_batch_compacted_before_its_commit_is_replayed_exactly(spark, tmp_path):
    """A crash after Spark planned a batch (its offsets logged) and before it committed, then
    a compaction of the files it was planned over: the restart replays the batch, which is a
    ``_seq`` range, not a list of files, so it reads the compacted files and every row once."""
    lake = str(tmp_path / "lake")
    build_lake(lake, 6)
    query = start(spark, lake, tmp_path, "first")
    query.processAllAvailable()
    query.stop()
    commits = tmp_path / "first_ck" / "commits"
    for name in os.listdir(commits):  # as if killed between planning batch 0 and committing it
        os.remove(commits / name)
    for name in os.listdir(tmp_path / "first"):  # and before the file sink committed its output
        if not name.startswith("_"):
            os.remove(tmp_path / "first" / name)
    for name in os.listdir(tmp_path / "first" / "_spark_metadata"):
        os.remove(tmp_path / "first" / "_spark_metadata" / name)
    K.compact_lake(lake, NOW)
    query = start(spark, lake, tmp_path, "first")
    query.processAllAvailable()
    query.stop()
    assert delivered(spark, tmp_path, "first") == landed(spark, lake)


def compact(lake: str, tmp_path: Path) -> subprocess.Popen[str]:
    """``binlake compact --min-age 0`` on the lake, as an operator runs it."""
    config = tmp_path / "empty.toml"
    config.write_text("")
    return subprocess.Popen(
        [sys.executable, "-m", "replica.cli", "compact", "--lake", lake, "--min-age", "0"],
        env=os.environ | {"BINLAKE_CONFIG": str(config), "HOME": str(tmp_path)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(compaction: subprocess.Popen[str]) -> str:
    out, err = compaction.communicate(timeout=600)
    assert compaction.returncode == 0, err[-2000:]
    return out.splitlines()[-1]


def test_streams_before_during_and_after_binlake_compact_beside_a_writer(spark, tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, FILES)
    # one file per micro-batch: the query is still planning batches over the daemon's files
    # when the compaction replaces them
    before = start(spark, lake, tmp_path, "before", maxFilesPerTrigger="1")
    restarted = start(spark, lake, tmp_path, "restarted", maxFilesPerTrigger="2")

    def writer() -> None:  # the daemon's part: commits while the compaction runs
        for _ in range(4):
            build_more(lake, 1)

    landing = threading.Thread(target=writer)
    landing.start()
    compaction = compact(lake, tmp_path)
    during = start(spark, lake, tmp_path, "during")
    summary = finish(compaction)
    landing.join()
    assert summary.startswith("compacted 1 partitions: "), summary
    restarted.stop()  # wherever it was; its checkpoint goes on after the next compaction
    build_more(lake, 3)
    assert finish(compact(lake, tmp_path)).startswith("compacted 1 partitions: ")
    assert all(os.path.basename(f).startswith("compacted-") for f in data_files(lake))
    restarted = start(spark, lake, tmp_path, "restarted", maxFilesPerTrigger="2")
    build_more(lake, 2)
    after = start(spark, lake, tmp_path, "after")
    for query in (before, during, restarted, after):
        query.processAllAvailable()
        assert query.exception() is None
        query.stop()
    everything = landed(spark, lake)
    assert len(everything) == FILES * 2 - FILES // 3 + (4 + 3 + 2) * 2
    for name in ("before", "during", "restarted", "after"):
        assert delivered(spark, tmp_path, name) == everything, name
