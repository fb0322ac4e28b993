"""A reader's view of the commit log: live objects by layout name, and what a stream delivers."""

from __future__ import annotations

from sinks.objectstore.commit import Record
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.view import data_additions, layout_name, live_names, read_records, read_view

PART = "shop/users/schema_version=1/commit_date=2026-01-01/part-{:016d}-000-w{}.parquet"
SCHEMA = "shop/users/_schema/v1-w1.json"


def record(number: int, adds: tuple[str, ...] = (), removes: tuple[str, ...] = (), *,
           data_change: bool = True) -> Record:
    return Record(number, "w", adds, removes, {"seq": number}, data_change)


def log() -> list[Record]:
    parts = [PART.format(i, 1) for i in range(4)]
    compacted = "shop/users/schema_version=1/commit_date=2026-01-01/compacted-g00000001-" \
                "0000000000000000-000.parquet"
    return [
        Record(1, "w", checkpoint=None, data_change=False, takeover=True),
        record(2, (SCHEMA, parts[0])),
        record(3, (parts[1], parts[2])),
        record(4, (compacted,), (parts[0], parts[1], parts[2]), data_change=False),
        record(5, (parts[3], "other/t/schema_version=1/commit_date=2026-01-01/"
                   "part-0000000000000009-000-w1.parquet")),
    ]


def test_live_objects_by_layout_name():
    live = live_names(log())
    assert layout_name(SCHEMA) == "shop/users/_schema/v1.json"
    assert sorted(live) == [
        "other/t/schema_version=1/commit_date=2026-01-01/part-0000000000000009-000.parquet",
        "shop/users/_schema/v1.json",
        "shop/users/schema_version=1/commit_date=2026-01-01/compacted-g00000001-"
        "0000000000000000-000.parquet",
        "shop/users/schema_version=1/commit_date=2026-01-01/part-0000000000000003-000.parquet",
    ]


def test_a_stream_skips_what_a_compaction_added():
    assert data_additions(log(), "shop/users/") == [PART.format(i, 1) for i in range(4)]
    assert data_additions(log()[3:], "shop/users/") == [PART.format(3, 1)]


def test_a_view_reads_up_to_the_first_absent_record(tmp_path):
    store = MemoryStore()
    for r in log()[:3]:
        store.put(f"_log/{r.number:020d}.json", r.to_bytes())
    store.put(SCHEMA, b'{"version": 1}')
    store.put(PART.format(7, 1), b"not named by any record")
    assert [r.number for r in read_records(store)] == [1, 2, 3]
    assert [r.number for r in read_records(store, after=1, upto=2)] == [2]
    view = read_view(store, "s3://b/p", "s3a://b/p", directory=str(tmp_path / "v"))
    assert view.number == 3 and view.checkpoint == {"seq": 3}
    assert (tmp_path / "v" / "shop/users/_schema/v1.json").read_bytes() == b'{"version": 1}'
    assert view.spark_paths("shop/users/") == [f"s3a://b/p/{PART.format(i, 1)}"
                                               for i in range(3)]
    view.close()
    assert not (tmp_path / "v").exists()
