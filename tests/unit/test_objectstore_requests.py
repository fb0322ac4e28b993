"""``binlake snapshot``'s requests on a lake on object storage (``sinks/objectstore/requests.py``),
on the in-memory store: a request is created once, read by the daemon, removed; an unreadable
one is said once; the writer's start sweep and a compaction's leave requests alone; the lease
says whether a daemon may hold the lake."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import trio

from replica.commands import snapshot as S
from replica.config import Config, load_config
from sinks.contract import SnapshotProgress, TableProgress
from sinks.objectstore import compact as C
from sinks.objectstore.commit import ObjectCommitter, Record
from sinks.objectstore.lease import Holder, Lease
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.requests import REQUESTS, StoreRequests
from sinks.parquet.compact import CompactOptions
from tests.objectlake import URL


def test_a_request_is_created_read_and_removed() -> None:
    store = MemoryStore()
    requests = StoreRequests(store, URL)
    assert requests.read() == [] and requests.checkpoint() is None
    first = requests.write([("shop", "orders"), ("shop", "users")])
    second = requests.write([("shop", "items")])
    assert first != second
    assert sorted(requests.read()) == sorted([(first, [("shop", "orders"), ("shop", "users")]),
                                              (second, [("shop", "items")])])
    assert sorted(i.key for i in store.list(REQUESTS)) == sorted(
        [f"_snapshot_requests/{first}.json", f"_snapshot_requests/{second}.json"])
    requests.remove(first)
    requests.remove(first)  # gone already: nothing
    assert requests.read() == [(second, [("shop", "items")])]


def test_a_pending_request_is_read_once_however_often_the_daemon_polls() -> None:
    """Requests never change (each is created whole, with If-None-Match), so the daemon's poll
    costs one LIST and a GET per request it has not read yet — a request waiting through a
    long snapshot is not fetched again every 5 seconds."""
    store = MemoryStore()
    requests = StoreRequests(store, URL)
    first = requests.write([("shop", "orders")])
    store.put(f"{REQUESTS}broken.json", b'{"id": ')

    def gets() -> int:
        return sum(1 for op, key in store.operations if op == "get" and key.startswith(REQUESTS))

    before = gets()
    for _ in range(3):
        assert requests.read() == [(first, [("shop", "orders")])]
    assert gets() - before == 2  # the request and the unreadable one, once each
    second = requests.write([("shop", "items")])
    requests.remove(first)
    assert requests.read() == [(second, [("shop", "items")])]
    assert gets() - before == 3


def test_an_unreadable_request_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    requests = StoreRequests(store, URL)
    good = requests.write([("shop", "orders")])
    store.put(f"{REQUESTS}broken.json", b'{"id": ')
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert requests.read() == [(good, [("shop", "orders")])]
    warnings = [r.getMessage() for r in caplog.records if "unreadable snapshot request" in
                r.getMessage()]
    assert warnings == ["ignoring the unreadable snapshot request mem://lake/_snapshot_requests/"
                        "broken.json: Expecting value: line 1 column 8 (char 7)"]


def test_a_writers_start_and_a_compaction_leave_requests_alone() -> None:
    store = MemoryStore()
    requests = StoreRequests(store, URL)
    request = requests.write([("shop", "orders")])
    first = ObjectCommitter(store, URL, Lease(store, URL, duration_s=30.0))
    first.open()
    assert requests.held() is not None  # a daemon holds the lake
    first.commit([], [], {"seq": 7})
    store.put(f"shop/orders/schema_version=1/commit_date=2026-01-01/part-1-000-w{first.epoch}"
              ".parquet", b"an interrupted commit's upload")
    first.close()
    assert requests.held() is None  # released by a clean stop
    assert requests.checkpoint() == {"seq": 7}
    store.put("shop/orders/schema_version=1/commit_date=2026-01-01/compacted-g00000001-"
              "0000000000000001-000-cdeadbeef.parquet", b"a killed compaction's upload")
    second = ObjectCommitter(store, URL, Lease(store, URL, duration_s=30.0))
    second.open()
    assert len(second.swept) == 1  # the interrupted commit's upload, not the request
    C.compact_store(store, URL, CompactOptions(min_age=0, grace=0), now=1000.0)
    assert isinstance(second.log.read(second.epoch + 1), Record)  # the compaction's fence
    second.close()
    assert requests.read() == [(request, [("shop", "orders")])]
    assert [i.key for i in store.list("") if "compacted-" in i.key] == []


def test_a_lease_left_by_a_process_dead_on_this_host_is_not_held() -> None:
    store = MemoryStore()
    here = Holder.this_process()
    gone = Holder(here.host, here.boot, 2**22 + 12345)  # no such pid runs
    lease = Lease(store, URL, duration_s=30.0, holder=gone)
    lease.acquire()  # and never released: killed
    requests = StoreRequests(store, URL)
    seen = requests.lease()
    assert seen is not None and seen.holder == gone and not seen.released
    assert requests.held() is None


def _config() -> Config:
    return load_config(None, env={"BINLAKE_CONFIG": "/dev/null", "BINLAKE_LAKE_PATH": URL,
                                  "BINLAKE_REPLICA_SERVER_ID": "7"})


async def _ask(requests: StoreRequests) -> int | None:
    """``binlake snapshot`` asking the daemon for shop.orders, bounded (a test never hangs)."""
    with trio.fail_after(30):
        return await S._ask_store_daemon(_config(), [("shop", "orders")], requests)


def test_the_command_learns_the_outcome_from_the_newest_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    monkeypatch.setattr(S, "STORE_WAIT_POLL", 0.01)
    writer = ObjectCommitter(store, URL, Lease(store, URL, duration_s=30.0))
    writer.open()
    requests = StoreRequests(store, URL)

    def daemon() -> None:  # takes the request up and commits the table done
        deadline = time.monotonic() + 30
        while not (found := requests.read()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (request, tables), = found
        entry = TableProgress(database="shop", table="orders", status="done",
                              reason="binlake snapshot", one_time=False, last_key=None, rows=3,
                              chunks=1, requests=(request,))
        writer.commit([], [], {"seq": 9, "snapshot": SnapshotProgress(tables=(entry,)).to_json()})

    thread = threading.Thread(target=daemon)
    thread.start()
    code = trio.run(_ask, requests)
    thread.join()
    writer.close()
    assert code == 0 and requests.read() == []


def test_a_lease_never_renewed_while_watched_is_a_gone_holder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    monkeypatch.setattr(S, "STORE_WAIT_POLL", 0.01)
    elsewhere = Holder("another-host", "boot", 4242)  # died there: never renews, never releases
    Lease(store, URL, duration_s=0.3, holder=elsewhere).acquire()
    requests = StoreRequests(store, URL)
    assert requests.held() is not None
    assert trio.run(_ask, requests) is None
    assert requests.read() == []  # the request is not left behind


def test_a_daemon_that_stops_before_the_snapshot_is_done_fails_the_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    monkeypatch.setattr(S, "STORE_WAIT_POLL", 0.01)
    lease = Lease(store, URL, duration_s=0.3)
    lease.acquire()
    lease.start()  # alive: renewed every 0.1 s
    requests = StoreRequests(store, URL)

    def stop_later() -> None:
        time.sleep(0.5)
        lease.release()

    thread = threading.Thread(target=stop_later)
    thread.start()
    code = trio.run(_ask, requests)
    thread.join()
    assert code == 1 and requests.read() == []
