"""A lake landed on disk, published into an object store through the commit protocol — the
lake on object storage the readers' and compaction's tests read (a daemon's landing is proven
elsewhere; these tests need exact control of every commit). A log snapshot is written every
few records (:data:`SNAPSHOT_EVERY`), so every reader of these lakes reads through snapshots
and the records after them, as it does on a daemon's long-lived lake."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sinks.objectstore.commit import ObjectCommitter
from sinks.objectstore.lease import Lease
from sinks.objectstore.store import ObjectStore
from sinks.parquet import layout as L
from tests.unit.test_compact import data_files

URL = "s3://bucket/lake"
#: Records between log snapshots here (the daemon's default is 100).
SNAPSHOT_EVERY = 4


class Published:
    """A disk lake published into ``store`` (see the module docstring)."""

    def __init__(self, lake: str, store: ObjectStore) -> None:
        self.lake = lake
        self.store = store
        self.committer = ObjectCommitter(self.store, URL, Lease(self.store, URL,
                                                                duration_s=30.0),
                                         snapshot_every=SNAPSHOT_EVERY)
        self.committer.open()
        self.done: set[str] = set()
        self.bookkeeping()

    def bookkeeping(self) -> None:
        lake = self.lake
        bookkeeping = [os.path.relpath(os.path.join(d, n), lake)
                       for d, _, names in os.walk(lake) for n in names]
        self.commit([n for n in bookkeeping if "/_schema/" in n or n.startswith(L.DDL_DIR)])
        self.more()

    def more(self) -> None:
        """Publish the disk lake's data files not published yet, one commit each."""
        for path in data_files(self.lake):
            name = os.path.relpath(path, self.lake)
            if name not in self.done:
                self.commit([name])
                self.done.add(name)

    def checkpoint(self) -> dict:
        with open(os.path.join(self.lake, L.CHECKPOINT), encoding="utf-8") as f:
            return dict(json.load(f))

    def commit(self, names: list[str]) -> None:
        keys = []
        for name in names:
            key = self.committer.fresh(name)
            self.store.put(key, Path(self.lake, name).read_bytes())
            keys.append(key)
        self.committer.commit(keys, [], self.checkpoint())

    def compact(self, count: int) -> int:
        """A compaction record: the first ``count`` parts replaced by one file of their rows
        (kept in the store: a reader of an older record may read them). Its row count."""
        live = sorted(self.committer_live())[:count]
        table = pa.concat_tables([pq.read_table(self.store.open_input(k)) for k in live])
        name = os.path.dirname(live[0]) + "/compacted-g00000001-0000000000000000-000.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.store.put(name, sink.getvalue().to_pybytes())
        self.committer.commit([name], live, self.checkpoint(), data_change=False,
                              delete_removed=False)
        return table.num_rows

    def committer_live(self) -> list[str]:
        from sinks.objectstore.view import live_names, read_records

        return [k for n, k in live_names(read_records(self.store)).items()
                if "/part-" in n and n.endswith(".parquet")]

    def close(self) -> None:
        self.committer.close()
