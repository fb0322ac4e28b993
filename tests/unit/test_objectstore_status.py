"""``binlake status``'s facts of a lake on object storage come from its commit log: an orphan
and the files a compaction replaced are not counted, and nothing is written."""

from __future__ import annotations

from pathlib import Path

from sinks.objectstore import compact as C
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.status import object_lake_facts
from sinks.parquet.compact import CompactOptions
from tests.objectlake import URL, Published
from tests.unit.test_compact import build_lake, data_files


def test_status_counts_what_the_log_leaves_live(tmp_path):
    assert not object_lake_facts(MemoryStore(), URL).exists
    lake = str(tmp_path / "disk")
    build_lake(lake, 12)
    published = Published(lake, MemoryStore())
    published.close()
    store = published.store
    first = data_files(lake)[0]
    store.put("shop/users/schema_version=1/commit_date=2026-01-01/part-9-000-w99.parquet",
              Path(first).read_bytes())  # an orphan: no record names it
    done = len(store.operations)
    facts = object_lake_facts(store, URL)
    assert {op for op, _ in store.operations[done:]} <= {"get", "head", "list", "open_input"}
    assert facts.exists and facts.path == URL and facts.unreadable == []
    assert facts.checkpoint == published.checkpoint()
    [table] = facts.tables
    assert (table.database, table.table, table.schema_versions) == ("shop", "users", [1])
    assert (table.files, table.rows) == (12, 20)
    assert table.bytes == sum(Path(p).stat().st_size for p in data_files(lake))
    C.compact_store(store, URL, CompactOptions(min_age=0), now=1000.0)
    [table] = object_lake_facts(store, URL).tables
    assert (table.files, table.rows) == (1, 20)
