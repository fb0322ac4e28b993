"""The landing process's cyclic-GC policy (``replica.cli._tune_gc``): a backlog over thousands of
tables buffers every event until its flush, and must not be scanned again and again for it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

from protocol.binlog.coltypes import FieldType as T
from replica import cli
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col

TABLES = 2000
PER_TABLE = 8  # transactions: ~190k objects buffered, twice the previous threshold
COLUMNS = [col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "name", charset=45),
           col(2, T.LONG, "score")]


def _backlog() -> Iterator[Any]:
    """PER_TABLE 5-row transactions into each of TABLES tables, round robin (bench.many_tables),
    made as they are handled, as a stream's decoder makes them."""
    b = StreamBuilder()
    maps = [b.table("many", f"t{i:04d}", COLUMNS) for i in range(TABLES)]
    for n in range(TABLES * PER_TABLE):
        yield b.begin()
        yield b.insert(maps[n % TABLES], [(n * 5 + k, "name", k) for k in range(5)])
        yield b.commit()


def test_a_landing_process_buffers_a_many_tables_backlog_without_a_collection(tmp_path) -> None:
    saved = gc.get_threshold()
    young: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young.append(info["generation"])

    sink = ParquetSink(str(tmp_path / "lake"))
    sink.open()
    try:
        assert cli.run(["run"]) == cli.EXIT_USAGE  # tunes the GC, then refuses: no config
        assert gc.get_threshold() == (1_000_000, saved[1], saved[2])
        gc.collect()
        gc.callbacks.append(count)
        try:
            for item in _backlog():
                sink.handle(item)
            buffered = gc.get_count()[0]
        finally:
            gc.callbacks.remove(count)
        sink.close()
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
    assert sink.stats.files == TABLES and sink.stats.flushes == 1
    assert young == []
    # what the buffered events left alive: the previous threshold (100,000) collected here
    assert buffered > 100_000
