"""An unreachable object store and a stopping daemon: the store's transient failures are retried
for as long as it takes, until the daemon says to give up (its stop budget spent). Then the
call raises :class:`~sinks.errors.StoreAbandoned`, a wait in progress ends at once, the flush
that made the call commits nothing, and a next writer lands its transactions once.

Server-free, against the in-memory store failing every operation with ``StoreUnavailable``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sinks.errors import StoreAbandoned, StoreUnavailable
from sinks.objectstore.commit import CommitLog, Retry
from sinks.objectstore.lease import LEASE, Holder, Lease
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.mirror import ObjectLake
from sinks.parquet import ParquetSink
from tests.unit.test_objectstore_commit import FakeClock
from tests.unit.test_objectstore_sink import URL, run, store_rows
from tests.unit.test_sink_crash import SMALL, lake_rows, workload
from tests.unit.test_sink_crash import land as land_on_disk

DOWN = StoreUnavailable("PUT", "mem://lake/x", "EndpointConnectionError")


class _Sleeps:
    """A fake wait that counts the retries and, after ``until`` of them, sets ``event`` (the
    daemon's stop budget running out while the store is down)."""

    def __init__(self, event: threading.Event | None = None, until: int = 0) -> None:
        self.delays: list[float] = []
        self.event = event
        self.until = until

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.event is not None and len(self.delays) == self.until:
            self.event.set()


class _Enough(Exception):
    """Ends a retry loop the test bounds."""


def _down() -> None:
    raise DOWN


def test_without_the_signal_a_failing_call_is_retried_for_as_long_as_it_takes() -> None:
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 40:
            raise _Enough

    retry = Retry(sleep=sleep, give_up=threading.Event())  # the signal exists, never set
    with pytest.raises(_Enough):
        retry.call("uploading x", _down)
    assert delays[:7] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0]
    assert delays[7:] == [10.0] * 33


def test_once_the_signal_is_set_the_failing_call_is_given_up() -> None:
    event = threading.Event()
    sleeps = _Sleeps(event, until=3)
    with pytest.raises(StoreAbandoned) as raised:
        Retry(sleep=sleeps, give_up=event).call("uploading x", _down)
    assert sleeps.delays == [0.2, 0.4, 0.8]  # no attempt after the signal
    assert raised.value.last is DOWN and raised.value.what == "uploading x"
    assert not isinstance(raised.value, StoreUnavailable)  # nothing retries it
    assert str(raised.value) == ("PUT mem://lake/x: EndpointConnectionError (the object store "
                                 "was unreachable while stopping: uploading x was given up "
                                 "once the stop budget was spent)")
    # set before the call: its first failure is given up, without a wait
    with pytest.raises(StoreAbandoned):
        Retry(sleep=_Sleeps(), give_up=event).call("uploading x", _down)
    # a call that succeeds is never given up
    assert Retry(give_up=event).call("reading x", lambda: 7) == 7


def test_the_signal_ends_a_wait_in_progress_at_once() -> None:
    """A backoff of an hour: the call returns as soon as the signal is set, not after it."""
    event = threading.Event()
    waiting = threading.Event()
    outcome: list[BaseException] = []

    def attempt() -> None:
        waiting.set()
        raise DOWN

    def call() -> None:
        try:
            Retry(first=3600.0, cap=3600.0, give_up=event).call("uploading x", attempt)
        except BaseException as exc:  # noqa: BLE001 - what the thread ended with, checked below
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    assert waiting.wait(30)
    event.set()
    thread.join(30)
    assert not thread.is_alive()
    assert [type(exc) for exc in outcome] == [StoreAbandoned]


def test_a_flush_given_up_commits_nothing_and_the_next_writer_lands_it_once(
        tmp_path: Any) -> None:
    transactions = workload(transactions=8)
    disk = str(tmp_path / "disk")
    land_on_disk(disk, transactions)
    store = MemoryStore()
    clock = FakeClock()
    give_up = threading.Event()
    sleeps = _Sleeps(give_up, until=5)
    lease = Lease(store, URL, duration_s=30.0, holder=Holder("host", "boot", 1),
                  clock=clock, sleep=clock.sleep)
    lease.start = lambda: None  # type: ignore[method-assign]
    spool = str(tmp_path / "spool")
    sink = ParquetSink(spool, SMALL, mirror=ObjectLake(store, URL, spool, lease=lease,
                                                       retry=Retry(sleep=sleeps,
                                                                   give_up=give_up)))
    sink.open()
    for items in transactions[:3]:
        for item in items:
            sink.handle(item)
    sink.flush()
    records = list(CommitLog(store).records())
    lease_before = store.get(LEASE).data
    for items in transactions[3:]:
        for item in items:
            sink.handle(item)
    store.reject("*", "", DOWN)  # the store unreachable from here on
    with pytest.raises(StoreAbandoned):
        sink.flush()
    assert len(sleeps.delays) == 5  # retried until the signal, then given up
    sink.close()  # no second flush; the lease is not written (the store is down)
    store.heal()
    assert list(CommitLog(store).records()) == records  # nothing of the flush committed
    assert store.get(LEASE).data == lease_before  # left to run out
    # the next writer (the lease watched out on its clock) lands the rest, each row once
    clock2 = FakeClock()
    successor = ParquetSink(spool, SMALL, mirror=ObjectLake(
        store, URL, spool, retry=Retry(sleep=clock2.sleep),
        lease=Lease(store, URL, duration_s=30.0, holder=Holder("host", "boot", 2),
                    clock=clock2, sleep=clock2.sleep)))
    successor._workspace.mirror.lease.start = lambda: None  # type: ignore[union-attr]
    run(successor, transactions)
    assert store_rows(store) == lake_rows(disk)


def test_a_store_given_up_exits_1_with_its_fix() -> None:
    """Exit 1, not 4: the store was unreachable (what a retry cures, had the daemon not been
    stopping), nothing about the lake needs fixing."""
    from replica.cli import exit_code_for, hint_for

    abandoned = StoreAbandoned("uploading x", DOWN)
    assert exit_code_for(abandoned) == 1
    assert hint_for(abandoned) == abandoned.fix
    assert abandoned.fix.startswith("nothing is lost or landed twice: the next start resumes "
                                    "after the lake's last commit record")
