"""The object-store commit protocol (``sinks/objectstore/commit.py``), crashed at every step.

A writer lands a series of commits the way the sink does — data objects PUT at their final
(epoch-tagged) keys, some streamed, XA parts added by one commit and removed by a later one,
then the record with the checkpoint. The process is killed before each of its store
operations in turn (``MemoryStore.crash_after``); a new writer then starts on what the store
holds (its start can be killed at every operation too), and must find exactly the commits whose
record exists: the checkpoint names the last of them, the lake's data objects are exactly
theirs (each transaction once), and nothing an interrupted commit left remains. It then lands
the rest, and the lake holds every transaction exactly once.

Then the fencing race (a writer paused past its lease can never commit) and the lease (a
second writer refuses while the first renews; a dead writer is taken over on the taker's clock).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

from sinks.errors import LakeFenced, LakeLeased
from sinks.objectstore.commit import (
    HINT,
    CommitLog,
    ObjectCommitter,
    Record,
    Retry,
    epoch_of,
    record_key,
)
from sinks.objectstore.lease import LEASE, Holder, Lease, LeaseLost
from sinks.objectstore.memory import MemoryStore, StoreCrashed

LAKE = "s3://bucket/lake"
DURATION = 30.0
#: Transactions per commit, and commits in the workload (crash points grow with both).
TXNS = 2
COMMITS = int(os.environ.get("BINLAKE_OBJECT_CRASH_COMMITS", "4"))


class FakeClock:
    """A monotonic clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)


def writer(store: MemoryStore, clock: FakeClock | None = None, pid: int = 1,
           duration: float = DURATION) -> ObjectCommitter:
    clock = clock or FakeClock()
    lease = Lease(store, LAKE, duration_s=duration, holder=Holder("host", "boot", pid),
                  clock=clock, sleep=clock.sleep)
    lease.start = lambda: None  # type: ignore[method-assign]  # renewals are driven by the test
    return ObjectCommitter(store, LAKE, lease, Retry(sleep=clock.sleep))


def land(committer: ObjectCommitter, store: MemoryStore, commit: int) -> None:
    """Commit number ``commit`` (1-based): its transactions' data objects, one streamed; on odd
    commits an XA part, removed by the next commit."""
    seqs = [(commit - 1) * TXNS + k + 1 for k in range(TXNS)]
    adds = []
    for seq in seqs:
        key = committer.fresh(f"db/t/schema_version=1/commit_date=2026-11-29/"
                              f"part-{seq:016d}-000.parquet")
        if seq % 2:
            store.put(key, json.dumps([seq]).encode())
        else:
            out = store.open_output(key)
            out.write(json.dumps([seq]).encode())
            out.close()
        adds.append(key)
    if commit % 2:
        xa = committer.fresh(f"_xa/xa-{seqs[0]}-0.arrow")
        store.put(xa, b"prepared")
        adds.append(xa)
    previous = f"_xa/xa-{(commit - 2) * TXNS + 1}-0-w"  # the part the commit before added
    removes = [key for key in store.keys() if key.startswith(previous)] if commit % 2 == 0 else []
    committer.commit(adds, removes, {"seq": seqs[-1]})


def landed(store: MemoryStore) -> list[int]:
    """Every transaction in the lake's data objects (those no hidden component names)."""
    seqs: list[int] = []
    for key, data in store.snapshot().items():
        if not any(part[:1] in "_." for part in key.split("/")):
            seqs.extend(json.loads(data))
    return sorted(seqs)


def committed_seq(store: MemoryStore) -> int:
    """The checkpoint of the newest record (what a restart resumes after)."""
    log = CommitLog(store)
    newest = log.newest_number()
    record = log.read(newest) if newest else None
    return (record.checkpoint or {}).get("seq", 0) if record else 0


def assert_consistent(store: MemoryStore) -> int:
    """The lake after a clean start: data == the committed transactions, each once, and no
    epoch-tagged object outside the live set of an older epoch."""
    seq = committed_seq(store)
    assert landed(store) == list(range(1, seq + 1))
    return seq


def test_a_clean_run_then_a_restart_resumes_from_the_newest_record() -> None:
    store = MemoryStore()
    first = writer(store)
    assert first.open() is None
    for commit in range(1, COMMITS + 1):
        land(first, store, commit)
    first.close()
    assert landed(store) == list(range(1, COMMITS * TXNS + 1))
    second = writer(store, pid=2)
    assert second.open() == {"seq": COMMITS * TXNS}
    assert second.swept == []
    assert second.epoch == COMMITS + 2  # two takeover records and the commits
    assert store.get(HINT).data == json.dumps({"number": second.epoch}).encode()
    # the only XA part left is the one the last odd commit added and nothing removed yet
    assert [key for key in store.keys() if key.startswith("_xa/")] == (
        [first.fresh(f"_xa/xa-{(COMMITS - 1) * TXNS + 1}-0.arrow")] if COMMITS % 2 else [])


def _ops_of_a_full_run() -> int:
    store = MemoryStore()
    committer = writer(store)
    committer.open()
    for commit in range(1, COMMITS + 1):
        land(committer, store, commit)
    committer.close()
    return len(store.operations)


def _crash_run(store: MemoryStore, at: int | None,
               make: Callable[[MemoryStore], ObjectCommitter] = writer) -> int:
    """Run the workload, killed before operation ``at`` (None: never) by a writer ``make``
    builds; the commits acknowledged."""
    committer = make(store)
    store.crash_after(at)
    acknowledged = 0
    try:
        committer.open()
        for commit in range(1, COMMITS + 1):
            land(committer, store, commit)
            acknowledged = commit
    except StoreCrashed:
        pass
    store.heal()
    return acknowledged


def _recover_and_finish(store: MemoryStore, acknowledged: int) -> None:
    survivor = writer(store, pid=2)  # another pid on this host and boot: pid 1 is not running
    survivor._lease._holder = Holder("host", "boot", 2)
    checkpoint = survivor.open()
    seq = (checkpoint or {}).get("seq", 0)
    assert seq >= acknowledged * TXNS  # every acknowledged commit is there
    assert seq % TXNS == 0  # a commit is there whole or not at all
    assert landed(store) == list(range(1, seq + 1))  # and nothing else: orphans swept
    orphans = [key for key in store.keys() if epoch_of(key) is not None
               and epoch_of(key) < survivor.epoch and key.startswith("db/")
               and int(key.split("part-")[1][:16]) > seq]
    assert orphans == []
    for commit in range(seq // TXNS + 1, COMMITS + 1):
        land(survivor, store, commit)
    survivor.close()
    assert landed(store) == list(range(1, COMMITS * TXNS + 1))


@pytest.fixture(autouse=True)
def _dead_pid_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """pid 1 of the fake host counts as dead, any other pid as alive (for the shortcut)."""
    monkeypatch.setattr(Holder, "is_dead_here",
                        lambda self, here: self.host == here.host and self.pid == 1
                        and here.pid != 1)


def test_a_crash_before_every_operation_loses_and_duplicates_nothing() -> None:
    total = _ops_of_a_full_run()
    assert total > 20
    for at in range(total + 1):
        store = MemoryStore()
        acknowledged = _crash_run(store, at)
        _recover_and_finish(store, acknowledged)


def test_a_crash_during_the_recovery_too() -> None:
    """Killed at every operation of the first run, then the start after it killed at every
    operation of its own: the third start still finds a consistent lake."""
    total = _ops_of_a_full_run()
    for at in range(0, total + 1, 3):
        base = MemoryStore()
        acknowledged = _crash_run(base, at)
        objects = base.snapshot()
        recovering = MemoryStore.restored(objects)
        probe = writer(recovering, pid=2)
        probe._lease._holder = Holder("host", "boot", 1)  # itself dies: pid 1 again
        probe.open()
        recovery_ops = len(recovering.operations)
        for again in range(recovery_ops):
            store = MemoryStore.restored(objects)
            second = writer(store, pid=1)
            store.crash_after(again)
            try:
                second.open()
            except StoreCrashed:
                pass
            store.heal()
            _recover_and_finish(store, acknowledged)


def test_an_ambiguous_record_create_is_read_back() -> None:
    """The create happened, but its answer was lost (a timeout): the retry finds the record and
    knows it is its own."""
    store = MemoryStore()
    committer = writer(store)
    committer.open()
    real = store.put_if_absent
    calls = []

    def lost_answer(key: str, data: bytes) -> str | None:
        result = real(key, data)
        if key == record_key(2) and not calls:
            calls.append(key)
            from sinks.errors import StoreUnavailable
            raise StoreUnavailable("PUT", store.url(key), "timed out")
        return result

    store.put_if_absent = lost_answer  # type: ignore[method-assign]
    record = committer.commit(["a-w1.parquet"], [], {"seq": 1})
    assert record.number == 2 and calls == [record_key(2)]
    assert committer.log.read(2) == Record(2, committer._lease.token, ("a-w1.parquet",), (),
                                           {"seq": 1})


def test_a_writer_paused_past_its_lease_is_fenced_and_lands_nothing() -> None:
    store = MemoryStore()
    clock = FakeClock()
    old = writer(store, clock, pid=7)
    old.open()
    land(old, store, 1)
    # the old writer pauses (no renewals); a new one watches the lease for its whole duration
    new = writer(store, clock, pid=8)
    assert new.open() == {"seq": TXNS}
    assert clock.now >= 1000.0 + DURATION
    # the old one wakes: its PUTs land at its own epoch's keys, its record number is taken
    with pytest.raises(LakeFenced, match=r"its commit record mem://lake/_log/\d+\.json exists"):
        land(old, store, 2)
    with pytest.raises(LeaseLost):
        old._lease.renew()
    # once its renewal has found the lease taken, that is what the next commit says
    with pytest.raises(LakeFenced, match="its lease mem://lake/_lease.json replaced this "
                                         "writer's, so this writer stops without committing"):
        land(old, store, 3)
    assert committed_seq(store) == TXNS
    land(new, store, 2)
    new.close()
    assert committed_seq(store) == 2 * TXNS
    # the fenced writer's PUTs are orphans until the next start, which removes them
    assert sorted(landed(store)) != list(range(1, 2 * TXNS + 1))
    third = writer(store, clock, pid=9)
    third.open()
    assert landed(store) == list(range(1, 2 * TXNS + 1))
    assert third.swept and all(epoch_of(key) == old.epoch for key in third.swept)


def test_the_fencing_race_between_the_data_and_the_record() -> None:
    """A takeover lands between the old writer's data PUTs and its record: the record's create
    fails, the takeover's sweep ran before or runs after, and no record names the old data."""
    store = MemoryStore()
    clock = FakeClock()
    old = writer(store, clock, pid=7)
    old.open()
    raced = []

    def take_over(operation: str, key: str) -> None:
        if operation == "put_if_absent" and key == record_key(old.epoch + 1) and not raced:
            raced.append(key)
            store.before(None)
            writer(store, clock, pid=8).open()

    store.before(take_over)
    with pytest.raises(LakeFenced):
        land(old, store, 1)
    assert raced and committed_seq(store) == 0
    assert writer(store, clock, pid=9).open() is None
    assert landed(store) == []


def test_a_second_writer_refuses_while_the_first_renews(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="binlake.sinks.objectstore")
    store = MemoryStore()
    clock = FakeClock()
    first = writer(store, clock, pid=7)
    first.open()
    second = writer(store, clock, pid=8)
    renewals = []

    def sleep(seconds: float) -> None:  # the holder renews while the second one watches
        clock.sleep(seconds)
        if clock.now >= 1000.0 + DURATION / 3 * (len(renewals) + 1):
            renewals.append(clock.now)
            first._lease.renew()

    second._lease._sleep = sleep
    with pytest.raises(LakeLeased, match="pid 7 on host") as refused:
        second.open()
    assert "stop the other `binlake run`" in refused.value.fix
    assert len(renewals) == 1 and clock.now < 1000.0 + DURATION
    # the wait is not silent: the log says whose lease is watched, and for how long
    assert [r.getMessage() for r in caplog.records if "watching its lease" in r.getMessage()] == [
        f"object store: the lake is held by pid 7 on host; watching its lease "
        f"{store.url(LEASE)} for up to {DURATION:g} s: taken over if it is not renewed, "
        "refused if it is"]
    assert committed_seq(store) == 0 and CommitLog(store).newest_number() == first.epoch
    land(first, store, 1)  # the first writer is untouched


def test_a_writer_paused_for_less_than_its_lease_keeps_the_lake() -> None:
    """SIGSTOP for less than the lease, then SIGCONT: the holder's next renewal comes within
    the taker's watch, and the taker refuses."""
    store = MemoryStore()
    clock = FakeClock()
    first = writer(store, clock, pid=7)
    first.open()
    second = writer(store, clock, pid=8)

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 1000.0 + DURATION * 0.9:  # resumed before the lease ran out
            first._lease.renew()

    second._lease._sleep = sleep
    with pytest.raises(LakeLeased):
        second.open()
    land(first, store, 1)
    assert committed_seq(store) == TXNS


def test_a_released_lease_and_a_dead_local_holder_are_taken_at_once() -> None:
    store = MemoryStore()
    clock = FakeClock()
    first = writer(store, clock, pid=7)
    first.open()
    first.close()
    second = writer(store, clock, pid=8)
    second.open()
    assert clock.now == 1000.0  # no wait: the lease was released
    other = MemoryStore()
    writer(other, clock, pid=1).open()  # pid 1 of this host counts as dead here
    writer(other, clock, pid=3).open()
    assert clock.now == 1000.0


def test_two_writers_starting_on_a_new_lake_one_wins() -> None:
    store = MemoryStore()
    clock = FakeClock()
    first = writer(store, clock, pid=7)
    second = writer(store, clock, pid=8)
    started = []

    def race(operation: str, key: str) -> None:
        if operation == "put_if_absent" and key == LEASE and not started:
            started.append(key)
            store.before(None)
            first.open()  # the first wins the lease's create just before the second's

    def sleep(seconds: float) -> None:  # the winner renews while the loser watches
        clock.sleep(seconds)
        first._lease.renew()

    second._lease._sleep = sleep
    store.before(race)
    with pytest.raises(LakeLeased):
        second.open()
    assert first.epoch == 1


def test_a_compaction_taking_the_writers_number_is_not_fencing() -> None:
    """A compaction's record (created without the lease) takes the number the writer was about
    to use: the writer commits after it; a takeover after a compaction still fences it."""
    store = MemoryStore()
    clock = FakeClock()
    first = writer(store, clock, pid=7)
    first.open()
    land(first, store, 1)
    log = CommitLog(store)
    for number in (first.epoch + 2, first.epoch + 3):  # two compactions in a row
        assert log.create(Record(number, "compact-x", checkpoint={"seq": TXNS},
                                 data_change=False, compaction=True, time=1.0))
    assert log.read(first.epoch + 2) == Record(first.epoch + 2, "compact-x",
                                               checkpoint={"seq": TXNS}, data_change=False,
                                               compaction=True, time=1.0)
    land(first, store, 2)
    assert CommitLog(store).newest_number() == first.epoch + 4
    assert committed_seq(store) == 2 * TXNS
    assert log.create(Record(first.epoch + 5, "compact-y", checkpoint={"seq": 2 * TXNS},
                             data_change=False, compaction=True, time=2.0))
    first._lease.release()
    second = writer(store, clock, pid=8)
    assert second.open() == {"seq": 2 * TXNS}  # its takeover record follows the compaction
    with pytest.raises(LakeFenced):
        land(first, store, 3)
    land(second, store, 3)
    assert committed_seq(store) == 3 * TXNS
