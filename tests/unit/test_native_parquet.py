"""The native small-file Parquet writer against pyarrow, its reference (sinks/parquet/small_file.py).

Every file the native writer produces must read back — through pyarrow — as the table pyarrow's
own file of the same rows reads back as: the same values, types, schema and field metadata, the
same Parquet schema, and the same footer statistics on ``_seq`` and ``_commit_ts``. Covered here:
the type matrix (every Arrow type the sink lands, and booleans and time64[us] besides, NULLs
everywhere, required fields, a struct with NULL structs and NULL children, a list with NULL and
empty lists and NULL elements, slices and several chunks), booleans of every length (bit-packed),
the sink's whole type mapping (every column type it lands is covered), random tables (``BINLAKE_NATIVE_FUZZ_ROUNDS`` of them, a few by default; more
under the sanitizers, bench/native_asan.sh), what it does not cover (None: pyarrow writes those),
damaged templates (None, never a crash), and the sink's every operation (I/U/D, ``_before``,
``_missing``, ``_json_diff``) landed through ``ParquetSink`` by each writer. The flush's pool of
native writer threads (``files.NativeFiles``) must write the very bytes ``write`` returns, hand
back to pyarrow what it does not cover, break the flush on a file it cannot write (nothing
committed, no further file taken) and land every file of a flush over many tables.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import glob
import os
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.events import EventType
from protocol.binlog.values import JsonDiff
from sinks.errors import SinkStateError
from sinks.parquet import ParquetSink, SinkOptions, small_file
from sinks.parquet import files as F
from sinks.parquet.testing import StreamBuilder, col

from .test_sink_many_tables import _failed_flush

pytestmark = pytest.mark.skipif(not small_file.ENABLED,
                                reason="the native Parquet writer is not built")

STATS = F.SMALL_FILE_STATISTICS
ROUNDS = int(os.environ.get("BINLAKE_NATIVE_FUZZ_ROUNDS", "60"))


def _reference(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression="none", use_dictionary=False,
                          write_statistics=list(STATS)) as writer:
        writer.write_table(table, row_group_size=max(1, table.num_rows))
    return bytes(sink.getvalue())


def _statistics(data: bytes) -> dict[str, Any]:
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    out = {}
    for group in range(meta.num_row_groups):
        for i in range(meta.num_columns):
            column = meta.row_group(group).column(i)
            s = column.statistics
            if s is not None:
                out[column.path_in_schema] = (s.has_min_max, s.min if s.has_min_max else None,
                                              s.max if s.has_min_max else None, s.null_count)
    return out


def _same(table: pa.Table) -> bytes:
    """The native file of ``table``, once checked against pyarrow's."""
    native = small_file.write(table, STATS)
    assert native is not None
    reference = _reference(table)
    got = pq.read_table(pa.BufferReader(native))
    want = pq.read_table(pa.BufferReader(reference))
    assert got.schema.equals(want.schema, check_metadata=True)
    for field in want.schema:
        assert got.schema.field(field.name).metadata == field.metadata
    assert got.equals(want)
    assert got.equals(table.combine_chunks()) or got.to_pylist() == table.to_pylist()
    ours = pq.ParquetFile(pa.BufferReader(native)).metadata
    theirs = pq.ParquetFile(pa.BufferReader(reference)).metadata
    assert ours.schema.equals(theirs.schema)
    assert (ours.num_rows, ours.num_row_groups) == (theirs.num_rows, 1)
    assert ours.metadata == theirs.metadata  # the footer's key-value metadata, ARROW:schema too
    assert _statistics(native) == _statistics(reference)
    return native


def _decimal_type(precision: int) -> pa.DataType:
    return pa.decimal128(precision, min(precision, 3))


def _values(arrow_type: pa.DataType, n: int, rng: random.Random, nulls: float) -> list[Any]:
    def one() -> Any:
        if pa.types.is_boolean(arrow_type):
            return rng.random() < 0.5
        if pa.types.is_time64(arrow_type):
            return rng.choice([0, 86_399_999_999, rng.randrange(86_400_000_000)])
        if pa.types.is_integer(arrow_type):
            bits = arrow_type.bit_width
            return rng.choice([-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, 0, -1,
                               rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))])
        if pa.types.is_floating(arrow_type):
            return rng.choice([0.0, -0.0, 1.5, -2.25e300 if arrow_type.bit_width == 64 else -2.5,
                               float("inf"), rng.random()])
        if pa.types.is_decimal(arrow_type):
            digits = rng.randrange(arrow_type.precision + 1)
            unscaled = rng.randrange(-(10 ** digits) + 1, 10 ** digits) if digits else 0
            return Decimal(unscaled).scaleb(-arrow_type.scale)
        if pa.types.is_date32(arrow_type):
            return dt.date(1, 1, 1) + dt.timedelta(days=rng.randrange(3_652_058))
        if pa.types.is_timestamp(arrow_type):
            micros = rng.randrange(-62_135_596_800_000_000, 253_402_300_799_999_999)
            return pa.scalar(micros, pa.int64()).cast(arrow_type).as_py()
        if pa.types.is_string(arrow_type):
            return "".join(rng.choice("aé€😀 ") for _ in range(rng.randrange(6)))
        if pa.types.is_binary(arrow_type):
            return bytes(rng.randrange(256) for _ in range(rng.randrange(6)))
        raise AssertionError(arrow_type)
    return [None if rng.random() < nulls else one() for _ in range(n)]


PRIMITIVES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
              pa.date32(), pa.timestamp("us"), pa.timestamp("us", tz="UTC"), pa.string(),
              pa.binary(), pa.decimal128(20, 0), pa.decimal128(12, 2), pa.decimal128(38, 10),
              pa.decimal128(1, 0), pa.bool_(), pa.time64("us")]


def _array(arrow_type: pa.DataType, n: int, rng: random.Random, nulls: float) -> pa.Array:
    return pa.array(_values(arrow_type, n, rng, nulls), arrow_type)


def _metadata_columns(n: int, rng: random.Random, nulls: float) -> list[tuple[pa.Field, pa.Array]]:
    seq = sorted(rng.randrange(1, 2**62) for _ in range(n))
    commit = _array(pa.timestamp("us", tz="UTC"), n, rng, nulls)
    return [(pa.field("_op", pa.string(), nullable=False),
             pa.array([rng.choice("IUD") for _ in range(n)])),
            (pa.field("_seq", pa.int64(), nullable=False), pa.array(seq, pa.int64())),
            (pa.field("_commit_ts", pa.timestamp("us", tz="UTC")), commit)]


def _struct(fields: list[pa.Field], n: int, rng: random.Random, nulls: float) -> pa.Array:
    children = [_array(f.type, n, rng, nulls if f.nullable else 0.0) for f in fields]
    mask = pa.array([rng.random() < nulls for _ in range(n)])
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


def _list(n: int, rng: random.Random, nulls: float, item_nullable: bool = True) -> pa.Array:
    rows: list[list[str | None] | None] = []
    for _ in range(n):
        if rng.random() < nulls:
            rows.append(None)
        else:
            rows.append([None if item_nullable and rng.random() < nulls else rng.choice("abc")
                         for _ in range(rng.randrange(4))])
    return pa.array(rows, pa.list_(pa.field("element", pa.string(), nullable=item_nullable)))


def _random_table(rng: random.Random) -> pa.Table:
    n = rng.choice([1, 2, 7, 8, 9, 50, 300])
    nulls = rng.choice([0.0, 0.1, 0.5, 1.0])
    fields: list[pa.Field] = []
    arrays: list[pa.Array] = []
    for i in range(rng.randrange(1, 8)):
        arrow_type = rng.choice(PRIMITIVES + [_decimal_type(rng.randrange(1, 39))])
        nullable = rng.random() < 0.8
        meta = {"mysql_type": str(i).encode()} if rng.random() < 0.5 else None
        fields.append(pa.field(f"c{i}", arrow_type, nullable=nullable, metadata=meta))
        arrays.append(_array(arrow_type, n, rng, nulls if nullable else 0.0))
    for field, array in _metadata_columns(n, rng, nulls):
        fields.append(field)
        arrays.append(array)
    if rng.random() < 0.7:
        fields.append(pa.field("_missing", pa.list_(pa.field("element", pa.string()))))
        arrays.append(_list(n, rng, nulls))
    if rng.random() < 0.7:
        children = [pa.field(f.name, f.type, nullable=f.nullable, metadata=f.metadata)
                    for f in fields[: max(1, len(fields) - 3)] if not f.name.startswith("_")]
        if children:
            fields.append(pa.field("_before", pa.struct(children)))
            arrays.append(_struct(children, n, rng, nulls))
    schema = pa.schema(fields, metadata={"binlake.table": "t"} if rng.random() < 0.5 else None)
    table = pa.Table.from_arrays(arrays, schema=schema)
    if rng.random() < 0.3 and n > 2:  # a slice: offsets into every buffer
        start = rng.randrange(1, n)
        table = table.slice(start, rng.randrange(1, n - start + 1))
    if rng.random() < 0.2 and table.num_rows > 1:  # several chunks: combined first
        half = table.num_rows // 2
        table = pa.concat_tables([table.slice(0, half), table.slice(half)])
    return table


def _matrix() -> pa.Table:
    """Every type the sink lands, NULLs everywhere, required fields, ``_missing``, ``_before``."""
    rng = random.Random(17)
    n = 64
    fields = [pa.field(f"p{i}", t, metadata={"mysql_type_name": str(t).encode()})
              for i, t in enumerate(PRIMITIVES)]
    fields += [pa.field(f"d{p}", _decimal_type(p)) for p in range(1, 39)]  # every FLBA width
    fields += [pa.field("required_int", pa.int32(), nullable=False),
               pa.field("required_text", pa.string(), nullable=False),
               pa.field("required_bool", pa.bool_(), nullable=False),
               pa.field("required_time", pa.time64("us"), nullable=False)]
    arrays = [_array(f.type, n, rng, 0.3 if f.nullable else 0.0) for f in fields]
    for name, values in (("all_true", [True] * n), ("all_false", [False] * n),
                         ("all_null_bool", [None] * n)):
        fields.append(pa.field(name, pa.bool_()))
        arrays.append(pa.array(values, pa.bool_()))
    fields.append(pa.field("all_null_time", pa.time64("us")))
    arrays.append(pa.array([None] * n, pa.time64("us")))
    for field, array in _metadata_columns(n, rng, 0.3):
        fields.append(field)
        arrays.append(array)
    fields.append(pa.field("_missing", pa.list_(pa.field("element", pa.string()))))
    arrays.append(_list(n, rng, 0.3))
    fields.append(pa.field("required_list", pa.list_(pa.field("element", pa.string(),
                                                                nullable=False)),
                           nullable=False))
    arrays.append(_list(n, rng, 0.0, item_nullable=False))
    fields.append(pa.field("_json_diff", pa.string()))
    arrays.append(_array(pa.string(), n, rng, 0.8))
    children = [pa.field(f.name, f.type, nullable=f.nullable, metadata=f.metadata)
                for f in fields[:20]]
    fields.append(pa.field("_before", pa.struct(children)))
    arrays.append(_struct(children, n, rng, 0.3))
    schema = pa.schema(fields, metadata={"binlake.database": "db", "binlake.table": "t"})
    return pa.Table.from_arrays(arrays, schema=schema)


def _matrix_variants() -> list[pa.Table]:
    """The matrix whole, sliced (offsets), in chunks, and with every ``_commit_ts`` NULL (no
    min/max, all nulls counted)."""
    table = _matrix()
    commit = pa.array([None] * table.num_rows, pa.timestamp("us", tz="UTC"))
    return [table, table.slice(5, 40), pa.concat_tables([table.slice(0, 10), table.slice(10)]),
            table.set_column(table.schema.get_field_index("_commit_ts"),
                             table.schema.field("_commit_ts"), commit)]


def test_the_type_matrix_reads_back_as_pyarrow_writes_it() -> None:
    for table in _matrix_variants():
        _same(table)


def _bits(pattern: str, n: int, rng: random.Random) -> list[bool | None]:
    return [{"true": True, "false": False, "null": None}.get(
        pattern, rng.choice([True, False, None] if pattern == "mixed" else [True, False]))
        for _ in range(n)]


@pytest.mark.parametrize("pattern", ["true", "false", "null", "mixed", "no-null"])
def test_booleans_and_times_of_every_length_read_back_as_pyarrow_writes_them(pattern) -> None:
    """BOOLEAN is bit-packed (a byte per eight values, the last one partly filled), so every
    length from 1 to 17, at the top level, in ``_before`` (NULL structs too), in a list, as a
    required field, sliced at an odd offset; time64[us] beside it (INT64 under TIME(MICROS))."""
    rng = random.Random(pattern)
    for n in range(1, 18):
        flags = pa.array(_bits(pattern, n, rng), pa.bool_())
        times = pa.array([None if b is None else rng.randrange(86_400_000_000)
                          for b in _bits(pattern, n, rng)], pa.time64("us"))
        required = pa.array([bool(b) for b in _bits(pattern, n, rng)], pa.bool_())
        children = [pa.field("flag", pa.bool_()), pa.field("at", pa.time64("us"))]
        before = pa.StructArray.from_arrays(
            [flags, times], fields=children,
            mask=pa.array([pattern == "mixed" and rng.random() < 0.3 for _ in range(n)]))
        lists = pa.array([_bits(pattern, rng.randrange(4), rng) for _ in range(n)],
                         pa.list_(pa.bool_()))
        table = pa.table({"flag": flags, "at": times, "required": required, "flags": lists,
                          "_seq": pa.array(range(n), pa.int64()), "_before": before},
                         schema=pa.schema([
                             pa.field("flag", pa.bool_()), pa.field("at", pa.time64("us")),
                             pa.field("required", pa.bool_(), nullable=False),
                             pa.field("flags", pa.list_(pa.bool_())),
                             pa.field("_seq", pa.int64(), nullable=False),
                             pa.field("_before", pa.struct(children))]))
        _same(table)
        if n > 3:
            _same(table.slice(3))  # the values' bits start mid-byte


def _job(path: str, table: pa.Table) -> F.ParquetJob:
    return F.ParquetJob(path, table.to_batches(), table.schema, "zstd", None, "none",
                        1 << 20)


def test_the_pool_writes_the_files_write_makes_byte_for_byte(tmp_path, monkeypatch) -> None:
    """The flush's small files come from the pool's C threads (files.NativeFiles): the same
    encoder as ``write``, so the same bytes, over the matrix and random tables."""
    rng = random.Random(4242)
    tables = _matrix_variants() + [_random_table(rng) for _ in range(ROUNDS)]
    paths = [str(tmp_path / f"{i}.parquet") for i in range(len(tables))]
    open(paths[0], "wb").write(b"x" * 1_000_000)  # longer than the file: cut to its length
    wrote = spy_native(monkeypatch)
    F.run_all(_job(path, table) for path, table in zip(paths, tables, strict=True))
    assert wrote == [True] * len(tables)
    for path, table in zip(paths, tables, strict=True):
        assert open(path, "rb").read() == small_file.write(table, STATS)


def test_rows_the_pool_does_not_cover_land_through_pyarrow(tmp_path, monkeypatch) -> None:
    covered = pa.table({"x": pa.array([1, None], pa.int32()), "_seq": pa.array([1, 2])})
    uncovered = pa.table({"x": pa.array(["a", None], pa.large_string()),
                          "_seq": pa.array([3, 4])})
    wrote = spy_native(monkeypatch)
    F.run_all([_job(str(tmp_path / "a.parquet"), covered),
               _job(str(tmp_path / "b.parquet"), uncovered)])
    assert sorted(wrote) == [False, True, True]  # both taken, one handed back to pyarrow
    assert pq.read_table(tmp_path / "a.parquet").equals(covered)
    assert pq.read_table(tmp_path / "b.parquet").equals(uncovered)
    assert _statistics(open(tmp_path / "b.parquet", "rb").read()) == _statistics(
        _reference(uncovered))


def test_random_tables_read_back_as_pyarrow_writes_them() -> None:
    rng = random.Random(1717)
    for _ in range(ROUNDS):
        _same(_random_table(rng))


@pytest.mark.parametrize("arrow_type", [
    pa.large_string(), pa.uint32(), pa.uint64(), pa.timestamp("ns"), pa.time64("ns"),
    pa.time32("ms"), pa.decimal256(40, 2), pa.dictionary(pa.int32(), pa.string()),
    pa.struct([pa.field("inner", pa.struct([pa.field("x", pa.int32())]))]),
    pa.list_(pa.struct([pa.field("x", pa.int32())])), pa.null(),
])
def test_what_it_does_not_cover_is_left_to_pyarrow(arrow_type: pa.DataType) -> None:
    table = pa.table({"x": pa.array([None, None], arrow_type),
                      "_seq": pa.array([1, 2], pa.int64())})
    assert small_file.write(table, STATS) is None
    child = pa.StructArray.from_arrays([table["x"].combine_chunks()], names=["x"])
    assert small_file.write(table.append_column("_before", child), STATS) is None  # in a struct


def test_a_batch_already_imported_into_pyarrow_is_refused(tmp_path) -> None:
    """Importing the export moves its buffers out (release is NULL): neither the writer nor
    the pool may then read them, GIL released or not."""
    native = small_file._module
    batch = pa.record_batch({"x": pa.array([1, 2], pa.int64())})
    schema_capsule, array_capsule = batch.__arrow_c_array__()
    template = small_file.template(batch.schema)
    pa.RecordBatch._import_from_c_capsule(schema_capsule, array_capsule)
    with pytest.raises(ValueError, match="^the exported batch was already moved out$"):
        native.write(schema_capsule, array_capsule, template, ())
    pool = native.Pool(1, 2)
    with pytest.raises(ValueError, match="^the exported batch was already moved out$"):
        pool.submit(str(tmp_path / "x.parquet"), schema_capsule, array_capsule, template, (),
                    None)
    assert pool.reap(True) == []
    pool.close()
    assert os.listdir(tmp_path) == []


def test_a_null_in_a_field_declared_non_nullable_is_left_to_pyarrow() -> None:
    """Such a field has no definition levels: a NULL there has no place in the page (the
    native writer would drop its value, the column chunk one value short), so pyarrow, the
    reference, decides what the file gets — at the top level, in a struct, in a list."""
    required = pa.field("v", pa.int64(), nullable=False)
    seq = pa.array([1, 2], pa.int64())
    top = pa.Table.from_arrays([pa.array([1, None], pa.int64()), seq],
                               schema=pa.schema([required, pa.field("_seq", pa.int64())]))
    inner = pa.StructArray.from_arrays([pa.array([None, 3], pa.int64())], fields=[required])
    items = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()),
                                     pa.array([4, None], pa.int64()), type=pa.list_(required))
    for table in (top, pa.table({"s": inner, "_seq": seq}), pa.table({"l": items, "_seq": seq})):
        assert small_file.write(table, STATS) is None
    allowed = pa.table({"s": pa.StructArray.from_arrays([pa.array([5, 3], pa.int64())],
                                                        fields=[required]), "_seq": seq})
    _same(allowed)  # the same field with no NULL: written natively, as pyarrow writes it


def test_statistics_on_a_column_that_is_not_int64_are_left_to_pyarrow() -> None:
    table = pa.table({"_seq": pa.array(["a"]), "x": pa.array([1])})
    assert small_file.write(table, STATS) is None
    assert small_file.write(table.slice(0, 0), STATS) is None  # no rows: pyarrow's


def test_a_damaged_template_is_refused_never_read_past() -> None:
    from sinks.parquet import _native_parquet as N
    rng = random.Random(4)
    table = _random_table(rng)
    batch = table.combine_chunks().to_batches()[0]
    good = small_file.template(table.schema)
    kv = small_file.key_value_metadata(table.schema)
    schema_capsule, array_capsule = batch.__arrow_c_array__()
    assert N.write(schema_capsule, array_capsule, good, STATS) is not None
    with pytest.raises(TypeError):
        N.write(schema_capsule, array_capsule, good, STATS, ((b"k", "not bytes"),))
    for k in range(ROUNDS * 5):
        damaged = bytearray(good)
        if k % 3 == 0:
            damaged = damaged[: rng.randrange(len(damaged))]
        else:
            for _ in range(rng.randrange(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        schema_capsule, array_capsule = batch.__arrow_c_array__()
        data = N.write(schema_capsule, array_capsule, bytes(damaged), STATS,
                       kv if k % 2 else None)
        if data is not None:  # the damage left the spliced fields parseable: still a file
            assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"


def test_tables_of_the_same_fields_share_a_template_and_keep_their_own_metadata() -> None:
    rng = random.Random(99)
    table = _random_table(rng).combine_chunks()
    before = len(small_file._templates)
    files = {}
    for name in ("a", "b", "c"):
        named = table.replace_schema_metadata({"binlake.table": name})
        files[name] = _same(named)
        assert pq.read_schema(pa.BufferReader(files[name])).metadata == {
            b"binlake.table": name.encode()}
    assert len(small_file._templates) == min(before + 1, small_file.TEMPLATES)
    _same(table.replace_schema_metadata(None))  # no metadata of its own: ARROW:schema only


COLUMNS = [col(0, T.LONG, "id", pk=True), col(1, T.VARCHAR, "name", charset=45),
           col(2, T.NEWDECIMAL, "amount", precision=12, scale=2), col(3, T.DATETIME2, "ts"),
           col(4, T.DOUBLE, "ratio"), col(5, T.TINY, "tiny"), col(6, T.DATE, "day"),
           col(7, T.STRING, "bin", binary=True), col(8, T.JSON, "doc"),
           col(9, T.LONGLONG, "u64", unsigned=True)]


def stream() -> list[Any]:
    """Every operation: inserts with NULLs, updates (full and MINIMAL images, a key change, a
    partial JSON update), deletes, over two tables, in several transactions."""
    b = StreamBuilder()
    t1 = b.table("db", "t1", COLUMNS)
    t2 = b.table("db", "t2", COLUMNS[:3])
    row = (1, "é", Decimal("12.50"), dt.datetime(2024, 1, 2, 3, 4, 5, 6), 0.5, -128,
           dt.date(2024, 2, 29), b"\x00\x01", '{"a": 1}', 2**64 - 1)
    nulls = (2,) + (None,) * 9
    items: list[Any] = [b.begin(), b.insert(t1, [row, nulls]), b.insert(t2, [(1, "x", None)]),
                        b.commit()]
    items += [b.begin(), b.update(t1, [(row, (1, "new",) + row[2:])]), b.commit()]
    items += [b.begin(), b.update(t1, [((1,), (1, None))], columns=[0, 1], before_columns=[0]),
              b.commit()]  # MINIMAL: _missing on both sides
    partial = b.update(t1, [((2,), (2, JsonDiff(((0, "$.a", "5"),))))], columns=[0, 8],
                       before_columns=[0])
    partial = dataclasses.replace(partial, header=dataclasses.replace(
        partial.header, type_code=EventType.PARTIAL_UPDATE_ROWS))
    items += [b.begin(), partial, b.commit()]  # partial JSON without a before value: _json_diff
    items += [b.begin(), b.update(t1, [(row, (3,) + row[1:])]), b.commit()]  # key change
    items += [b.begin(), b.delete(t1, [nulls]), b.delete(t2, [(1, "x", None)]), b.commit()]
    return items


def spy_native(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records, per small file the sink writes, whether the native writer's threads took it
    (True) or pyarrow wrote it (False; after a True: the native writer did not cover it)."""
    wrote: list[bool] = []
    take, call = F.NativeFiles.take, F.ParquetJob.__call__

    def spy_take(self: F.NativeFiles, job: F.ParquetJob) -> bool:
        taken = take(self, job)
        if taken:
            wrote.append(True)
        return taken

    def spy_call(self: F.ParquetJob) -> None:
        wrote.append(False)
        call(self)

    monkeypatch.setattr(F.NativeFiles, "take", spy_take)
    monkeypatch.setattr(F.ParquetJob, "__call__", spy_call)
    return wrote


def land(lake: str, items: list[Any]) -> list[str]:
    sink = ParquetSink(lake, SinkOptions())
    sink.open()
    for item in items:
        sink.handle(item)
    sink.close()
    return sorted(glob.glob(os.path.join(lake, "db", "*", "*", "*", "*.parquet")))


def test_the_sink_lands_the_same_tables_through_either_writer(tmp_path, monkeypatch) -> None:
    items = stream()
    wrote = spy_native(monkeypatch)
    native = land(str(tmp_path / "native"), items)
    assert wrote == [True, True]
    monkeypatch.setattr(small_file, "ENABLED", False)
    reference = land(str(tmp_path / "reference"), items)
    assert wrote == [True, True, False, False]
    assert len(native) == len(reference) == 2
    for ours, theirs in zip(native, reference, strict=True):
        assert os.path.relpath(ours, tmp_path / "native") == os.path.relpath(
            theirs, tmp_path / "reference")
        meta = pq.ParquetFile(ours).metadata
        assert meta.row_group(0).column(0).compression == "UNCOMPRESSED"
        got, want = pq.read_table(ours), pq.read_table(theirs)
        assert got.schema.equals(want.schema, check_metadata=True)
        assert got.equals(want)
        assert pq.ParquetFile(ours).schema.equals(pq.ParquetFile(theirs).schema)
        assert _statistics(open(ours, "rb").read()) == _statistics(open(theirs, "rb").read())
    rows = pq.read_table(native[0]).to_pylist()  # t1
    assert [(r["id"], r["_op"], r["_seq"], r["_row"]) for r in rows] == [
        (1, "I", 1, 0), (2, "I", 1, 1), (1, "U", 2, 0), (1, "U", 3, 0), (2, "U", 4, 0),
        (1, "D", 5, 0), (3, "I", 5, 1), (2, "D", 6, 0)]
    assert rows[3]["_missing"] == ["amount", "ts", "ratio", "tiny", "day", "bin", "doc", "u64"]
    assert rows[4]["_json_diff"] == '{"doc": [{"op": "REPLACE", "path": "$.a", "value": 5}]}'
    assert rows[4]["doc"] is None and "doc" in rows[4]["_missing"]
    assert [r["_before"] is not None for r in rows] == [False, False, True, True, True, True,
                                                        True, True]
    assert rows[2]["_before"]["name"] == "é" and rows[3]["_before"]["name"] is None
    assert rows[1]["name"] is None and rows[0]["u64"] == Decimal(2**64 - 1)


def test_bool_bit_and_time_columns_land_through_the_native_writer(tmp_path, monkeypatch) -> None:
    """MySQL's BOOL (TINYINT(1)), BIT(1) and TIME land as int8, int64 and int64 microseconds
    (``types.arrow_type_for``: TIME is a duration up to +-838 h, not a time of day), all of
    which the native writer covers: a table of them is written by the pool, none handed back to
    pyarrow, with exactly its rows, as pyarrow lands them."""
    columns = [col(0, T.LONG, "id", pk=True), col(1, T.TINY, "flag"), col(2, T.BIT, "b1", meta=1),
               col(3, T.TIME2, "t", meta=6)]
    b = StreamBuilder()
    table = b.table("db", "flags", columns)
    high = dt.timedelta(hours=838, minutes=59, seconds=59)
    low = -high
    rows = [(1, 1, 1, low), (2, 0, 0, dt.timedelta(0)), (3, None, None, None),
            (4, 1, 0, dt.timedelta(microseconds=1)), (5, 0, 1, high)]
    items = [b.begin(), b.insert(table, rows), b.commit(),
             b.begin(), b.update(table, [(rows[0], (1, 0, 0, high))]), b.commit(),
             b.begin(), b.delete(table, [rows[2]]), b.commit()]
    wrote = spy_native(monkeypatch)
    native = land(str(tmp_path / "native"), items)
    assert wrote == [True]  # taken by the pool, never handed back to pyarrow
    landed = pq.read_table(native[0])
    assert [str(landed.schema.field(c).type) for c in ("flag", "b1", "t")] == [
        "int8", "int64", "int64"]
    micros = 838 * 3_600_000_000 + 59 * 60_000_000 + 59 * 1_000_000
    assert [(r["_op"], r["id"], r["flag"], r["b1"], r["t"]) for r in landed.to_pylist()] == [
        ("I", 1, 1, 1, -micros), ("I", 2, 0, 0, 0), ("I", 3, None, None, None),
        ("I", 4, 1, 0, 1), ("I", 5, 0, 1, micros), ("U", 1, 0, 0, micros),
        ("D", 3, None, None, None)]
    assert landed.column("_before").to_pylist()[5] == {"id": 1, "flag": 1, "b1": 1, "t": -micros}
    monkeypatch.setattr(small_file, "ENABLED", False)
    reference = land(str(tmp_path / "reference"), items)
    assert wrote == [True, False]
    assert landed.equals(pq.read_table(reference[0]))


def test_every_type_the_sink_lands_is_covered() -> None:
    """What ``types.arrow_type_for`` gives any column type (signed or not, binary or not, with
    or without a charset, narrow and wide DECIMALs) in the schema the sink lands (the column,
    ``_before``'s struct of them, ``_missing``): the native writer writes it, never pyarrow."""
    from sinks.parquet.schema import TableVersion, VersionOrigin

    variants: list[dict[str, Any]] = [{}, {"unsigned": True}, {"binary": True}, {"charset": 45},
                                      {"precision": 10, "scale": 2}, {"precision": 65, "scale": 30}]
    columns = [col(0, T.LONG, "id", pk=True)]
    for code in T:
        for kw in variants:
            columns.append(col(len(columns), int(code), f"c{len(columns)}", **kw))
    version = TableVersion.from_table_map(StreamBuilder().table("db", "all", columns), 1,
                                          VersionOrigin(seq=1), None)
    landed = {str(t) for t in version.arrow_types}
    assert {"bool", "time64[us]"} & landed == set()  # BOOL, BIT and TIME land as integers
    rng = random.Random(5)
    n = 13
    arrays = []
    for field in version.schema:
        if field.name == "_before":
            arrays.append(_struct(list(field.type), n, rng, 0.3))
        elif field.name == "_missing":
            arrays.append(_list(n, rng, 0.3))
        elif field.name in ("_op", "_seq", "_row"):
            arrays.append(pa.array([rng.choice("IUD") for _ in range(n)]) if field.name == "_op"
                          else pa.array(range(n), pa.int64()))
        else:
            arrays.append(_array(field.type, n, rng, 0.3 if field.nullable else 0.0))
    _same(pa.Table.from_arrays(arrays, schema=version.schema))


def test_a_file_the_pool_cannot_write_breaks_the_flush_and_nothing_lands(tmp_path,
                                                                          monkeypatch) -> None:
    lake = str(tmp_path / "lake")
    take = F.NativeFiles.take
    missing = os.path.join(lake, "_staging", "no-such-directory", "part.parquet")

    def take_one_astray(self: F.NativeFiles, job: F.ParquetJob) -> bool:
        if job.path.endswith("part-0000000000000001-000.parquet"):
            job.path = missing
        return take(self, job)

    monkeypatch.setattr(F.NativeFiles, "take", take_one_astray)
    sink = ParquetSink(lake, SinkOptions())
    items = stream()
    failed = _failed_flush(sink, items)
    assert (failed.errno, failed.path) == (errno.ENOENT, missing)
    with pytest.raises(SinkStateError, match="lake error"):
        sink.handle(items[0])
    sink.close()
    assert glob.glob(os.path.join(lake, "db", "**", "*.parquet"), recursive=True) == []
    assert not os.path.exists(os.path.join(lake, "_checkpoint.json"))
    monkeypatch.undo()
    assert len(land(lake, items)) == 2  # a restart lands both tables


def test_once_a_native_job_failed_no_further_file_of_the_flush_is_taken(tmp_path,
                                                                        monkeypatch) -> None:
    """The flush raises anyway: the files after a failure seen are neither taken from the
    iterable (converted) nor written, nor are the documents."""
    table = pa.table({"x": pa.array([1, None], pa.int32()), "_seq": pa.array([1, 2])})
    missing = str(tmp_path / "no-such-directory" / "0.parquet")
    converted: list[str] = []

    def jobs() -> Any:
        for i in range(50):
            path = missing if i == 0 else str(tmp_path / f"{i}.parquet")
            converted.append(path)
            yield _job(path, table)

    take = F.NativeFiles.take

    def take_and_wait(self: F.NativeFiles, job: F.ParquetJob) -> bool:
        taken = take(self, job)
        self._reap(True)  # the job ended and was seen before the next is asked for
        return taken

    monkeypatch.setattr(F.NativeFiles, "take", take_and_wait)
    with pytest.raises(OSError) as failed:
        F.run_all(jobs(), [(str(tmp_path / "v1.json"), b"{}")])
    assert (failed.value.errno, failed.value.filename) == (errno.ENOENT, missing)
    assert converted == [missing]
    assert os.listdir(tmp_path) == []


def test_a_file_pyarrow_writes_is_sized_once(tmp_path, monkeypatch) -> None:
    """Whether a file is small (its codec) is decided once: when the native writer does not
    take it (too big) or hands it back (not covered), pyarrow's write asks again."""
    decided: list[str] = []
    decide = F.ParquetJob._decide

    def counted(self: F.ParquetJob) -> str:
        decided.append(self.path)
        return decide(self)

    monkeypatch.setattr(F.ParquetJob, "_decide", counted)
    big = pa.table({"x": pa.array(range(40_000), pa.int64()), "_seq": pa.array(range(40_000))})
    uncovered = pa.table({"x": pa.array(["a", None], pa.large_string()),
                          "_seq": pa.array([3, 4])})
    paths = [str(tmp_path / "big.parquet"), str(tmp_path / "uncovered.parquet")]
    F.run_all([_job(paths[0], big), _job(paths[1], uncovered)])
    assert sorted(decided) == sorted(paths)
    assert [pq.ParquetFile(path).metadata.row_group(0).column(0).compression
            for path in paths] == ["ZSTD", "UNCOMPRESSED"]
    assert pq.read_table(paths[0]).equals(big) and pq.read_table(paths[1]).equals(uncovered)


def test_the_pool_writes_documents_and_names_one_it_cannot_write(tmp_path) -> None:
    """A flush's schema files and DDL logs go to the native threads too, written as they are."""
    made_empty = tmp_path / "made.json"
    made_empty.write_bytes(b"")
    documents = [(str(made_empty), b'{"a": 1}\n'), (str(tmp_path / "new.jsonl"), b"x" * 70_000)]
    F.run_all([], documents)
    assert [open(path, "rb").read() for path, _ in documents] == [data for _, data in documents]
    missing = str(tmp_path / "no-such-directory" / "v1.json")
    with pytest.raises(OSError) as failed:
        F.run_all([], [(str(tmp_path / "fine.json"), b"{}"), (missing, b"{}")])
    assert (failed.value.errno, failed.value.filename) == (errno.ENOENT, missing)
    assert (tmp_path / "fine.json").read_bytes() == b"{}"  # the rest still written


def test_the_pool_hands_back_every_job_once_through_reaps_closes_and_drops(tmp_path) -> None:
    """Many tiny jobs, rows and bytes, on pools of 1 to 8 threads bound at 1 to 32: reap(False)
    interleaved, close() with jobs queued (a later submit restarts the threads), the pool
    dropped with jobs queued (it runs them and joins). Every job is handed back exactly once,
    written; run under the sanitizers too (bench/native_asan.sh)."""
    table = pa.table({"x": pa.array([1, None, 3], pa.int32()), "_seq": pa.array([1, 2, 3])})
    template, kv = small_file.constants(table.schema)
    batch = table.to_batches()[0]
    rows = small_file.write(table, STATS)
    rng = random.Random(77)
    for round_ in range(60):
        pool = small_file.new_pool(rng.choice([1, 2, 8]), rng.choice([1, 2, 32]))
        want: dict[int, tuple[str, bytes | None]] = {}
        got: list[tuple[int, int, int]] = []
        for i in range(rng.randint(1, 80)):
            path = str(tmp_path / f"{round_}-{i}")
            if rng.random() < 0.5:
                want[pool.submit(path, *batch.__arrow_c_array__(), template, STATS, kv)] = (
                    path, rows)
            else:
                data = rng.randbytes(rng.randint(0, 3000))
                want[pool.write(path, data)] = (path, data)
            if rng.random() < 0.3:
                got += pool.reap(False)
            elif rng.random() < 0.05:
                pool.close()
        if rng.random() < 0.2:
            del pool  # queued jobs run, the threads are joined
            continue
        if rng.random() < 0.5:
            pool.close()
        got += pool.reap(True)
        assert sorted(got) == sorted((job, 0, 0) for job in want)
        assert pool.reap(False) == [] and pool.reap(True) == []
        pool.close()
        for path, data in want.values():
            assert open(path, "rb").read() == data


def test_a_flush_over_many_tables_writes_every_file_in_the_pool(tmp_path, monkeypatch) -> None:
    b = StreamBuilder()
    tables = [b.table("db", f"t{i:03d}", COLUMNS[:3]) for i in range(300)]
    items: list[Any] = []
    for n in range(900):  # three one-row transactions per table
        items += [b.begin(), b.insert(tables[n % 300], [(n, f"r{n}", Decimal(n))]), b.commit()]
    wrote = spy_native(monkeypatch)
    files = land(str(tmp_path / "lake"), items)
    assert wrote == [True] * 300
    assert len(files) == 300
    ids = sorted(i for path in files for i in pq.read_table(path, columns=["id"])["id"].to_pylist())
    assert ids == list(range(900))
    # one template for the 300 tables of one shape, each file its own table's metadata
    assert [pq.read_schema(path).metadata[b"binlake.table"] for path in files] == [
        f"t{i:03d}".encode() for i in range(300)]


def test_a_missing_writer_is_said_once(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """Each extension is optional on its own: this one missing is said once per process, not
    only seen as CPU (and nothing is said when BINLAKE_NATIVE=0 asked for pyarrow)."""
    monkeypatch.setattr(small_file, "_module", None)
    monkeypatch.setattr(small_file, "_warned", False)
    monkeypatch.setenv("BINLAKE_NATIVE", "0")
    sink = ParquetSink(str(tmp_path / "off"))
    sink.open()
    sink.close()
    monkeypatch.delenv("BINLAKE_NATIVE")
    for name in ("a", "b"):
        sink = ParquetSink(str(tmp_path / name))
        sink.open()
        sink.close()
    said = [r.getMessage() for r in caplog.records if "_native_parquet" in r.getMessage()]
    assert said == ["sinks.parquet._native_parquet is not built: pyarrow writes every small "
                    "Parquet file (the same tables, ~5x the CPU per file); reinstall binlake "
                    "(or `python setup.py build_ext --inplace` in a checkout) to build it"]


def native_stream(tables: int) -> list[Any]:
    """Two transactions of three INSERT rows per table, each event decoded by the native
    decoder with its Arrow chunks (as the daemon's are), every column of a type that lands from
    them: each table's part is exported whole (``rows.Exported``) and stays so."""
    from protocol.binlog.model import RowsEvent, RowsKind
    from tests.unit.rowbuild import image, rows_body
    from tests.unit.test_batch_fast_path import _native_only
    from tests.unit.test_native_arrow import _decode

    rng = random.Random(17)
    table, pools = _native_only(rng)
    b = StreamBuilder()
    items: list[Any] = []
    for i in range(tables):
        one = dataclasses.replace(table, table_id=1000 + i, table=f"t{i:03d}")
        for _ in range(2):
            rows = [image([None if rng.random() < 0.2 else rng.choice(pool) for pool in pools])
                    for _ in range(3)]
            event = _decode(rows_body(len(pools), rows, table_id=1000 + i), RowsKind.INSERT,
                            True, one)
            assert isinstance(event, RowsEvent) and event.arrow is not None
            event = dataclasses.replace(event, header=b._header(int(EventType.WRITE_ROWS)))
            items += [b.begin(), event, b.commit()]
    return items


def count_imports(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the rows of each ``rows.Exported`` imported into pyarrow."""
    from sinks.parquet import rows as R

    imported: list[int] = []
    batch = R.Exported.batch

    def counted(self: R.Exported) -> pa.RecordBatch:
        imported.append(self.num_rows)
        return batch(self)

    monkeypatch.setattr(R.Exported, "batch", counted)
    return imported


def test_small_parts_reach_the_pool_unimported_and_land_the_same_bytes(tmp_path,
                                                                       monkeypatch) -> None:
    """A flush's small part exported whole goes to the pool's threads as the export's capsule
    (``rows.Exported``), never imported into pyarrow: the very files the imported batch makes,
    byte for byte, one per table with every row; pyarrow, when it writes them (the native
    writer off), imports the capsule once and lands the same tables."""
    from sinks.parquet import parts as W
    from sinks.parquet import rows as R

    items = native_stream(40)
    imported = count_imports(monkeypatch)
    unimported: list[bool] = []
    take = F.NativeFiles.take

    def spy_take(self: F.NativeFiles, job: F.ParquetJob) -> bool:
        unimported.append(isinstance(job.batches[0], R.Exported))
        return take(self, job)

    monkeypatch.setattr(F.NativeFiles, "take", spy_take)
    exported = land(str(tmp_path / "exported"), items)
    assert unimported == [True] * 40 and imported == []
    assert len(exported) == 40
    assert sum(pq.read_metadata(path).num_rows for path in exported) == 240

    with monkeypatch.context() as patch:  # the batch imported into pyarrow first
        patch.setattr(W, "rows_export", lambda version, group: R.rows_batch(version, group, True))
        before = land(str(tmp_path / "imported"), items)
    assert unimported == [True] * 40 + [False] * 40 and imported == []
    assert [os.path.relpath(p, tmp_path / "exported") for p in exported] == [
        os.path.relpath(p, tmp_path / "imported") for p in before]
    for ours, theirs in zip(exported, before, strict=True):
        assert open(ours, "rb").read() == open(theirs, "rb").read()

    monkeypatch.setattr(small_file, "ENABLED", False)  # pyarrow writes: the capsule imported
    reference = land(str(tmp_path / "pyarrow"), items)
    assert imported == [6] * 40 and len(unimported) == 80
    assert len(reference) == 40
    for ours, theirs in zip(exported, reference, strict=True):
        got, want = pq.read_table(ours), pq.read_table(theirs)
        assert got.schema.equals(want.schema, check_metadata=True)
        assert got.equals(want)


def test_an_exported_part_over_the_small_size_is_imported_and_written_by_pyarrow(
        tmp_path, monkeypatch) -> None:
    """The export's size bound decides only "small" (it is at least the rows' bytes); over it
    the part is imported and sized as any batch: here every part, with the bound lowered."""
    items = native_stream(3)
    imported = count_imports(monkeypatch)
    monkeypatch.setattr(F, "SMALL_FILE_BYTES", 64)
    wrote = spy_native(monkeypatch)
    files = land(str(tmp_path / "lake"), items)
    assert imported == [6, 6, 6] and wrote == [False, False, False]
    assert [pq.read_metadata(path).num_rows for path in files] == [6, 6, 6]
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "ZSTD"
