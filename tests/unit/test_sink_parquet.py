"""ParquetSink on synthetic streams: layout, columns, types, PK changes, DDL, resume."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.values import InvalidTemporal
from sinks.parquet import ParquetSink, SinkOptions
from sinks.parquet.testing import StreamBuilder, col

UTC = dt.UTC


def users_columns() -> list:
    return [col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "name", charset=45),
            col(2, T.LONG, "score")]


def read_table(lake: str, db: str, table: str) -> pa.Table:
    files = sorted(glob.glob(os.path.join(lake, db, table, "schema_version=*", "*", "*.parquet")))
    if not files:
        return pa.table({})
    tables = [pq.read_table(f) for f in files]
    return pa.concat_tables(tables, promote_options="permissive").sort_by(
        [("_seq", "ascending"), ("_row", "ascending")])


def feed(sink: ParquetSink, items: list) -> None:
    for item in items:
        sink.handle(item)


@pytest.fixture
def lake(tmp_path):
    return str(tmp_path / "lake")


def test_insert_update_delete_land_with_metadata(lake):
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    assert sink.open() is None
    feed(sink, [b.begin(), b.insert(users, [(1, "ann", 10), (2, "bob", None)]), b.commit()])
    feed(sink, [b.begin(), b.update(users, [((1, "ann", 10), (1, "ann", 11))]),
                b.delete(users, [(2, "bob", None)]), b.commit()])
    checkpoint = sink.flush()
    assert checkpoint is not None and checkpoint.seq == 2
    assert checkpoint.gtid == "0-1-2" and checkpoint.gtid_state == "0-1-2"
    assert checkpoint.gtid_flavor == "mariadb"
    sink.close()

    t = read_table(lake, "shop", "users").to_pylist()
    assert [(r["_op"], r["_seq"], r["_row"], r["id"], r["score"]) for r in t] == [
        ("I", 1, 0, 1, 10), ("I", 1, 1, 2, None), ("U", 2, 0, 1, 11), ("D", 2, 1, 2, None)]
    assert t[0]["_before"] is None
    assert t[2]["_before"] == {"id": 1, "name": "ann", "score": 10}
    assert t[3]["_before"] == {"id": 2, "name": "bob", "score": None}
    assert t[0]["_gtid"] == "0-1-1" and t[0]["_gtid_domain"] == 0
    assert t[0]["_gtid_server_id"] == 1 and t[0]["_gtid_seq"] == 1
    assert t[0]["_binlog_file"] == "binlog.000001" and t[0]["_binlog_pos"] > 4
    assert t[0]["_commit_ts"] == dt.datetime(2026, 1, 1, tzinfo=UTC)
    assert t[0]["_missing"] is None

    files = glob.glob(os.path.join(lake, "shop", "users", "schema_version=1",
                                   "commit_date=2026-01-01", "part-*.parquet"))
    assert len(files) == 1
    assert os.path.basename(files[0]) == "part-0000000000000001-000.parquet"
    schema = json.load(open(os.path.join(lake, "shop", "users", "_schema", "v1.json")))
    assert schema["primary_key"] == ["id"]
    assert [c["spark_type"] for c in schema["columns"]] == ["bigint", "string", "int"]
    assert os.listdir(os.path.join(lake, "_staging")) == []
    assert not os.path.exists(os.path.join(lake, "_commit.json"))


def test_primary_key_change_lands_as_delete_plus_insert(lake):
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.insert(users, [(1, "a", 1), (2, "b", 2)]), b.commit()])
    feed(sink, [b.begin(), b.update(users, [((1, "a", 1), (1, "a", 5)),
                                            ((2, "b", 2), (20, "b", 2))]), b.commit()])
    sink.close()
    rows = read_table(lake, "shop", "users").to_pylist()[2:]
    assert [(r["_op"], r["_row"], r["id"]) for r in rows] == [
        ("U", 0, 1), ("D", 1, 2), ("I", 2, 20)]
    assert rows[1]["_before"]["id"] == 2 and rows[2]["_before"]["id"] == 2


def test_rollback_and_skipped_replay_land_nothing(lake):
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    first = [b.begin(), b.insert(users, [(1, "a", 1)]), b.commit()]
    feed(sink, first)
    feed(sink, [b.begin(), b.insert(users, [(2, "b", 2)]), b.rollback()])
    sink.close()
    sink = ParquetSink(lake)
    checkpoint = sink.open()
    assert checkpoint.seq == 1
    feed(sink, first)  # a replay of an already landed transaction is skipped by GTID
    feed(sink, [b.begin(), b.insert(users, [(3, "c", 3)]), b.commit()])
    sink.close()
    rows = read_table(lake, "shop", "users").to_pylist()
    assert [(r["_seq"], r["id"]) for r in rows] == [(1, 1), (2, 3)]
    assert sink.stats.skipped_transactions == 1


def test_position_based_resume_without_gtids(lake):
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    first = [b.begin(gtid=False), b.insert(users, [(1, "a", 1)]), b.commit()]
    feed(sink, first)
    sink.close()
    sink = ParquetSink(lake)
    checkpoint = sink.open()
    assert checkpoint.gtid_state is None and checkpoint.position == first[-1].end
    feed(sink, first)
    sink.close()
    assert len(read_table(lake, "shop", "users")) == 1


def test_mysql_gtids(lake):
    b = StreamBuilder(flavor="mysql")
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    for i in range(3):
        feed(sink, [b.begin(), b.insert(users, [(i, "x", i)]), b.commit()])
    checkpoint = sink.flush()
    sink.close()
    assert checkpoint.gtid_flavor == "mysql"
    assert checkpoint.gtid_state == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3"
    row = read_table(lake, "shop", "users").to_pylist()[0]
    assert row["_gtid"] == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1"
    assert row["_gtid_uuid"] == "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert row["_gtid_seq"] == 1 and row["_gtid_domain"] is None and row["_gtid_tag"] is None
    sink = ParquetSink(lake)
    sink.open()
    b2 = StreamBuilder(flavor="mysql", first_gtid_seq=2)
    again = b2.table("shop", "users", users_columns())
    feed(sink, [b2.begin(), b2.insert(again, [(9, "dup", 9)]), b2.commit()])
    sink.close()
    assert sink.stats.skipped_transactions == 1


def test_every_type_maps_to_the_intended_arrow_type(lake):
    b = StreamBuilder()
    columns = [
        col(0, T.LONG, "id", pk=True),
        col(1, T.TINY, "t8"), col(2, T.TINY, "u8", unsigned=True),
        col(3, T.SHORT, "s16"), col(4, T.SHORT, "u16", unsigned=True),
        col(5, T.INT24, "m24"), col(6, T.LONG, "u32", unsigned=True),
        col(7, T.LONGLONG, "s64"), col(8, T.LONGLONG, "u64", unsigned=True),
        col(9, T.FLOAT, "f32"), col(10, T.DOUBLE, "f64"),
        col(11, T.NEWDECIMAL, "dec", precision=10, scale=2),
        col(12, T.NEWDECIMAL, "wide", precision=65, scale=30),
        col(13, T.DATE, "d"), col(14, T.DATETIME2, "dt", meta=6),
        col(15, T.TIMESTAMP2, "ts", meta=6), col(16, T.TIME2, "tm", meta=6),
        col(17, T.YEAR, "y"), col(18, T.BIT, "bits", length=64),
        col(19, T.ENUM, "e", enum_values=("small", "large")),
        col(20, T.SET, "st", set_values=("a", "b", "c")),
        col(21, T.JSON, "j"), col(22, T.VARCHAR, "vc", charset=45),
        col(23, T.STRING, "bin", binary=True), col(24, T.BLOB, "blob", binary=True),
        col(25, T.BLOB, "txt", charset=45), col(26, T.GEOMETRY, "geo"),
    ]
    table = b.table("types", "all_types", columns)
    row = (1, -128, 255, -32768, 65535, -8388608, 4294967295, -2**63, 2**64 - 1, 1.5, 2.25,
           Decimal("12345678.91"), Decimal("1" * 35 + "." + "2" * 30), dt.date(2024, 2, 29),
           dt.datetime(2024, 1, 2, 3, 4, 5, 678901),
           dt.datetime(2024, 1, 2, 3, 4, 5, 1, tzinfo=UTC),
           -dt.timedelta(hours=838, minutes=59, seconds=59), 2024, 2**64 - 1, "large", "a,c",
           '{"k": [1, 2]}', "héllo", b"\x00\xff", b"\x01" * 10, "text", b"\x01\x01")
    nulls = (2,) + (None,) * (len(columns) - 1)
    zero = (3,) + (None,) * 12 + (InvalidTemporal("0000-00-00"),
                                  InvalidTemporal("0000-00-00 00:00:00"),
                                  InvalidTemporal("0000-00-00 00:00:00")) + (None,) * 11
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.insert(table, [row, nulls, zero]), b.commit()])
    sink.close()
    t = read_table(lake, "types", "all_types")
    expected = {
        "t8": pa.int8(), "u8": pa.int16(), "s16": pa.int16(), "u16": pa.int32(),
        "m24": pa.int32(), "u32": pa.int64(), "s64": pa.int64(), "u64": pa.decimal128(20, 0),
        "f32": pa.float32(), "f64": pa.float64(), "dec": pa.decimal128(10, 2),
        "wide": pa.string(), "d": pa.date32(), "dt": pa.timestamp("us"),
        "ts": pa.timestamp("us", tz="UTC"), "tm": pa.int64(), "y": pa.int16(),
        "bits": pa.int64(), "e": pa.string(), "st": pa.string(), "j": pa.string(),
        "vc": pa.string(), "bin": pa.binary(), "blob": pa.binary(), "txt": pa.string(),
        "geo": pa.binary(), "_commit_ts": pa.timestamp("us", tz="UTC"),
    }
    for name, arrow_type in expected.items():
        assert t.schema.field(name).type == arrow_type, name
    got = t.to_pylist()
    first = got[0]
    assert first["u64"] == Decimal(2**64 - 1)
    assert first["wide"] == "1" * 35 + "." + "2" * 30
    assert first["tm"] == -(838 * 3600 + 59 * 60 + 59) * 1_000_000
    assert first["bits"] == -1  # BIT(64) all ones: two's complement in int64
    assert first["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 1, tzinfo=UTC)
    assert first["dt"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678901)
    assert all(v is None for k, v in got[1].items() if not k.startswith("_") and k != "id")
    assert got[2]["d"] is None and got[2]["dt"] is None and got[2]["ts"] is None
    assert sink.invalid_temporal_count == 3
    meta = t.schema.field("u64").metadata
    assert meta[b"mysql_type_name"] == b"LONGLONG UNSIGNED"
    assert b"UNSIGNED" in meta[b"flag_names"]
    # Parquet-level: microsecond timestamps, UTC-adjusted only for TIMESTAMP
    pfile = glob.glob(os.path.join(lake, "types", "all_types", "*", "*", "*.parquet"))[0]
    parquet_schema = pq.ParquetFile(pfile).schema
    assert "isAdjustedToUTC=false, timeUnit=microseconds" in str(
        parquet_schema.column(parquet_schema.names.index("dt")).logical_type)
    assert "isAdjustedToUTC=true, timeUnit=microseconds" in str(
        parquet_schema.column(parquet_schema.names.index("ts")).logical_type)
    # a few rows: no codec, not the configured zstd (see test_sink_many_tables)
    assert pq.ParquetFile(pfile).metadata.row_group(0).column(0).compression == "UNCOMPRESSED"


def test_enum_and_set_given_as_numbers_land_as_labels(lake):
    b = StreamBuilder()
    table = b.table("db", "t", [col(0, T.LONG, "id", pk=True),
                                col(1, T.ENUM, "e", enum_values=("x", "y")),
                                col(2, T.SET, "s", set_values=("a", "b", "c"))])
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.insert(table, [(1, 2, 5), (2, 0, 0), (3, "x", {"b"})]), b.commit()])
    sink.close()
    rows = read_table(lake, "db", "t").to_pylist()
    assert [(r["e"], r["s"]) for r in rows] == [("y", "a,c"), ("", ""), ("x", "b")]


def test_schema_change_creates_a_new_version_with_its_ddl(lake):
    b = StreamBuilder()
    v1 = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.insert(v1, [(1, "a", 1)]), b.commit()])
    feed(sink, [b.begin(), b.ddl("shop", "ALTER TABLE users ADD COLUMN email varchar(99)"),
                b.commit()])
    sink.flush()
    sink.close()
    # restart between the DDL and the first row of the new shape
    sink = ParquetSink(lake)
    sink.open()
    v2 = b.table("shop", "users", [*users_columns(), col(3, T.VARCHAR, "email", charset=45)])
    feed(sink, [b.begin(), b.insert(v2, [(2, "b", 2, "b@x")]), b.commit()])
    v1_again = b.table("shop", "users", users_columns())
    feed(sink, [b.begin(), b.insert(v1_again, [(3, "c", 3)]), b.commit()])
    sink.close()
    base = os.path.join(lake, "shop", "users")
    assert sorted(os.listdir(os.path.join(base, "_schema"))) == ["v1.json", "v2.json", "v3.json"]
    v2doc = json.load(open(os.path.join(base, "_schema", "v2.json")))
    assert v2doc["created"]["ddl"] == "ALTER TABLE users ADD COLUMN email varchar(99)"
    assert v2doc["created"]["ddl_type"] == 5
    assert [c["name"] for c in v2doc["columns"]] == ["id", "name", "score", "email"]
    assert pq.read_table(glob.glob(os.path.join(base, "schema_version=2", "*", "*"))[0]
                         ).column("email").to_pylist() == ["b@x"]
    ddl_files = glob.glob(os.path.join(lake, "_ddl", "shop", "*.jsonl"))
    entries = [json.loads(line) for f in ddl_files for line in open(f)]
    assert [(e["seq"], e["ddl_type"], e["tables"]) for e in entries] == [
        (2, 5, [["shop", "users"]])]


def test_no_column_names_land_as_col_n(lake, caplog):
    b = StreamBuilder()
    table = b.table("db", "anon", users_columns(), full_metadata=False)
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.insert(table, [(1, "a", 1)]), b.commit()])
    sink.close()
    assert read_table(lake, "db", "anon").column_names[:3] == ["col_1", "col_2", "col_3"]
    assert "binlog_row_metadata" in caplog.text


def test_minimal_images_record_missing_columns(lake):
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.update(users, [((1,), (7,))], before_columns=[0], columns=[2]),
                b.delete(users, [(1,)], columns=[0]), b.commit()])
    sink.close()
    rows = read_table(lake, "shop", "users").to_pylist()
    assert rows[0]["_op"] == "U" and rows[0]["score"] == 7 and rows[0]["id"] is None
    assert rows[0]["_missing"] == ["id", "name"]
    assert rows[1]["_op"] == "D" and rows[1]["id"] == 1 and rows[1]["_missing"] == ["name", "score"]


def test_over_many_tables_a_full_memory_budget_flushes_instead_of_opening_files(
        lake, monkeypatch):
    """Relieving memory by row groups opens a file per table; over more than MAX_OPEN_FILES
    tables the sink flushes at the next commit instead (no time flush while catching up)."""
    from sinks.parquet import parts

    monkeypatch.setattr(parts, "MAX_OPEN_FILES", 3)
    b = StreamBuilder()
    tables = [b.table("shop", f"t{i}", users_columns()) for i in range(5)]
    sink = ParquetSink(lake, SinkOptions(memory_limit_bytes=2_000))
    sink.open()
    for n in range(60):
        feed(sink, [b.begin(), b.insert(tables[n % 5], [(n, "x" * 20, n)]), b.commit()])
        assert all(part.writer is None for part in sink._parts.parts.values())
    # ~204 estimated bytes a row: every 10th commit passes the 2,000-byte budget and flushes
    assert sink.stats.flushes == 6
    assert sink.durable_position.seq == 60
    sink.close()
    files = glob.glob(os.path.join(lake, "shop", "t*", "schema_version=1", "*", "*.parquet"))
    assert len(files) == 5 * 6
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == 60


def test_names_that_spark_would_hide_are_escaped(lake):
    b = StreamBuilder()
    t = b.table("_db", "_t", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.insert(t, [(1, "a", 1)]), b.commit()])
    sink.close()
    assert os.path.isdir(os.path.join(lake, "%5Fdb", "%5Ft", "schema_version=1"))


def test_flush_triggers_by_rows_time_and_size(lake):
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake, SinkOptions(flush_rows=5, flush_interval_s=2.0))
    sink.open()
    for i in range(4):
        feed(sink, [b.begin(), b.insert(users, [(i, "x", i)]), b.commit()])
    assert sink.durable_position is None
    feed(sink, [b.begin(), b.insert(users, [(9, "x", 9)]), b.commit()])
    assert sink.durable_position.seq == 5
    feed(sink, [b.begin(), b.insert(users, [(10, "x", 10)]), b.commit()])
    assert not sink.maybe_flush(100.0)
    assert not sink.maybe_flush(101.0)
    assert sink.maybe_flush(102.5)
    assert sink.durable_position.seq == 6
    assert not sink.maybe_flush(200.0)
    # behind (a backlog): time flushes wait catch_up_interval_s (60 s by default)
    feed(sink, [b.begin(), b.insert(users, [(11, "x", 11)]), b.commit()])
    assert not sink.maybe_flush(300.0, behind=True)
    assert not sink.maybe_flush(359.0, behind=True)
    assert sink.durable_position.seq == 6
    assert sink.maybe_flush(360.0, behind=True)
    assert sink.durable_position.seq == 7
    feed(sink, [b.begin(), b.insert(users, [(12, "x", 12)]), b.commit()])
    assert not sink.maybe_flush(400.0, behind=True)
    assert not sink.maybe_flush(410.0, behind=True)
    assert sink.maybe_flush(410.0)  # caught up: what waited flush_interval_s lands at once
    assert sink.durable_position.seq == 8
    sink.close()

    lake2 = lake + "2"
    sink = ParquetSink(lake2, SinkOptions(file_size_bytes=1, row_group_bytes=1))
    sink.open()
    feed(sink, [b.begin(), b.insert(users, [(1, "x", 1)]), b.commit()])
    assert sink.durable_position.seq == 1  # the file reached its size: flushed at commit
    sink.close()


def test_spilled_transaction_lands_whole_and_rollback_of_spill_leaves_nothing(lake):
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    opts = SinkOptions(memory_limit_bytes=64 * 1024, row_group_bytes=32 * 1024,
                       file_size_bytes=256 * 1024)
    sink = ParquetSink(lake, opts)
    sink.open()
    items = [b.begin()]
    n = 0
    for _ in range(50):
        items.append(b.insert(users, [(n + i, f"name{n + i}", i) for i in range(500)]))
        n += 500
    feed(sink, items)
    assert sink.stats.spilled_batches > 0
    assert sink.durable_position is None
    feed(sink, [b.commit()])
    feed(sink, [b.begin(), *[b.insert(users, [(10**6 + i, "r", 0) for i in range(500)])
                             for _ in range(20)], b.rollback()])
    sink.close()
    t = read_table(lake, "shop", "users")
    assert len(t) == n
    assert t.column("_row").to_pylist() == list(range(n))
    assert set(t.column("_seq").to_pylist()) == {1}
    files = glob.glob(os.path.join(lake, "shop", "users", "*", "*", "*.parquet"))
    assert len(files) > 1
    assert os.listdir(os.path.join(lake, "_staging")) == []


def test_commit_date_partitions_follow_commit_time(lake):
    b = StreamBuilder(start_time_us=1_767_225_600_000_000 - 1_000_000)  # 2025-12-31 23:59:59
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    feed(sink, [b.begin(), b.insert(users, [(1, "a", 1)]), b.commit()])
    feed(sink, [b.begin(), b.insert(users, [(2, "b", 2)]), b.commit()])
    sink.close()
    assert sorted(os.listdir(os.path.join(lake, "shop", "users", "schema_version=1"))) == [
        "commit_date=2025-12-31", "commit_date=2026-01-01"]


def test_pending_says_what_the_next_flush_lands_and_when(lake):
    """For the progress lines: committed, not durable, and the time flush's due time (the
    catch-up interval while behind); a flush empties it."""
    from sinks.contract import Pending

    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake, SinkOptions(flush_interval_s=2.0, catch_up_interval_s=60.0,
                                         file_size_bytes=1 << 20))
    sink.open()
    assert sink.pending(100.0) == Pending(0, 0, None, 1 << 20)
    feed(sink, [b.begin(), b.insert(users, [(1, "a", 1), (2, "b", 2)]), b.commit()])
    assert not sink.flush_due(100.0, behind=True)  # the clock starts at the first look
    pending = sink.pending(110.0, behind=True)
    assert (pending.transactions, pending.lands_in) == (1, 50.0) and pending.bytes > 0
    assert sink.pending(110.0).lands_in == 0.0  # not behind: overdue, lands at the next tick
    sink.flush()
    assert sink.pending(111.0) == Pending(0, 0, None, 1 << 20)
    sink.close()
