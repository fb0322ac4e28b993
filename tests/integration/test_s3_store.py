"""``S3Store`` keeps every promise of the object-store seam on the real gateway (the test bed's
Ceph RGW), classifies the gateway's real refusals and outages, and its start-time probe passes
a store that honours conditional writes."""

from __future__ import annotations

import concurrent.futures
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.errors import ObjectMissing, StoreRefused, StoreUnavailable
from sinks.objectstore.probe import PROBE_PREFIX, probe_conditional_writes
from sinks.objectstore.s3 import S3Settings, S3Store, open_store
from sinks.objectstore.store import ObjectStore
from tests.servers.ceph import CephGateway

pytestmark = pytest.mark.s3


def settings(gateway: CephGateway, **changes: object) -> S3Settings:
    values: dict[str, object] = {
        "endpoint": gateway.endpoint, "region": gateway.region,
        "access_key_id": gateway.access_key, "secret_access_key": gateway.secret_key,
        "max_attempts": 1, "connect_timeout": 2.0, "request_timeout": 10.0}
    values.update(changes)
    return S3Settings(**values)  # type: ignore[arg-type]


def store_for(gateway: CephGateway, bucket: str, prefix: str = "lake/one",
              **changes: object) -> S3Store:
    return open_store(f"s3://{bucket}/{prefix}", settings(gateway, **changes))


def test_promises_of_the_seam(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    store: ObjectStore = store_for(ceph_gateway, s3_bucket)
    assert store.url("a/b") == f"s3://{s3_bucket}/lake/one/a/b"
    first = store.put_if_absent("_log/1.json", b"one")
    assert first is not None
    assert store.put_if_absent("_log/1.json", b"two") is None
    assert store.get("_log/1.json") == type(store.get("_log/1.json"))(b"one", first)
    assert store.put_if_match("_log/1.json", b"three", '"0123456789abcdef0123456789abcdef"') is None
    second = store.put_if_match("_log/1.json", b"three", first)
    assert second is not None and second != first
    assert store.put_if_match("_log/1.json", b"four", first) is None
    assert store.put_if_match("gone", b"x", second) is None
    assert store.get("_log/1.json").data == b"three"
    for key in ("b/2", "a/1", "b/1", "b/10", "c"):
        assert store.put(key, key.encode()).startswith('"')
    assert [info.key for info in store.list("b/")] == ["b/1", "b/10", "b/2"]
    assert [info.key for info in store.list("b/", start_after="b/10")] == ["b/2"]
    assert [(info.key, info.size) for info in store.list("a")] == [("a/1", 3)]
    info = store.head("c")
    assert info is not None and (info.key, info.size) == ("c", 1)
    assert store.head("nope") is None
    with pytest.raises(ObjectMissing, match=f"s3://{s3_bucket}/lake/one/nope"):
        store.get("nope")
    with pytest.raises(ObjectMissing):
        store.open_input("nope")
    store.delete("c")
    store.delete("c")
    store.delete_many(["a/1", "b/1", "b/10", "b/2", "never"])
    assert [info.key for info in store.list("")] == ["_log/1.json"]
    # Nothing outside the prefix is seen or touched.
    other = store_for(ceph_gateway, s3_bucket, prefix="lake/two")
    assert list(other.list("")) == []


def test_listing_pages_past_one_request(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    store = store_for(ceph_gateway, s3_bucket)
    store.page_size = 7
    keys = [f"k/{n:05d}" for n in range(30)]
    for key in keys:
        store.put(key, b"")
    assert [info.key for info in store.list("k/")] == keys
    assert [info.key for info in store.list("k/", start_after="k/00012")] == keys[13:]
    store.delete_many(keys)
    assert list(store.list("k/")) == []


def test_parquet_streams_out_in_parts_and_reads_back_by_range(
        ceph_gateway: CephGateway, s3_bucket: str) -> None:
    store = store_for(ceph_gateway, s3_bucket)
    table = pa.table({"id": pa.array(range(1_500_000), pa.int64()),
                      "v": pa.array([f"row {n}" for n in range(1_500_000)])})
    out = store.open_output("db/t/part-1.parquet")
    pq.write_table(table, out, compression="none", row_group_size=300_000)
    assert store.head("db/t/part-1.parquet") is None  # not closed: not there
    out.close()
    info = store.head("db/t/part-1.parquet")
    assert info is not None and info.size > 10 * 1024 * 1024
    assert info.etag.strip('"').rpartition("-")[2].isdigit()  # a multipart upload's ETag
    back = pq.read_table(store.open_input("db/t/part-1.parquet"), columns=["id"])
    assert back.column("id").to_pylist() == list(range(1_500_000))
    piece = pq.ParquetFile(store.open_input("db/t/part-1.parquet")).read_row_group(3)
    assert piece.column("v")[0].as_py() == "row 900000"


def test_racing_writers_one_creator_wins(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    """Eight writers, each with its own store (as eight daemons would have), create one
    commit record at once: exactly one gets an ETag, and the record holds its bytes."""
    stores = [store_for(ceph_gateway, s3_bucket) for _ in range(8)]
    barrier = threading.Barrier(len(stores))

    def create(n: int) -> str | None:
        barrier.wait()
        return stores[n].put_if_absent("_log/00000001.json", f"writer {n}".encode())

    with concurrent.futures.ThreadPoolExecutor(len(stores)) as pool:
        results = list(pool.map(create, range(len(stores))))
    winners = [n for n, etag in enumerate(results) if etag is not None]
    assert len(winners) == 1, results
    assert stores[0].get("_log/00000001.json").data == f"writer {winners[0]}".encode()


def test_the_probe_passes_and_leaves_nothing(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    store = store_for(ceph_gateway, s3_bucket)
    probe_conditional_writes(store)
    assert list(store.list(PROBE_PREFIX)) == []


def test_wrong_secret_key_is_refused_with_a_fix(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    wrong = "W" * 40
    store = store_for(ceph_gateway, s3_bucket, secret_access_key=wrong)
    for attempt in (lambda: store.put("x", b"1"), lambda: store.open_input("x"),
                    lambda: pq.write_table(pa.table({"a": [1]}), store.open_output("y"))):
        with pytest.raises(StoreRefused) as refused:
            attempt()
        text = f"{refused.value} {refused.value.fix}"
        assert "403" in str(refused.value) or "SIGNATURE" in str(refused.value).upper()
        assert wrong not in text and ceph_gateway.access_key not in text
        assert ceph_gateway.secret_key not in text
    assert "secret" in refused.value.fix


def test_unknown_access_key_is_refused(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    store = store_for(ceph_gateway, s3_bucket, access_key_id="NOSUCHKEY0000000")
    with pytest.raises(StoreRefused) as refused:
        store.put_if_absent("_log/1.json", b"1")
    assert str(refused.value) == (f"PUT If-None-Match s3://{s3_bucket}/lake/one/_log/1.json: "
                                  "403 InvalidAccessKeyId")
    assert "access key id" in refused.value.fix and "NOSUCHKEY" not in refused.value.fix


def test_missing_bucket_is_refused_naming_it(ceph_gateway: CephGateway) -> None:
    store = store_for(ceph_gateway, "binlake-no-such-bucket")
    with pytest.raises(StoreRefused) as refused:
        store.put_if_absent("_log/1.json", b"1")
    assert str(refused.value) == ("PUT If-None-Match s3://binlake-no-such-bucket/lake/one/"
                                  "_log/1.json: 404 NoSuchBucket")
    assert refused.value.fix.startswith("the bucket binlake-no-such-bucket does not exist")
    with pytest.raises(StoreRefused, match="NO_SUCH_BUCKET|NoSuchBucket|404"):
        pq.write_table(pa.table({"a": [1]}), store.open_output("db/t/x.parquet"))
    with pytest.raises(StoreRefused, match="NoSuchBucket"):
        list(store.list(""))


def test_quota_exceeded_is_refused(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    ceph_gateway.radosgw_admin("quota", "set", "--quota-scope=bucket", f"--bucket={s3_bucket}",
                               "--max-objects=1")
    ceph_gateway.radosgw_admin("quota", "enable", "--quota-scope=bucket", f"--bucket={s3_bucket}")
    store = store_for(ceph_gateway, s3_bucket)
    store.put("one", b"1")
    with pytest.raises(StoreRefused) as refused:
        store.put("two", b"2")
    assert str(refused.value).endswith("403 QuotaExceeded")
    assert refused.value.fix.startswith(f"a quota of the bucket {s3_bucket}")


def test_stopped_gateway_is_transient_and_recovers(ceph_gateway: CephGateway,
                                                   s3_bucket: str) -> None:
    store = store_for(ceph_gateway, s3_bucket)
    store.put("before", b"1")
    ceph_gateway.stop_gateway()
    try:
        with pytest.raises(StoreUnavailable):
            store.put_if_absent("_log/1.json", b"1")
        with pytest.raises(StoreUnavailable):
            store.get("before")
        with pytest.raises(StoreUnavailable):
            list(store.list(""))
        with pytest.raises(StoreUnavailable):
            pq.write_table(pa.table({"a": [1]}), store.open_output("db/t/x.parquet"))
    finally:
        ceph_gateway.start_gateway()
    assert store.put_if_absent("_log/1.json", b"1") is not None
    assert store.get("before").data == b"1"


def test_slow_down_from_a_rate_limit_is_transient(ceph_gateway: CephGateway,
                                                   s3_bucket: str) -> None:
    ceph_gateway.radosgw_admin("ratelimit", "set", "--ratelimit-scope=bucket",
                               f"--bucket={s3_bucket}", "--max-write-ops=1")
    ceph_gateway.radosgw_admin("ratelimit", "enable", "--ratelimit-scope=bucket",
                               f"--bucket={s3_bucket}")
    store = store_for(ceph_gateway, s3_bucket)
    errors = []
    for n in range(5):
        try:
            store.put(f"w{n}", b"x")
        except StoreUnavailable as exc:
            errors.append(str(exc))
    assert errors and errors[0] == f"PUT s3://{s3_bucket}/lake/one/w1: 503 SlowDown", errors
