"""Every fast path of TIMESTAMP, TIME, DECIMAL, MySQL JSON and a legacy charset against the
readable reference of ``protocol.valuetypes`` (server-free).

For each type, hypothesis draws values (and, for the binlog, arbitrary stored bytes as well) and
this test encodes them as a server stores them and prints them. The reference —
``timestamp2.decode``, ``time2.decode``, ``newdecimal.decode``, ``binary_json.json_binary_to_text``,
``characters.text_decoder`` — must give the value back, and every twin must give what the
reference gives:

* the binlog: the generated row decoder, the native decoder's Python values, its Arrow chunks
  (landed by the sink's conversion, against the reference values landed the same way); bytes the
  reference refuses are refused by all of them (``RowDecodeError``);
* a snapshot: the text converter (``protocol.snapshot.values``) and the native text → Arrow
  conversion (``native.text_arrow`` through ``SnapshotTable.decode_kept``).

* the text outputs: ``binlake decode``'s ``format_value`` and the Open Protocol's
  ``encode_value`` print what each of those paths gave (every Python value: the generated and
  native decoders', the snapshot converter's) exactly as the server's own form of the drawn
  value says — written here from the server's format for TIMESTAMP, TIME and DECIMAL, and for
  MySQL JSON and character data the printing of the server's text — so an output cannot print
  one path's value differently from another's.

``BINLAKE_VALUE_EXAMPLES`` sets hypothesis's examples per type (default 40).
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.binlog import native
from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.enrich import ColumnDescription, TableDescription
from protocol.binlog.model import EventHeader, RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.rows import DecoderCache, decode_rows_event
from protocol.errors import EventDecodeError
from protocol.packets import lenenc_bytes
from protocol.results import parse_text_row
from protocol.snapshot import SnapshotTable, snapshot_table
from protocol.snapshot.values import PYTHON_SPEC, converter_for, text_spec
from protocol.valuetypes import binary_json, characters, newdecimal, time2, timestamp2
from protocol.valuetypes.temporal import InvalidTemporal
from replica.commands.decode import format_value
from sinks.openprotocol import encode_value, open_type_code
from sinks.parquet.rows import PendingRows, TransactionTags, rows_batch
from sinks.parquet.schema import TableVersion, VersionOrigin
from sinks.parquet.types import new_counter
from tests.unit.rowbuild import Col, header, image, rows_body, u16
from tests.unit.test_native_rows import _encode_decimal, _table
from tests.unit.test_rows import jsonb

pytestmark = pytest.mark.skipif(not (native.AVAILABLE and native.TEXT_ARROW),
                                reason="the native extensions are not built")

EXAMPLES = int(os.environ.get("BINLAKE_VALUE_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TAGS = TransactionTags(7, None, None, None, None, None, None, "bin.000001", 4)
LATIN1, SJIS = 8, 13  # collation ids: latin1_swedish_ci, sjis_japanese_ci


@dataclass(frozen=True)
class Case:
    """One column type: its binlog column, its snapshot description, the reference decoder of
    its stored bytes, and the server's encoding of a value (stored bytes, snapshot text)."""

    name: str
    col: Col
    described: ColumnDescription
    size: int | None  # stored bytes of a fixed-size type (arbitrary bytes of it are drawn too)
    reference: Callable[[bytes], Any]
    values: st.SearchStrategy[Any]
    stored: Callable[[Any], bytes]
    text: Callable[[Any], bytes]
    #: ``binlake decode``'s literal and the Open Protocol value of a drawn value, from the
    #: server's format (None: the outputs' printing of the server's text, :func:`_printed`).
    printed: Callable[[Any], tuple[str, Any]] | None = None


def _fraction(us: int, fsp: int) -> bytes:
    """A fraction as stored after TIMESTAMP2/DATETIME2: fsp digits in (fsp + 1) // 2 bytes."""
    if fsp == 0:
        return b""
    if fsp <= 2:
        return (us // 10000).to_bytes(1, "big")
    if fsp <= 4:
        return (us // 100).to_bytes(2, "big")
    return us.to_bytes(3, "big")


def _six(us: int) -> str:
    """The fraction as the outputs print it before trimming: six digits, none for zero."""
    return f".{us:06d}" if us else ""


def _micros(fsp: int) -> st.SearchStrategy[int]:
    step = 10 ** (6 - fsp)
    return st.integers(0, 999999 // step).map(lambda n: n * step)


def _timestamp(fsp: int) -> Case:
    values = st.one_of(st.just((0, 0)), st.tuples(st.integers(0, 2 ** 32 - 1), _micros(fsp)))

    def text(v: tuple[int, int]) -> bytes:
        return (f"{v[0]}" + (f".{v[1]:06d}"[:fsp + 1] if fsp else "")).encode()

    def printed(v: tuple[int, int]) -> tuple[str, Any]:
        if v == (0, 0):  # the zero TIMESTAMP, as SELECT prints it
            zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
            return f"'{zero}'", zero
        t = time.gmtime(v[0])
        when = (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d} "
                f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}")
        return (f"'{when}{_six(v[1])}+00:00'", when + _six(v[1]).rstrip("0"))

    return Case(f"timestamp({fsp})", Col(T.TIMESTAMP2, bytes([fsp])),
                ColumnDescription("c", "timestamp", True, fsp=fsp), 4 + (fsp + 1) // 2,
                lambda b: timestamp2.decode(b, 0, fsp), values,
                lambda v: v[0].to_bytes(4, "big") + _fraction(v[1], fsp), text, printed)


def _time(fsp: int) -> Case:
    step = 10 ** (6 - fsp)
    values = st.tuples(st.booleans(), st.integers(0, 838), st.integers(0, 59),
                       st.integers(0, 59), _micros(fsp))

    def stored(v: tuple[bool, int, int, int, int]) -> bytes:
        negative, hour, minute, second, us = v
        packed = ((hour << 12 | minute << 6 | second) << 24) + us
        packed = -packed if negative else packed
        intpart, frac = packed >> 24, packed & 0xFFFFFF  # a negative fraction borrows
        out = (intpart + 0x800000).to_bytes(3, "big")
        if fsp >= 5:
            return (packed + 0x800000000000).to_bytes(6, "big")
        if fsp:
            size = (fsp + 1) // 2
            units = (frac - (1 << 24) if frac and negative else frac) // (10000 if size == 1
                                                                        else 100)
            out += (units % (256 ** size)).to_bytes(size, "big")
        assert us % step == 0
        return out

    def text(v: tuple[bool, int, int, int, int]) -> bytes:
        negative, hour, minute, second, us = v
        frac = f".{us:06d}"[:fsp + 1] if fsp else ""
        zero = not (hour or minute or second or us)
        return f"{'-' if negative and not zero else ''}{hour:02d}:{minute:02d}:{second:02d}{frac}".encode()

    def printed(v: tuple[bool, int, int, int, int]) -> tuple[str, Any]:
        negative, hour, minute, second, us = v
        sign = "-" if negative and (hour or minute or second or us) else ""
        hms = f"{sign}{hour:02d}:{minute:02d}:{second:02d}"
        return f"'{hms}{_six(us)}'", hms + _six(us).rstrip("0")

    return Case(f"time({fsp})", Col(T.TIME2, bytes([fsp])),
                ColumnDescription("c", "time", True, fsp=fsp), 3 + (fsp + 1) // 2,
                lambda b: time2.decode(b, 0, fsp), values, stored, text, printed)


def _decimal(precision: int, scale: int) -> Case:
    digits = st.text("0123456789", min_size=precision, max_size=precision)
    values = st.tuples(st.booleans(), digits).map(
        lambda v: Decimal(("-" if v[0] else "") + v[1][:precision - scale] + "."
                          + v[1][precision - scale:]) if scale else
        Decimal(("-" if v[0] else "") + v[1]))
    return Case(f"decimal({precision},{scale})", Col(T.NEWDECIMAL, bytes([precision, scale])),
                ColumnDescription("c", "decimal", True, precision=precision, scale=scale),
                newdecimal.size(precision, scale),
                lambda b: newdecimal.decode(b, 0, precision, scale)[0], values,
                lambda v: _encode_decimal(v, precision, scale), lambda v: f"{v:f}".encode(),
                lambda v: (str(Decimal(f"{v:f}")),) * 2)


_JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 64 - 1),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
_JSON = st.recursive(_JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12)


def _json() -> Case:
    return Case("json", Col(T.JSON, b"\x04"), ColumnDescription("c", "json", True), None,
                lambda b: binary_json.json_binary_to_text(b[4:]), _JSON,
                lambda v: len(jsonb(v)).to_bytes(4, "little") + jsonb(v),
                lambda v: binary_json.json_binary_to_text(jsonb(v)).encode())


def _charset(collation: int, charset: str) -> Case:
    decode_text = characters.text_decoder(collation)
    return Case(charset, Col(T.VARCHAR, u16(40), charset=collation),
                ColumnDescription("c", "varchar", True, charset=charset, collation=collation,
                                  octet_length=40),
                None, lambda b: decode_text(b[1:]), st.binary(max_size=40),
                lambda v: bytes([len(v)]) + v, lambda v: v)


CASES = [*(_timestamp(fsp) for fsp in (0, 3, 6)), *(_time(fsp) for fsp in (0, 2, 4, 6)),
         *(_decimal(p, s) for p, s in ((10, 2), (18, 9), (38, 10), (65, 30), (5, 5))),
         _json(), _charset(LATIN1, "latin1"), _charset(SJIS, "sjis")]


# --- the binlog -------------------------------------------------------------------------------


def _decoded(table: TableMapEvent, body: bytes, use_native: bool, arrow: bool
             ) -> RowsEvent | type[BaseException]:
    with mock.patch.object(native, "ENABLED", use_native), \
            mock.patch.object(native, "ARROW", arrow):
        try:
            return decode_rows_event(header(), memoryview(body), 8, {table.table_id: table},
                                     version=1, kind=RowsKind.INSERT,
                                     decoders=DecoderCache(arrow=arrow))
        except EventDecodeError as exc:
            return type(exc)


def _tagged(value: Any) -> Any:
    """A value compared with its type, a Decimal with its exponent and sign, a datetime with
    its time zone."""
    if isinstance(value, Decimal):
        return ("dec", value.as_tuple())
    if isinstance(value, dt.datetime):
        return ("dt", value, value.tzinfo)
    return (type(value).__name__, value)


def _reference_or_error(case: Case, stored: bytes) -> Any:
    try:
        return case.reference(stored)
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _land(table: TableMapEvent, event: RowsEvent) -> tuple[list[Any], pa.DataType, int]:
    counter = new_counter()
    version = TableVersion.from_table_map(table, 1, VersionOrigin(1), counter)
    batch = rows_batch(version, [PendingRows(event, TAGS, 0, (), 1_700_000_000_000_000)],
                       with_commit_time=True)
    column = batch.column(len(table.columns) - 1)  # the table's columns come first
    return column.to_pylist(), column.type, counter.invalid_temporal


def _check_binlog(case: Case, stored: list[bytes | None]) -> list[list[Any]]:
    """The binlog paths against the reference; the Python values each path gave."""
    table = _table([case.col])
    body = rows_body(1, [image([v]) for v in stored])
    values = [None if v is None else _reference_or_error(case, v) for v in stored]
    refused = any(v is not None and value is None for v, value in zip(stored, values, strict=True))
    got: list[list[Any]] = []
    for use_native in (False, True):
        event = _decoded(table, body, use_native, arrow=False)
        if refused:
            assert not isinstance(event, RowsEvent), (use_native, event)
            continue
        assert isinstance(event, RowsEvent), (use_native, event)
        assert event.after is not None
        assert [_tagged(v) for v in event.after[0]] == [_tagged(v) for v in values], use_native
        got.append(event.after[0])
    arrow = _decoded(table, body, True, arrow=True)
    if refused:
        assert not isinstance(arrow, RowsEvent)
        return got
    assert isinstance(arrow, RowsEvent) and arrow.arrow is not None
    reference = RowsEvent(arrow.header, RowsKind.INSERT, table, arrow.flags, len(stored), (),
                          (0,), None, ([*values],))
    assert _land(table, arrow) == _land(table, reference)
    return got


# --- a snapshot --------------------------------------------------------------------------------


def _snapshot(case: Case) -> SnapshotTable:
    key = ColumnDescription("id", "int", False)
    return snapshot_table(TableDescription("db", "t", (key, case.described), primary_key=("id",)),
                          mysql=True, row_metadata="FULL")


def _event(snap: SnapshotTable, after: Any, count: int, arrow: Any) -> RowsEvent:
    return RowsEvent(header=EventHeader(0, 0, 0, 0, 0, 0), kind=RowsKind.READ,
                     table=snap.table_map, flags=0, row_count=count, before_columns=(),
                     after_columns=(0, 1), before=None, after=after, arrow=arrow)


def _check_snapshot(case: Case, snap: SnapshotTable, texts: list[bytes | None],
                    expected: list[Any]) -> list[Any]:
    """The snapshot paths against the reference; the Python values the converter gave."""
    payloads = [lenenc_bytes(b"%d" % i) + (b"\xfb" if t is None else lenenc_bytes(t))
                for i, t in enumerate(texts)]
    binary = (False, False)
    parsed = [parse_text_row(p, binary) for p in payloads]
    converted = snap.decode_rows(parsed)
    assert [_tagged(v) for v in converted[1]] == [_tagged(v) for v in expected], case.name
    kept = bytearray()
    for p in payloads:
        kept += struct.pack("<I", len(p)) + p
    image_, chunks = snap.decode_kept(kept, len(texts), binary)
    reference = _event(snap, (list(range(len(texts))), [*expected]), len(texts), None)
    got = _event(snap, image_, len(texts), (None, chunks))
    assert _land(snap.table_map, got) == _land(snap.table_map, reference), case.name
    return converted[1]


# --- the text outputs --------------------------------------------------------------------------


def _printed(case: Case, drawn: Any) -> tuple[str, Any]:
    """What both outputs print for a drawn value: the case's own form, else the printing of the
    value the server's text stands for (JSON: that text; character data: its decoding)."""
    if drawn is None:
        return "NULL", None
    if case.printed is not None:
        return case.printed(drawn)
    server = case.text(drawn)
    value = server.decode("utf-8") if case.name == "json" else case.reference(
        case.stored(drawn))
    column = _table([case.col]).columns[0]
    return format_value(value), encode_value(column, open_type_code(column), value)


def _check_outputs(case: Case, drawn: list[Any], paths: list[list[Any]]) -> None:
    column = _table([case.col]).columns[0]
    code = open_type_code(column)
    expected = [_printed(case, d) for d in drawn]
    for values in paths:
        assert [(format_value(v), encode_value(column, code, v)) for v in values] == expected


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@SETTINGS
@given(data=st.data())
def test_every_path_gives_the_reference_value(case: Case, data: st.DataObject) -> None:
    drawn = data.draw(st.lists(st.one_of(st.none(), case.values), min_size=1, max_size=6))
    stored = [None if v is None else case.stored(v) for v in drawn]
    expected = [None if s is None else case.reference(s) for s in stored]
    paths = _check_binlog(case, stored)
    paths.append(_check_snapshot(case, _snapshot(case),
                                 [None if v is None else case.text(v) for v in drawn], expected))
    assert len(paths) == 3  # the generated and native decoders, the snapshot's converter
    _check_outputs(case, drawn, paths)


@pytest.mark.parametrize("case", [c for c in CASES if c.size is not None], ids=lambda c: c.name)
@SETTINGS
@given(data=st.data())
def test_arbitrary_stored_bytes_decode_or_fail_alike(case: Case, data: st.DataObject) -> None:
    assert case.size is not None
    stored = data.draw(st.lists(st.one_of(st.none(), st.binary(min_size=case.size,
                                                               max_size=case.size)),
                                min_size=1, max_size=4))
    _check_binlog(case, stored)


def test_the_references_decode_what_the_server_stores() -> None:
    """The reference gives back the value it was encoded from (the encoders above are the
    server's layout, written from its documentation, not from the reference)."""
    ts = _timestamp(6)
    assert ts.reference(ts.stored((1_700_000_000, 123456))) == dt.datetime(
        2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)
    assert ts.reference(ts.stored((0, 0))) == InvalidTemporal("0000-00-00 00:00:00.000000")
    tm = _time(2)
    assert tm.reference(tm.stored((True, 838, 59, 58, 990000))) == -dt.timedelta(
        hours=838, minutes=59, seconds=58, microseconds=990000)
    assert tm.text((True, 838, 59, 58, 990000)) == time2.text(
        tm.reference(tm.stored((True, 838, 59, 58, 990000))), 2).encode()
    dec = _decimal(65, 30)
    value = Decimal("-" + "9" * 35 + "." + "1" * 30)
    assert dec.reference(dec.stored(value)).as_tuple() == value.as_tuple()
    assert binary_json.json_binary_to_text(jsonb({"b": [1, 2.5], "a": None})) == \
        '{"a": null, "b": [1, 2.5]}'
    latin1 = _charset(LATIN1, "latin1")
    assert latin1.reference(latin1.stored(b"\x80\x81caf\xe9")) == "\u20ac\x81café"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_native_twins_are_the_paths_taken(case: Case) -> None:
    """The comparisons above are not vacuous: the native decoder has a plan for each type, and
    a snapshot's text goes to Arrow natively for each but a legacy charset (which has no native
    check, so the reference converts it)."""
    table = _table([case.col])
    with mock.patch.object(native, "ENABLED", True):
        assert DecoderCache().decoder_for(table).native_plan(None, (0,)) is not None
    column = _snapshot(case).table_map.columns[1]
    python_only = case.name in ("latin1", "sjis")
    assert (text_spec(column, converter_for(column)) == PYTHON_SPEC) is python_only


def test_the_outputs_print_legacy_text_and_a_partial_json_update() -> None:
    """A legacy charset's TEXT column, decoded by either decoder: ``binlake decode`` quotes its
    text and Open Protocol carries the UTF-8 of that text in base64 (not the stored Shift-JIS);
    a partial JSON update without its document prints as its operations in both outputs."""
    sjis = "日本語テキスト"
    stored = sjis.encode("shift_jis")
    table = _table([Col(T.BLOB, b"\x02", charset=SJIS)])
    column = table.columns[0]
    for use_native in (False, True):
        event = _decoded(table, rows_body(1, [image([len(stored).to_bytes(2, "little")
                                                     + stored])]), use_native, arrow=False)
        assert isinstance(event, RowsEvent) and event.after is not None
        assert event.after[0] == [sjis]
        assert format_value(event.after[0][0]) == f"'{sjis}'"
        assert encode_value(column, open_type_code(column), event.after[0][0]) == \
            base64.b64encode(sjis.encode("utf-8")).decode("ascii")
    diff = binary_json.JsonDiff(((binary_json.JsonDiffOp.REPLACE, "$.a", "2"),
                                 (binary_json.JsonDiffOp.REMOVE, "$.b[0]", None),
                                 (binary_json.JsonDiffOp.INSERT, '$."k"', '"z"')))
    assert format_value(diff) == 'JSON_DIFF(REPLACE $.a 2, REMOVE $.b[0], INSERT $."k" "z")'
    assert diff.to_json_text() == ('[{"op": "REPLACE", "path": "$.a", "value": 2}, '
                                   '{"op": "REMOVE", "path": "$.b[0]"}, '
                                   '{"op": "INSERT", "path": "$.\\"k\\"", "value": "z"}]')
