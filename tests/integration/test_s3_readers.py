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

import json
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
    changes,
    delivered,
    keys,
    start,
)
from tests.objectlake import Published
from tests.servers.ceph import CephGateway, S3fsMount
from tests.unit.test_compact import build_lake, build_more, data_files

pytestmark = [pytest.mark.s3, pytest.mark.spark]


def gateway_env(gateway: CephGateway, monkeypatch: pytest.MonkeyPatch,
                secrets: Path | None = None) -> dict[str, str]:
    """This process's environment pointed at the gateway (as an operator's would be), without
    any other BINLAKE_/AWS_ setting; also returned, for a command run as a subprocess. With
    ``secrets`` (a directory), the keys are in files there named by ``*_FILE`` variables and
    addressing is path-style — a container's way — and no AWS variable is set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BINLAKE_", "AWS_"))}
    env |= {"BINLAKE_LAKE_S3_ENDPOINT": gateway.endpoint, "BINLAKE_LAKE_S3_REGION": gateway.region}
    if secrets is None:
        env |= gateway.s3_env()
    else:
        secrets.mkdir(exist_ok=True)
        (secrets / "key-id").write_text(gateway.access_key + "\n")
        (secrets / "secret").write_text(gateway.secret_key + "\n")
        env |= {"BINLAKE_LAKE_S3_ADDRESSING": "path",
                "BINLAKE_LAKE_S3_ACCESS_KEY_ID_FILE": str(secrets / "key-id"),
                "BINLAKE_LAKE_S3_SECRET_ACCESS_KEY_FILE": str(secrets / "secret"),
                "AWS_SHARED_CREDENTIALS_FILE": str(secrets / "none")}  # no SDK chain either
    for key in [k for k in os.environ if k.startswith(("BINLAKE_", "AWS_")) and k not in env]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def test_spark_reads_an_s3_lake_through_its_log(spark, ceph_gateway, s3_bucket, tmp_path,
                                                monkeypatch):
    gateway_env(ceph_gateway, monkeypatch)
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
    everything = keys(read_changes(spark, lake, DB, TABLE))
    assert len(everything) == 10 * 2 - 3 + 3 * 2
    assert delivered(spark, tmp_path, "early") == everything
    assert delivered(spark, tmp_path, "late") == everything


def test_binlake_compact_beside_a_writer_and_streams(spark, ceph_gateway, s3_bucket, tmp_path,
                                                     monkeypatch):
    """``binlake compact`` on the gateway's lake while a writer commits: streams started before,
    during and after see each row once, a batch read after sees every row once, the file count
    falls (as ``binlake status`` reports it), and the writer commits after the compaction's
    record. The commands and the streams are configured only by secret files and path-style
    addressing: the daemon's configuration and the readers resolve them by one rule."""
    import threading

    from sinks.objectstore.view import is_data_name, live_names, read_records

    env = gateway_env(ceph_gateway, monkeypatch, secrets=tmp_path / "secrets")
    url = f"s3://{s3_bucket}/lake"
    lake = str(tmp_path / "disk")
    build_lake(lake, 12)
    published = Published(lake, store_from_environment(url))

    def files() -> list[str]:
        live = live_names(read_records(published.store))
        return [k for n, k in live.items() if is_data_name(n)]

    assert len(files()) == 12
    before = start(spark, tmp_path, "before", url)
    before.processAllAvailable()

    def writer() -> None:  # the daemon's part: commits while the compaction runs
        for _ in range(4):
            build_more(lake, 1)
            published.more()

    landing = threading.Thread(target=writer)
    landing.start()
    compaction = subprocess.Popen(
        [sys.executable, "-m", "replica.cli", "compact", "--lake", url, "--min-age", "0"],
        env=env | {"BINLAKE_CONFIG": str(tmp_path / "empty.toml"), "HOME": str(tmp_path)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (tmp_path / "empty.toml").write_text("")
    during = start(spark, tmp_path, "during", url)
    out, err = compaction.communicate(timeout=600)
    landing.join()
    assert compaction.returncode == 0, err[-2000:]
    summary = out.splitlines()[-1]
    assert summary.startswith("compacted 1 partitions: ") and " -> 1 (" in summary, out
    compacted = int(summary.split(": ")[1].split(" ")[0])
    assert compacted >= 12 and len(files()) == 1 + (12 + 4 - compacted)
    assert ceph_gateway.secret_key not in out + err
    record = next(r for r in read_records(published.store) if r.compaction and r.adds)
    assert record.number < read_records(published.store)[-1].number or compacted == 16
    status = subprocess.run(
        [sys.executable, "-m", "replica.cli", "status", "--json", "--no-server", "--lake", url],
        env=env | {"BINLAKE_CONFIG": str(tmp_path / "empty.toml"), "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr[-2000:]
    facts = json.loads(status.stdout)
    assert (facts["lake"]["files"], facts["lake"]["rows"]) == (len(files()), 12 * 2 - 4 + 4 * 2)
    assert facts["lake"]["checkpoint"] == published.checkpoint()
    assert ceph_gateway.secret_key not in status.stdout + status.stderr
    after = start(spark, tmp_path, "after", url)
    for query in (before, during, after):
        query.processAllAvailable()
        query.stop()
    published.close()
    everything = keys(read_changes(spark, lake, DB, TABLE))
    assert len(everything) == 12 * 2 - 4 + 4 * 2
    for name in ("before", "during", "after"):
        assert delivered(spark, tmp_path, name) == everything, name
    with S3fsMount(ceph_gateway, s3_bucket, tmp_path / "mnt"):
        batch = read_changes(spark, url, DB, TABLE, spark_root=str(tmp_path / "mnt" / "lake"))
        assert keys(batch) == everything
