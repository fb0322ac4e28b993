"""The Parquet sink landing on object storage (a lake URL: the factory's object-store strategy),
against the in-memory store, killed before every store operation.

The workload is the crash tests' (several tables, inserts, key-changing updates, deletes,
rollbacks, an ALTER mid-stream, a spilling transaction). The sink lands it through a local
spool and the commit log; the lake read back *through the log* must equal the same workload
landed on disk, row for row. Then the process is killed before each of the store's operations
in turn: a new sink opens the lake (taking over the dead writer's lease), the stream is
replayed from the start (the sink skips what the checkpoint covers), and the lake must again
equal the reference, with no ``(_seq, _row)`` twice and no object of an interrupted commit left.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow.parquet as pq
import pytest

from sinks.factory import build_sink, is_object_url
from sinks.objectstore import mirror
from sinks.objectstore.commit import CommitLog, Retry, layout_name, live_objects
from sinks.objectstore.lease import Holder, Lease
from sinks.objectstore.memory import MemoryStore, StoreCrashed
from sinks.objectstore.mirror import ObjectLake, spool_for
from sinks.parquet import ParquetSink
from sinks.parquet.options import SinkOptions
from tests.unit.test_objectstore_commit import FakeClock
from tests.unit.test_sink_crash import SMALL, assert_no_duplicates, lake_rows, workload
from tests.unit.test_sink_crash import land as land_on_disk

URL = "s3://bucket/lake"
#: Transactions in the crash loop's workload (crash points grow with it).
CRASH_TRANSACTIONS = int(os.environ.get("BINLAKE_OBJECT_SINK_TRANSACTIONS", "16"))


def object_sink(store: MemoryStore, spool: str, pid: int,
                options: SinkOptions = SMALL) -> ParquetSink:
    """A sink on ``store`` as the factory builds one, with a lease on a fake clock (a dead
    writer's lease is watched out on it) that renews only when asked."""
    clock = FakeClock()
    lease = Lease(store, URL, duration_s=30.0, holder=Holder("host", "boot", pid),
                  clock=clock, sleep=clock.sleep)
    lease.start = lambda: None  # type: ignore[method-assign]
    return ParquetSink(spool, options, mirror=ObjectLake(store, URL, spool, lease=lease,
                                                       retry=Retry(sleep=clock.sleep)))


def run(sink: ParquetSink, transactions: list[list[Any]]) -> None:
    land_on_disk(sink.lake, transactions, sink=sink)


def store_rows(store: MemoryStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the lake's data objects the log keeps, in ``lake_rows``' shape."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for key in sorted(live_objects(CommitLog(store).records())):
        name = layout_name(key)
        if any(part[:1] in "_." for part in name.split("/")):
            continue
        database, table = name.split("/")[:2]
        version = name.split("schema_version=")[1].split("/")[0]
        rows = out.setdefault(f"/{database}/{table}", [])
        for r in pq.read_table(store.open_input(key)).to_pylist():
            rows.append((r["_seq"], r["_row"], version, repr(sorted(r.items()))))
    for rows in out.values():
        rows.sort()
    return out


def data_keys(store: MemoryStore) -> set[str]:
    return {key for key in store.keys() if not any(p[:1] in "_." for p in key.split("/"))}


@pytest.fixture(scope="module")
def crash_workload() -> list[list[Any]]:
    return workload(transactions=CRASH_TRANSACTIONS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory,
              crash_workload: list[list[Any]]) -> dict[str, list[tuple[Any, ...]]]:
    lake = str(tmp_path_factory.mktemp("reference") / "lake")
    land_on_disk(lake, crash_workload)
    return lake_rows(lake)


def test_the_factory_chooses_the_object_store_strategy_for_a_url(tmp_path: Any) -> None:
    assert is_object_url("s3://bucket/prefix") and not is_object_url("/srv/lake")
    assert spool_for(URL) == spool_for(URL) != spool_for(URL + "2")
    store = MemoryStore()
    sink = build_sink(URL, file_size_bytes=1 << 20, flush_rows=1000, flush_interval_s=5,
                      catch_up_interval_s=60, compression="zstd", object_store=store,
                      spool=str(tmp_path / "spool"))
    assert isinstance(sink, ParquetSink) and isinstance(sink._workspace.mirror, ObjectLake)
    local = build_sink(str(tmp_path / "lake"), file_size_bytes=1 << 20, flush_rows=1000,
                       flush_interval_s=5, catch_up_interval_s=60, compression="zstd")
    assert isinstance(local, ParquetSink) and local._workspace.mirror is None


def test_the_lake_on_a_store_equals_the_lake_on_disk(tmp_path: Any) -> None:
    transactions = workload()
    disk = str(tmp_path / "disk")
    land_on_disk(disk, transactions)
    store = MemoryStore()
    run(object_sink(store, str(tmp_path / "spool"), pid=1), transactions)
    assert store_rows(store) == lake_rows(disk)
    # exactly the committed data objects, nothing else visible; the spool keeps no data file
    live = live_objects(CommitLog(store).records())
    assert data_keys(store) == {key for key in live if key in data_keys(store)}
    assert data_keys(store) <= live
    spooled = [os.path.join(root, f) for root, _, files in os.walk(tmp_path / "spool")
               for f in files if f.endswith(".parquet")]
    assert spooled == []
    # a restart resumes where the lake is: the same stream again lands nothing twice
    run(object_sink(store, str(tmp_path / "spool"), pid=2), transactions)
    assert store_rows(store) == lake_rows(disk)


def _land_until_crash(store: MemoryStore, spool: str, transactions: list[list[Any]],
                      at: int) -> None:
    sink = object_sink(store, spool, pid=1)
    store.crash_after(at)
    try:
        run(sink, transactions)
    except StoreCrashed:
        sink._lock.release()  # the kernel drops a dead process's flock
        sink._parts.abandon()  # and its threads die with it: none outlives the test
        sink._buffer.abandon()
        sink._parts.close()
    finally:
        store.heal()


@pytest.mark.slow
def test_killed_before_every_store_operation_the_lake_ends_exactly_once(
        tmp_path: Any, crash_workload: list[list[Any]],
        reference: dict[str, list[tuple[Any, ...]]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror, "PUT_WHOLE_BYTES", 4096)  # big files stream (multipart)
    monkeypatch.setattr(mirror, "STREAM_CHUNK", 1024)
    probe = MemoryStore()
    run(object_sink(probe, str(tmp_path / "probe"), pid=1), crash_workload)
    total = len(probe.operations)
    assert ("complete_upload" in {op for op, _ in probe.operations})
    assert store_rows(probe) == reference
    step = max(1, total // int(os.environ.get("BINLAKE_OBJECT_SINK_CRASHES", "400")))
    crashed = aborted = 0
    for at in range(0, total, step):
        store = MemoryStore()
        spool = str(tmp_path / f"spool-{at}")
        _land_until_crash(store, spool, crash_workload, at)
        crashed += 1
        unfinished = list(store.uploads(""))  # killed while a file streamed
        survivor = object_sink(store, spool, pid=2)  # pid 1 is dead: taken over at once
        run(survivor, crash_workload)
        # its start aborted the dead writer's unfinished multipart upload, and left none of its own
        assert survivor._workspace.mirror.committer.aborted == unfinished  # type: ignore[union-attr]
        assert list(store.uploads("")) == []
        aborted += len(unfinished)
        rows = store_rows(store)
        assert_no_duplicates(rows)
        assert rows == reference, f"crash before operation {at} of {total}"
        swept = survivor._workspace.mirror.committer.swept  # type: ignore[union-attr]
        assert not any(key in live_objects(CommitLog(store).records()) for key in swept)
        # the layout's promise after a clean stop: the data objects are exactly the live ones
        assert data_keys(store) <= live_objects(CommitLog(store).records())
    assert crashed >= min(total, 30)
    assert aborted > 0  # some crashes came while a file streamed


@pytest.fixture(autouse=True)
def _dead_pid_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """pid 1 of the fake host counts as dead to any other pid (the restart shortcut)."""
    monkeypatch.setattr(Holder, "is_dead_here",
                        lambda self, here: self.host == here.host and self.pid == 1
                        and here.pid != 1)


def test_the_stores_refusals_exit_4() -> None:
    from replica.cli import exit_code_for, hint_for
    from sinks.errors import LakeFenced, LakeLeased, StoreRefused
    from sinks.factory import recover_compaction_if_idle

    refused = StoreRefused("PUT", "s3://bucket/lake/_log/x", "403 AccessDenied",
                           fix="grant the key s3:PutObject on bucket")
    assert (exit_code_for(refused), hint_for(refused)) == (4, "grant the key s3:PutObject on bucket")
    for held in (LakeLeased(URL, URL + "/_lease.json", "pid 7 on host", 30.0),
                 LakeFenced(URL, URL + "/_log/00000000000000000003.json")):
        assert exit_code_for(held) == 4 and "binlake run" in (hint_for(held) or "")
    assert recover_compaction_if_idle(URL) is None


def test_a_fenced_sink_is_broken_by_it_and_closes_without_flushing_again(tmp_path: Any) -> None:
    """A writer whose lake another took over fails its flush with ``LakeFenced``; that breaks
    the sink, so ``close()`` does not flush again (its local commit already moved the staged
    files: a second flush would fail on them with ENOENT, and that error would hide this one)
    and nothing of it is committed."""
    from sinks.errors import LakeFenced, SinkStateError

    store = MemoryStore()
    transactions = workload(transactions=8)
    first = object_sink(store, str(tmp_path / "first"), pid=1)
    first.open()
    for item in transactions[0]:
        first.handle(item)
    first.flush()
    second = object_sink(store, str(tmp_path / "second"), pid=2)
    second.open()  # the first stopped renewing (paused): its lease is watched out and taken
    records = list(CommitLog(store).records())
    for item in transactions[1]:
        first.handle(item)
    with pytest.raises(LakeFenced):
        first.flush()
    with pytest.raises(SinkStateError, match="stopped after a lake error"):
        first.handle(transactions[2][0])
    first.close()  # no second flush, no error
    assert list(CommitLog(store).records()) == records
    second.close()
