"""Log snapshots (``sinks/objectstore/logstate.py``): only an optimisation, never a second truth.

Whatever snapshot a reader starts from — the newest, an older one, none because it is missing,
corrupt, or ahead of the records — it gets the state records ``1..n`` give; the writer writes
one every ``snapshot_every`` records; a start and a reader make a number of requests bounded by
the snapshot interval, not by the log's length; and a writer crashed before every one of its
store operations, snapshots included, still recovers a lake with every transaction once.
"""

from __future__ import annotations

import json
import random

from sinks.objectstore import compact as C
from sinks.objectstore.commit import CommitLog, ObjectCommitter, Record, record_key
from sinks.objectstore.lease import Holder
from sinks.objectstore.logstate import (
    KEEP,
    POINTER,
    PURGED,
    LogState,
    read_state,
    snapshot_key,
    snapshot_numbers,
)
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.view import live_names, read_view
from sinks.parquet.compact import CompactOptions
from tests.objectlake import URL, Published
from tests.unit.test_compact import build_lake, build_more
from tests.unit.test_objectstore_commit import (
    COMMITS,
    TXNS,
    _crash_run,
    _dead_pid_one,  # noqa: F401 - the fixture, autouse here too
    _recover_and_finish,
    land,
    writer,
)


def snapshotting(store: MemoryStore, every: int, pid: int = 1) -> ObjectCommitter:
    committer = writer(store, pid=pid)
    committer._snapshot_every = every
    return committer


def from_records(store: MemoryStore) -> LogState:
    """The state replayed from every record, no snapshot used."""
    state = LogState()
    for record in CommitLog(store).records():
        state.apply(record)
    return state


def same(a: LogState, b: LogState) -> None:
    assert (a.number, a.checkpoint, a.live, a.names) == (b.number, b.checkpoint, b.live, b.names)


def a_long_log(store: MemoryStore, commits: int, every: int) -> ObjectCommitter:
    committer = snapshotting(store, every)
    committer.open()
    for commit in range(1, commits + 1):
        land(committer, store, commit)
    return committer


def test_the_writer_snapshots_every_k_records_and_keeps_the_newest_few() -> None:
    store = MemoryStore()
    committer = a_long_log(store, 23, every=5)
    # the takeover record is 1, commits are 2..24: a snapshot at 5, 10, 15, 20
    assert snapshot_numbers(store) == [5, 10, 15, 20][-KEEP:]
    assert [k for k in store.keys() if k.endswith(".snapshot.json")] == [
        snapshot_key(n) for n in [5, 10, 15, 20][-KEEP:]]
    same(LogState.from_bytes(store.get(snapshot_key(20)).data),
         _upto(from_records(store), store, 20))
    same(committer.state, from_records(store))
    committer.close()


def _upto(state: LogState, store: MemoryStore, number: int) -> LogState:
    replay = LogState()
    for n in range(1, number + 1):
        replay.apply(CommitLog(store).read(n))  # type: ignore[arg-type]
    return replay


def test_a_reader_and_a_start_pay_for_the_records_since_the_snapshot_not_the_log() -> None:
    store = MemoryStore()
    a_long_log(store, 60, every=10).close()  # records 1..61, snapshots up to 60
    before = len(store.operations)
    state = read_state(store)
    reads = store.operations[before:]
    # the pointer, the snapshot, a HEAD of its record, record 61, and absent 62
    assert reads == [("get", POINTER), ("get", snapshot_key(60)), ("head", record_key(60)),
                     ("get", record_key(61)), ("get", record_key(62))]
    same(state, from_records(store))
    before = len(store.operations)
    second = snapshotting(store, 10, pid=2)
    second._lease._holder = Holder("host", "boot", 2)  # pid 1 (the first writer) is dead
    second.open()
    gets = [key for op, key in store.operations[before:] if op in ("get", "head")
            and key.startswith("_log/")]
    assert len(gets) == 5  # the same walk; the sweep lists the lake, never the log's records
    assert not any(op == "list" and key.startswith("_log/")
                   for op, key in store.operations[before:])


def test_a_missing_corrupt_or_ahead_snapshot_falls_back_to_the_records() -> None:
    store = MemoryStore()
    a_long_log(store, 30, every=7).close()  # snapshots at 7, 14, 21, 28
    truth = from_records(store)
    same(read_state(store), truth)
    store.delete(snapshot_key(28))  # missing: the next older one
    same(read_state(store), truth)
    store.put(snapshot_key(21), b"{not json")  # corrupt: older still
    same(read_state(store), truth)
    store.put(snapshot_key(14), store.get(snapshot_key(7)).data)  # names the wrong record
    same(read_state(store), truth)
    store.put(POINTER, json.dumps({"numbers": [7, 50]}).encode())
    store.put(snapshot_key(50), LogState(number=50).to_bytes())  # ahead of the records
    same(read_state(store), truth)
    store.put(POINTER, b"garbage")  # no usable list at all: every record
    same(read_state(store), truth)
    store.delete(POINTER)
    same(read_state(store), truth)
    # and a reader asking for an older cut gets it, from a snapshot at or before it
    store.put(POINTER, json.dumps({"numbers": [7]}).encode())
    same(read_state(store, upto=12), _upto(truth, store, 12))
    same(read_state(store, upto=5), _upto(truth, store, 5))


def test_names_the_keys_alone_do_not_give_survive_a_snapshot() -> None:
    state = LogState()
    state.apply(Record(1, "w", adds=("a/x-w1.json", "a/y-w1.json")))
    state.apply(Record(2, "w", adds=("a/x-w2.json",)))  # a second key of name a/x.json
    state.apply(Record(3, "w", removes=("a/x-w2.json",)))  # removed: the name is gone
    state.apply(Record(4, "w", adds=("a/y-w0.json",)))  # sorts first, but is the newest
    assert state.names == {"a/y.json": "a/y-w0.json"}
    back = LogState.from_bytes(state.to_bytes())
    same(back, state)
    rng = random.Random(28)  # and any mix of adds and removes of keys sharing names
    for _ in range(200):
        state = LogState()
        for number in range(1, 8):
            keys = [f"t/{rng.choice('abc')}-w{rng.randint(1, 4)}.json" for _ in range(3)]
            state.apply(Record(number, "w", adds=tuple(keys[:rng.randint(0, 3)]),
                               removes=tuple(rng.sample(sorted(state.live),
                                                        min(len(state.live), rng.randint(0, 2))))))
        same(LogState.from_bytes(state.to_bytes()), state)


def test_a_crash_before_every_operation_with_snapshots_loses_and_duplicates_nothing() -> None:
    def run(store: MemoryStore, at: int | None) -> int:
        return _crash_run(store, at, lambda store: snapshotting(store, 2))

    full = MemoryStore()
    run(full, None)
    assert snapshot_numbers(full)  # the run writes snapshots
    for at in range(len(full.operations) + 1):
        store = MemoryStore()
        acknowledged = run(store, at)
        same(read_state(store), from_records(store))
        _recover_and_finish(store, acknowledged)
        assert len(from_records(store).live) >= COMMITS * TXNS
        same(read_state(store), from_records(store))


def test_compaction_status_and_views_read_through_snapshots(tmp_path) -> None:
    """A lake whose log has snapshots on both sides of a compaction: the compaction's purge
    and the readers see what the records say; a snapshot drops what the purge deleted."""
    lake = str(tmp_path / "disk")
    build_lake(lake, 8)
    published = Published(lake, MemoryStore())
    store = published.store
    published.committer._snapshot_every = 2
    C.compact_store(store, URL, CompactOptions(min_age=0, grace=100), now=1000.0)
    build_more(lake, 3)
    published.more()
    replaced = from_records(store).replaced
    assert replaced and read_state(store).replaced == replaced
    C.compact_store(store, URL, CompactOptions(min_age=10**9, grace=100), now=2000.0)
    assert json.loads(store.get(PURGED).data)["number"] == max(replaced)
    assert all(not store.head(key) for _, keys in replaced.values() for key in keys)
    build_more(lake, 4)
    published.more()
    state = read_state(store)
    same(state, from_records(store))
    assert state.replaced == {}  # the newest snapshot forgot what was purged
    view = read_view(store, URL, "file:///x")
    try:
        assert dict(view.live) == live_names(CommitLog(store).records())
    finally:
        view.close()
    published.close()


def test_a_stream_plans_its_first_batch_from_a_snapshot_and_every_row_once(tmp_path) -> None:
    """The streaming source's positions (no Spark session needed to plan): with a file limit,
    the first batch ends at a snapshot — the table as of it, each live file once — and the
    later batches add what each record added; together exactly the live files, none twice."""
    from sinks.spark.objectstream import ObjectBackend

    lake = str(tmp_path / "disk")
    build_lake(lake, 13)
    published = Published(lake, MemoryStore())
    store = published.store
    newest = CommitLog(store).newest_number()
    listed = snapshot_numbers(store)
    assert listed and listed[-1] < newest
    backend = ObjectBackend(lambda: store, "shop/users/")
    end = backend.latest(0, 2)
    assert end == listed[-1]  # more than 2 files live there: one batch
    first = [p.key for p in backend.partitions(0, end)]
    assert len(first) == len(set(first)) >= 2
    planned = list(first)
    while end < newest:
        start, end = end, backend.latest(end, 2)
        planned += [p.key for p in backend.partitions(start, end)]
    live = sorted(k for n, k in read_state(store).names.items()
                  if n.startswith("shop/users/") and n.endswith(".parquet"))
    assert sorted(planned) == live and len(planned) == len(set(planned)) == 13
    assert backend.latest(0, 0) == newest
    assert sorted(p.key for p in backend.partitions(0, newest)) == live
    published.close()
