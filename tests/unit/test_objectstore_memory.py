"""The in-memory object store keeps the seam's promises (``sinks/objectstore/store.py``), and
its faults do what the protocol tests rely on: a crash stops everything after it, a rejection
raises the error given, a streamed upload appears only when closed."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.errors import ObjectMissing, StoreUnavailable
from sinks.objectstore.memory import MemoryStore, StoreCrashed
from sinks.objectstore.store import ObjectStore


def test_it_is_an_object_store() -> None:
    store: ObjectStore = MemoryStore()
    assert store.url("a/b") == "mem://lake/a/b"


def test_conditional_create_and_replace() -> None:
    store = MemoryStore()
    first = store.put_if_absent("k", b"one")
    assert first is not None
    assert store.put_if_absent("k", b"two") is None
    assert store.get("k").data == b"one"
    assert store.put_if_match("k", b"three", '"not-it"') is None
    second = store.put_if_match("k", b"three", first)
    assert second is not None and second != first
    assert store.put_if_match("k", b"four", first) is None  # the ETag moved on
    assert store.get("k").data == b"three"
    assert store.put_if_match("gone", b"x", second) is None
    assert store.put("k", b"one") == first  # an ETag names content, not a write


def test_racing_creators_exactly_one_wins() -> None:
    store = MemoryStore()
    results: list[str | None] = []
    barrier = threading.Barrier(8)

    def create(n: int) -> None:
        barrier.wait()
        results.append(store.put_if_absent("_log/00000001.json", str(n).encode()))

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(result is not None for result in results) == 1


def test_listing_is_sorted_by_key_and_pages_after_a_key() -> None:
    store = MemoryStore()
    for key in ("b/2", "a/1", "b/1", "b/10", "c"):
        store.put(key, key.encode())
    assert [info.key for info in store.list("b/")] == ["b/1", "b/10", "b/2"]
    assert [info.key for info in store.list("b/", start_after="b/10")] == ["b/2"]
    assert [(info.key, info.size) for info in store.list("a")] == [("a/1", 3)]


def test_reads_and_idempotent_deletes() -> None:
    store = MemoryStore()
    with pytest.raises(ObjectMissing, match="mem://lake/nope"):
        store.get("nope")
    assert store.head("nope") is None
    store.put("x", b"12345")
    info = store.head("x")
    assert info is not None and (info.key, info.size) == ("x", 5)
    store.delete("x")
    store.delete("x")
    store.delete_many(["x", "y"])
    assert store.keys() == []


def test_a_streamed_upload_appears_whole_at_close() -> None:
    store = MemoryStore()
    out = store.open_output("t/part-1.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3]}), out)
    assert store.head("t/part-1.parquet") is None  # not yet closed: not there
    out.close()
    assert pq.read_table(store.open_input("t/part-1.parquet")).column("id").to_pylist() == [1, 2, 3]
    assert store.operations == [("head", "t/part-1.parquet"),
                                ("complete_upload", "t/part-1.parquet"),
                                ("get", "t/part-1.parquet")]


def test_crash_after_stops_every_later_operation() -> None:
    store = MemoryStore()
    store.crash_after(2)
    store.put("a", b"1")
    store.put("b", b"2")
    with pytest.raises(StoreCrashed):
        store.put("c", b"3")
    with pytest.raises(StoreCrashed):
        store.head("a")
    out = store.open_output("d")
    out.write(b"data")
    with pytest.raises(StoreCrashed):
        out.close()
    store.heal()
    assert store.keys() == ["a", "b"]


def test_rejection_raises_the_given_error_until_healed() -> None:
    store = MemoryStore()
    error = StoreUnavailable("PUT", store.url("_log/"), "503 SlowDown")
    store.reject("put_if_absent", "_log/", error)
    with pytest.raises(StoreUnavailable, match="SlowDown"):
        store.put_if_absent("_log/1", b"x")
    store.put_if_absent("data/1", b"x")
    store.heal()
    assert store.put_if_absent("_log/1", b"x") is not None


def test_restored_holds_exactly_the_objects_given() -> None:
    store = MemoryStore.restored({"a": b"1"})
    assert store.snapshot() == {"a": b"1"}
    assert store.put_if_absent("a", b"2") is None
