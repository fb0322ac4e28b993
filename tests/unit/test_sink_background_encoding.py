"""Row groups encoded on a background thread (sinks/parquet/encoder.py) land the same lake as
in the foreground: the same files, row groups, rows and checkpoints, flushes at the same
commits — whatever the thread's speed — and a background write's error stops the sink as a
foreground one does."""

from __future__ import annotations

import dataclasses
import errno
import glob
import os
import threading
from typing import Any

import pyarrow.parquet as pq
import pytest

from sinks.errors import LakeError, SinkStateError
from sinks.parquet import ParquetSink
from sinks.parquet import encoder as E
from tests.unit.test_sink_crash import SMALL, lake_rows, workload

#: Files that fill by size (16 KiB) in row groups of 8 KiB, flushed by size only: 11 flushes
#: called for by a full file at a commit.
SIZED = dataclasses.replace(SMALL, row_group_bytes=8 * 1024, file_size_bytes=16 * 1024,
                            flush_rows=10**6, flush_interval_s=1e9)


def _land(lake: str, options: Any, transactions: list[list[Any]]) -> list[tuple[int, int]]:
    """Land ``transactions``; returns (seq, flush count) after each one."""
    sink = ParquetSink(lake, options)
    sink.open()
    seen = []
    clock = 0.0
    for items in transactions:
        for item in items:
            sink.handle(item)
        clock += 0.5
        sink.maybe_flush(clock)
        durable = sink.durable_position
        seen.append((durable.seq if durable else 0, sink.stats.flushes))
    sink.close()
    return seen


def _files(lake: str) -> dict[str, tuple[int, list[int]]]:
    out = {}
    for path in glob.glob(os.path.join(lake, "*", "*", "schema_version=*", "*", "*.parquet")):
        meta = pq.ParquetFile(path).metadata
        out[os.path.relpath(path, lake)] = (
            meta.num_rows, [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    return out


@pytest.mark.parametrize(("options", "expected", "delay"), [
    (SMALL, (29, 29, (224, 22)), 0.0),  # flushes by time and row count: a row group per file
    (SIZED, (17, 75, (217, 11)), 0.0),
    (SIZED, (17, 75, (217, 11)), 0.02),
], ids=["small", "sized", "sized-slow-thread"])
def test_background_encoding_lands_the_same_lake(tmp_path: Any, monkeypatch: Any, options: Any,
                                                 expected: Any, delay: float) -> None:
    """``delay``: each background write first sleeps, as on a machine whose second core is
    busy, so the daemon's thread gets far ahead of it."""
    transactions = workload()
    foreground = str(tmp_path / "foreground")
    steps = _land(foreground, dataclasses.replace(options, background_encoding=False),
                  transactions)
    if delay:
        start = E.RowGroupEncoder.start

        def slow(self: Any, write: Any, *args: Any) -> None:
            def late() -> int:
                threading.Event().wait(delay)
                return int(write())
            start(self, late, *args)

        monkeypatch.setattr(E.RowGroupEncoder, "start", slow)
    background = str(tmp_path / "background")
    assert _land(background, options, transactions) == steps
    files = _files(background)
    assert files == _files(foreground)
    assert sum(rows for rows, _ in files.values()) == 9_582
    assert (len(files), sum(len(groups) for _, groups in files.values()), steps[-1]) == expected
    assert lake_rows(background) == lake_rows(foreground)


def test_a_background_write_error_stops_the_sink_naming_its_file(tmp_path: Any,
                                                                 monkeypatch: Any) -> None:
    """ENOSPC in the background thread: the sink call that waits for it raises the LakeError
    (naming the staged file), the checkpoint stays where it was durable, nothing more lands."""
    transactions = workload()
    lake = str(tmp_path / "lake")
    start = E.RowGroupEncoder.start
    writes = []

    def failing(self: Any, write: Any, owner: Any, path: str, nbytes: int) -> None:
        writes.append(path)
        if len(writes) < 5:
            start(self, write, owner, path, nbytes)
            return

        def full() -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        start(self, full, owner, path, nbytes)

    monkeypatch.setattr(E.RowGroupEncoder, "start", failing)
    sink = ParquetSink(lake, SMALL)
    sink.open()
    with pytest.raises(LakeError) as failed:
        for items in transactions:
            for item in items:
                sink.handle(item)
        sink.flush()
    assert failed.value.errno == errno.ENOSPC
    assert failed.value.path == writes[4]
    durable = sink.durable_position
    assert durable is not None and 0 < durable.seq < len(transactions)
    with pytest.raises(SinkStateError, match="lake error"):
        sink.flush()
    sink.close()
    assert sorted(t.name for t in threading.enumerate()
                  if t.name.startswith("binlake-row-groups")) == []


def test_a_commit_returns_before_the_row_group_it_started_is_written(tmp_path: Any,
                                                                    monkeypatch: Any) -> None:
    """The overlap itself: every background write is held until the sink waits for it
    (``RowGroupEncoder.finish``), so a commit that started a row group and returned with it
    still unwritten did not wait for it: a row group that cannot fill its file (judged from
    what Parquet wrote per Arrow byte, plus 64 KiB a column) is only waited for before the
    next one starts, or at a flush."""
    holds: list[threading.Event] = []
    start, finish = E.RowGroupEncoder.start, E.RowGroupEncoder.finish

    def held(self: Any, write: Any, *args: Any) -> None:
        hold = threading.Event()
        holds.append(hold)

        def late() -> int:
            hold.wait(5)
            return int(write())
        start(self, late, *args)

    def released(self: Any) -> Any:
        for hold in holds:
            hold.set()
        return finish(self)

    monkeypatch.setattr(E.RowGroupEncoder, "start", held)
    monkeypatch.setattr(E.RowGroupEncoder, "finish", released)
    options = dataclasses.replace(SMALL, row_group_bytes=256 * 1024,
                                  file_size_bytes=16 * 1024 * 1024, flush_rows=10**6,
                                  flush_interval_s=1e9, memory_limit_bytes=64 * 1024 * 1024)
    sink = ParquetSink(str(tmp_path / "lake"), options)
    sink.open()
    starting, unwritten_after = 0, 0
    for items in workload():
        started = len(holds)
        for item in items:
            sink.handle(item)
        if len(holds) > started:
            starting += 1
            job = sink._parts.encoder.job
            unwritten_after += job is not None and not job.future.done()
    sink.close()
    assert starting >= 3
    assert unwritten_after == starting
