"""The Parquet sink landing on the real S3 gateway (the test bed's Ceph RGW) through the commit
log: exactly once across kill -9, orphans swept, one writer per lake.

* The crash tests' workload (several tables, inserts, key-changing updates, deletes, rollbacks,
  an ALTER mid-stream, a spilling transaction) lands into a bucket; the lake read back through
  its log equals the same workload landed on disk, row for row.
* A writer process is killed with SIGKILL at random moments (``BINLAKE_S3_KILLS`` times,
  default 8) and restarted each time, replaying the stream from the start; the final lake
  equals the reference with no ``(_seq, _row)`` twice, and after the last, clean run the data
  objects are exactly the ones the log keeps.
* A second writer refuses while the first runs, and while the first is stopped (SIGSTOP) for
  less than its lease; once the first has been stopped for longer, the second takes the lake
  and the first, resumed, is fenced: it exits without committing.

Run as a script (``python tests/integration/test_objectstore_s3.py URL SPOOL [LEASE_S]``) this
module is the writer; it reads the gateway's address from ``BINLAKE_TEST_S3_ENDPOINT`` and the
keys from the standard ``AWS_*`` variables.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sinks.errors import LakeLeased
from sinks.objectstore.commit import CommitLog
from sinks.objectstore.mirror import ObjectLake
from sinks.objectstore.s3 import S3Settings, open_store
from sinks.objectstore.store import ObjectStore
from sinks.parquet import ParquetSink
from tests.integration.s3_lake import committed_data_keys, data_keys

ENDPOINT_VARIABLE = "BINLAKE_TEST_S3_ENDPOINT"
KILLS = int(os.environ.get("BINLAKE_S3_KILLS", "8"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _settings_from_env() -> S3Settings:
    return S3Settings(endpoint=os.environ[ENDPOINT_VARIABLE],
                      region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
                      access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                      secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])


def _sink(url: str, spool: str, lease_s: float = 30.0) -> ParquetSink:
    from tests.unit.test_sink_crash import SMALL

    store = open_store(url, _settings_from_env())
    return ParquetSink(spool, SMALL, mirror=ObjectLake(store, url, spool,
                                                       lease_duration_s=lease_s))


def _write(url: str, spool: str, lease_s: float, pace: float = 0.0) -> None:
    """The writer process: the whole workload, flushed as a daemon would, then a clean stop.
    Files above 64 KiB are streamed (a multipart upload), so a kill lands in those too."""
    from sinks.objectstore import mirror
    from tests.unit.test_sink_crash import land, workload

    mirror.PUT_WHOLE_BYTES = 64 * 1024

    land(spool, workload(), sink=_sink(url, spool, lease_s), pace=pace)


@pytest.fixture
def gateway_env(ceph_gateway: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {**ceph_gateway.s3_env(), ENDPOINT_VARIABLE: ceph_gateway.endpoint}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return {**os.environ, **env, "PYTHONPATH": ROOT}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[Any, ...]]]:
    from tests.unit.test_sink_crash import lake_rows, land, workload

    lake = str(tmp_path_factory.mktemp("reference") / "lake")
    land(lake, workload())
    return lake_rows(lake)


def _writer(url: str, spool: str, env: dict[str, str], lease_s: float = 30.0,
            pace: float = 0.0) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, url, spool, str(lease_s), str(pace)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@contextlib.contextmanager
def _first_writer(url: str, spool: str, env: dict[str, str], lease_s: float,
                  until: Callable[[ObjectStore], bool],
                  ) -> Iterator[tuple[subprocess.Popen[bytes], ObjectStore]]:
    """A paced writer process on ``url``, once ``until(store)`` holds (polled for up to a
    minute while the writer runs); resumed and killed on the way out, whatever its state."""
    first = _writer(url, spool, env, lease_s, pace=0.2)
    store = open_store(url, _settings_from_env())
    try:
        deadline = time.monotonic() + 60
        while not until(store):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        yield first, store
    finally:
        first.send_signal(signal.SIGCONT)
        if first.poll() is None:
            first.kill()
        first.wait()


@pytest.mark.s3
def test_the_lake_on_the_gateway_equals_the_lake_on_disk(
        gateway_env: dict[str, str], s3_bucket: str, tmp_path: Any,
        reference: dict[str, list[tuple[Any, ...]]]) -> None:
    from tests.unit.test_objectstore_sink import store_rows

    url = f"s3://{s3_bucket}/lake"
    _write(url, str(tmp_path / "spool"), 30.0)
    store = open_store(url, _settings_from_env())
    assert store_rows(store) == reference  # type: ignore[arg-type]
    assert data_keys(store) == committed_data_keys(store)


@pytest.mark.s3
@pytest.mark.slow
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(
        gateway_env: dict[str, str], s3_bucket: str, tmp_path: Any,
        reference: dict[str, list[tuple[Any, ...]]]) -> None:
    from tests.unit.test_objectstore_sink import store_rows
    from tests.unit.test_sink_crash import assert_no_duplicates

    url = f"s3://{s3_bucket}/lake"
    spool = str(tmp_path / "spool")
    rng = random.Random(int(os.environ.get("BINLAKE_S3_KILL_SEED", "28")))
    store = open_store(url, _settings_from_env())
    killed = 0
    for _ in range(KILLS):
        # paced so that no run can finish within the longest wait: every run is killed
        writer = _writer(url, spool, gateway_env, pace=0.02)
        time.sleep(rng.uniform(0.3, 4.0))
        assert writer.poll() is None, writer.stderr.read().decode()  # type: ignore[union-attr]
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        killed += 1
        rows = store_rows(store)  # type: ignore[arg-type]
        assert_no_duplicates(rows)  # between kills too: readers never see a row twice
    final = _writer(url, spool, gateway_env)
    _, err = final.communicate(timeout=600)
    assert final.returncode == 0, err.decode()
    rows = store_rows(store)  # type: ignore[arg-type]
    assert_no_duplicates(rows)
    assert rows == reference
    assert data_keys(store) == committed_data_keys(store)
    assert killed == KILLS


@pytest.mark.s3
def test_a_second_writer_refuses_while_the_first_runs_or_is_briefly_stopped(
        gateway_env: dict[str, str], s3_bucket: str, tmp_path: Any) -> None:
    url = f"s3://{s3_bucket}/lake"
    lease_s = 6.0
    # the first writer holds the lake
    with _first_writer(url, str(tmp_path / "first"), gateway_env, lease_s,
                       lambda store: store.head("_lease.json") is not None) as (first, _store):
        with pytest.raises(LakeLeased, match="renewed its lease"):
            _sink(url, str(tmp_path / "second"), lease_s).open()
        # stopped while a third watches, resumed before its lease runs out: the third refuses
        first.send_signal(signal.SIGSTOP)
        outcome: list[BaseException | None] = []

        def third() -> None:
            try:
                _sink(url, str(tmp_path / "third"), lease_s).open()
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - the outcome is the assertion
                outcome.append(exc)

        watcher = threading.Thread(target=third)
        watcher.start()
        time.sleep(lease_s / 2)
        first.send_signal(signal.SIGCONT)
        watcher.join(timeout=4 * lease_s)
        assert len(outcome) == 1 and isinstance(outcome[0], LakeLeased), outcome
        assert first.poll() is None  # the first writer goes on


@pytest.mark.s3
def test_a_writer_stopped_past_its_lease_is_taken_over_and_fenced(
        gateway_env: dict[str, str], s3_bucket: str, tmp_path: Any) -> None:
    url = f"s3://{s3_bucket}/lake"
    lease_s = 3.0
    # the first writer has committed something
    with _first_writer(url, str(tmp_path / "first"), gateway_env, lease_s,
                       lambda store: CommitLog(store).newest_number() >= 3) as (first, store):
        first.send_signal(signal.SIGSTOP)
        second = _sink(url, str(tmp_path / "second"), lease_s)
        second.open()  # watches the stopped writer's lease run out, then takes the lake
        taken = CommitLog(store).newest_number()
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=120)
        assert first.returncode != 0
        assert b"LakeFenced" in err or b"LeaseLost" in err, err.decode()[-2000:]
        assert CommitLog(store).newest_number() == taken  # the fenced writer committed nothing
        second.close()


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    _write(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
