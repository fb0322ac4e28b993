"""Spark reads a lake on the real S3 gateway through its commit log: batch, current state, the
current-state job, and streams on either side of a compaction record.

The lake is landed on disk and published into a bucket of the suite's Ceph gateway through the
object-store commit protocol (``test_objectstore_readers.Published``), with an orphan beside it.
Spark reads the objects through an s3fs mount of the bucket (``spark_root``: the only
difference from production, where it is the ``s3a://`` URL); the log is read, and the
streaming workers read the files, through the gateway with the settings of the environment,
as in production.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sinks.spark.objectlake import store_from_environment
from sinks.spark.readers import read_changes
from sinks.spark.state import read_current_state
from tests.integration.test_objectstore_readers import (
    DB,
    TABLE,
    Published,
    changes,
    delivered,
    start,
)
from tests.servers.ceph import S3fsMount
from tests.unit.test_compact import build_lake, build_more, data_files

pytestmark = [pytest.mark.s3, pytest.mark.spark]


def test_spark_reads_an_s3_lake_through_its_log(spark, ceph_gateway, s3_bucket, tmp_path,
                                                monkeypatch):
    for key, value in ceph_gateway.s3_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BINLAKE_LAKE_S3_ENDPOINT", ceph_gateway.endpoint)
    monkeypatch.setenv("BINLAKE_LAKE_S3_REGION", ceph_gateway.region)
    url = f"s3://{s3_bucket}/lake"
    lake = str(tmp_path / "disk")
    build_lake(lake, 10)
    published = Published(lake, store_from_environment(url))
    first = data_files(lake)[0]
    orphan = os.path.relpath(first, lake).replace("part-", "part-9").replace(
        ".parquet", f"-w{published.committer.epoch + 1}.parquet")
    published.store.put(orphan, Path(first).read_bytes())  # no record names it

    with S3fsMount(ceph_gateway, s3_bucket, tmp_path / "mnt"):
        root = str(tmp_path / "mnt" / "lake")
        assert (Path(root) / orphan).exists()  # a listing of the prefix would read it
        got = read_changes(spark, url, DB, TABLE, spark_root=root)
        assert got.count() == 10 * 2 - 3
        assert changes(got) == changes(read_changes(spark, lake, DB, TABLE))
        state = sorted(tuple(r) for r in read_current_state(
            spark, url, DB, TABLE, spark_root=root).collect())
        assert state == sorted(tuple(r) for r in read_current_state(
            spark, lake, DB, TABLE, use_state=False).collect())
        out = tmp_path / "state"
        job = subprocess.run(
            [sys.executable, "-m", "sinks.spark.current_state", "--lake", url, "--db", DB,
             "--table", TABLE, "--out", str(out), "--spark-root", root,
             "--master", "local[1]"], capture_output=True, text=True, timeout=600)
        assert job.returncode == 0, job.stderr[-2000:]
        assert f"{DB}.{TABLE}: {len(state)} rows of current state" in job.stdout
        assert sorted(tuple(r) for r in spark.read.parquet(str(out)).collect()) == state
        assert ceph_gateway.secret_key not in job.stdout + job.stderr

    early = start(spark, tmp_path, "early", url)  # the store from the environment
    early.processAllAvailable()
    assert published.compact(6) == 6 * 2 - 2
    build_more(lake, 3)
    published.more()
    early.processAllAvailable()
    late = start(spark, tmp_path, "late", url)  # its first batch reads the compacted file
    late.processAllAvailable()
    early.stop()
    late.stop()
    published.close()
    everything = sorted((r["_seq"], r["_row"]) for r in read_changes(
        spark, lake, DB, TABLE).select("_seq", "_row").collect())
    assert len(everything) == 10 * 2 - 3 + 3 * 2
    assert delivered(spark, tmp_path, "early") == everything
    assert delivered(spark, tmp_path, "late") == everything
