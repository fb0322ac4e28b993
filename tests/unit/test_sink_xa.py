"""XA through ParquetSink, server-free: a prepared part is durable but invisible (``_xa/``, listed
in the checkpoint) until XA COMMIT lands it with the commit's ``_seq`` and time, or XA ROLLBACK
drops it — also when the sink is closed and reopened in between (a restart)."""

from __future__ import annotations

import glob
import io
import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from protocol.binlog.coltypes import FieldType as T
from replica.commands import status
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col

XID_A = "X'61',X'',1"
XID_B = "X'62',X'',1"


def _rows(lake: Path) -> list[tuple[Any, ...]]:
    rows = [r for f in sorted(glob.glob(str(lake / "shop" / "t" / "*" / "*" / "*.parquet")))
            for r in pq.read_table(f).to_pylist()]
    rows.sort(key=lambda r: (r["_seq"], r["_row"]))
    return [(r["_seq"], r["_op"], r["id"], r["v"]) for r in rows]


def _checkpoint(lake: Path) -> dict[str, Any]:
    return json.loads((lake / "_checkpoint.json").read_text())  # type: ignore[no-any-return]


def _feed(sink: ParquetSink, items: list[Any]) -> None:
    for item in items:
        sink.handle(item)


def test_prepared_rows_stay_invisible_until_their_outcome(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    b = StreamBuilder()
    t = b.table("shop", "t", [col(0, T.LONG, "id", pk=True), col(1, T.VARCHAR, "v")])
    sink = ParquetSink(str(lake))
    sink.open()
    _feed(sink, [b.begin(), b.insert(t, [(1, "one")]), b.commit()])  # seq 1
    _feed(sink, [b.begin(), b.insert(t, [(2, "two")]), b.update(t, [((1, "one"), (1, "uno"))]),
                 b.prepare(XID_A)])  # seq 2: prepared A
    _feed(sink, [b.begin(), b.insert(t, [(3, "three")]), b.prepare(XID_B)])  # seq 3: prepared B
    sink.flush()
    assert _rows(lake) == [(1, "I", 1, "one")]  # nothing prepared is visible
    checkpoint = _checkpoint(lake)
    assert checkpoint["seq"] == 3
    assert [(x["xid"], x["seq"]) for x in checkpoint["xa_prepared"]] == [(XID_A, 2), (XID_B, 3)]
    assert sorted(os.listdir(lake / "_xa")) == ["xa-0000000000000002-000.arrow",
                                                "xa-0000000000000003-000.arrow"]
    out = io.StringIO()
    status.render_text(status.Status(status.lake_facts(str(lake)), None), out)
    assert (f"  xa in doubt     2 prepared, neither committed nor rolled back yet (rows land at "
            f"XA COMMIT): {XID_A}, {XID_B}\n") in out.getvalue()
    assert "1 rows in 1 files" in out.getvalue()  # _xa is not data
    sink.close()  # a restart between PREPARE and the outcome

    sink = ParquetSink(str(lake))
    assert sink.open() is not None
    _feed(sink, b.xa_outcome(XID_B, commit=False))  # seq 4: B rolled back
    _feed(sink, [b.begin(), b.insert(t, [(4, "four")]), b.commit()])  # seq 5
    _feed(sink, b.xa_outcome(XID_A, commit=True))  # seq 6: A commits
    sink.close()
    assert _rows(lake) == [(1, "I", 1, "one"), (5, "I", 4, "four"),
                           (6, "I", 2, "two"), (6, "U", 1, "uno")]
    assert sink.stats.xa_prepared == 0 and sink.stats.xa_committed == 1
    assert sink.stats.xa_rolled_back == 1 and sink.stats.statement_dml == 0
    checkpoint = _checkpoint(lake)
    assert checkpoint["seq"] == 6 and "xa_prepared" not in checkpoint
    assert os.listdir(lake / "_xa") == []


def test_an_outcome_in_the_same_flush_never_reaches_xa(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    b = StreamBuilder()
    t = b.table("shop", "t", [col(0, T.LONG, "id", pk=True), col(1, T.VARCHAR, "v")])
    sink = ParquetSink(str(lake))
    sink.open()
    _feed(sink, [b.begin(), b.insert(t, [(1, "one")]), b.prepare(XID_A)])
    _feed(sink, b.xa_outcome(XID_A, commit=True))
    _feed(sink, [b.begin(), b.insert(t, [(2, "two")]), b.prepare(XID_B)])
    _feed(sink, b.xa_outcome(XID_B, commit=False))
    sink.close()
    assert _rows(lake) == [(2, "I", 1, "one")]
    assert not (lake / "_xa").exists() or os.listdir(lake / "_xa") == []
    assert os.listdir(lake / "_staging") == []
    assert _checkpoint(lake)["seq"] == 4


def test_an_unknown_xa_commit_is_said(tmp_path: Path, caplog: Any) -> None:
    b = StreamBuilder()
    sink = ParquetSink(str(tmp_path / "lake"))
    sink.open()
    _feed(sink, b.xa_outcome(XID_A, commit=True))
    sink.close()
    assert "its prepared part is not in the lake" in caplog.text
