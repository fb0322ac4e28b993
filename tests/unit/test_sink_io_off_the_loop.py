"""With ``flush_in_handle=False`` (the daemon's sink) handing an item over touches no disk: a
spill past the memory budget, an XA PREPARE's staged rows, an XA COMMIT's prepared rows read
back, a spilled transaction's landing or discard and an XA ROLLBACK's files wait in
``io_wanted`` for ``run_io`` (which the daemon runs on its sink worker) — and the lake is the
same, file for file and row for row, as the sink that does them inside ``handle``."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from protocol.binlog.coltypes import FieldType as T
from sinks.parquet import ParquetSink
from sinks.parquet.options import SinkOptions
from sinks.parquet.testing import StreamBuilder, col

XID = "X'61',X'',1"
XID_GONE = "X'62',X'',1"


def _stream() -> list[Any]:
    """A spilled transaction, a spilled one rolled back, XA prepared and committed, XA
    prepared and rolled back, a small transaction between each."""
    b = StreamBuilder()
    t = b.table("shop", "t", [col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "v")])
    items: list[Any] = [b.begin()]
    items += [b.insert(t, [(n * 500 + i, f"v{n * 500 + i}") for i in range(500)])
              for n in range(40)]
    items += [b.commit(), b.begin()]
    items += [b.insert(t, [(10**6 + n * 500 + i, "gone") for i in range(500)])
              for n in range(40)]
    items += [b.rollback(), b.begin(), b.insert(t, [(-1, "small")]), b.commit()]
    items += [b.begin(), b.insert(t, [(-2, "prepared")]), b.prepare(XID)]
    items += [b.begin(), b.insert(t, [(-3, "prepared, rolled back")]), b.prepare(XID_GONE)]
    items += [b.begin(), b.insert(t, [(-4, "between")]), b.commit()]
    items += b.xa_outcome(XID, commit=True) + b.xa_outcome(XID_GONE, commit=False)
    return items


def _options(in_handle: bool) -> SinkOptions:
    return SinkOptions(memory_limit_bytes=64 * 1024, row_group_bytes=32 * 1024,
                       file_size_bytes=1 << 30, flush_rows=10**9, flush_in_handle=in_handle)


def _staged(lake: Path) -> list[str]:
    """The spill files and XA parts in staging and ``_xa`` (not the directories and files
    the part writer's own threads make ahead)."""
    names = os.listdir(lake / "_staging") + os.listdir(lake / "_xa")
    return sorted(n for n in names if n.startswith(("spill", "xa")))


def _lake(lake: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    files = sorted(glob.glob(str(lake / "shop" / "t" / "*" / "*" / "*.parquet")))
    return [(os.path.relpath(f, lake), pq.read_table(f).to_pylist()) for f in files]


def _inline(lake: Path, items: list[Any]) -> ParquetSink:
    """The stream landed by a sink that does its lake work inside ``handle``."""
    inline = ParquetSink(str(lake), _options(True))
    inline.open()
    for item in items:
        inline.handle(item)
    inline.close()
    return inline


def test_the_daemons_sink_leaves_every_disk_touch_to_run_io(tmp_path: Path) -> None:
    items = _stream()
    inline = _inline(tmp_path / "inline", items)

    lake = tmp_path / "deferred"
    sink = ParquetSink(str(lake), _options(False))
    sink.open()
    os.makedirs(lake / "_xa", exist_ok=True)
    runs = 0
    for item in items:
        before = _staged(lake)
        sink.handle(item)
        assert _staged(lake) == before  # handing over wrote or removed nothing
        if sink.io_wanted:
            assert sink.unlanded
            sink.run_io()
            runs += 1
            assert not sink.io_wanted
    # a spill, the spilled commit, the spilled rollback's discard, two PREPAREs, the XA
    # COMMIT (its rows read back) and the XA ROLLBACK (its staged file deleted)
    assert runs >= 7
    assert sink.stats.spilled_batches == inline.stats.spilled_batches > 0
    sink.close()
    assert (sink.stats.xa_prepared, sink.stats.xa_committed, sink.stats.xa_rolled_back) == (
        2, 1, 1)
    assert _lake(lake) == _lake(tmp_path / "inline")
    rows = [row for _, part in _lake(lake) for row in part]
    assert sorted(r["id"] for r in rows) == [-4, -2, -1, *range(20_000)]
    assert {r["_seq"] for r in rows if r["id"] == -2} == {6}  # the XA COMMIT's transaction


def test_an_item_handed_over_before_run_io_has_the_work_done_first(tmp_path: Path) -> None:
    """A caller that does not run ``run_io`` loses nothing: the next item does the work
    first, in the caller's thread."""
    items = _stream()
    _inline(tmp_path / "inline", items)
    sink = ParquetSink(str(tmp_path / "late"), _options(False))
    sink.open()
    for item in items:
        sink.handle(item)
    sink.close()
    assert _lake(tmp_path / "late") == _lake(tmp_path / "inline")
