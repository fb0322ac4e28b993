"""Commits on object storage: whole transactions and the checkpoint, with no rename.

On disk a commit is a manifest and renames (``sinks/parquet/commit.py``). An object store has
no rename, a PUT is visible at once, and a listing may show a half-finished commit's objects.
So the truth of a lake on object storage is a **commit log** of binlake's own,
``<prefix>/_log/<n>.json`` (``n`` zero-padded to 20 digits, so key order is number order):
each record names the objects it adds and removes and carries the checkpoint; the lake is
what the records say, and an object no record names is not part of it.

Why not Spark's ``_spark_metadata``: a directory holding it is read by Spark's batch and
streaming file sources through it, which is what a log is for, but its format is Spark's
internal one (versioned with Spark, compacted every ten batches into files Spark rewrites),
it names only additions a streaming source then treats as new (a compaction's new files would
be read as new rows, a second time), it carries no checkpoint, and it has no fencing. A log of
binlake's own says all of it, is read by binlake's readers (which then hand Spark the exact
files), and leaves the data objects at the layout's usual names.

A commit, step by step:

1. every object the commit adds — Parquet parts, schema files, DDL log entries, XA parts — is
   PUT at its **final** key (streamed as a multipart upload when large). Each key carries the
   writer's *epoch* (``-w<epoch>`` before the extension, :meth:`ObjectCommitter.fresh`), the
   number of the log record with which the writer took the lake, so no two writers ever PUT
   the same key, and a writer that lost the lake can never overwrite an object a record names;
2. the record ``_log/<n>.json``, ``n`` one past the writer's last record, is created with
   ``If-None-Match: *``, naming what it adds and removes and carrying the checkpoint.
   **The commit happened iff this record exists.** If the create finds the number taken by
   a compaction's record, the writer tries the next number (compactions change no data);
   taken by any other record, another writer has taken the lake: this one stops
   (:class:`~sinks.errors.LakeFenced`) without committing, and tries no later number;
3. the objects it removes are deleted — XA parts whose outcome came, which no reader reads
   (a commit that replaces data a reader of an older record may still read keeps them:
   ``delete_removed=False``) — and ``_log/_hint.json`` is set to ``n``; both best effort: a
   crash before leaves objects the next start deletes, and an older hint.

At start (:meth:`ObjectCommitter.open`):

1. the lease is taken (``lease.py``: one writer, no ``flock``);
2. the newest record is found: the hint's number, then HEAD of the numbers after it until one
   is absent (the hint only ever names a record that exists, so the walk is short, and a
   start never lists the whole log for its position);
3. the writer creates the next record, its *takeover record* (it adds nothing, carries the
   newest checkpoint on, and its number becomes the writer's epoch). From here on any earlier
   writer is fenced: its next number is taken;
4. the log is read whole and every object carrying an epoch tag that no live entry names —
   added and not since removed — and whose epoch is older than this writer's is deleted:
   what interrupted commits and fenced writers left. Objects without an epoch tag
   (``_log/``, the lease, snapshot requests) are not the protocol's and are left alone;
5. the checkpoint of the newest record is where the stream resumes.

Invariants, and why they hold:

* **Exactly once.** A transaction is in the lake iff a record naming its objects exists;
  the record also carries the checkpoint past it, so a restart resumes right after the last
  record's transactions: none twice, none lost.
* **One writer commits.** Records are created only with ``If-None-Match: *`` at one past the
  writer's own last number — or past the compaction records found there (a compaction,
  ``compact.py``, takes the next free number without the lease; it changes no data and
  carries the checkpoint on) — so two writers can never both extend the same log state; the
  takeover record fences every earlier writer before anything is deleted. **Safety never
  depends on the lease's timing**: a writer paused past its lease, whose clock is wrong, or
  whose renewals were lost, still cannot create a record. The lease decides only who *tries*
  (liveness).
* **Orphans are never live.** The sweep deletes only epoch-tagged objects of older epochs that
  no record names (objects a compaction replaced count as named: its retention deletes them),
  after the takeover record fenced their writers: no later record can name
  them. A newer writer's objects (a later epoch) are never touched.
* **Layout promise.** Once a daemon has started and stopped cleanly, the objects whose key has
  no component starting with ``_`` or ``.`` are exactly the committed data files: the start
  swept every older orphan, and this writer's own commits all completed. (A fenced writer's
  PUTs after that sweep are orphans until the next start.)
* **Transient failures.** A PUT, HEAD or GET that fails with
  :class:`~sinks.errors.StoreUnavailable` is retried with backoff; a record create whose answer
  was lost is read back: it is ours iff its writer token is.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import LakeFenced, ObjectMissing, StoreUnavailable
from .lease import LEASE, Lease
from .store import ObjectStore

__all__ = ["HINT", "LOG_DIR", "CommitLog", "ObjectCommitter", "Record", "epoch_of", "layout_name", "record_key"]

log = logging.getLogger("binlake.sinks.objectstore")

LOG_DIR = "_log/"
HINT = "_log/_hint.json"
_RECORD = re.compile(r"^_log/(\d{20})\.json$")
_EPOCH = re.compile(r"-w(\d+)(\.[A-Za-z0-9]+)$")
_T = TypeVar("_T")


def record_key(number: int) -> str:
    """The key of log record ``number``."""
    return f"{LOG_DIR}{number:020d}.json"


def epoch_of(key: str) -> int | None:
    """The epoch tag a committer put in ``key`` (None: not one of the protocol's objects)."""
    match = _EPOCH.search(key)
    return int(match.group(1)) if match else None


def layout_name(key: str) -> str:
    """``key`` without the writer's epoch tag (what :meth:`ObjectCommitter.fresh` put in): the
    object's name in the lake's layout, as a lake on disk names it."""
    epoch = epoch_of(key)
    if epoch is None:
        return key
    tag = f"-w{epoch}"
    stem, dot, suffix = key.rpartition(".")
    if dot and "/" not in suffix and stem.endswith(tag):
        return f"{stem[:-len(tag)]}.{suffix}"
    return key[:-len(tag)] if key.endswith(tag) else key


@dataclass(frozen=True, slots=True)
class Record:
    """One commit: the objects it adds and removes, and the checkpoint it makes current.
    ``data_change`` is False for a commit that changes no rows (a compaction's, or a takeover
    record), so a streaming reader skips its additions. ``compaction``: made by a compaction,
    which takes a number without the lease (a writer finding its number taken by one retries
    at the next); ``time`` (a compaction's, seconds since the epoch) dates its replaced
    objects for their retention."""

    number: int
    writer: str
    adds: tuple[str, ...] = ()
    removes: tuple[str, ...] = ()
    checkpoint: dict[str, Any] | None = None
    data_change: bool = True
    takeover: bool = False
    compaction: bool = False
    time: float | None = None

    def to_bytes(self) -> bytes:
        doc = {
            "format": 1, "number": self.number, "writer": self.writer, "adds": list(self.adds),
            "removes": list(self.removes), "checkpoint": self.checkpoint,
            "data_change": self.data_change, "takeover": self.takeover,
        }
        if self.compaction:
            doc |= {"compaction": True, "time": self.time}
        return (json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Record:
        doc: dict[str, Any] = json.loads(data)
        return cls(int(doc["number"]), str(doc["writer"]), tuple(doc.get("adds") or ()),
                   tuple(doc.get("removes") or ()), doc.get("checkpoint"),
                   bool(doc.get("data_change", True)), bool(doc.get("takeover", False)),
                   bool(doc.get("compaction", False)),
                   None if doc.get("time") is None else float(doc["time"]))


@dataclass(slots=True)
class Retry:
    """Backoff for :class:`~sinks.errors.StoreUnavailable`: ``first`` seconds, doubling up to
    ``cap``, for as long as it takes (the store coming back is what a daemon waits for; a
    permanent refusal is :class:`~sinks.errors.StoreRefused`, never retried)."""

    first: float = 0.2
    cap: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    def call(self, what: str, operation: Callable[[], _T]) -> _T:
        delay = self.first
        while True:
            try:
                return operation()
            except StoreUnavailable as exc:
                log.warning("object store: %s failed (%s); retrying in %.1f s", what, exc, delay)
                self.sleep(delay)
                delay = min(self.cap, delay * 2)


class CommitLog:
    """Reads and creates the log's records (module docstring)."""

    def __init__(self, store: ObjectStore, retry: Retry | None = None) -> None:
        self._store = store
        self._retry = retry or Retry()

    def read(self, number: int) -> Record | None:
        try:
            fetched = self._retry.call("reading a commit record",
                                       lambda: self._store.get(record_key(number)))
        except ObjectMissing:
            return None
        return Record.from_bytes(fetched.data)

    def newest_number(self) -> int:
        """The newest record's number (0: an empty log): the hint, then HEAD forward."""
        number = 0
        try:
            hint = self._retry.call("reading the log's hint", lambda: self._store.get(HINT))
            number = int(json.loads(hint.data)["number"])
        except (ObjectMissing, ValueError, KeyError, TypeError):
            number = 0
        if number and self._head(number) is None:  # a hint is never ahead; distrust a bad one
            number = 0
        while self._head(number + 1) is not None:
            number += 1
        return number

    def _head(self, number: int) -> object | None:
        return self._retry.call("looking up a commit record",
                                lambda: self._store.head(record_key(number)))

    def records(self) -> Iterator[Record]:
        """Every record, oldest first."""
        listing = self._retry.call("listing the log", lambda: list(self._store.list(LOG_DIR)))
        for info in listing:
            match = _RECORD.match(info.key)
            if match is not None:
                record = self.read(int(match.group(1)))
                if record is not None:
                    yield record

    def create(self, record: Record) -> bool:
        """Create ``record`` only if its number is free: True if it now exists as ours."""
        key, data = record_key(record.number), record.to_bytes()
        while True:
            try:
                created = self._store.put_if_absent(key, data)
            except StoreUnavailable as exc:
                log.warning("object store: creating %s failed (%s); reading it back", key, exc)
                self._retry.sleep(self._retry.first)
                found = self.read(record.number)  # did the lost attempt happen?
                if found is None:
                    continue
                return found.to_bytes() == data
            if created is not None:
                return True
            found = self.read(record.number)
            return found is not None and found.to_bytes() == data

    def set_hint(self, number: int) -> None:
        """Best effort: a failure leaves an older hint, which costs the next start a few HEADs."""
        try:
            self._store.put(HINT, json.dumps({"number": number}).encode())
        except StoreUnavailable as exc:
            log.warning("object store: could not update the log's hint (%s)", exc)


def live_objects(records: Iterable[Record]) -> set[str]:
    """The objects the records, in order, leave in the lake."""
    live: set[str] = set()
    for record in records:
        live.difference_update(record.removes)
        live.update(record.adds)
    return live


def kept_objects(records: Iterable[Record]) -> set[str]:
    """What a start's sweep must keep: the live objects, and those a compaction record
    replaced, which stay for readers until the compaction's grace period ends
    (``compact.py`` deletes them then)."""
    records = list(records)
    return live_objects(records) | {key for record in records if record.compaction
                                    for key in record.removes}


class ObjectCommitter:
    """The writer's side of the protocol (module docstring): :meth:`open`, then
    :meth:`commit` per flush, then :meth:`close`. ``lake`` names the lake in messages."""

    def __init__(self, store: ObjectStore, lake: str, lease: Lease,
                 retry: Retry | None = None) -> None:
        self._store = store
        self._lake = lake
        self._lease = lease
        self._retry = retry or Retry()
        self.log = CommitLog(store, self._retry)
        self._last = 0
        self.epoch = 0
        self.checkpoint: dict[str, Any] | None = None
        self.swept: list[str] = []
        #: The objects the log keeps, as the start read it (:meth:`open`).
        self.live: set[str] = set()

    def fresh(self, key: str) -> str:
        """``key`` with this writer's epoch tag: where an object this writer adds is PUT."""
        stem, dot, suffix = key.rpartition(".")
        if not dot or "/" in suffix:
            return f"{key}-w{self.epoch}"
        return f"{stem}-w{self.epoch}.{suffix}"

    def open(self) -> dict[str, Any] | None:
        """Start steps 1-5: take the lake, fence earlier writers, sweep, and return the
        checkpoint document to resume from (None: a new lake)."""
        self._lease.acquire()
        self._lease.start()
        try:
            newest = self.log.newest_number()
            previous = self.log.read(newest) if newest else None
            self.checkpoint = previous.checkpoint if previous is not None else None
            takeover = Record(newest + 1, self._lease.token, checkpoint=self.checkpoint,
                              data_change=False, takeover=True)
            if not self.log.create(takeover):
                raise LakeFenced(self._lake, self._store.url(record_key(newest + 1)))
            self._last = self.epoch = newest + 1
            self.log.set_hint(self._last)
            self._sweep()
        except BaseException:
            self._lease.release()
            raise
        return self.checkpoint

    def _sweep(self) -> None:
        records = list(self.log.records())
        self.live = live_objects(records)
        live = kept_objects(records)
        listing = self._retry.call("listing the lake", lambda: list(self._store.list("")))
        doomed = []
        for info in listing:
            epoch = epoch_of(info.key)
            if (epoch is not None and epoch < self.epoch and info.key not in live
                    and not info.key.startswith(LOG_DIR) and info.key != LEASE):
                doomed.append(info.key)
        if doomed:
            log.info("object store: removing %d objects no commit names (left by an "
                     "interrupted commit)", len(doomed))
            self._retry.call("removing orphaned objects", lambda: self._store.delete_many(doomed))
        self.swept = doomed

    def commit(self, adds: Iterable[str], removes: Iterable[str],
               checkpoint: dict[str, Any], *, data_change: bool = True,
               delete_removed: bool = True) -> Record:
        """Steps 2-3 for objects already PUT at their final keys (step 1)."""
        if self._lease.lost is not None:
            raise LakeFenced(self._lake, self._store.url(LEASE))
        adds, removes = tuple(adds), tuple(removes)
        number = self._last + 1
        while True:
            record = Record(number, self._lease.token, adds, removes, checkpoint, data_change)
            if self.log.create(record):
                break
            number = self._after_compactions(number)
        self._last = record.number
        self.checkpoint = checkpoint
        if record.removes and delete_removed:
            try:
                self._store.delete_many(record.removes)
            except StoreUnavailable as exc:
                log.warning("object store: objects a commit removed stay until the next start "
                            "(%s)", exc)
        self.log.set_hint(record.number)
        return record

    def _after_compactions(self, number: int) -> int:
        """The first free number at or after ``number``, taken: if only compaction records
        (``compact.py``, which take numbers without the lease) sit there, this writer still
        holds the lake and commits after them; any other record — a takeover, another
        writer's — means this writer was fenced (:class:`~sinks.errors.LakeFenced`)."""
        while (found := self.log.read(number)) is not None:
            if not found.compaction:
                raise LakeFenced(self._lake, self._store.url(record_key(number)))
            number += 1
        return number

    def close(self) -> None:
        """Release the lease (a clean stop: the next writer takes the lake at once)."""
        self._lease.release()
