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
   crash before leaves objects the next start deletes, and an older hint;
4. every ``snapshot_every`` records, a *log snapshot* of the lake as of ``n`` is written
   (``logstate.py``): only an optimisation for whoever reads the log next.

At start (:meth:`ObjectCommitter.open`):

1. the lease is taken (``lease.py``: one writer, no ``flock``);
2. the lake as of the newest record is read (``logstate.read_state``): the newest usable log
   snapshot, then the records after it up to the first absent number — never the whole log;
3. the writer creates the next record, its *takeover record* (it adds nothing, carries the
   newest checkpoint on, and its number becomes the writer's epoch). From here on any earlier
   writer is fenced: its next number is taken;
4. the lake is listed (outside ``_log/``) and every object carrying an epoch tag that no live
   entry names — added and not since removed — and whose epoch is older than this writer's
   is deleted: what interrupted commits and fenced writers left. Objects without an epoch tag
   (``_log/``, the lease, snapshot requests) are not the protocol's and are left alone; the
   multipart uploads such writers left unfinished (killed while streaming a file: no object,
   but stored parts) are aborted by the same rule;
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

import logging
from collections.abc import Iterable
from typing import Any

from ..errors import LakeFenced, StoreUnavailable
from .lease import LEASE, Lease
from .log import (
    HINT,
    LOG_DIR,
    CommitLog,
    Record,
    Retry,
    epoch_of,
    layout_name,
    live_objects,
    record_key,
)
from .logstate import LogState, lake_objects, read_state, write_snapshot
from .store import ObjectStore, Upload

__all__ = ["HINT", "LOG_DIR", "CommitLog", "ObjectCommitter", "Record", "Retry", "epoch_of",
           "layout_name", "live_objects", "record_key"]

log = logging.getLogger("binlake.sinks.objectstore")


class ObjectCommitter:
    """The writer's side of the protocol (module docstring): :meth:`open`, then
    :meth:`commit` per flush, then :meth:`close`. ``lake`` names the lake in messages."""

    def __init__(self, store: ObjectStore, lake: str, lease: Lease,
                 retry: Retry | None = None, *, snapshot_every: int = 100) -> None:
        self._store = store
        self._lake = lake
        self._lease = lease
        self._retry = retry or Retry()
        self._snapshot_every = snapshot_every
        self.log = CommitLog(store, self._retry)
        self._last = 0
        self.epoch = 0
        self.checkpoint: dict[str, Any] | None = None
        self.swept: list[str] = []
        self.aborted: list[Upload] = []  # unfinished uploads of older epochs the start aborted
        #: The lake as of this writer's last record (``logstate.py``), kept up to date by every
        #: record it creates or steps over; its snapshots are written from it.
        self.state = LogState()

    @property
    def live(self) -> set[str]:
        """The objects the log keeps, as of this writer's last record."""
        return self.state.live

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
            self.state = read_state(self._store, retry=self._retry)
            newest = self.state.number
            self.checkpoint = self.state.checkpoint
            takeover = Record(newest + 1, self._lease.token, checkpoint=self.checkpoint,
                              data_change=False, takeover=True)
            if not self.log.create(takeover):
                raise LakeFenced(self._lake, self._store.url(record_key(newest + 1)))
            self._last = self.epoch = newest + 1
            self.state.apply(takeover)
            self.log.set_hint(self._last)
            self._sweep()
        except BaseException:
            self._lease.release()
            raise
        return self.checkpoint

    def _sweep(self) -> None:
        live = self.state.kept()
        doomed = []
        for info in lake_objects(self._store, self._retry):
            epoch = epoch_of(info.key)
            if (epoch is not None and epoch < self.epoch and info.key not in live
                    and not info.key.startswith(LOG_DIR) and info.key != LEASE):
                doomed.append(info.key)
        if doomed:
            log.info("object store: removing %d objects no commit names (left by an "
                     "interrupted commit)", len(doomed))
            self._retry.call("removing orphaned objects", lambda: self._store.delete_many(doomed))
        self.swept = doomed
        # A writer killed while streaming a file leaves its multipart upload unfinished: no
        # object, but parts the store keeps (and bills) until the upload is aborted.
        unfinished = [upload for upload in self._retry.call(
                          "listing unfinished uploads", lambda: list(self._store.uploads("")))
                      if (epoch := epoch_of(upload.key)) is not None and epoch < self.epoch]
        if unfinished:
            log.info("object store: aborting %d multipart uploads an interrupted commit left "
                     "unfinished", len(unfinished))
            for upload in unfinished:
                self._abort(upload)
        self.aborted = unfinished

    def _abort(self, upload: Upload) -> None:
        self._retry.call("aborting an unfinished upload", lambda: self._store.abort_upload(upload))

    def commit(self, adds: Iterable[str], removes: Iterable[str],
               checkpoint: dict[str, Any], *, data_change: bool = True,
               delete_removed: bool = True) -> Record:
        """Steps 2-3 for objects already PUT at their final keys (step 1)."""
        if self._lease.lost is not None:
            raise LakeFenced(self._lake, self._store.url(LEASE), lease=True)
        adds, removes = tuple(adds), tuple(removes)
        number = self._last + 1
        while True:
            record = Record(number, self._lease.token, adds, removes, checkpoint, data_change)
            if self.log.create(record):
                break
            number = self._after_compactions(number)
        self._last = record.number
        self.checkpoint = checkpoint
        self.state.apply(record)
        if record.removes and delete_removed:
            try:
                self._store.delete_many(record.removes)
            except StoreUnavailable as exc:
                log.warning("object store: objects a commit removed stay until the next start "
                            "(%s)", exc)
        self.log.set_hint(record.number)
        if self._snapshot_every > 0 and (
                record.number - max(self.state.snapshots, default=0) >= self._snapshot_every):
            write_snapshot(self._store, self.state, self._retry)
        return record

    def _after_compactions(self, number: int) -> int:
        """The first free number at or after ``number``, taken: if only compaction records
        (``compact.py``, which take numbers without the lease) sit there, this writer still
        holds the lake and commits after them; any other record — a takeover, another
        writer's — means this writer was fenced (:class:`~sinks.errors.LakeFenced`)."""
        while (found := self.log.read(number)) is not None:
            if not found.compaction:
                raise LakeFenced(self._lake, self._store.url(record_key(number)))
            self.state.apply(found)
            number += 1
        return number

    def close(self) -> None:
        """Release the lease (a clean stop: the next writer takes the lake at once) — unless a
        store call was given up (:class:`Retry`): the store is unreachable, the lease runs
        out by itself."""
        self._lease.release(write=not self._retry.given_up)
