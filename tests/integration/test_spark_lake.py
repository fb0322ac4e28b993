"""Spark reads what ParquetSink lands: types, all schema versions, current state, streaming."""

from __future__ import annotations

import datetime as dt
import glob
import os
import subprocess
import sys
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col
from sinks.spark.readers import read_changes, stream_changes
from sinks.spark.state import current_state, read_current_state
from tests.unit.test_sink_crash import _replay_model, land, workload

pytestmark = pytest.mark.spark
UTC = dt.UTC


def feed(lake: str, *transactions: list) -> None:
    sink = ParquetSink(lake)
    sink.open()
    for items in transactions:
        for item in items:
            sink.handle(item)
    sink.close()


def test_every_type_reads_with_the_intended_spark_type(spark, tmp_path):  # noqa: F811
    from pyspark.sql import types as S

    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    columns = [
        col(0, T.LONG, "id", pk=True), col(1, T.TINY, "t8"), col(2, T.TINY, "u8", unsigned=True),
        col(3, T.SHORT, "u16", unsigned=True), col(4, T.INT24, "m24"),
        col(5, T.LONG, "u32", unsigned=True), col(6, T.LONGLONG, "s64"),
        col(7, T.LONGLONG, "u64", unsigned=True), col(8, T.FLOAT, "f32"),
        col(9, T.DOUBLE, "f64"), col(10, T.NEWDECIMAL, "dec", precision=38, scale=10),
        col(11, T.NEWDECIMAL, "wide", precision=65, scale=2), col(12, T.DATE, "d"),
        col(13, T.DATETIME2, "dt"), col(14, T.TIMESTAMP2, "ts"), col(15, T.TIME2, "tm"),
        col(16, T.YEAR, "y"), col(17, T.BIT, "bits"),
        col(18, T.ENUM, "e", enum_values=("a", "b")), col(19, T.SET, "st", set_values=("x",)),
        col(20, T.JSON, "j"), col(21, T.VARCHAR, "vc", charset=45),
        col(22, T.STRING, "bin", binary=True), col(23, T.GEOMETRY, "geo"),
        col(24, T.VARCHAR, "commit_date", charset=45),
    ]
    table = b.table("types", "all_types", columns)
    row = (1, -1, 255, 65535, -5, 4294967295, -2**63, 2**64 - 1, 0.5, 0.25,
           Decimal("1234567890123456789012345678.0123456789"), Decimal("9" * 60 + ".25"),
           dt.date(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
           dt.datetime(2038, 1, 19, 3, 14, 7, 499999, tzinfo=UTC), dt.timedelta(hours=-838),
           1901, 5, "b", "x", "[]", "ü", b"\x00", b"\x01\x02", "a column named like a partition")
    feed(lake, [b.begin(), b.insert(table, [row]), b.commit()])
    df = read_changes(spark, lake, "types", "all_types")
    expected = {
        "t8": S.ByteType(), "u8": S.ShortType(), "u16": S.IntegerType(), "m24": S.IntegerType(),
        "u32": S.LongType(), "s64": S.LongType(), "u64": S.DecimalType(20, 0),
        "f32": S.FloatType(), "f64": S.DoubleType(), "dec": S.DecimalType(38, 10),
        "wide": S.StringType(), "d": S.DateType(), "dt": S.TimestampNTZType(),
        "ts": S.TimestampType(), "tm": S.LongType(), "y": S.ShortType(), "bits": S.LongType(),
        "e": S.StringType(), "st": S.StringType(), "j": S.StringType(), "vc": S.StringType(),
        "bin": S.BinaryType(), "geo": S.BinaryType(), "commit_date_": S.StringType(),
        "_op": S.StringType(), "_seq": S.LongType(), "_row": S.LongType(),
        "_commit_ts": S.TimestampType(), "_missing": S.ArrayType(S.StringType()),
        "schema_version": S.IntegerType(), "commit_date": S.DateType(),
    }
    got = {f.name: f.dataType for f in df.schema.fields}
    for name, spark_type in expected.items():
        assert got[name] == spark_type, name
    # Spark reads the files with the same types when it infers them itself
    inferred = spark.read.parquet(os.path.join(lake, "types", "all_types"))
    inferred_types = {f.name: f.dataType for f in inferred.schema.fields}
    for name, spark_type in expected.items():
        if name != "schema_version":
            assert inferred_types[name] == spark_type, name
    r = df.collect()[0]
    assert r["u64"] == Decimal(2**64 - 1)
    assert r["dec"] == Decimal("1234567890123456789012345678.0123456789")
    assert r["wide"] == "9" * 60 + ".25"
    assert r["d"] == dt.date(1000, 1, 1)
    assert r["dt"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert r["ts"].replace(tzinfo=UTC) == dt.datetime(2038, 1, 19, 3, 14, 7, 499999,
                                                      tzinfo=UTC) or r["ts"].tzinfo is not None
    assert r["tm"] == -838 * 3600 * 1_000_000
    assert (r["e"], r["st"], r["bin"], r["geo"]) == ("b", "x", bytearray(b"\x00"),
                                                     bytearray(b"\x01\x02"))
    assert r["commit_date"] == dt.date(2026, 1, 1) and r["schema_version"] == 1


def _as_tuple(row, names):
    return tuple(row[n] for n in names)


def test_current_state_equals_the_source_model(spark, tmp_path):  # noqa: F811
    lake = str(tmp_path / "lake")
    transactions = workload()
    land(lake, transactions)
    state = read_current_state(spark, lake, "bank", "accounts")
    assert state.columns == ["id", "owner", "balance", "note"]
    got = {r["id"]: _as_tuple(r, state.columns) for r in state.collect()}
    assert got == _replay_model(transactions, 4)
    changes = read_changes(spark, lake, "bank", "accounts")
    state2 = current_state(changes)  # key and columns from the field metadata
    assert state2.columns == state.columns
    assert {r["id"]: _as_tuple(r, state2.columns) for r in state2.collect()} == got
    assert sorted(r[0] for r in changes.select("schema_version").distinct().collect()) == [1, 2]
    assert changes.groupBy("_seq", "_row").count().where("count > 1").count() == 0


def test_versions_with_different_types_union_by_name(spark, tmp_path):  # noqa: F811
    from pyspark.sql import types as S

    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    v1 = b.table("db", "t", [col(0, T.LONG, "id", pk=True), col(1, T.LONG, "n"),
                             col(2, T.VARCHAR, "gone", charset=45)])
    v2 = b.table("db", "t", [col(0, T.LONG, "id", pk=True), col(1, T.LONGLONG, "n"),
                             col(2, T.NEWDECIMAL, "amount", precision=5, scale=2)])
    feed(lake, [b.begin(), b.insert(v1, [(1, 10, "x"), (2, 20, "y")]), b.commit()],
         [b.begin(), b.ddl("db", "ALTER TABLE t MODIFY n BIGINT, DROP gone, ADD amount "
                                 "DECIMAL(5,2)"), b.commit()],
         [b.begin(), b.update(v2, [((2, 20, None), (2, 2**40, Decimal("1.50")))]), b.commit()])
    df = read_changes(spark, lake, "db", "t")
    assert df.schema["n"].dataType == S.LongType()
    assert df.schema["_before"].dataType.names == ["id", "n", "amount", "gone"]
    assert df.columns[:4] == ["id", "n", "amount", "gone"]
    rows = sorted(df.collect(), key=lambda r: (r["_seq"], r["_row"]))
    assert [(r["id"], r["n"], r["gone"], r["amount"], r["schema_version"]) for r in rows] == [
        (1, 10, "x", None, 1), (2, 20, "y", None, 1), (2, 2**40, None, Decimal("1.50"), 2)]
    assert rows[2]["_before"]["n"] == 20 and rows[0]["_before"] is None
    state = read_current_state(spark, lake, "db", "t")
    assert sorted(_as_tuple(r, state.columns) for r in state.collect()) == [
        (1, 10, None), (2, 2**40, Decimal("1.50"))]


def test_partial_row_images_are_merged(spark, tmp_path):  # noqa: F811
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t = b.table("db", "m", [col(0, T.LONG, "id", pk=True), col(1, T.LONG, "a"),
                            col(2, T.BLOB, "big", binary=True)])
    feed(lake, [b.begin(), b.insert(t, [(1, 1, b"blob1"), (2, 2, b"blob2")]), b.commit()],
         # MINIMAL: before image = key, after image = changed columns only
         [b.begin(), b.update(t, [((1,), (10,))], before_columns=[0], columns=[1]),
          b.update(t, [((2,), (None,))], before_columns=[0], columns=[2]), b.commit()],
         [b.begin(), b.update(t, [((1,), (b"new",))], before_columns=[0], columns=[2]),
          b.commit()])
    state = read_current_state(spark, lake, "db", "m")
    assert sorted(_as_tuple(r, state.columns) for r in state.collect()) == [
        (1, 10, bytearray(b"new")), (2, 2, None)]


def test_truncate_resets_the_current_state(spark, tmp_path):  # noqa: F811
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t = b.table("db", "r", [col(0, T.LONG, "id", pk=True)])
    feed(lake, [b.begin(), b.insert(t, [(1,), (2,)]), b.commit()],
         [b.begin(), b.ddl("db", "TRUNCATE TABLE r"), b.commit()],
         [b.begin(), b.insert(t, [(3,)]), b.commit()])
    state = read_current_state(spark, lake, "db", "r")
    assert [r["id"] for r in state.collect()] == [3]
    changes = read_changes(spark, lake, "db", "r")
    assert current_state(changes).count() == 3  # the raw reduction keeps history


def test_streaming_picks_up_a_later_transaction(spark, tmp_path):  # noqa: F811
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t = b.table("db", "s", [col(0, T.LONG, "id", pk=True), col(1, T.VARCHAR, "v", charset=45)])
    sink = ParquetSink(lake)
    sink.open()
    for item in [b.begin(), b.insert(t, [(1, "a")]), b.commit()]:
        sink.handle(item)
    sink.flush()
    stream = stream_changes(spark, lake, "db", "s", maxFilesPerTrigger="10")
    query = (stream.writeStream.format("memory").queryName("binlake_stream_test")
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        query.processAllAvailable()
        assert [r["id"] for r in spark.sql("select id from binlake_stream_test").collect()] == [1]
        for item in [b.begin(), b.insert(t, [(2, "b"), (3, "c")]), b.commit()]:
            sink.handle(item)
        sink.flush()
        query.processAllAvailable()
        got = spark.sql("select id, _op, _seq, schema_version, commit_date "
                        "from binlake_stream_test order by id").collect()
        assert [(r["id"], r["_op"], r["_seq"], r["schema_version"]) for r in got] == [
            (1, "I", 1, 1), (2, "I", 2, 1), (3, "I", 2, 1)]
        assert got[0]["commit_date"] == dt.date(2026, 1, 1)
    finally:
        query.stop()
        sink.close()


def test_current_state_job_runs_as_a_module(tmp_path):
    lake = str(tmp_path / "lake")
    transactions = workload(transactions=60)
    land(lake, transactions)
    out = str(tmp_path / "state")
    env = dict(os.environ, PYTHONPATH=os.getcwd(), SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, "-m", "sinks.spark.current_state", "--lake", lake,
                           "--db", "bank", "--table", "accounts", "--out", out, "--master",
                           "local[1]"], check=True, env=env, capture_output=True, text=True,
                          timeout=300)
    files = glob.glob(os.path.join(out, "*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    got = {r["id"]: (r["id"], r["owner"], r["balance"], r["note"]) for r in rows}
    expected = _replay_model(transactions, 4)
    assert got == expected
    assert done.stdout.splitlines()[-1] == (
        f"bank.accounts: {len(expected)} rows of current state in {out} (Parquet, mode "
        f"overwrite, from the lake {lake})")


def test_a_column_added_with_a_default_has_it_in_older_rows(spark, tmp_path):  # noqa: F811
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    v1 = b.table("db", "d", [col(0, T.LONG, "id", pk=True)])
    v2 = b.table("db", "d", [col(0, T.LONG, "id", pk=True), col(1, T.LONG, "n"),
                             col(2, T.VARCHAR, "s", charset=45)])
    feed(lake, [b.begin(), b.insert(v1, [(1,), (2,)]), b.commit()],
         [b.begin(), b.ddl("db", "ALTER TABLE d ADD n INT NOT NULL DEFAULT 7, ADD s text"),
          b.commit()],
         [b.begin(), b.insert(v2, [(3, 8, "x")]), b.update(v2, [((2, 7, None), (2, 9, None))]),
          b.commit()])
    state = read_current_state(spark, lake, "db", "d")
    assert sorted(_as_tuple(r, state.columns) for r in state.collect()) == [
        (1, 7, None), (2, 9, None), (3, 8, "x")]


def test_native_small_files_read_in_spark_as_in_pyarrow(spark, tmp_path, monkeypatch):  # noqa: F811
    """Files the native small-file writer wrote (sinks/parquet/small_file.py) — every operation,
    ``_before``, ``_missing``, ``_json_diff``, NULLs — read in Spark as pyarrow reads them."""
    from tests.unit.test_native_parquet import land, spy_native, stream

    lake = str(tmp_path / "lake")
    wrote = spy_native(monkeypatch)
    files = land(lake, stream())
    assert wrote == [True, True]
    names = ["id", "name", "amount", "ts", "ratio", "tiny", "day", "bin", "doc", "u64", "_op",
             "_seq", "_row", "_gtid", "_binlog_pos", "_missing", "_json_diff"]
    for table, path in (("t1", files[0]), ("t2", files[1])):
        want = pq.read_table(path).to_pylist()
        df = read_changes(spark, lake, "db", table).orderBy("_seq", "_row")
        got = df.collect()
        assert len(got) == len(want) == (8 if table == "t1" else 2)
        for row, expected in zip(got, want, strict=True):
            present = [n for n in names if n in expected]
            assert [bytes(v) if isinstance(v, bytearray) else v
                    for v in _as_tuple(row, present)] == [expected[n] for n in present]
            before = row["_before"].asDict() if row["_before"] is not None else None
            if before is not None:
                before = {k: bytes(v) if isinstance(v, bytearray) else v
                          for k, v in before.items()}
            assert before == expected["_before"]
        utc = df.selectExpr("unix_micros(_commit_ts) AS us").collect()
        assert [r["us"] for r in utc] == [
            int(r["_commit_ts"].timestamp() * 1_000_000) for r in want]

