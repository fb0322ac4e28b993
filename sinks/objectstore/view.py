"""A reader's view of a lake on object storage: exactly the committed objects, as the log says.

On object storage the lake is its commit log (``commit.py``): an object is part of the lake iff
a record adds it and no later record removes it. A listing of the prefix is no guide — it
shows the objects of a commit whose record does not exist yet (and may never: an interrupted
commit's orphans stay until the next start). So a reader reads the records, oldest first, up
to the newest one it finds (a consistent cut: records are immutable and numbered without gaps,
so records ``1..n`` are exactly the lake as of commit ``n``), and reads only what they name —
starting from the newest log snapshot (``logstate.py``), which holds what the records before
it give, so a reader's requests do not grow with the lake's age.

Readers never take the writer's lease and never write: a reader beside a running daemon, a
compaction, or a second reader changes nothing and needs nothing of them.

What a reader gets (:class:`LakeView`):

* ``live``: every committed object, by its *layout name* — the key without the writer's epoch
  tag, the name it has on disk (``<db>/<table>/schema_version=N/commit_date=D/part-….parquet``,
  ``<db>/<table>/_schema/v<N>.json``, ``_ddl/…``) — mapped to its key;
* ``directory``: a local directory holding the lake's *bookkeeping* under those names (the
  schema files, the DDL log, ``_checkpoint.json`` from the newest record): small files the
  readers of a lake on disk already know how to read, so they read this one the same way.
  Data objects are not downloaded; Spark reads them where they are (``spark_root``);
* :func:`data_additions`: for a streaming reader, the data files each record *added as new
  rows* — a compaction's record (``data_change`` false) adds files whose rows were already
  delivered, and is skipped, so no row is delivered twice.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..parquet import layout as L
from .log import CommitLog, Record, Retry, layout_name
from .logstate import read_state
from .store import ObjectStore

__all__ = ["LakeView", "data_additions", "is_data_name", "layout_name", "live_names",
           "read_records", "read_view", "spark_url"]


def is_data_name(name: str) -> bool:
    """A data file of the layout: no component starting with ``_`` or ``.``, a Parquet name."""
    return name.endswith(L.DATA_SUFFIX) and not any(p[:1] in "_." for p in name.split("/"))


def read_records(store: ObjectStore, *, after: int = 0, upto: int | None = None,
                 retry: Retry | None = None) -> list[Record]:
    """Records ``after+1 ..`` (up to ``upto``, or the newest), oldest first. Numbers have no
    gaps (each record is created at one past an existing one), so the walk stops at the first
    absent number: a record created meanwhile is simply the next read's."""
    log = CommitLog(store, retry)
    found: list[Record] = []
    number = after
    while upto is None or number < upto:
        record = log.read(number + 1)
        if record is None:
            break
        found.append(record)
        number += 1
    return found


def spark_url(root: str, key: str) -> str:
    """Where Spark reads ``key`` of a lake whose objects it reads at ``root``."""
    return f"{root.rstrip('/')}/{key}"


@dataclass(frozen=True, slots=True)
class LakeView:
    """The lake as of record ``number`` (module docstring). ``directory`` is the local copy of
    its bookkeeping, removed by :meth:`close`."""

    url: str
    number: int
    checkpoint: dict[str, Any] | None
    live: Mapping[str, str]
    directory: str
    spark_root: str = field(default="")

    def data_keys(self, prefix: str) -> list[str]:
        """The keys of the committed data files whose layout name starts with ``prefix``, in
        layout-name order (a part's name is its first ``_seq``)."""
        return [self.live[name] for name in sorted(self.live)
                if name.startswith(prefix) and is_data_name(name)]

    def spark_paths(self, prefix: str) -> list[str]:
        """:meth:`data_keys` as the URLs Spark reads them at."""
        return [spark_url(self.spark_root, key) for key in self.data_keys(prefix)]

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def live_names(records: Iterable[Record]) -> dict[str, str]:
    """Layout name → key of every object the records, in order, leave in the lake."""
    live: dict[str, str] = {}
    for record in records:
        for key in record.removes:
            name = layout_name(key)
            if live.get(name) == key:
                del live[name]
        for key in record.adds:
            live[layout_name(key)] = key
    return live


def read_view(store: ObjectStore, url: str, spark_root: str, *, upto: int | None = None,
              retry: Retry | None = None, directory: str | None = None) -> LakeView:
    """Read the log and download the bookkeeping (module docstring). ``spark_root``: the URL
    Spark reads the lake's objects at (``s3a://BUCKET/PREFIX`` in production)."""
    retry = retry or Retry()
    state = read_state(store, upto=upto, retry=retry)
    live, checkpoint = state.names, state.checkpoint
    local = directory or tempfile.mkdtemp(prefix="binlake-view-")
    try:
        for name, key in live.items():
            if is_data_name(name):
                continue
            fetched = _get(store, key, retry)
            path = os.path.join(local, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(fetched)
        if checkpoint is not None:
            with open(os.path.join(local, L.CHECKPOINT), "w", encoding="utf-8") as f:
                json.dump(checkpoint, f)
    except BaseException:
        shutil.rmtree(local, ignore_errors=True)
        raise
    return LakeView(url, state.number, checkpoint, live, local, spark_root)


def _get(store: ObjectStore, key: str, retry: Retry) -> bytes:
    return retry.call(f"reading {key}", lambda: store.get(key)).data


def data_additions(records: Iterable[Record], prefix: str) -> list[str]:
    """The keys of data files under ``prefix`` (a layout name prefix) that ``records`` added as
    new rows, in record order then name order — compaction records (``data_change`` false)
    add files whose rows an earlier record already delivered, and are skipped."""
    keys: list[str] = []
    for record in records:
        if not record.data_change:
            continue
        keys += sorted(key for key in record.adds
                       if layout_name(key).startswith(prefix) and is_data_name(layout_name(key)))
    return keys
