"""The lake as of a log record, and the log's snapshots: what reading records ``1..n`` gives, kept in one object.

A lake on object storage is its commit log (``commit.py``): records ``_log/<n>.json``, numbered
without gaps. Reading it whole costs a GET per record, and a daemon committing every second
writes 86,400 records a day, so every start and every reader would pay for the lake's age. A
**log snapshot** ``_log/<n>.snapshot.json`` holds the :class:`LogState` as of record ``n`` —
the live objects (and their layout names), the objects compaction records replaced whose
deletion has not been recorded yet (``_compact_purged.json``) with those records' numbers and
times, and record ``n``'s checkpoint — so a reader reads the newest snapshot and then only the
records after it.

The writer (``ObjectCommitter``, the lease holder) writes one after each record that is at
least ``log_snapshot_records`` past the previous snapshot:

1. record ``n`` exists first (its create returned): a snapshot only ever describes records
   that exist, and it is created with ``If-None-Match: *`` — immutable once written;
2. then the pointer ``_log/_snapshots.json`` is replaced with the newest snapshot numbers
   (the last :data:`KEEP`, newest last), and the snapshot that fell off the list is deleted.

**A snapshot is only an optimisation.** A reader trusts one only if it parses, says it is
the state as of the number it is named for, and that record exists; a snapshot that is
missing (deleted, never written: a crash between steps 1 and 2 leaves an unlisted snapshot,
which stays), corrupt, or ahead of the records is skipped — the next older one listed is
tried, and with none the records are read from the first. Whatever snapshot a reader uses,
or none, it gets the same state: the one records ``1..n`` give (:meth:`LogState.apply` is the
only place a record changes the state, whether a reader replays records or a writer keeps
its state up to date).

Records before a snapshot stay: their numbers are what makes a second writer's create fail
(``If-None-Match``), and they are small (a record names a flush's files); what grows with the
lake's age is their storage, not the requests a start or a reader makes.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import ObjectMissing, StoreUnavailable
from .log import LOG_DIR, CommitLog, Record, Retry, layout_name, record_key
from .store import ObjectInfo, ObjectStore

__all__ = ["KEEP", "POINTER", "PURGED", "LogState", "lake_objects", "read_state",
           "purged_number", "snapshot_key",
           "snapshot_numbers", "write_snapshot"]

log = logging.getLogger("binlake.sinks.objectstore")

#: The newest snapshots' numbers, newest last: ``{"numbers": [...]}``.
POINTER = f"{LOG_DIR}_snapshots.json"
#: How far the objects compaction records replaced have been deleted: ``{"number": n}``
#: (written by ``compact.py`` after the deletions).
PURGED = "_compact_purged.json"
#: How many snapshots the pointer lists (older ones are deleted).
KEEP = 4
_FORMAT = 1


def snapshot_key(number: int) -> str:
    """The key of the log snapshot as of record ``number``."""
    return f"{LOG_DIR}{number:020d}.snapshot.json"


@dataclass(slots=True)
class LogState:
    """The lake as of record :attr:`number` (module docstring).

    ``live``: every object the records leave in the lake; ``names``: layout name → key of
    those objects, as a reader addresses them (``view.live_names``); ``replaced``: compaction
    record number → (its time, the objects it removed), for those not yet recorded as deleted;
    ``snapshots``: the snapshot numbers the pointer listed when this state was read (not part
    of a snapshot)."""

    number: int = 0
    checkpoint: dict[str, Any] | None = None
    live: set[str] = field(default_factory=set)
    names: dict[str, str] = field(default_factory=dict)
    replaced: dict[int, tuple[float | None, tuple[str, ...]]] = field(default_factory=dict)
    snapshots: list[int] = field(default_factory=list)

    def apply(self, record: Record) -> None:
        """The state after ``record``, the next one (ValueError if it is not)."""
        if record.number != self.number + 1:
            raise ValueError(f"log record {record.number} does not follow {self.number}")
        self.live.difference_update(record.removes)
        self.live.update(record.adds)
        for key in record.removes:
            name = layout_name(key)
            if self.names.get(name) == key:
                del self.names[name]
        for key in record.adds:
            self.names[layout_name(key)] = key
        if record.compaction and record.removes:
            self.replaced[record.number] = (record.time, tuple(record.removes))
        self.checkpoint = record.checkpoint
        self.number = record.number

    def kept(self) -> set[str]:
        """What a start's sweep keeps: the live objects and those compactions replaced, still
        readable during their grace period (``compact.py`` deletes them)."""
        return self.live.union(*(removes for _, removes in self.replaced.values()))

    def forget_purged(self, number: int) -> None:
        """Drop the replaced objects of compaction records up to ``number``: deleted."""
        for done in [n for n in self.replaced if n <= number]:
            del self.replaced[done]

    def to_bytes(self) -> bytes:
        """The snapshot document: live keys, and only the layout names the keys alone do not
        give (a name two live keys share, or one the records removed while an older key of it
        is live) — so a snapshot is about the size of its key list."""
        live = sorted(self.live)
        plain = _plain_names(live)
        exceptions: dict[str, str | None] = {
            name: key for name, key in self.names.items() if plain.get(name) != key}
        exceptions |= {name: None for name in plain if name not in self.names}
        doc = {"format": _FORMAT, "number": self.number, "checkpoint": self.checkpoint,
               "live": live, "names": exceptions,
               "replaced": [{"number": n, "time": t, "removes": list(r)}
                            for n, (t, r) in sorted(self.replaced.items())]}
        return (json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LogState:
        """A snapshot document (ValueError, KeyError or TypeError if it is not one)."""
        doc: dict[str, Any] = json.loads(data)
        if doc.get("format") != _FORMAT:
            raise ValueError(f"log snapshot format {doc.get('format')!r}")
        live = [str(key) for key in doc["live"]]
        names = _plain_names(live)
        for name, key in dict(doc["names"]).items():
            if key is None:
                names.pop(name, None)
            else:
                names[str(name)] = str(key)
        checkpoint = doc["checkpoint"]
        if checkpoint is not None and not isinstance(checkpoint, dict):
            raise TypeError("a log snapshot's checkpoint is not a document")
        replaced = {int(item["number"]): (None if item["time"] is None else float(item["time"]),
                                          tuple(str(key) for key in item["removes"]))
                    for item in doc["replaced"]}
        return cls(int(doc["number"]), checkpoint, set(live), names, replaced)


def _plain_names(live: list[str]) -> dict[str, str]:
    """Layout name → key for sorted ``live`` keys, the last of a shared name winning."""
    return {layout_name(key): key for key in live}


def read_state(store: ObjectStore, *, upto: int | None = None,
               retry: Retry | None = None) -> LogState:
    """The lake as of record ``upto`` (None: the newest record): the newest usable snapshot
    at or before it, then the records after it (module docstring). Requests: a GET of the
    pointer, a GET of the snapshot and a HEAD of its record, a GET per record after it and
    one for the first absent number (none when ``upto`` is reached)."""
    retry = retry or Retry()
    commit_log = CommitLog(store, retry)
    numbers = _listed(store, retry)
    state = _usable_snapshot(store, commit_log, numbers, upto, retry) or LogState()
    state.snapshots = numbers
    while upto is None or state.number < upto:
        record = commit_log.read(state.number + 1)
        if record is None:
            break
        state.apply(record)
    return state


def snapshot_numbers(store: ObjectStore, retry: Retry | None = None) -> list[int]:
    """The numbers of the snapshots the pointer lists, oldest first (one GET)."""
    return _listed(store, retry or Retry())


def _listed(store: ObjectStore, retry: Retry) -> list[int]:
    try:
        fetched = retry.call("reading the log's snapshot list", lambda: store.get(POINTER))
        return sorted(int(n) for n in json.loads(fetched.data)["numbers"])
    except ObjectMissing:
        return []
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("object store: ignoring the log's snapshot list %s (%s)",
                    store.url(POINTER), exc)
        return []


def _usable_snapshot(store: ObjectStore, commit_log: CommitLog, numbers: list[int],
                     upto: int | None, retry: Retry) -> LogState | None:
    for number in reversed(numbers):
        if upto is not None and number > upto:
            continue
        key = snapshot_key(number)
        try:
            state = LogState.from_bytes(
                retry.call("reading a log snapshot", functools.partial(store.get, key)).data)
            if state.number != number:
                raise ValueError(f"it holds the state as of record {state.number}")
            if retry.call("looking up a commit record",
                          functools.partial(store.head, record_key(number))) is None:
                raise ValueError("it is ahead of the log's records")
        except ObjectMissing:
            continue  # deleted after the list was read: an older one, or the records
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("object store: ignoring the log snapshot %s (%s)", store.url(key), exc)
            continue
        return state
    return None


def write_snapshot(store: ObjectStore, state: LogState, retry: Retry) -> None:
    """Write the snapshot of ``state`` (whose record exists) and list it in the pointer,
    deleting the snapshot that falls off the list (module docstring, steps 1-2). What
    compactions replaced and the purge mark says is deleted is left out first. Best effort:
    a failure costs readers records, never correctness; ``state.snapshots`` is updated."""
    try:
        state.forget_purged(purged_number(store, retry))
        store.put_if_absent(snapshot_key(state.number), state.to_bytes())
        numbers = sorted({*state.snapshots, state.number})
        store.put(POINTER, json.dumps({"numbers": numbers[-KEEP:]}).encode())
        state.snapshots = numbers[-KEEP:]
        store.delete_many(snapshot_key(n) for n in numbers[:-KEEP])
    except StoreUnavailable as exc:
        log.warning("object store: could not write the log snapshot as of record %d (%s)",
                    state.number, exc)


def purged_number(store: ObjectStore, retry: Retry) -> int:
    """How far compaction records' replaced objects are deleted (``PURGED``; 0: none)."""
    try:
        return int(json.loads(retry.call("reading the compaction purge mark",
                                         lambda: store.get(PURGED)).data)["number"])
    except (ObjectMissing, ValueError, KeyError, TypeError):
        return 0


def lake_objects(store: ObjectStore, retry: Retry) -> Iterator[ObjectInfo]:
    """Every object of the lake outside ``_log/``: two listings, around the log's keys (a
    record, a snapshot, the hint and the pointer all start ``_log/`` + a digit or ``_``), so
    that their number — one per commit — costs no listing page."""
    def before_log() -> list[ObjectInfo]:
        found = []
        for info in store.list(""):
            if info.key >= LOG_DIR:
                break
            found.append(info)
        return found

    def after_log() -> list[ObjectInfo]:
        return [info for info in store.list("", f"{LOG_DIR}~")
                if not info.key.startswith(LOG_DIR)]

    yield from retry.call("listing the lake", before_log)
    yield from retry.call("listing the lake", after_log)
