"""A flush over many tables: its files are written side by side, and stay crash-safe.

The sink writes each table's file whole in writer threads (``sinks/parquet/files.py``), small
files with the cheap codec; a write that fails breaks the sink before anything becomes visible,
and a restart lands every transaction exactly once.
"""

from __future__ import annotations

import errno
import glob
import json
import os
from typing import Any

import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from sinks.errors import LakeError, SinkStateError
from sinks.parquet import ParquetSink, SinkOptions
from sinks.parquet import commit as C
from sinks.parquet.compact import max_seq
from sinks.parquet.testing import StreamBuilder, col

TABLES = 120
COLUMNS = [col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "name", charset=45),
           col(2, T.LONG, "score")]


def _stream(tables: int = TABLES, per_table: int = 3) -> list[Any]:
    """``per_table`` two-row transactions into each of ``tables`` tables, round robin."""
    b = StreamBuilder()
    maps = [b.table("many", f"t{i:04d}", COLUMNS) for i in range(tables)]
    items: list[Any] = []
    key = 0
    for n in range(tables * per_table):
        items += [b.begin(), b.insert(maps[n % tables], [(key, "a", n), (key + 1, "b", n)]),
                  b.commit()]
        key += 2
    return items


def _data_files(lake: str) -> list[str]:
    return sorted(glob.glob(os.path.join(lake, "many", "*", "schema_version=1", "*",
                                         "*.parquet")))


def _land(lake: str, items: list[Any], options: SinkOptions | None = None) -> ParquetSink:
    sink = ParquetSink(lake, options)
    sink.open()
    for item in items:
        sink.handle(item)
    sink.close()
    return sink


def _failed_flush(sink: ParquetSink, items: list[Any]) -> LakeError:
    """Open ``sink``, hand it ``items`` and return the LakeError its flush raises, having
    checked that nothing became durable (a test's failing write, fsync or syncfs)."""
    sink.open()
    for item in items:
        sink.handle(item)
    with pytest.raises(LakeError) as failed:
        sink.flush()
    assert sink.durable_position is None
    return failed.value


def test_one_flush_writes_a_whole_file_per_table(tmp_path) -> None:
    lake = str(tmp_path / "lake")
    sink = _land(lake, _stream())
    assert sink.stats.flushes == 1 and sink.stats.files == TABLES
    files = _data_files(lake)
    assert len(files) == TABLES
    for path in files:
        meta = pq.ParquetFile(path).metadata
        assert (meta.num_rows, meta.num_row_groups) == (6, 1)
        # a few rows: no codec, not the configured zstd, whose set-up costs more than it saves
        # (so the native writer writes it, small_file.py)
        assert {meta.row_group(0).column(i).compression
                for i in range(meta.num_columns)} == {"UNCOMPRESSED"}
        # and plain encoding: a dictionary per column chunk costs more than a few rows save
        assert not any(meta.row_group(0).column(i).has_dictionary_page
                       for i in range(meta.num_columns))
    ids = sorted(i for path in files for i in pq.read_table(path, columns=["id"])["id"].to_pylist())
    assert ids == list(range(TABLES * 3 * 2))
    schemas = glob.glob(os.path.join(lake, "many", "*", "_schema", "v1.json"))
    assert len(schemas) == TABLES
    assert json.load(open(schemas[0]))["columns"][1]["name"] == "name"
    assert os.listdir(os.path.join(lake, "_staging")) == []
    assert json.load(open(os.path.join(lake, "_checkpoint.json")))["seq"] == TABLES * 3


@pytest.mark.parametrize(("compression", "small", "rows", "codec"), [
    ("zstd", "none", 4000, "ZSTD"),  # ~600 KB of Arrow data: the configured codec
    ("zstd", "none", 10, "UNCOMPRESSED"),  # small: the native writer's
    ("zstd", "snappy", 10, "SNAPPY"),  # small, a codec asked for: pyarrow's
    ("none", "none", 10, "UNCOMPRESSED"),  # no codec asked for: none, small or not
    ("lz4", "none", 10, "LZ4"),  # cheap to set up already
    ("snappy", "none", 4000, "SNAPPY"),  # takes no level: once refused at the first write
    ("none", "none", 4000, "UNCOMPRESSED"),
])
def test_the_codec_of_a_file_written_whole(tmp_path, compression: str, small: str, rows: int,
                                           codec: str) -> None:
    b = StreamBuilder()
    table = b.table("many", "t", COLUMNS)
    lake = str(tmp_path / "lake")
    _land(lake, [b.begin(), b.insert(table, [(i, "x" * 120, i) for i in range(rows)]),
                 b.commit()], SinkOptions(compression=compression, small_file_compression=small))
    [path] = _data_files(lake)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == rows
    assert meta.row_group(0).column(1).compression == codec
    # a dictionary is tried on the big file's columns only (the small ones: files.ParquetJob)
    assert meta.row_group(0).column(0).has_dictionary_page == (rows == 4000)


@pytest.mark.parametrize("rows", [10, 4000])
def test_a_small_file_keeps_the_statistics_readers_use(tmp_path, rows: int) -> None:
    """A small file's footer has statistics on ``_seq`` and ``_commit_ts`` only (the rest cost
    CPU per column chunk and no reader uses them); a big one keeps them on every column."""
    b = StreamBuilder()
    table = b.table("many", "t", COLUMNS)
    lake = str(tmp_path / "lake")
    _land(lake, [b.begin(), b.insert(table, [(i, "x" * 120, i) for i in range(rows)]),
                 b.commit(), b.begin(), b.insert(table, [(rows, "y", -1)]), b.commit()])
    [path] = _data_files(lake)
    group = pq.ParquetFile(path).metadata.row_group(0)
    with_statistics = {group.column(i).path_in_schema for i in range(group.num_columns)
                       if group.column(i).statistics is not None}
    if rows == 10:
        assert with_statistics == {"_seq", "_commit_ts"}
    else:
        assert len(with_statistics) == group.num_columns == 20
    seq = group.column(pq.ParquetFile(path).schema_arrow.get_field_index("_seq")).statistics
    assert (seq.min, seq.max, seq.null_count) == (1, 2, 0)
    assert max_seq(path) == 2  # what retention and _covered.json read


def test_a_failed_file_write_breaks_the_flush_and_a_restart_lands_exactly_once(
        tmp_path, monkeypatch) -> None:
    lake = str(tmp_path / "lake")
    items = _stream()
    real_write = C.OS.write
    calls = {"n": 0}

    def write(self: C.FileSystem, path: str, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 37:  # one file among the flush's 240 (data and schema files)
            raise C._named(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), path)
        real_write(path, data)

    monkeypatch.setattr(type(C.OS), "write", write)  # on the class: see test_sink_crash
    sink = ParquetSink(lake)
    failed = _failed_flush(sink, items)
    assert failed.errno == errno.ENOSPC
    assert failed.path.startswith(os.path.join(lake, "_staging") + "/")
    with pytest.raises(SinkStateError, match="lake error"):
        sink.handle(items[0])
    sink.close()
    assert _data_files(lake) == []  # nothing of the failed flush is visible
    assert not os.path.exists(os.path.join(lake, "_checkpoint.json"))

    monkeypatch.undo()  # the restart writes for real
    _land(lake, items)  # restart: staging emptied, the whole stream landed once
    files = _data_files(lake)
    assert len(files) == TABLES
    ids = sorted(i for path in files for i in pq.read_table(path, columns=["id"])["id"].to_pylist())
    assert ids == list(range(TABLES * 3 * 2))
