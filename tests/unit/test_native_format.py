"""The native line formatter of ``binlake decode`` against the Python reference (server-free).

``replica.commands.decode.rows_text`` and ``OpenProtocolEncoder.encode_lines`` take the native
path (``protocol/binlog/_native_format.c``); ``decode.format_rows`` and
``OpenProtocolEncoder.encode`` + ``dumps`` are the reference. They must give the same text for
every value type (NULLs, integers at and past 64 bits, floats with NaN/inf/-0.0, DECIMAL(65),
strings with every escape and non-ASCII, lone surrogates, bytes, naive and aware datetimes, zero
dates, TIME, JSON diffs, bools and subclasses), for random tables, images (full, MINIMAL) and
update kinds (key-changing updates, composite keys), and over the captured binlogs of every
flavor through ``binlake decode`` itself. Bad arguments raise, never crash (also under ASan:
bench/native_asan.sh).
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import itertools
import math
import os
import random
import struct
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from protocol.binlog import ddl, native_format
from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.model import (
    Column,
    ColumnFlag,
    EventHeader,
    RowsEvent,
    RowsKind,
    TableMapEvent,
)
from protocol.binlog.values import InvalidTemporal, JsonDiff
from replica import cli
from replica.commands import decode
from sinks.openprotocol import OpenProtocolEncoder, dumps

if native_format.text_lines is None:
    if os.environ.get("CI") == "true" and os.environ.get("BINLAKE_NATIVE", "1") != "0":
        pytest.fail("CI=true but protocol.binlog._native_format is not built", pytrace=False)
    pytest.skip("the native formatter is not built (or BINLAKE_NATIVE=0)",
                allow_module_level=True)

ROUNDS = int(os.environ.get("BINLAKE_NATIVE_FUZZ_ROUNDS", "300"))
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "binlogs"
FLAVORS = ("mariadb-10.11", "mariadb-11.8", "mysql-9.7")


class Level(enum.IntEnum):
    HIGH = 7


class Text(str):
    pass


UTC2 = dt.timezone(dt.timedelta(hours=2))
#: Every kind of value a decoded image can hold, and some it should not (subclasses).
VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 255, 2**31 - 1, -2**31, 2**63 - 1, -2**63, 2**64 - 1, 2**100,
    -2**100, Level.HIGH,
    0.0, -0.0, 1.5, -2.25, 1e300, -1e-300, 5e-324, 1 / 3, 123456789.125, 1e16, 1e22,
    float("nan"), float("inf"), float("-inf"),
    Decimal("0"), Decimal("-0.00"), Decimal("123.45"), Decimal("-1E-30"), Decimal("1E+3"),
    Decimal("9" * 35 + "." + "9" * 30), Decimal("-" + "1" * 65), Decimal("0.000000000000001"),
    "", "a", "it's", 'say "hi"', "back\\slash", "\x00\x01\x08\x0c\x1f\x7f", "tab\tnew\nret\r",
    "é😀 ΑΒΓ", "\u2028\u0085", "new", "active", "closed", "a,b", "b,a", "x,zz", Text("sub"),
    "\ud800 lone", "'" * 5, "%s %d {}",
    b"", b"\x00\xff", b"abc\\\"'", b"\n\t\r\x7f\x80", bytes(range(256)), bytearray(b"ba"),
    dt.datetime(2024, 2, 29, 12, 34, 56, 123456), dt.datetime(2024, 2, 29, 12, 34, 56),
    dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 1, 1, 0, 0, 0, 120000), dt.datetime(2024, 1, 1, 0, 0, 0, 1),
    dt.datetime(2024, 2, 29, 12, 34, 56, tzinfo=dt.UTC),
    dt.datetime(2024, 2, 29, 12, 34, 56, 500, tzinfo=UTC2),
    dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(999, 12, 31),
    dt.timedelta(0), dt.timedelta(seconds=1), -dt.timedelta(hours=838, minutes=59, seconds=59),
    dt.timedelta(microseconds=-1), dt.timedelta(hours=1, microseconds=120000),
    InvalidTemporal("0000-00-00"), InvalidTemporal("0000-00-00 00:00:00.000000"),
    JsonDiff(((0, "$.a", "1"), (2, "$.b", None))),
    '{"a": [1, 2.5, "x"]}',
]
#: Column type codes and TABLE_MAP metadata, as the decoder hands them to the formatters.
TYPES: list[tuple[int, int, dict[str, Any]]] = [
    (T.TINY, 0, {}), (T.SHORT, 0, {}), (T.INT24, 0, {}), (T.LONG, 0, {}), (T.LONGLONG, 0, {}),
    (T.FLOAT, 4, {}), (T.DOUBLE, 8, {}), (T.NEWDECIMAL, 0, {"precision": 65, "scale": 30}),
    (T.DECIMAL, 0, {}), (T.YEAR, 0, {}), (T.BIT, 0, {}),
    (T.VARCHAR, 64, {}), (T.VAR_STRING, 64, {}), (T.STRING, 20, {}),
    (T.BLOB, 1, {}), (T.BLOB, 2, {}), (T.BLOB, 3, {}), (T.BLOB, 4, {}), (T.GEOMETRY, 4, {}),
    (T.JSON, 4, {}), (T.DATE, 0, {}), (T.NEWDATE, 0, {}), (T.DATETIME2, 6, {}),
    (T.TIMESTAMP2, 3, {}), (T.TIME2, 6, {}), (T.DATETIME, 0, {}), (T.TIMESTAMP, 0, {}),
    (T.TIME, 0, {}),
    (T.ENUM, 1, {"enum_values": ("new", "active", "", "closed", "new")}), (T.ENUM, 1, {}),
    (T.SET, 1, {"set_values": ("a", "b", "x")}), (T.SET, 1, {}),
]
_HEADER = EventHeader(1_700_000_000, 30, 7, 100, 200, 0, "mysql-bin.000001", 100, 200)


def _table(rng: random.Random, width: int, named: bool = True) -> TableMapEvent:
    columns = []
    for index in range(width):
        code, meta, extra = rng.choice(TYPES)
        flags = ColumnFlag(rng.choice([0, 1, 2, 3, 8, 9, 32, 64, 67]))
        name = rng.choice(["id", "n", "naïve", 'q"uote', "back`tick", "with space", "123",
                           "x\ny", "ü"]) + f"_{index}" if named else None
        columns.append(Column(index, int(code), meta, name, flags, **extra))
    pk = tuple(sorted(rng.sample(range(width), rng.choice([0, 1, 1, 2]) if width > 1 else 0)))
    return TableMapEvent(_HEADER, 42, 1, rng.choice(["db", "wéird db"]),
                         rng.choice(["t", "t-1"]), tuple(columns), pk, named)


def _column_values(rng: random.Random, rows: int) -> list[Any]:
    pool = rng.sample(VALUES, rng.randrange(1, 6))  # a few kinds per column, as real data has
    return [rng.choice(pool) for _ in range(rows)]


def _event(rng: random.Random, table: TableMapEvent, kind: RowsKind, rows: int) -> RowsEvent:
    width = len(table.columns)

    def present() -> tuple[int, ...]:
        if rng.random() < 0.6:
            return tuple(range(width))
        return tuple(sorted(rng.sample(range(width), rng.randrange(width + 1))))  # MINIMAL

    before_columns = present() if kind is not RowsKind.INSERT else ()
    after_columns = present() if kind is not RowsKind.DELETE else ()
    before = (tuple(_column_values(rng, rows) for _ in before_columns)
              if kind is not RowsKind.INSERT else None)
    after = (tuple(_column_values(rng, rows) for _ in after_columns)
             if kind is not RowsKind.DELETE else None)
    if before is not None and after is not None and rng.random() < 0.5:
        for pos, index in enumerate(after_columns):  # some rows keep their key
            if index in before_columns and rng.random() < 0.7:
                source = before[before_columns.index(index)]
                for row in range(rows):
                    if rng.random() < 0.5:
                        after[pos][row] = source[row]
    return RowsEvent(_HEADER, kind, table, 1, rows, before_columns, after_columns, before, after)


def _reference_text(event: RowsEvent) -> str:
    return "".join(f"{line}\n" for line in decode.format_rows(event))


def _reference_json(encoder: OpenProtocolEncoder, event: RowsEvent) -> str:
    return "".join(f"{dumps(obj)}\n" for obj in encoder.encode(event))


def _outcome(fn: Any) -> tuple[str, Any]:
    """The text, or that it raised: a value no format can print (a date in an ENUM column
    for JSON, a lone surrogate for base64) raises on both sides, maybe at another value first."""
    try:
        return "ok", fn()
    except (TypeError, ValueError):
        return "error", None


def _assert_same(event: RowsEvent) -> None:
    assert _outcome(lambda: decode.rows_text(event)) == _outcome(lambda: _reference_text(event))
    encoder = OpenProtocolEncoder()
    native = _outcome(lambda: encoder.encode_lines(event))
    reference = _outcome(lambda: _reference_json(encoder, event))
    assert native == reference


@pytest.mark.parametrize(("code", "meta", "extra"), TYPES, ids=lambda t: repr(t))
def test_every_value_in_every_column_type(code: int, meta: int, extra: dict[str, Any]) -> None:
    table = TableMapEvent(_HEADER, 42, 1, "db", "t",
                          (Column(0, code, meta, "c", ColumnFlag.NULLABLE, **extra),), (), True)
    for value, kind in itertools.product(VALUES, (RowsKind.INSERT, RowsKind.DELETE)):
        image = ([value, None, value],)
        event = RowsEvent(_HEADER, kind, table, 1, 3, (0,) if kind is RowsKind.DELETE else (),
                          (0,) if kind is RowsKind.INSERT else (),
                          image if kind is RowsKind.DELETE else None,
                          image if kind is RowsKind.INSERT else None)
        _assert_same(event)


def test_the_native_path_is_taken() -> None:
    """Plain values never reach the reference: it would be as slow as before."""
    plain: list[tuple[int, int, dict[str, Any], Any]] = [
        (T.LONG, 0, {}, 1), (T.LONGLONG, 0, {}, 2**64 - 1), (T.DOUBLE, 8, {}, -1.5),
        (T.FLOAT, 4, {}, 2.5), (T.NEWDECIMAL, 0, {"precision": 65, "scale": 30},
                                Decimal("1." + "0" * 30)),
        (T.VARCHAR, 64, {}, "it's \"é\"\n"), (T.STRING, 20, {}, "x"),
        (T.BLOB, 2, {}, "text"), (T.BLOB, 4, {}, b"\x00blob"), (T.VARCHAR, 16, {}, b"\\\x89\n\""),
        (T.JSON, 4, {}, '{"a": 1}'), (T.DATE, 0, {}, dt.date(2024, 1, 2)),
        (T.DATETIME2, 6, {}, dt.datetime(2024, 1, 2, 3, 4, 5, 600)),
        (T.TIMESTAMP2, 0, {}, dt.datetime(2024, 1, 2)),
        (T.ENUM, 1, {"enum_values": ("new", "active")}, "active"), (T.ENUM, 1, {}, 2),
        (T.YEAR, 0, {}, 2024), (T.BIT, 0, {}, 5),
    ]
    table = TableMapEvent(_HEADER, 42, 1, "db", "t", tuple(
        Column(i, int(code), meta, f"c{i}", ColumnFlag.NULLABLE, **extra)
        for i, (code, meta, extra, _) in enumerate(plain)), (0,), True)
    values = [value for *_, value in plain]
    event = RowsEvent(_HEADER, RowsKind.INSERT, table, 1, 2, (), tuple(range(len(values))),
                      None, tuple([v, None] for v in values))
    calls = []
    reference = decode.format_value
    expected = _reference_text(event)

    def spy(value: Any) -> str:
        calls.append(value)
        return reference(value)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode, "format_value", spy)
        assert decode.rows_text(event) == expected
    assert calls == []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sinks.openprotocol.encode_value", _forbidden)
        encoder = OpenProtocolEncoder()
        lines = encoder.encode_lines(event)
    assert lines == _reference_json(OpenProtocolEncoder(), event)


def _forbidden(*args: Any) -> Any:
    raise AssertionError(f"reference called for {args[-1]!r}")


def test_random_events() -> None:
    rng = random.Random(17)
    for _ in range(ROUNDS):
        table = _table(rng, rng.randrange(1, 9), named=rng.random() < 0.8)
        kind = rng.choice([RowsKind.INSERT, RowsKind.DELETE, RowsKind.UPDATE, RowsKind.UPDATE])
        _assert_same(_event(rng, table, kind, rng.randrange(0, 6)))


def _doubles(rng: random.Random, count: int) -> list[float]:
    """Doubles of every kind the fast repr must get right: any bit pattern, the magnitudes it
    handles (1e-5..1e14) densely, short decimals, integers, neighbours of powers of ten and
    two, and carries (…99.5 rounding up)."""
    out = []
    for _ in range(count):
        r = rng.random()
        if r < 0.15:
            v = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        elif r < 0.45:
            v = rng.uniform(0, 1) * 10 ** rng.uniform(-6, 15)
        elif r < 0.6:
            v = round(rng.uniform(-1e6, 1e6), rng.randrange(0, 9))
        elif r < 0.7:
            v = float(rng.randrange(-10**15, 10**15))
        elif r < 0.8:
            v = float(f"{rng.randrange(1, 10 ** rng.randrange(1, 18))}e{rng.randrange(-9, 16)}")
        elif r < 0.9:
            base = rng.choice([10.0 ** rng.randrange(-6, 15), 2.0 ** rng.randrange(-20, 48),
                               float(f"9.5e{rng.randrange(-6, 14)}")])
            v = base
            for _ in range(rng.randrange(4)):
                v = math.nextafter(v, rng.choice([0.0, math.inf]))
        else:
            v = float(f"0.{'9' * rng.randrange(1, 18)}e{rng.randrange(-4, 15)}")
        out.append(-v if rng.random() < 0.3 else v)
    return out


def test_floats_print_as_repr() -> None:
    assert native_format.text_lines is not None and native_format.json_lines is not None
    rng = random.Random(11)
    for _ in range(max(1, ROUNDS // 30)):
        column = _doubles(rng, 1000)
        text = native_format.text_lines(("", "\n"), ((("",), (column,)),), 1000, repr)
        assert text == "".join(f"{v!r}\n" for v in column)
        plan = (("",), (0,), (None,), (dumps,), (column,))
        lines = native_format.json_lines("", plan, None, (), 1000)
        assert lines == "".join(f'{{"d":{{{dumps(v)}}}}}}}}}\n' for v in column)


def test_key_changing_updates() -> None:
    """TiCDC's delete + insert for a new key in a full after image, u/p otherwise; composite
    keys, NULL keys, values equal once encoded (a SET's member order) or not (NaN)."""
    columns = (Column(0, T.LONG, 0, "id", ColumnFlag.NONE),
               Column(1, T.SET, 1, "tags", ColumnFlag.NONE, set_values=("a", "b")),
               Column(2, T.DOUBLE, 8, "f", ColumnFlag.NONE),
               Column(3, T.VARCHAR, 10, "s", ColumnFlag.NULLABLE))
    nan = float("nan")
    for pk in ((0,), (1,), (2,), (3,), (0, 3), (1, 2)):
        table = TableMapEvent(_HEADER, 42, 1, "db", "t", columns, pk, True)
        before = ([1, 1, 2, 3, 4], ["a,b", "a", "b", "", "a"], [nan, 1.0, -0.0, 2.0, 3.0],
                  ["x", None, "y", "z", None])
        after = ([1, 2, 2, 3, 4], ["b,a", "a", "b,a", "", "b"], [nan, 1.0, 0.0, 2.5, 3.0],
                 ["x", None, None, "z", "w"])
        for after_columns in ((0, 1, 2, 3), (0, 2), (1, 3)):
            event = RowsEvent(_HEADER, RowsKind.UPDATE, table, 1, 5, (0, 1, 2, 3), after_columns,
                              before, tuple(after[i] for i in after_columns))
            _assert_same(event)


def test_colliding_names_and_json_diffs_use_the_reference() -> None:
    columns = (Column(0, T.LONG, 0, None, ColumnFlag.NONE),
               Column(1, T.LONG, 0, "col_1", ColumnFlag.NONE),
               Column(2, T.JSON, 4, "doc", ColumnFlag.NONE))
    table = TableMapEvent(_HEADER, 42, 1, "db", "t", columns, (0,), False)
    event = RowsEvent(_HEADER, RowsKind.UPDATE, table, 1, 2, (0, 1, 2), (0, 1, 2),
                      ([1, 2], [3, 4], ['{"a": 1}', None]),
                      ([1, 5], [3, 4], [JsonDiff(((0, "$.a", "2"),)), "[]"]))
    _assert_same(event)
    named = TableMapEvent(_HEADER, 42, 1, "db", "t", columns[1:], (), True)
    partial = RowsEvent(_HEADER, RowsKind.UPDATE, named, 1, 1, (0,), (0, 1), ([3],),
                        ([3], [JsonDiff(((2, "$.b", None),))]))
    _assert_same(partial)
    assert '"jd":{"doc":' in OpenProtocolEncoder().encode_lines(partial)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("output_format", ["text", "open-protocol"])
def test_decode_of_the_captured_binlogs_is_unchanged(
        flavor: str, output_format: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``binlake decode`` itself, natively and with the reference only (BINLAKE_NATIVE=0's
    formatting): the same bytes, password redaction of statements included."""
    files = sorted(str(p) for p in (FIXTURES / flavor).glob("mysql-bin.0*"))
    assert cli.run(["decode", "--format", output_format, *files]) == 0
    native, _ = capsys.readouterr()
    monkeypatch.setattr(native_format, "text_lines", None)
    monkeypatch.setattr(native_format, "json_lines", None)
    assert cli.run(["decode", "--format", output_format, *files]) == 0
    reference, _ = capsys.readouterr()
    assert native == reference
    assert native.count("\n") > 20


def test_statements_are_redacted_and_escaped_as_the_reference_does() -> None:
    """Random statements of markers in any letter case, password clauses, URLs, quotes,
    controls, backslashes and non-ASCII (Unicode upper-casing can make a marker: a long s)."""
    pieces = ["PASSWORD", "password", "PassWord", "paſsword", "IDENTIFIED BY ", "identified",
              "IdEnTiFiEd WITH x AS ", "'secret'", '"pw"', "mysql://u:p@h/db", ":/", "://",
              "CREATE USER u ", "SET PASSWORD = ", "ALTER USER 'a'@'%' ", " ", "\n", "\t",
              "\\", "\x00", "\x1b", "\x7f", "\x85", "é", "😀", "ﬁ", "INSERT INTO t VALUES (1)",
              "-- c", "/* x */", "REPLACE 'old'", "p", "i", "d"]
    rng = random.Random(5)
    for _ in range(ROUNDS * 10):
        query = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        assert decode._statement(query) == decode._one_line(ddl.redact_secrets(query)), query


def test_the_native_screen_takes_its_markers_from_the_python_list() -> None:
    """``ddl.SECRET_MARKERS`` is the one list: the extension reads it when it is imported (a
    different list in a fresh interpreter changes what it screens), and it finds each marker in
    any letter case and nothing short of one."""
    import protocol.binlog._native_format as extension

    assert extension.MARKERS is ddl.SECRET_MARKERS
    screen = native_format.maybe_secret
    assert screen is not None
    for marker in ddl.SECRET_MARKERS:
        for text in (marker, marker.lower(), marker.title(), f"x {marker.swapcase()} y"):
            assert screen(text), text
        assert not screen(marker[:-1]) and not screen(marker[1:])
    script = ("import sys; from protocol.binlog import ddl; ddl.SECRET_MARKERS = ('SECRETWORD',); "
              "from protocol.binlog import _native_format as n; "
              "sys.exit(0 if n.maybe_secret('a SecretWord b') and not n.maybe_secret('PASSWORD')"
              " else 1)")
    assert subprocess.run([sys.executable, "-c", script], check=False).returncode == 0


def test_long_statements_are_escaped_as_the_reference_does() -> None:
    """Every byte class at every offset of the eight-byte scan (latin-1, BMP and astral text
    too), and markers cut across those words."""
    alphabet = ["a", "Z", "\\", "\x00", "\x1f", " ", "\x7f", "\x80", "\xff", "\n", "\t", "\r",
                "[", "]", "é", "😀", "Ā", "pass", "word", "PASS", "WORD", "iden", "tified", ":", "/"]
    rng = random.Random(6)
    for _ in range(ROUNDS * 10):
        query = "".join(rng.choice(alphabet) for _ in range(rng.randrange(60)))
        assert decode._statement(query) == decode._one_line(ddl.redact_secrets(query)), query


def test_password_literals_stay_redacted_in_statements() -> None:
    statement = "CREATE USER 'u'@'%' IDENTIFIED BY 'hunter2'; -- tab\there\\"
    assert decode._statement(statement) == (
        "CREATE USER 'u'@'%' IDENTIFIED BY '<redacted>'; -- tab\\there\\\\")


def test_bad_arguments_raise_instead_of_crashing() -> None:
    assert native_format.text_lines is not None and native_format.json_lines is not None
    text_lines, json_lines = native_format.text_lines, native_format.json_lines
    fallback = decode.format_value
    bad_text: list[tuple[Any, ...]] = [
        (("a",), (), -1, fallback), (("a", "b"), ((("x=",), ([1],)),), 2, fallback),
        (("a", "b"), ((("x=",), ([1], [2])),), 1, fallback), (("a", 1), ((("x=",), ([1],)),), 1,
                                                               fallback),
        (("a", "b"), ((("x=",), ((1,),)),), 1, fallback), (("a", "b"), (((1,), ([1],)),), 1,
                                                            fallback),
        (("a", "b"), ((("x=",), ([object()],)),), 1, lambda v: 5),
        (("a", "b"), ((("x=",), ([object()],)),), 1, None),
        (("a", "b"), (("x=",),), 1, fallback), (("a",), "nope", 1, fallback),
    ]
    for args in bad_text:
        with pytest.raises((TypeError, ValueError)):
            text_lines(*args)
    plan = (("x",), (0,), (None,), (str,), ([1],))
    bad_json: list[tuple[Any, ...]] = [
        ("h", None, None, (), 1), ("h", plan, None, ((0, 0, str),), 1), ("h", plan, None, (), -1),
        ("h", plan, plan, ((0, 5, str),), 1), ("h", plan, plan, ((0,),), 1),
        ("h", (("x",), (9,), (None,), (str,), ([1],)), None, (), 1),
        ("h", (("x",), (2,), ([],), (str,), (["a"],)), None, (), 1),
        ("h", (("x",), (0,), (None,), (str,), ([1],)), None, (), 2),
        ("h", (("x",), (0, 1), (None,), (str,), ([1],)), None, (), 1),
        ("h", (("x",), (3,), (None,), (lambda v: 1,), ([1],)), None, (), 1),
        ("h", (("x",), (0,), (None,), (str,)), None, (), 1),
    ]
    for args in bad_json:
        with pytest.raises((TypeError, ValueError, IndexError)):
            json_lines(*args)
    assert text_lines(("a", "\n"), ((("x=",), ([1],)),), 0, fallback) == ""
    assert json_lines("h", plan, None, (), 1) == 'h{"d":{x1}}}}\n'  # x's prefix, 1, '}'


def test_shrinking_lists_under_a_fallback_raise() -> None:
    column: list[Any] = [object(), 1, 2]

    def shrink(value: Any) -> str:
        column.clear()
        return "v"

    assert native_format.text_lines is not None
    with pytest.raises(ValueError):
        native_format.text_lines(("", "\n"), ((("x=",), (column,)),), 3, shrink)
    column[:] = [object(), 1, 2]
    assert native_format.json_lines is not None
    with pytest.raises(ValueError):
        native_format.json_lines("h", (("x",), (3,), (None,), (shrink,), (column,)), None, (),
                                 3)


def test_fallback_partial_keeps_the_reference() -> None:
    """A value of a type the fast path does not know goes to the reference, whatever column."""
    seen = []
    fallback = functools.partial(lambda tag, v: seen.append(v) or tag, "'?'")
    assert native_format.text_lines is not None
    text = native_format.text_lines(("", "\n"), ((("a=", ", b="),
                                                  ([dt.timedelta(1)], [Level.HIGH])),), 1,
                                    fallback)
    assert text == "a='?', b='?'\n" and seen == [dt.timedelta(1), Level.HIGH]
