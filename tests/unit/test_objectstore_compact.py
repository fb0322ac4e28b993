"""Compaction on object storage (``sinks/objectstore/compact.py``), on the in-memory store.

A compaction is a record that changes no data: the lake's rows (read through the log) are the
same before and after, the file count falls, a writer whose number a compaction took commits
after it, what it replaced stays for the grace period, and a killed compaction's files are
removed behind a fence that a still-running compaction respects.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.objectstore import compact as C
from sinks.objectstore.commit import CommitLog, epoch_of
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.view import data_additions, is_data_name, live_names, read_records
from sinks.parquet.compact import CompactOptions
from tests.objectlake import URL, Published
from tests.unit.test_compact import build_lake, build_more, rows

NOW = CompactOptions(min_age=0, grace=3600)


def lake_rows(store: MemoryStore) -> list[tuple]:
    """Every row of the table's live files, as the log says."""
    live = live_names(read_records(store))
    keys = [k for n, k in sorted(live.items()) if is_data_name(n) and n.startswith("shop/")]
    tables = [pq.read_table(store.open_input(k)) for k in keys]
    return sorted(tuple(r.values()) for r in pa.concat_tables(tables).to_pylist())


def data_keys(store: MemoryStore) -> list[str]:
    live = live_names(read_records(store))
    return [k for n, k in live.items() if is_data_name(n)]


@pytest.fixture
def published(tmp_path):  # noqa: ANN201
    lake = str(tmp_path / "disk")
    build_lake(lake, 12)
    lake_published = Published(lake, MemoryStore())
    yield lake_published
    lake_published.close()


def test_a_compaction_is_a_record_that_changes_no_rows(published):
    store = published.store
    before = lake_rows(store)
    assert before == rows(published.lake) and len(data_keys(store)) == 12
    stats = C.compact_store(store, URL, NOW, now=1000.0)
    assert (stats.partitions, stats.files_in, stats.files_out, stats.rows) == (1, 12, 1, 20)
    assert stats.tables == {"shop/users": 11}
    assert lake_rows(store) == before
    assert len(data_keys(store)) == 1
    record = read_records(store)[-1]
    assert record.compaction and not record.data_change and record.time == 1000.0
    assert record.checkpoint == read_records(store)[-2].checkpoint
    assert data_additions([record], "shop/") == []  # a stream delivers none of it again
    assert all(store.head(k) is not None for k in record.removes)  # kept for the grace period
    assert epoch_of(record.adds[0]) is None  # a writer's start never sweeps it
    # nothing old enough: no record
    build_more(published.lake, 2)
    published.more()
    newest = CommitLog(store).newest_number()
    assert C.compact_store(store, URL, CompactOptions(min_age=10**9), now=1001.0).partitions == 0
    assert CommitLog(store).newest_number() == newest


def test_the_writer_commits_after_a_compaction_that_took_its_number(published):
    store = published.store
    C.compact_store(store, URL, NOW, now=1000.0)  # the writer's next number is now taken
    build_more(published.lake, 3)
    published.more()
    assert lake_rows(store) == rows(published.lake)
    assert len(data_keys(store)) == 1 + 3
    published.close()
    # a new writer's start sweeps orphans, never what the compaction replaced (grace) or added
    from sinks.objectstore.commit import ObjectCommitter
    from sinks.objectstore.lease import Lease

    kept = read_records(store)[-4].removes
    second = ObjectCommitter(store, URL, Lease(store, URL, duration_s=30.0))
    second.open()
    second.close()
    assert second.swept == [] and all(store.head(k) is not None for k in kept)
    assert lake_rows(store) == rows(published.lake)


def test_replaced_files_are_deleted_after_the_grace_period(published):
    store = published.store
    C.compact_store(store, URL, NOW, now=1000.0)
    replaced = read_records(store)[-1].removes
    C.compact_store(store, URL, NOW, now=1000.0 + 3599)
    assert all(store.head(k) is not None for k in replaced)
    C.compact_store(store, URL, NOW, now=1000.0 + 3600)
    assert all(store.head(k) is None for k in replaced)
    assert lake_rows(store) == rows(published.lake)


def test_a_killed_compactions_files_are_removed_behind_a_fence(published, monkeypatch):
    store = published.store
    real_commit = C._commit

    def killed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - dies before its record
        raise KeyboardInterrupt

    monkeypatch.setattr(C, "_commit", killed)
    with pytest.raises(KeyboardInterrupt):
        C.compact_store(store, URL, NOW, now=1000.0)
    orphans = [i.key for i in store.list("") if "-c" in i.key and "compacted-" in i.key]
    assert len(orphans) == 1 and lake_rows(store) == rows(published.lake)
    monkeypatch.setattr(C, "_commit", real_commit)
    stats = C.compact_store(store, URL, NOW, now=1001.0)
    assert stats.files_in == 12 and all(store.head(k) is None for k in orphans)
    fence, record = read_records(store)[-2:]
    assert fence.compaction and not fence.adds and not fence.removes
    assert record.adds[0] not in orphans and lake_rows(store) == rows(published.lake)


def test_a_running_compaction_fenced_by_a_sweep_abandons(published, monkeypatch):
    """Run A writes its outputs; before its record, run B fences and sweeps them: A must not
    commit a record naming deleted objects."""
    store = published.store
    real_commit = C._commit
    raced = []

    def sweep_first(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not raced:
            raced.append(True)
            build_more(published.lake, 1)
            published.more()
            C.compact_store(store, URL, CompactOptions(min_age=10**9), now=1000.0)  # B
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(C, "_commit", sweep_first)
    stats = C.compact_store(store, URL, NOW, now=1000.0)
    assert raced and stats.partitions == 0  # abandoned
    assert [r for r in read_records(store) if r.compaction and r.adds] == []
    assert not [i.key for i in store.list("") if "compacted-" in i.key]
    assert lake_rows(store) == rows(published.lake)


def test_a_stopped_compaction_removes_its_files_and_commits_nothing(published, monkeypatch):
    store = published.store
    newest = CommitLog(store).newest_number()
    stopped = False
    real_rewrite = C._rewrite

    def rewrite_then_stop(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the daemon stops
        nonlocal stopped
        written = real_rewrite(*args, **kwargs)
        stopped = True
        return written

    monkeypatch.setattr(C, "_rewrite", rewrite_then_stop)
    stats = C.compact_store(store, URL, NOW, now=1000.0, stop=lambda: stopped)
    assert (stats.partitions, stats.files_in) == (0, 0)
    assert CommitLog(store).newest_number() == newest
    assert [i.key for i in store.list("") if "compacted-" in i.key] == []
    assert lake_rows(store) == rows(published.lake) and len(data_keys(store)) == 12
