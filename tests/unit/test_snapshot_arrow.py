"""A snapshot chunk's text rows straight into Arrow against the reference conversion
(server-free): the same rows, as the server's text protocol sends them for the snapshot's
``SELECT`` expressions, kept unparsed and converted by ``SnapshotTable.decode_kept``
(``native.text_arrow``) or parsed and converted value by value by ``decode_rows`` (the
reference), then landed by the sink's conversion (``rows_batch``) — identical record batches
(types, values, NULLs, zero dates counted alike) batch for batch. Random rows of a type matrix
(every integer width signed and unsigned, BIGINT UNSIGNED, DECIMAL up to 65 digits, FLOAT,
DOUBLE, DATE, DATETIME, TIMESTAMP, TIME, YEAR, BIT, ENUM, SET, UTF-8 and latin1 strings,
binary strings, BINARY(n), MySQL JSON, GEOMETRY, VECTOR), edge values, NULLs, and values only
Python converts (zero dates, the zero TIMESTAMP, strings not valid UTF-8, DECIMAL(65)): the
column then lands from Python values, with the same result. Truncated and bit-flipped kept
rows raise a typed error (``MalformedPacket``), never crash (``bench/native_asan.sh`` runs this
under ASan+UBSan). The kept read itself (``TextResultReader(keep=True)``) keeps exactly the
rows a parsed read parses, also rows the bulk copy leaves to the Python path.
"""

from __future__ import annotations

import os
import random
import struct
from typing import Any

import pyarrow as pa
import pytest

from protocol.binlog import native
from protocol.binlog.enrich import ColumnDescription as D
from protocol.binlog.enrich import TableDescription
from protocol.binlog.model import EventHeader, RowsEvent, RowsKind
from protocol.capabilities import Capability
from protocol.packets import PacketCodec, frame_packet, lenenc_bytes, lenenc_int
from protocol.results import TextResultReader, kept_payloads, kept_row, parse_text_row
from protocol.snapshot import SnapshotTable, snapshot_table
from sinks.parquet.rows import PendingRows, TransactionTags, _column, rows_batch
from sinks.parquet.schema import TableVersion, VersionOrigin
from sinks.parquet.types import new_counter

pytestmark = pytest.mark.skipif(not native.TEXT_ARROW, reason="native text_arrow not built/on")

ROUNDS = int(os.environ.get("BINLAKE_NATIVE_FUZZ_ROUNDS", "300"))
UTF8MB4, LATIN1 = 45, 8
TAGS = TransactionTags(7, None, None, None, None, None, None, "bin.000001", 4)
_LABELS = ("new", "active", "süspended", "closed")
_MEMBERS = ("a", "b", "c,d"[:1] + "d", "é")


def _col(name: str, data_type: str, **kw: Any) -> D:
    return D(name, data_type, True, **kw)


# (description, text generator) per column: the text the server prints for the column's
# snapshot expression (protocol/snapshot/values.py), as bytes.
def _int_text(lo: int, hi: int):  # type: ignore[no-untyped-def]
    return lambda r: str(r.choice([lo, hi, 0, -1 if lo < 0 else 1, r.randint(lo, hi)])).encode()


def _decimal_text(precision: int, scale: int):  # type: ignore[no-untyped-def]
    def text(r: random.Random) -> bytes:
        whole = r.randint(0, 10 ** (precision - scale) - 1) if r.random() < .8 else 0
        frac = r.randint(0, 10 ** scale - 1) if scale else 0
        sign = "-" if r.random() < .3 else ""
        body = str(whole) + (f".{frac:0{scale}d}" if scale else "")
        return (sign + body).encode()
    return text


def _date_text(r: random.Random) -> bytes:
    if r.random() < .05:
        return r.choice([b"0000-00-00", b"2024-02-30", b"2024-00-10"])
    return f"{r.randint(1, 9999):04d}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}".encode()


def _datetime_text(fsp: int):  # type: ignore[no-untyped-def]
    def text(r: random.Random) -> bytes:
        frac = f".{r.randint(0, 10 ** fsp - 1):0{fsp}d}" if fsp else ""
        if r.random() < .05:
            return b"0000-00-00 00:00:00" + frac.encode()
        return (_date_text(r).replace(b"0000-00-00", b"2000-01-01")
                + f" {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}{frac}"
                .encode())
    return text


def _timestamp_text(fsp: int):  # type: ignore[no-untyped-def]
    def text(r: random.Random) -> bytes:
        if r.random() < .05:
            return b"0" if not fsp or r.random() < .5 else b"0." + b"0" * fsp
        frac = f".{r.randint(0, 10 ** fsp - 1):0{fsp}d}" if fsp else ""
        return f"{r.randint(1, 2 ** 31 - 1)}{frac}".encode()
    return text


def _time_text(fsp: int):  # type: ignore[no-untyped-def]
    def text(r: random.Random) -> bytes:
        frac = f".{r.randint(0, 10 ** fsp - 1):0{fsp}d}" if fsp else ""
        sign = "-" if r.random() < .3 else ""
        return f"{sign}{r.randint(0, 838):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}{frac}".encode()
    return text


def _float_text(r: random.Random) -> bytes:
    return repr(r.choice([0.0, -0.0, 1.5, 3.4e38, -1e-45, r.uniform(-1e6, 1e6),
                          r.uniform(-1, 1) * 10 ** r.randint(-300, 300)])).encode()


def _f32_text(r: random.Random) -> bytes:
    value = struct.unpack("<f", struct.pack("<f", r.uniform(-1e30, 1e30)))[0]
    return repr(r.choice([value, 0.0, 1.0000001192092896])).encode()


def _utf8_text(r: random.Random) -> bytes:
    if r.random() < .03:
        return b"\xff\xfe bad"
    return "".join(r.choice("aZ é€😀\x00,") for _ in range(r.randint(0, 12))).encode()


def _bytes_text(r: random.Random) -> bytes:
    return bytes(r.randint(0, 255) for _ in range(r.randint(0, 10)))


def _enum_text(r: random.Random) -> bytes:
    return str(r.randint(0, len(_LABELS))).encode()


def _set_text(r: random.Random) -> bytes:
    return str(r.randint(0, 2 ** len(_MEMBERS) - 1)).encode()


def _json_text(r: random.Random) -> bytes:
    return r.choice(['{"a": 1}', '[1, "é"]', "null", '"x"']).encode()


MATRIX: list[tuple[D, Any]] = [
    (D("id", "int", False), _int_text(-2 ** 31, 2 ** 31 - 1)),
    (_col("ti", "tinyint"), _int_text(-128, 127)),
    (_col("tiu", "tinyint", unsigned=True), _int_text(0, 255)),
    (_col("si", "smallint"), _int_text(-2 ** 15, 2 ** 15 - 1)),
    (_col("siu", "smallint", unsigned=True), _int_text(0, 2 ** 16 - 1)),
    (_col("mi", "mediumint"), _int_text(-2 ** 23, 2 ** 23 - 1)),
    (_col("miu", "mediumint", unsigned=True), _int_text(0, 2 ** 24 - 1)),
    (_col("iu", "int", unsigned=True), _int_text(0, 2 ** 32 - 1)),
    (_col("bi", "bigint"), _int_text(-2 ** 63, 2 ** 63 - 1)),
    (_col("biu", "bigint", unsigned=True), _int_text(0, 2 ** 64 - 1)),
    (_col("d12", "decimal", precision=12, scale=2), _decimal_text(12, 2)),
    (_col("d38", "decimal", precision=38, scale=10), _decimal_text(38, 10)),
    (_col("d5", "decimal", precision=5, scale=0), _decimal_text(5, 0)),
    (_col("d65", "decimal", precision=65, scale=30), _decimal_text(65, 30)),
    (_col("f", "float"), _f32_text),
    (_col("dbl", "double"), _float_text),
    (_col("dt", "date"), _date_text),
    (_col("dtm0", "datetime", fsp=0), _datetime_text(0)),
    (_col("dtm6", "datetime", fsp=6), _datetime_text(6)),
    (_col("ts0", "timestamp", fsp=0), _timestamp_text(0)),
    (_col("ts3", "timestamp", fsp=3), _timestamp_text(3)),
    (_col("tm", "time", fsp=2), _time_text(2)),
    (_col("tm0", "time", fsp=0), _time_text(0)),
    (_col("y", "year"), lambda r: str(r.choice([0, 1901, 2155, r.randint(1901, 2155)])).encode()),
    (_col("b10", "bit", precision=10), _int_text(0, 1023)),
    (_col("b64", "bit", precision=64), _int_text(0, 2 ** 64 - 1)),
    (_col("e", "enum", charset="utf8mb4", collation=UTF8MB4, enum_values=_LABELS), _enum_text),
    (_col("s", "set", charset="utf8mb4", collation=UTF8MB4, set_values=_MEMBERS), _set_text),
    (_col("v", "varchar", charset="utf8mb4", collation=UTF8MB4, octet_length=256), _utf8_text),
    (_col("c", "char", charset="utf8mb4", collation=UTF8MB4, octet_length=40), _utf8_text),
    (_col("tx", "text", charset="utf8mb4", collation=UTF8MB4, octet_length=65535), _utf8_text),
    (_col("l1", "varchar", charset="latin1", collation=LATIN1, octet_length=20), _bytes_text),
    (_col("vb", "varbinary", octet_length=20), _bytes_text),
    (_col("bn", "binary", octet_length=4), lambda r: bytes(r.randint(0, 255) for _ in range(4))),
    (_col("bl", "blob", octet_length=65535), _bytes_text),
    (_col("g", "geometry"), _bytes_text),
    (_col("vec", "vector", octet_length=8), lambda r: _bytes_text(r).hex().upper().encode()),
]


def _table(mysql: bool) -> SnapshotTable:
    columns = [d for d, _ in MATRIX]
    if mysql:
        columns.append(_col("j", "json"))
    return snapshot_table(TableDescription("db", "t", tuple(columns), primary_key=("id",)),
                          mysql=mysql, row_metadata="FULL")


def _texts(r: random.Random, mysql: bool, null_rate: float) -> list[bytes | None]:
    gens = [g for _, g in MATRIX] + ([_json_text] if mysql else [])
    return [None if r.random() < null_rate and i else g(r) for i, g in enumerate(gens)]


def _payload(values: list[bytes | None]) -> bytes:
    return b"".join(b"\xfb" if v is None else lenenc_bytes(v) for v in values)


def _keep(payloads: list[bytes]) -> bytearray:
    kept = bytearray()
    for p in payloads:
        kept += struct.pack("<I", len(p)) + p
    return kept


def _land(snap: SnapshotTable, event: RowsEvent) -> tuple[pa.RecordBatch, int]:
    counter = new_counter()
    version = TableVersion.from_table_map(snap.table_map, 1, VersionOrigin(1), counter)
    batch = rows_batch(version, [PendingRows(event, TAGS, 0, (), 1_700_000_000_000_000)],
                       with_commit_time=True)
    return batch, counter.invalid_temporal


def _event(snap: SnapshotTable, after: Any, count: int, arrow: Any) -> RowsEvent:
    return RowsEvent(header=EventHeader(0, 0, 0, 0, 0, 0), kind=RowsKind.READ,
                     table=snap.table_map, flags=0, row_count=count, before_columns=(),
                     after_columns=tuple(range(len(snap.table_map.columns))), before=None,
                     after=after, arrow=arrow)


def _both(snap: SnapshotTable, rows: list[list[bytes | None]], binary: tuple[bool, ...]
          ) -> tuple[Any, Any]:
    """(reference batch, zero dates), (kept batch, zero dates) and the kept chunks."""
    payloads = [_payload(v) for v in rows]
    parsed = [parse_text_row(p, binary) for p in payloads]
    width = len(snap.table_map.columns)
    reference = snap.decode_rows([row[:width] for row in parsed])
    image, chunks = snap.decode_kept(_keep(payloads), len(rows), binary)
    expected = _land(snap, _event(snap, reference, len(rows), None))
    got = _land(snap, _event(snap, image, len(rows), (None, chunks)))
    return (expected, got), chunks


@pytest.mark.parametrize("mysql", [False, True])
@pytest.mark.parametrize("null_rate", [0.0, 0.2])
def test_random_batches_equal_the_reference(mysql: bool, null_rate: float) -> None:
    r = random.Random(f"{mysql}{null_rate}")
    snap = _table(mysql)
    native_columns = set()
    for _ in range(max(20, ROUNDS // 10)):
        binary = tuple(r.random() < .5 for _ in range(len(snap.table_map.columns) + 1))
        rows = [_texts(r, mysql, null_rate) + [b"key"] for _ in range(r.randint(0, 40))]
        (expected, got), chunks = _both(snap, rows, binary)
        assert got[0].equals(expected[0]), _diff(got[0], expected[0])
        assert got[1] == expected[1]
        native_columns |= {k for k, c in enumerate(chunks) if c is not None}
    names = [c.name for c in snap.table_map.columns]
    python_only = {"d65", "l1", "vec"} if mysql else {"d65", "l1"}  # MariaDB's VECTOR: bytes
    assert {names[k] for k in native_columns} == set(names) - python_only


def _diff(got: pa.RecordBatch, expected: pa.RecordBatch) -> str:
    for name in expected.schema.names:
        if not got.column(name).equals(expected.column(name)):
            return f"{name}: {got.column(name)} != {expected.column(name)}"
    return "schemas differ"


def test_values_only_python_converts_leave_that_column_to_python() -> None:
    """A zero date, the zero TIMESTAMP, a string not valid UTF-8: that column of that chunk
    has no Arrow chunk (the reference converts it: NULL and counted, bytes); the others do."""
    snap = _table(False)
    r = random.Random(5)
    names = [c.name for c in snap.table_map.columns]
    clean = [_texts(r, False, 0.0) for _ in range(3)]
    for row in clean:  # no value of these columns only Python converts
        row[names.index("dt")] = b"2024-02-29"
        row[names.index("dtm0")] = b"2024-02-29 23:59:59"
        row[names.index("dtm6")] = b"1000-01-01 00:00:00.000001"
        row[names.index("ts0")] = b"1"
        row[names.index("ts3")] = b"0.001"
        for k in ("v", "c", "tx"):
            row[names.index(k)] = "é".encode()
    binary = (False,) * len(names)
    for column, text in (("dt", b"0000-00-00"), ("dtm6", b"2024-02-30 00:00:00.000000"),
                         ("ts0", b"0"), ("ts3", b"0.000"), ("v", b"\xc3")):
        rows = [list(row) for row in clean]
        rows[1][names.index(column)] = text
        (expected, got), chunks = _both(snap, rows, binary)
        assert got[0].equals(expected[0]), _diff(got[0], expected[0])
        assert got[1] == expected[1]
        assert [names[k] for k, c in enumerate(chunks) if c is None] == sorted(
            {"d65", "l1", column}, key=names.index)


def test_the_image_decodes_only_the_columns_asked_for() -> None:
    snap = _table(False)
    r = random.Random(9)
    rows = [_texts(r, False, 0.2) for _ in range(50)]
    payloads = [_payload(v) for v in rows]
    binary = (True,) * len(rows[0])
    image, _ = snap.decode_kept(_keep(payloads), 50, binary)
    reference = snap.decode_rows([parse_text_row(p, binary) for p in payloads])
    assert image[0] == reference[0]
    assert sum(v is not None for v in image._lists) == 1
    assert image[-1] == reference[-1]
    assert len(image) == len(reference) and list(image) == list(reference)


def _framed(payloads: list[bytes], start_seq: int = 1) -> tuple[bytes, int]:
    out, seq = b"", start_seq
    for p in payloads:
        frame, seq = frame_packet(p, seq)
        out += frame
    return out, seq


def _response(payloads: list[bytes], binary_columns: int) -> bytes:
    """A whole result set: column count, definitions, rows, the OK (DEPRECATE_EOF)."""
    columns = []
    for i in range(binary_columns):
        fixed = struct.pack("<HIBHB", 63, 255, 253, 0, 0) + b"\0\0"
        columns.append(b"".join(lenenc_bytes(x) for x in (b"def", b"", b"", b"", b"c%d" % i,
                                                           b"")) + lenenc_int(12) + fixed)
    ok = b"\xfe\x00\x00\x02\x00\x00\x00"
    data, _ = _framed([lenenc_int(binary_columns), *columns, *payloads, ok], 1)
    return data


@pytest.mark.parametrize("split", [1, 7, 4096, 1 << 20])
def test_a_kept_read_keeps_what_a_parsed_read_parses(split: int) -> None:
    """The bulk copy (text_collect) and the packet-by-packet path (a row the copy leaves to
    Python: one starting with 0xFE, i.e. a first value of 16 MiB or more — here a long first
    value — arriving as the bytes come) keep the same rows a parsed read parses."""
    r = random.Random(split)
    width = 3
    rows = []
    for i in range(200):
        values = [bytes(r.randint(0, 255) for _ in range(r.randint(0, 300))) for _ in range(width)]
        if i % 50 == 7:
            values[0] = b"x" * 70000  # 0xFD length: a plain row
        rows.append(_payload(values))
    data = _response(rows, width)
    caps = int(Capability.DEPRECATE_EOF)
    results = []
    for keep in (False, True):
        codec = PacketCodec()
        codec.reset_sequence(1)  # the query went out as 0
        reader = TextResultReader(caps, keep=keep)
        for at in range(0, len(data), split):
            codec.receive_data(data[at:at + split])
            if reader.pump(codec):
                break
        assert reader.done and reader.result is not None
        results.append(reader.result)
    parsed, kept = results
    assert kept.kept is not None and kept.kept_rows == 200 and not kept.rows
    assert [parse_text_row(p, (True,) * width) for p in kept_payloads(kept.kept)] == parsed.rows
    assert kept_row(kept.kept, kept.kept_last, (True,) * width) == parsed.rows[-1]


def _outcome(run: Any) -> Any:
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - the error's type is the outcome compared
        return type(exc)


def test_corrupted_kept_rows_raise_the_references_typed_error() -> None:
    """Truncated and bit-flipped kept rows: a malformed row raises the typed error the
    reference's parse raises (MalformedPacket / TruncatedData); else every column that has an
    Arrow chunk holds values the reference converts without error into the same array (a
    value it refuses always leaves its column to it, so the error is the reference's); never
    a crash."""
    snap = _table(True)
    r = random.Random(3)
    width = len(snap.table_map.columns)
    binary = (True,) * (width + 1)
    version = TableVersion.from_table_map(snap.table_map, 1, VersionOrigin(1), new_counter())
    for _ in range(ROUNDS):
        rows = [_texts(r, True, 0.2) + [b"k"] for _ in range(r.randint(1, 5))]
        kept = _keep([_payload(v) for v in rows])
        if r.random() < .4:
            kept = kept[:r.randrange(len(kept))]
        else:
            for _ in range(r.randint(1, 4)):
                kept[r.randrange(len(kept))] ^= 1 << r.randrange(8)
        parsed = _outcome(lambda kept=kept: [parse_text_row(p, binary)
                                             for p in kept_payloads(kept)])
        count = len(rows)
        decoded = _outcome(lambda kept=kept, n=count: snap.decode_kept(kept, n, binary))
        if not isinstance(parsed, list):
            assert decoded is parsed
            continue
        image, chunks = decoded
        for k, chunk in enumerate(chunks):
            if chunk is None:
                continue
            convert = snap._converters[k]
            values = [None if row[k] is None else convert(row[k]) for row in parsed]
            lists: list[Any] = [None] * width
            lists[k] = values
            expected = _column(version, k, [(None, None, lists, len(parsed))])
            assert _column(version, k, [(None, chunks, image, len(parsed))]).equals(expected)


@pytest.mark.parametrize("seed", range(3))
def test_corrupted_packets_never_crash_the_bulk_copy(seed: int) -> None:
    r = random.Random(seed)
    for _ in range(ROUNDS):
        payloads = [_payload([bytes(r.randint(0, 255) for _ in range(r.randint(0, 40)))])
                    for _ in range(r.randint(1, 6))]
        data = bytearray(_framed(payloads, 0)[0])
        for _ in range(r.randint(0, 3)):
            data[r.randrange(len(data))] ^= 1 << r.randrange(8)
        data = data[:r.randint(0, len(data))]
        out = bytearray()
        start, seq, rows, last = native.text_collect(  # type: ignore[misc]
            bytes(data), 0, len(data), 0, 1 << 24, out)
        assert 0 <= start <= len(data) and rows >= 0
        assert len(kept_payloads(out)) == rows
        assert last == -1 if not rows else 0 <= last < len(out)
