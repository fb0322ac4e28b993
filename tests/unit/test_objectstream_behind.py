"""A stream on object storage stopped for longer than ``lake.compact_grace`` while the lake was
compacted: its next batch must still deliver every row once (its offsets are positions in the
commit order, not files), not fail on a file the compaction replaced and a later run deleted."""

from __future__ import annotations

import os

import pytest

from sinks.objectstore import compact as C
from sinks.objectstore.commit import CommitLog
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.view import is_data_name
from sinks.parquet.compact import CompactOptions, max_seq
from tests.objectlake import URL, Published
from tests.unit.test_compact import build_lake, build_more

pytest.importorskip("pyspark")
from sinks.spark.objectstream import ObjectBackend  # noqa: E402
from tests.unit.test_localstream import landed, read  # noqa: E402


def lake_on_store(tmp_path, transactions: int, kind: type[Published] = Published
                  ) -> tuple[str, Published, MemoryStore, ObjectBackend]:
    """A disk lake of ``transactions`` published to a store, and a stream's backend on it."""
    lake = str(tmp_path / "disk")
    build_lake(lake, transactions)
    store = MemoryStore()
    return lake, kind(lake, store), store, ObjectBackend(lambda: store, "shop/users/")


def test_a_stream_behind_a_purged_compaction_reads_every_row_once(tmp_path) -> None:
    lake, published, store, backend = lake_on_store(tmp_path, 4)
    position = backend.latest(0, 0)
    delivered = read(backend, lake, 0, position)
    # the query stops; the daemon lands more, a compaction replaces it, a later run (past the
    # grace period) deletes what it replaced
    build_more(lake, 5)
    published.more()
    C.compact_store(store, URL, CompactOptions(min_age=0, grace=10), now=1000.0)
    C.compact_store(store, URL, CompactOptions(min_age=10**9, grace=10), now=2000.0)
    newest = CommitLog(store).newest_number()
    delivered += read(backend, lake, position, newest)  # the query is restarted
    assert sorted(delivered) == landed(lake)
    published.close()


class Honest(Published):
    """A published lake whose every record carries the checkpoint of the rows it holds (its
    ``seq``: the largest ``_seq`` published so far), as the daemon's records do."""

    def __init__(self, lake: str, store: MemoryStore) -> None:
        self.seq = 0
        super().__init__(lake, store)

    def commit(self, names: list[str]) -> None:
        for name in names:
            if is_data_name(name):
                self.seq = max(self.seq, max_seq(os.path.join(self.lake, name)))
        super().commit(names)

    def checkpoint(self) -> dict:
        return {**super().checkpoint(), "seq": self.seq}


def test_batches_of_one_record_across_compactions_deliver_their_own_rows(tmp_path) -> None:
    lake, published, store, backend = lake_on_store(tmp_path, 5, Honest)
    log = CommitLog(store)
    delivered: list[tuple[int, int]] = []
    position, now = 0, 1000.0

    def batch() -> None:
        nonlocal position
        end = backend.latest(position, 1)
        low = (log.read(position).checkpoint or {}).get("seq", 0) if position else 0
        high = log.read(end).checkpoint["seq"]
        got = read(backend, lake, position, end)
        assert all(low < seq <= high for seq, _ in got), (position, end)
        delivered.extend(got)
        position = end

    batch()
    batch()
    for more in (3, 4):
        build_more(lake, more)
        published.more()
        batch()  # one record of the daemon's files
        C.compact_store(store, URL, CompactOptions(min_age=0, grace=10), now=now)
        batch()  # the next record's rows: inside the compacted file, which spans the position
        now += 100.0
        C.compact_store(store, URL, CompactOptions(min_age=10**9, grace=10), now=now)
    while position < log.newest_number():
        batch()
    assert sorted(delivered) == landed(lake)
    published.close()
