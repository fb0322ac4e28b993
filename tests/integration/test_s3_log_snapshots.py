"""A long commit log on the real S3 gateway: a start, a batch read and ``status`` read the newest
log snapshot and the records after it — a number of requests set by the snapshot interval, not
by the log's length — and see exactly what reading every record gives. And a reader configured
the way a container is (secret files, path-style addressing) reads the lake.

The lake is landed on disk and published into a bucket of the suite's Ceph gateway through the
commit protocol, then a long run of checkpoint-only commits (a daemon flushing an idle source
every few seconds makes exactly these) with a data commit now and then. Requests are counted by
a wrapper around the gateway's store.
"""

from __future__ import annotations

import os
import pickle
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.objectstore.commit import LOG_DIR, CommitLog, ObjectCommitter
from sinks.objectstore.lease import Lease
from sinks.objectstore.logstate import LogState, snapshot_numbers
from sinks.objectstore.status import object_lake_facts
from sinks.objectstore.view import is_data_name, live_names, read_view
from sinks.spark.objectlake import object_view, store_from_environment, store_opener
from tests.integration.test_s3_readers import gateway_env
from tests.objectlake import Published
from tests.unit.test_compact import build_lake, build_more, rows

pytestmark = [pytest.mark.s3]

#: Records in the log (the point: well past a few snapshot intervals, and some after the
#: newest snapshot) and the interval.
RECORDS = int(os.environ.get("BINLAKE_S3_LOG_RECORDS", "2150"))
EVERY = 100


class Counting:
    """A store that counts the requests made through it: (operation, key) → count."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name == "url" or not callable(method):
            return method

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[(name, str(args[0]) if args else "")] += 1
            return method(*args, **kwargs)

        return counted

    def log_reads(self) -> int:
        """GETs and HEADs of the log's records and snapshots (not the hint or the pointer)."""
        return sum(n for (op, key), n in self.calls.items()
                   if op in ("get", "head") and key.startswith(LOG_DIR)
                   and key[len(LOG_DIR):][:1].isdigit())


def lake_rows(store: Any, keys: list[str]) -> list[tuple]:
    tables = [pq.read_table(store.open_input(key)) for key in keys]
    return sorted(tuple(r.values()) for r in pa.concat_tables(tables).to_pylist())


def test_a_long_log_costs_a_start_and_a_reader_the_records_since_the_snapshot(
        ceph_gateway, s3_bucket, tmp_path, monkeypatch):
    gateway_env(ceph_gateway, monkeypatch)
    url = f"s3://{s3_bucket}/lake"
    lake = str(tmp_path / "disk")
    build_lake(lake, 4)
    store = store_from_environment(url)
    published = Published(lake, store)
    published.committer._snapshot_every = EVERY
    while published.committer.state.number < RECORDS:
        if published.committer.state.number % 500 == 0:
            build_more(lake, 1)
            published.more()  # a data commit now and then
        else:
            published.committer.commit([], [], published.checkpoint())
    published.close()
    newest = CommitLog(store).newest_number()
    assert newest >= RECORDS
    listed = snapshot_numbers(store)
    assert listed and newest - listed[-1] < EVERY

    truth = LogState()
    for record in CommitLog(store).records():  # every record: the answer without snapshots
        truth.apply(record)
    assert truth.number == newest

    # a start: the snapshot, its record, the records after it and one absent number
    counting = Counting(store_from_environment(url))
    writer = ObjectCommitter(counting, url, Lease(counting, url, duration_s=30.0),  # type: ignore[arg-type]
                             snapshot_every=EVERY)
    assert writer.open() == truth.checkpoint
    assert writer.live == truth.live
    assert counting.log_reads() == 2 + (newest - listed[-1]) + 1
    assert counting.log_reads() <= EVERY + 3
    print(f"log of {newest} records, newest snapshot {listed[-1]}: a start made "
          f"{counting.log_reads()} log reads")
    assert not any(op == "list" and key.startswith(LOG_DIR) for op, key in counting.calls)
    writer.close()

    # a batch read: the same cut of the lake as every record gives, the same rows as on disk
    counting = Counting(store_from_environment(url))
    view = read_view(counting, url, "file:///unused")  # type: ignore[arg-type]
    try:
        print(f"a batch read made {counting.log_reads()} log reads")
        assert counting.log_reads() <= EVERY + 3
        assert dict(view.live) == live_names(CommitLog(store).records())
        keys = view.data_keys("")
        assert sorted(keys) == sorted(k for n, k in truth.names.items() if is_data_name(n))
        assert lake_rows(store, keys) == rows(lake)
    finally:
        view.close()

    # binlake status reads the lake the same way
    counting = Counting(store_from_environment(url))
    facts = object_lake_facts(counting, url)  # type: ignore[arg-type]
    assert counting.log_reads() <= EVERY + 3
    [table] = facts.tables
    assert (table.files, table.rows) == (len(keys), len(rows(lake)))


def test_a_reader_configured_by_secret_files_and_path_addressing_reads_the_lake(
        ceph_gateway, s3_bucket, tmp_path, monkeypatch):
    """The readers take the daemon's settings from the environment by the daemon's rules: here
    only ``BINLAKE_LAKE_S3_*`` variables, the keys in ``*_FILE`` secrets (as a container's
    mounted secrets), path-style addressing — no AWS variable at all."""
    gateway_env(ceph_gateway, monkeypatch)
    url = f"s3://{s3_bucket}/lake"
    lake = str(tmp_path / "disk")
    build_lake(lake, 6)
    Published(lake, store_from_environment(url)).close()
    gateway_env(ceph_gateway, monkeypatch, secrets=tmp_path / "secrets")
    assert [name for name in os.environ if name.startswith("AWS_")] == [
        "AWS_SHARED_CREDENTIALS_FILE"]  # pointing at no file

    opener = store_opener(url)
    settings = opener.args[1]  # type: ignore[attr-defined]  # a functools.partial
    assert (settings.addressing, settings.access_key_id) == ("path", ceph_gateway.access_key)
    assert ceph_gateway.secret_key not in repr(settings)
    with object_view(url) as view:
        keys = view.data_keys("")
        assert len(keys) == 6
    worker_store = pickle.loads(pickle.dumps(opener))()  # as a Spark worker opens it
    assert lake_rows(worker_store, keys) == rows(lake)
