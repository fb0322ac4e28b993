"""``binlake snapshot``'s requests to the daemon holding a lake on object storage.

On disk the command leaves ``<lake>/_snapshot_requests/<id>.json`` and the daemon polls the
directory. On a store the same names are objects under the prefix, made with the store's own
primitives:

* the command creates ``_snapshot_requests/<id>.json`` (``{"id": …, "tables": [[db, table], …]}``,
  the document a lake on disk holds) with ``If-None-Match: *``: a random id, created whole or
  not at all, never over another request;
* the daemon lists ``_snapshot_requests/`` (one LIST, paged by 1,000 requests) and GETs each
  request it has not read yet (a request never changes); it plans the tables into its snapshot state, which its next
  commit records carry, and deletes a request once its tables are done in a committed
  checkpoint (the command, still waiting, deletes its own request when it returns);
* the command learns the outcome from the lake's truth, the newest record's checkpoint
  (:meth:`StoreRequests.checkpoint`), and whether the daemon still runs from the lease
  (:func:`~sinks.objectstore.lease.read_lease`: released, or unchanged for its duration, means
  the holder stopped).

The requests are bookkeeping outside the commit log: no epoch tag and no record names them,
so a writer's start sweep (it deletes only epoch-tagged objects) and a compaction (it deletes
only its own ``-c`` outputs and what its records removed) leave them alone. A request the
daemon has not finished survives a restart of the daemon and is taken up again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from ..errors import ObjectMissing, SinkError
from ..parquet.layout import SNAPSHOT_REQUESTS_DIR
from .commit import CommitLog, Retry
from .lease import Holder, LeaseSeen, read_lease
from .store import ObjectStore

__all__ = ["REQUESTS", "StoreRequests"]

log = logging.getLogger("binlake.snapshot")

#: Where the requests are, under the lake's prefix (the directory's name on disk).
REQUESTS = f"{SNAPSHOT_REQUESTS_DIR}/"

Tables = list[tuple[str, str]]


class StoreRequests:
    """The requests of the lake at ``url`` on ``store`` (module docstring)."""

    def __init__(self, store: ObjectStore, url: str, retry: Retry | None = None) -> None:
        self._store = store
        self._url = url
        self._retry = retry or Retry()
        #: What each request key read so far held (None: unreadable, warned about once). A
        #: request never changes (created whole, with If-None-Match), so a poll GETs only the
        #: keys it has not read yet.
        self._known: dict[str, tuple[str, Tables] | None] = {}

    def write(self, tables: Sequence[tuple[str, str]]) -> str:
        """Leave a request for the daemon holding the lake; its id."""
        request = uuid.uuid4().hex
        key = f"{REQUESTS}{request}.json"
        data = json.dumps({"id": request, "tables": [list(t) for t in tables]}).encode()
        created = self._retry.call(f"creating {key}",
                                   lambda: self._store.put_if_absent(key, data))
        if created is None:  # a lost answer retried finds our own request; anything else is not
            found = self._retry.call(f"reading {key}", lambda: self._store.get(key))
            if found.data != data:
                raise SinkError(f"{self._store.url(key)} exists already: a request id collided")
        return request

    def read(self) -> list[tuple[str, Tables]]:
        """Every readable request, in key order (one LIST, and a GET of each request not read
        before); an unreadable one is warned about once."""
        listing = self._retry.call("listing snapshot requests",
                                   lambda: list(self._store.list(REQUESTS)))
        keys = [info.key for info in listing
                if info.key.endswith(".json") and "/" not in info.key[len(REQUESTS):]]
        self._known = {key: self._known[key] for key in keys if key in self._known}
        found: list[tuple[str, Tables]] = []
        for key in keys:
            if key not in self._known:
                try:
                    self._known[key] = self._parse(key, self._get(key))
                except ObjectMissing:  # removed by its waiter meanwhile
                    continue
            request = self._known[key]
            if request is not None:
                found.append(request)
        return found

    def _parse(self, key: str, data: bytes) -> tuple[str, Tables] | None:
        try:
            doc: dict[str, Any] = json.loads(data)
            return str(doc["id"]), [(str(d), str(t)) for d, t in doc["tables"]]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the unreadable snapshot request %s: %s", self._store.url(key),
                        exc)
            return None

    def _get(self, key: str) -> bytes:
        return self._retry.call(f"reading {key}", lambda: self._store.get(key)).data

    def remove(self, request: str) -> None:
        """Delete a request (nothing if it is gone already)."""
        key = f"{REQUESTS}{request}.json"
        self._retry.call(f"removing {key}", lambda: self._store.delete(key))

    def checkpoint(self) -> dict[str, Any] | None:
        """The lake's checkpoint document: the newest record's (None: no record yet)."""
        log_ = CommitLog(self._store, self._retry)
        newest = log_.newest_number()
        record = log_.read(newest) if newest else None
        return record.checkpoint if record is not None else None

    def lease(self) -> LeaseSeen | None:
        """The lake's lease as it is now (None: no writer ever took the lake)."""
        return self._retry.call("reading the lease", lambda: read_lease(self._store))

    def held(self) -> LeaseSeen | None:
        """The lease if a writer may hold it now: not released, and not a process of this
        host that no longer runs (a daemon killed here; the next writer takes it at once)."""
        seen = self.lease()
        if seen is None or seen.released or seen.holder.is_dead_here(Holder.this_process()):
            return None
        return seen
