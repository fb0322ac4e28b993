"""Compaction on synthetic lakes: same rows, fewer files, atomic swap, crash at every step."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from sinks.parquet import ParquetSink, SinkOptions
from sinks.parquet import compact as K
from sinks.parquet import layout as L
from sinks.parquet.commit import OS
from sinks.parquet.testing import StreamBuilder, col
from sinks.storage import Storage

OPTIONS = K.CompactOptions(min_age=0, grace=0)


def build_lake(lake: str, transactions: int, *, start_seq_rows: int = 0,
               storage: Storage = OS) -> ParquetSink:
    """A lake with one file per transaction (flush_rows=1) for shop.users: inserts, updates,
    deletes, so that _before is set too; landed through ``storage``."""
    b = StreamBuilder()
    users = b.table("shop", "users", [col(0, T.LONGLONG, "id", pk=True),
                                      col(1, T.VARCHAR, "name", charset=45)])
    sink = ParquetSink(lake, SinkOptions(flush_rows=1), storage)
    sink.open()
    for i in range(transactions):
        sink.handle(b.begin())
        if i % 3 == 2:
            sink.handle(b.update(users, [((i - 1, f"u{i - 1}"), (i - 1, f"v{i}"))]))
        else:
            sink.handle(b.insert(users, [(i, f"u{i}"), (i + 100_000, "x")]))
        sink.handle(b.commit(advance_us=1000))
    sink.flush()
    sink.close()
    return sink


def data_files(lake: str) -> list[str]:
    return sorted(glob.glob(os.path.join(lake, "shop", "users", "schema_version=*", "*",
                                         "*.parquet")))


def rows(lake: str) -> list[tuple]:
    tables = [pq.read_table(f) for f in data_files(lake)]
    table = pa.concat_tables(tables)
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_compaction_keeps_every_row_and_cuts_files(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 60)
    before = rows(lake)
    assert len(data_files(lake)) == 60
    stats = K.compact_lake(lake, OPTIONS)
    assert stats.files_in == 60 and stats.files_out == 1 and stats.partitions == 1
    assert rows(lake) == before
    [out] = data_files(lake)
    assert os.path.basename(out).startswith("compacted-g00000001-0000000000000001-000")
    table = pq.read_table(out)
    keys = list(zip(table.column("_seq").to_pylist(), table.column("_row").to_pylist(),
                    strict=True))
    assert keys == sorted(keys)
    # the daemon's field metadata (MariaDB types) survives
    assert table.schema.field("id").metadata == pq.read_schema(out).field("id").metadata
    assert not os.path.exists(os.path.join(lake, L.COMPACT_MANIFEST))
    assert os.listdir(os.path.join(lake, L.COMPACT_TRASH))  # grace: old files kept once
    # a second run purges the trash (grace 0) and has nothing to rewrite
    stats = K.compact_lake(lake, OPTIONS)
    assert stats.partitions == 0
    assert os.listdir(os.path.join(lake, L.COMPACT_TRASH)) == []


def test_new_files_after_compaction_are_compacted_apart(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 10)
    K.compact_lake(lake, OPTIONS)
    first = data_files(lake)
    # more daemon files land in the same partition: the earlier compacted file is kept as is
    b_rows = rows(lake)
    build_more(lake, 5)
    stats = K.compact_lake(lake, OPTIONS)
    assert stats.files_in == 5 and stats.files_out == 1
    names = [os.path.basename(f) for f in data_files(lake)]
    assert os.path.basename(first[0]) in names and len(names) == 2
    assert len(rows(lake)) == len(b_rows) + 10


def build_more(lake: str, transactions: int) -> None:
    sink = ParquetSink(lake, SinkOptions(flush_rows=1))
    checkpoint = sink.open()
    assert checkpoint is not None
    b = StreamBuilder(first_gtid_seq=checkpoint.seq + 1)
    users = b.table("shop", "users", [col(0, T.LONGLONG, "id", pk=True),
                                      col(1, T.VARCHAR, "name", charset=45)])
    for i in range(transactions):
        gtid_begin = b.begin()
        sink.handle(gtid_begin)
        sink.handle(b.insert(users, [(10_000 + i, "n"), (20_000 + i, "m")]))
        sink.handle(b.commit(advance_us=1000))
    sink.flush()
    sink.close()


def test_min_age_and_target_size(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 30)
    assert K.compact_lake(lake, K.CompactOptions(min_age=3600)).partitions == 0
    stats = K.compact_lake(lake, K.CompactOptions(min_age=0, target_size=1))
    # a 1-byte target closes a file after every input (rows never split across a file)
    assert stats.files_out == 30 and len(data_files(lake)) == 30


@pytest.mark.parametrize("crash_at", ["write", "manifest", "exchange", "trash"])
def test_a_killed_compaction_leaves_nothing_visible_twice(tmp_path, monkeypatch, crash_at):
    lake = str(tmp_path / "lake")
    build_lake(lake, 20)
    before = rows(lake)

    class Killed(BaseException):
        pass

    def die(*args, **kwargs):
        raise Killed

    target = {"write": (K, "_write_outputs"), "manifest": (K, "publish_lock"),
              "exchange": (K, "fsync_path"), "trash": (K, "_to_trash")}[crash_at]
    with monkeypatch.context() as m:
        if crash_at == "exchange":
            real = K.exchange

            def exchange_then_die(*args):
                real(*args)
                raise Killed
            m.setattr(K, "exchange", exchange_then_die)
        else:
            m.setattr(*target, die)
        with pytest.raises(Killed):
            K.compact_lake(lake, OPTIONS)
    assert rows(lake) == before  # nothing twice, nothing missing, before any recovery
    stats = K.compact_lake(lake, OPTIONS)
    assert rows(lake) == before
    assert len(data_files(lake)) == 1
    assert not os.path.exists(os.path.join(lake, L.COMPACT_MANIFEST))
    assert not os.path.exists(os.path.join(lake, L.COMPACT_STAGING))
    assert stats.files_out in (0, 1)
    # one record of replaced files, for the generation that swapped (an unswapped one's is gone)
    [record] = os.listdir(os.path.join(lake, "shop", "users", L.COMPACTION_LOG))
    assert record.endswith("-1-2026-01-01.json")


def test_a_file_landing_during_the_rewrite_cancels_the_swap(tmp_path, monkeypatch):
    lake = str(tmp_path / "lake")
    build_lake(lake, 10)
    real = K._write_outputs

    def write_then_land(lake_, partition, *args):
        result = real(lake_, partition, *args)
        build_more(lake, 1)  # the daemon lands a file in the same partition meanwhile
        return result
    monkeypatch.setattr(K, "_write_outputs", write_then_land)
    stats = K.compact_lake(lake, OPTIONS)
    assert stats.partitions == 0 and stats.skipped_busy == 1
    assert len(data_files(lake)) == 11 and len(rows(lake)) == 10 * 2 - 3 + 2
    assert os.listdir(os.path.join(lake, "shop", "users", L.COMPACTION_LOG)) == []


def test_retention_drops_only_partitions_a_state_covers(tmp_path):
    lake = str(tmp_path / "lake")
    build_lake(lake, 10)  # 2026-01-01, _seq 1..10
    assert K.drop_history(lake, "shop", "users", covered_seq=9, before="2026-01-02") == 0
    assert K.drop_history(lake, "shop", "users", covered_seq=10, before="2026-01-01") == 0
    assert len(data_files(lake)) == 10
    assert K.drop_history(lake, "shop", "users", covered_seq=10, before="2026-01-02") == 1
    assert data_files(lake) == []
    [retired] = os.listdir(os.path.join(lake, L.COMPACT_TRASH))
    assert retired.startswith("retired-")
    build_more(lake, 2)  # the daemon can land into that date again
    assert len(data_files(lake)) == 2


def test_binlake_compact_command(tmp_path, capsys):
    from replica.cli import run as main

    lake = str(tmp_path / "lake")
    build_lake(lake, 12)
    assert main(["compact", "--lake", lake, "--min-age", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "shop/users: 11 fewer files"
    assert out[1].startswith("compacted 1 partitions: 12 files -> 1 (20 rows) in ")
    assert main(["compact", "--lake", lake]) == 0  # default min-age (1 h): nothing to do
    assert capsys.readouterr().out.startswith("compacted 0 partitions: 0 files -> 0 (0 rows)")


def test_a_lake_error_exits_4_and_leaves_the_rows(tmp_path, monkeypatch, capsys):
    from replica.cli import run as main

    lake = str(tmp_path / "lake")
    build_lake(lake, 5)
    before = rows(lake)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(K, "_write_outputs", disk_full)
    assert main(["compact", "--lake", lake, "--min-age", "0"]) == 4
    assert "ENOSPC" in capsys.readouterr().err
    monkeypatch.undo()
    assert rows(lake) == before
    assert main(["compact", "--lake", lake, "--min-age", "0"]) == 0
    assert rows(lake) == before and len(data_files(lake)) == 1


def test_lake_paths_are_spelled_only_by_layout() -> None:
    """One home for lake paths: compaction and the Spark readers name them through layout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for module in ("sinks/parquet/compact.py", "sinks/spark/materialize.py",
                   "sinks/spark/state.py", "sinks/spark/readers.py"):
        with open(os.path.join(root, module), encoding="utf-8") as f:
            source = f.read()
        code = [line for line in source.splitlines() if not line.lstrip().startswith(("#", "``"))]
        for spelled in ('"schema_version=', '"commit_date=', '.parquet"', '"seq=', '"_schema"',
                        'f"g{'):
            assert not any(spelled in line for line in code), (module, spelled)


def test_daemon_start_cleans_up_a_killed_compaction_unless_one_runs(tmp_path, monkeypatch):
    """recover_if_idle (what the daemon calls at start): leftovers of a compaction killed
    before its swap are dropped — unless a compaction holds _compact.lock, which owns them."""
    import fcntl

    lake = str(tmp_path / "lake")
    build_lake(lake, 10)
    before = rows(lake)
    assert K.recover_if_idle(lake) is None  # nothing left: not even a lock file is made
    assert not os.path.exists(os.path.join(lake, L.COMPACT_LOCK))

    class Killed(BaseException):
        pass

    def die(*args, **kwargs):
        raise Killed
    with monkeypatch.context() as m:
        m.setattr(K, "publish_lock", die)  # staged and recorded, not swapped
        with pytest.raises(Killed):
            K.compact_lake(lake, OPTIONS)
    assert os.path.exists(os.path.join(lake, L.COMPACT_MANIFEST))
    fd = os.open(os.path.join(lake, L.COMPACT_LOCK), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a `binlake compact` running now
    try:
        assert K.recover_if_idle(lake) is False
        assert os.path.exists(os.path.join(lake, L.COMPACT_STAGING))
    finally:
        os.close(fd)
    assert K.recover_if_idle(lake) is True
    assert not os.path.exists(os.path.join(lake, L.COMPACT_MANIFEST))
    assert not os.path.exists(os.path.join(lake, L.COMPACT_STAGING))
    assert os.listdir(os.path.join(lake, "shop", "users", L.COMPACTION_LOG)) == []
    assert rows(lake) == before and len(data_files(lake)) == 10


def test_status_walks_a_table_again_when_compaction_switches_it_meanwhile(tmp_path,
                                                                          monkeypatch):
    """binlake status lists a table's files, then reads their footers: a switch in between
    makes it walk the table again, never report a file unreadable or count a row twice."""
    from replica.commands import status

    lake = str(tmp_path / "lake")
    build_lake(lake, 10)
    real = pq.read_metadata
    switched: list[int] = []

    def read_then_compact(path, *args, **kwargs):
        meta = real(path, *args, **kwargs)
        if not switched:
            switched.append(K.compact_lake(lake, OPTIONS).partitions)
        return meta
    monkeypatch.setattr(pq, "read_metadata", read_then_compact)
    facts = status.lake_facts(lake)
    assert switched == [1]
    [users] = facts.tables
    assert (users.rows, users.files, facts.unreadable) == (7 * 2 + 3, 1, [])
