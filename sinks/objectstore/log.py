"""The commit log's records on object storage: their keys, their format, reading and creating them.

``commit.py`` says what the log is and how a writer commits through it; this module is the
part every reader of the log shares with the writer — record keys (``_log/<n>.json``, ``n``
zero-padded to 20 digits), the :class:`Record` format, the epoch tag of a writer's objects,
:class:`CommitLog` (a record read, created only if absent, the newest number found), and the
backoff for a store's transient failures.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ObjectMissing, StoreAbandoned, StoreUnavailable
from .store import ObjectStore

__all__ = ["HINT", "LOG_DIR", "CommitLog", "Record", "Retry", "epoch_of", "layout_name",
           "live_objects", "record_key"]

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
    permanent refusal is :class:`~sinks.errors.StoreRefused`, never retried) — unless
    ``give_up`` is set: then a failed call raises :class:`~sinks.errors.StoreAbandoned` instead
    of waiting again, and a wait in progress ends at once. The daemon sets it once it is
    stopping and its stop budget is spent (an unreachable store must not keep it alive); the
    sink never sets it. ``sleep`` (tests: a fake clock) replaces the wait."""

    first: float = 0.2
    cap: float = 10.0
    sleep: Callable[[float], None] | None = None
    give_up: threading.Event | None = None

    def call(self, what: str, operation: Callable[[], _T]) -> _T:
        delay = self.first
        while True:
            try:
                return operation()
            except StoreUnavailable as exc:
                self.wait_after(what, exc, delay)
                delay = min(self.cap, delay * 2)

    def wait_after(self, what: str, failure: StoreUnavailable, delay: float) -> None:
        """``failure`` of ``what`` is retried in ``delay`` seconds: wait that long, or raise
        :class:`~sinks.errors.StoreAbandoned` if told to give up (before or while waiting)."""
        self._check(what, failure)
        log.warning("object store: %s failed (%s); retrying in %.1f s", what, failure, delay)
        if self.sleep is not None:
            self.sleep(delay)
        elif self.give_up is not None:
            self.give_up.wait(delay)
        else:
            time.sleep(delay)
        self._check(what, failure)

    @property
    def given_up(self) -> bool:
        """Told to give up: the store calls retried here fail at once."""
        return self.give_up is not None and self.give_up.is_set()

    def _check(self, what: str, failure: StoreUnavailable) -> None:
        if self.given_up:
            raise StoreAbandoned(what, failure) from failure


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
                self._retry.wait_after(f"creating {key} (then reading it back)", exc,
                                       self._retry.first)
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
