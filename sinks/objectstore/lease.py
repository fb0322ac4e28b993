"""``Lease``: one writer per lake on object storage, by a lease object renewed by conditional writes.

``<prefix>/_lease.json`` holds who writes the lake: a random token, a renewal count, the
holder's description (host, boot, pid: for messages and one shortcut below), the lease's
duration, and whether it was released by a clean stop. Every change is a conditional write, so
of two processes acting on the same state exactly one succeeds:

* **Take a free lake.** No lease object: create it (``If-None-Match: *``). A released lease:
  replace it (``If-Match`` its ETag).
* **Renew.** The holder replaces its lease every third of the duration (``If-Match`` the ETag
  of its last write; the count makes every write's bytes, hence ETag, unique).
* **Refuse a live holder.** A lease held by another writer is watched for its duration (the
  holder's, read from the object) on *this* process's monotonic clock, from the moment its
  current ETag was first seen. If it changes, its holder is alive: :class:`~sinks.errors.
  LakeLeased`. A second daemon started beside a running one, or beside one paused (SIGSTOP)
  for less than the duration, refuses this way.
* **Take over a dead holder.** A lease unchanged for the whole duration is replaced
  (``If-Match`` the ETag watched): its holder stopped renewing — it died, or is paused or cut
  off for longer than the lease. No clock of another machine is compared with this one's. One
  shortcut: a lease whose holder names this host and boot and a pid that no longer runs is
  taken over at once (a restart after ``kill -9``).

**Only liveness rests on the lease; safety never does.** Clocks drift, processes pause, and a
holder paused past its lease wakes believing it still holds it. What keeps such a writer from
committing is the commit log's contiguous numbering (``sinks/objectstore/commit.py``): the
taker's first act is to create the next log record, so the old holder's next record number is
taken and its conditional create fails; it stops (:class:`~sinks.errors.LakeFenced`) without
committing, whatever the clocks say. The lease only spares two live writers from fencing each
other in turn.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import LakeLeased, ObjectMissing, SinkError, StoreUnavailable
from .store import ObjectStore

__all__ = ["LEASE", "Holder", "Lease", "LeaseLost", "LeaseSeen", "read_lease"]

log = logging.getLogger("binlake.sinks.objectstore")

#: The lease object's key under the lake's prefix.
LEASE = "_lease.json"


class LeaseLost(SinkError):
    """This writer's lease was taken over (its renewal found another writer's lease)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lease: for messages, and to tell a dead process on this host."""

    host: str
    boot: str
    pid: int

    @classmethod
    def this_process(cls) -> Holder:
        try:
            with open("/proc/sys/kernel/random/boot_id") as file:
                boot = file.read().strip()
        except OSError:
            boot = ""
        return cls(os.uname().nodename, boot, os.getpid())

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def is_dead_here(self, here: Holder) -> bool:
        """Whether this holder is a process of ``here``'s host and boot that no longer runs."""
        if not self.boot or (self.host, self.boot) != (here.host, here.boot) or self.pid == here.pid:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False


@dataclass(frozen=True, slots=True)
class _State:
    token: str
    count: int
    holder: Holder
    duration_s: float
    released: bool

    def to_bytes(self) -> bytes:
        return json.dumps({
            "token": self.token, "count": self.count, "duration_s": self.duration_s,
            "released": self.released,
            "holder": {"host": self.holder.host, "boot": self.holder.boot,
                       "pid": self.holder.pid},
        }, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> _State:
        doc: dict[str, Any] = json.loads(data)
        holder = doc.get("holder") or {}
        return cls(str(doc["token"]), int(doc["count"]),
                   Holder(str(holder.get("host", "?")), str(holder.get("boot", "")),
                          int(holder.get("pid", 0))),
                   float(doc["duration_s"]), bool(doc.get("released", False)))


@dataclass(frozen=True, slots=True)
class LeaseSeen:
    """The lease as another process reads it (``binlake snapshot`` asking whether a daemon
    holds the lake): its holder, whether it was released, how long it lasts, and the ETag
    that changes at every renewal (unchanged for ``duration_s``: the holder stopped)."""

    holder: Holder
    released: bool
    duration_s: float
    etag: str


def read_lease(store: ObjectStore) -> LeaseSeen | None:
    """The lake's lease as it is now; None if no writer ever took the lake."""
    try:
        fetched = store.get(LEASE)
    except ObjectMissing:
        return None
    state = _State.from_bytes(fetched.data)
    return LeaseSeen(state.holder, state.released, state.duration_s, fetched.etag)


class Lease:
    """See the module docstring. ``clock`` and ``sleep`` are the monotonic clock and the wait
    used to watch another holder (tests drive them); ``lake`` names the lake in messages."""

    def __init__(self, store: ObjectStore, lake: str, *, duration_s: float = 30.0,
                 holder: Holder | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._store = store
        self._lake = lake
        self._duration = duration_s
        self._holder = holder or Holder.this_process()
        self._clock = clock
        self._sleep = sleep
        self._token = secrets.token_hex(16)
        self._count = 0
        self._etag: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: LeaseLost | None = None

    @property
    def held(self) -> bool:
        return self._etag is not None and self.lost is None

    @property
    def duration_s(self) -> float:
        """Seconds this writer's lease lasts unrenewed (``lake.s3.lease_duration``)."""
        return self._duration

    @property
    def token(self) -> str:
        """This writer's token (unique per :class:`Lease`): its commit records carry it."""
        return self._token

    # --- taking ---------------------------------------------------------------------------------

    def acquire(self) -> None:
        """Hold the lease, or raise :class:`~sinks.errors.LakeLeased` (module docstring)."""
        watched: tuple[str, float] | None = None  # (ETag, when first seen on our clock)
        while True:
            info = self._store.head(LEASE)
            if info is None:
                if self._take(None):
                    return
                continue
            try:
                fetched = self._store.get(LEASE)
            except ObjectMissing:
                continue
            state = _State.from_bytes(fetched.data)
            now = self._clock()
            if state.released or state.holder.is_dead_here(self._holder):
                if self._take(fetched.etag):
                    return
                continue
            if watched is None or watched[0] != fetched.etag:
                if watched is not None:  # renewed while watched: its holder is alive
                    raise LakeLeased(self._lake, self._store.url(LEASE),
                                     state.holder.describe(), state.duration_s)
                log.info("object store: the lake is held by %s; watching its lease %s for up "
                         "to %g s: taken over if it is not renewed, refused if it is",
                         state.holder.describe(), self._store.url(LEASE), state.duration_s)
                watched = (fetched.etag, now)
            elif now - watched[1] >= state.duration_s:
                if self._take(fetched.etag):
                    return
                watched = None
                continue
            self._sleep(min(state.duration_s / 10, max(0.0, watched[1] + state.duration_s - now)))

    def _take(self, etag: str | None) -> bool:
        """Write a new lease of ours over ``etag`` (None: where there is none)."""
        self._count += 1
        data = self._state(released=False).to_bytes()
        new = (self._store.put_if_absent(LEASE, data) if etag is None
               else self._store.put_if_match(LEASE, data, etag))
        if new is None:
            return False
        self._etag = new
        return True

    def _state(self, *, released: bool) -> _State:
        return _State(self._token, self._count, self._holder, self._duration, released)

    # --- holding --------------------------------------------------------------------------------

    def renew(self) -> None:
        """Replace the lease with a newer one of ours; :class:`LeaseLost` if another writer's
        is there. A renewal whose answer was lost (a timeout after the store acted) is found by
        reading the lease back: it holds exactly the bytes this writer tried to write."""
        with self._lock:
            if self.lost is not None:
                raise self.lost
            if self._etag is None:
                raise SinkError("renewing a lease never acquired")
            self._count += 1
            data = self._state(released=False).to_bytes()
            new = self._store.put_if_match(LEASE, data, self._etag)
            if new is None:
                try:
                    fetched = self._store.get(LEASE)
                except ObjectMissing:
                    fetched = None
                if fetched is None or fetched.data != data:
                    self.lost = LeaseLost(f"the lease {self._store.url(LEASE)} was taken over")
                    raise self.lost
                new = fetched.etag
            self._etag = new

    def start(self) -> None:
        """Renew every third of the duration on a thread of the lease's own, until
        :meth:`release`. A renewal that fails transiently is tried again next period; one that
        finds the lease taken over records :attr:`lost` and stops renewing."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="binlake-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._duration / 3):
            try:
                self.renew()
            except LeaseLost:
                return
            except StoreUnavailable:
                continue

    def release(self, *, write: bool = True) -> None:
        """Stop renewing and mark the lease released (a clean stop): the next writer takes it
        at once. Nothing if it was lost or never held. Without ``write`` (the store is known
        to be unreachable: nothing is written, and a renewal in flight, on its daemon thread,
        is not waited for), or if that write fails transiently, the lease is left to run out:
        a next writer takes it over after its duration (on this host, at once: its pid is
        dead)."""
        self._stop.set()
        if not write:  # a renewal in flight is not waited for; none starts after this
            self._thread = None
            return
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._etag is None or self.lost is not None:
                return
            etag, self._etag = self._etag, None
            self._count += 1
            try:
                self._store.put_if_match(LEASE, self._state(released=True).to_bytes(), etag)
            except StoreUnavailable as exc:
                log.warning("object store: could not mark the lease %s released (%s): it runs "
                            "out in %g s", self._store.url(LEASE), exc, self._duration)
