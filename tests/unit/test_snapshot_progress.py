"""The snapshots' progress as typed records: the checkpoint keeps the bytes binlake wrote
before they were typed, so a lake mid-snapshot resumes across the change."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sinks.chunks import SnapshotChunk
from sinks.parquet import commit as C
from sinks.parquet.snapshot_progress import FilterRecord, SnapshotProgress, TableProgress
from sinks.parquet.state import LakeState
from sinks.parquet.testing import StreamBuilder
from sinks.parquet.writer import ParquetSink

from .test_sink_parquet import feed, users_columns

#: A checkpoint's ``snapshot`` document as the untyped coordinator wrote it (taken from a
#: `binlake snapshot` run against MariaDB: keyed, keyless, composite-key and one-time tables,
#: the recorded filters), plus a table that did not exist and one still pending.
WRITTEN = json.loads(r"""
{
    "tables": {
        "shop.excl": {
            "database": "shop",
            "table": "excl",
            "status": "done",
            "reason": "binlake snapshot",
            "one_time": true,
            "last_key": [
                "3"
            ],
            "rows": 3,
            "chunks": 1,
            "requests": [
                "acd829f5147741f4954f60d08819fccc"
            ],
            "key": [
                "`id`"
            ],
            "high_key": [
                "3"
            ],
            "exact_chunks": 1
        },
        "shop.nokey": {
            "database": "shop",
            "table": "nokey",
            "status": "done",
            "reason": "binlake snapshot",
            "one_time": false,
            "last_key": null,
            "rows": 4,
            "chunks": 1,
            "requests": [
                "acd829f5147741f4954f60d08819fccc"
            ],
            "key": [],
            "high_key": null,
            "exact_chunks": 1
        },
        "shop.numbers": {
            "database": "shop",
            "table": "numbers",
            "status": "done",
            "reason": "binlake snapshot",
            "one_time": false,
            "last_key": [
                "76"
            ],
            "rows": 53,
            "chunks": 2,
            "requests": [
                "acd829f5147741f4954f60d08819fccc"
            ],
            "key": [
                "`id`"
            ],
            "high_key": [
                "76"
            ],
            "exact_chunks": 2
        },
        "shop.texts": {
            "database": "shop",
            "table": "texts",
            "status": "done",
            "reason": "binlake snapshot",
            "one_time": false,
            "last_key": [
                "131"
            ],
            "rows": 93,
            "chunks": 4,
            "requests": [
                "6b0a169628824cb1a103b086a2df3ee4"
            ],
            "key": [
                "`id`"
            ],
            "high_key": [
                "131"
            ],
            "exact_chunks": 4
        },
        "shop.times": {
            "database": "shop",
            "table": "times",
            "status": "done",
            "reason": "new in filter.include",
            "one_time": false,
            "last_key": [
                "246",
                "_latin1 X'6B312D3432' COLLATE latin1_swedish_ci"
            ],
            "rows": 180,
            "chunks": 7,
            "requests": [],
            "key": [
                "`k1`",
                "`k2`"
            ],
            "high_key": [
                "246",
                "_latin1 X'6B312D3432' COLLATE latin1_swedish_ci"
            ],
            "exact_chunks": 7
        },
        "shop.gone": {
            "database": "shop",
            "table": "gone",
            "status": "done",
            "reason": "signal s1",
            "one_time": false,
            "last_key": null,
            "rows": 0,
            "chunks": 0,
            "requests": [
                "5d1c0a7e"
            ],
            "message": "shop.gone does not exist (or this user may not see it): nothing to snapshot"
        },
        "shop.later": {
            "database": "shop",
            "table": "later",
            "status": "pending",
            "reason": "start.from = snapshot",
            "one_time": false,
            "last_key": null,
            "rows": 0,
            "chunks": 0,
            "requests": []
        }
    },
    "filter": {
        "include": [
            "shop.numbers",
            "shop.texts",
            "shop.nokey",
            "shop.times"
        ],
        "exclude": []
    }
}
""")


def test_the_written_document_reads_back_and_serialises_to_the_same_bytes() -> None:
    progress = SnapshotProgress.from_json(WRITTEN)
    assert progress.to_json() == WRITTEN
    assert C.dumps(progress.to_json()) == C.dumps(WRITTEN)
    assert [entry.name for entry in progress.tables or ()] == list(WRITTEN["tables"])
    nokey = (progress.tables or ())[1]
    assert (nokey.key, nokey.high_key, nokey.has_high_key, nokey.last_key) == ((), None, True,
                                                                               None)
    assert progress.filter == FilterRecord(tuple(WRITTEN["filter"]["include"]), ())


def test_absent_keys_stay_absent() -> None:
    assert SnapshotProgress().to_json() == {}
    assert not SnapshotProgress()
    assert SnapshotProgress.from_json({"tables": {}}).to_json() == {"tables": {}}
    pending = SnapshotProgress.from_json(WRITTEN).tables[-1]  # type: ignore[index]
    assert set(pending.to_json()) == {"database", "table", "status", "reason", "one_time",
                                      "last_key", "rows", "chunks", "requests"}


def test_the_records_are_frozen_and_replaced() -> None:
    entry = TableProgress("shop", "t", "pending", "binlake snapshot", False, None, 0, 0, ())
    done = replace(entry, status="done", rows=3, chunks=1, exact_chunks=1)
    assert entry.status == "pending" and done.to_json()["exact_chunks"] == 1


def test_the_checkpoint_holds_the_document_byte_for_byte(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    sink = ParquetSink(lake)
    sink.open()
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    feed(sink, [b.begin(), b.insert(users, [(1, "ann", 10)]), b.commit()])
    sink.land_chunk(SnapshotChunk(SnapshotProgress.from_json(WRITTEN)))  # the progress alone
    sink.flush()
    sink.close()
    with open(Path(lake) / "_checkpoint.json", encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["snapshot"] == WRITTEN
    state = LakeState.from_json(doc, lake)
    assert C.dumps(state.to_json()) == C.dumps(doc)
    reopened = ParquetSink(lake)
    reopened.open()
    assert reopened.snapshot_state.to_json() == WRITTEN
    reopened.close()


def test_a_signal_condition_is_kept_with_its_table() -> None:
    """A table limited by a signal's condition resumes with it after a restart."""
    entry = {"database": "shop", "table": "orders", "status": "running", "reason": "signal c1",
             "one_time": False, "last_key": ["40"], "rows": 12, "chunks": 3, "requests": ["r"],
             "condition": "created >= '2026-01-01'"}
    progress = SnapshotProgress.from_json({"tables": {"shop.orders": entry}})
    assert (progress.tables or ())[0].condition == "created >= '2026-01-01'"
    assert progress.to_json() == {"tables": {"shop.orders": entry}}
    del entry["condition"]
    assert "condition" not in SnapshotProgress.from_json(
        {"tables": {"shop.orders": entry}}).to_json()["tables"]["shop.orders"]
