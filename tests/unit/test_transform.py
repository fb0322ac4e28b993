"""Column rules (sinks.transform) through the sink, the config and decode, without a server."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.model import BinlogPosition, EventHeader, RowsEvent, RowsKind
from replica.cli import exit_code_for, hint_for
from replica.config import ConfigError, load_config
from sinks.chunks import SnapshotChunk
from sinks.contract import SnapshotProgress
from sinks.errors import TransformRefused
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col
from sinks.parquet.writer import SinkOptions
from sinks.transform import ColumnRule, Transform, TypeOptions, text_form

KEY = b"test-key"
RULES = (ColumnRule("shop.customers.email", "hash"), ColumnRule("shop.customers.bio", "exclude"),
         ColumnRule("shop.customers.card", "mask", mask="****"),
         ColumnRule("shop.*.note", "truncate", length=3))
SECRETS = ("ann@example.com", "bob@example.com", "a long biography", "4111111111111111",
           "4222222222222222", "hello world", "goodbye")


def _hash(text: str) -> str:
    return hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()


def _customers(b: StreamBuilder) -> Any:
    return b.table("shop", "customers", [
        col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "email", charset=45),
        col(2, T.BLOB, "bio", charset=45), col(3, T.VARCHAR, "card", charset=45),
        col(4, T.VARCHAR, "note", charset=45), col(5, T.NEWDECIMAL, "amount", precision=10,
                                                    scale=2)])


def _rows(lake: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(lake.rglob("*.parquet")):
        found.extend(pq.read_table(path).to_pylist())
    return sorted(found, key=lambda r: (r["_seq"], r["_row"]))


def _feed(sink: ParquetSink, items: list[Any]) -> None:
    for item in items:
        sink.handle(item)


def _no_secret_anywhere(lake: Path) -> None:
    for path in lake.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, (secret, path)


def test_rules_apply_to_streamed_rows_before_images_snapshots_and_xa(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    b = StreamBuilder()
    customers = _customers(b)
    sink = ParquetSink(str(lake), SinkOptions(transform=Transform(RULES, KEY)))
    sink.open()
    ann = (1, "ann@example.com", "a long biography", "4111111111111111", "hello world",
           Decimal("1.50"))
    ann2 = (1, "ann@example.com", "a long biography", "4222222222222222", "goodbye", None)
    _feed(sink, [b.begin(), b.insert(customers, [ann]), b.commit()])
    _feed(sink, [b.begin(), b.update(customers, [(ann, ann2)]), b.prepare("x1")])
    _feed(sink, b.xa_outcome("x1", commit=True))
    read = RowsEvent(header=EventHeader(0, 0, 0, 0, 0, 0), kind=RowsKind.READ, table=customers,
                     flags=0, row_count=1, before_columns=(), after_columns=tuple(range(6)),
                     before=None, after=tuple([v] for v in (2, "bob@example.com", None, None,
                                                             "hello world", Decimal("0.00"))))
    sink.land_chunk(SnapshotChunk(SnapshotProgress(), BinlogPosition("binlog.000001", b.pos), 1_767_300_000_000_000,
                                  read))
    _feed(sink, [b.begin(), b.delete(customers, [ann2]), b.commit()])
    sink.close()

    rows = _rows(lake)
    data = [{k: r[k] for k in ("_op", "id", "email", "card", "note", "amount")} for r in rows]
    assert data == [
        {"_op": "I", "id": 1, "email": _hash("ann@example.com"), "card": "****", "note": "hel",
         "amount": Decimal("1.50")},
        {"_op": "U", "id": 1, "email": _hash("ann@example.com"), "card": "****", "note": "goo",
         "amount": None},
        {"_op": "R", "id": 2, "email": _hash("bob@example.com"), "card": None, "note": "hel",
         "amount": Decimal("0.00")},
        {"_op": "D", "id": 1, "email": _hash("ann@example.com"), "card": "****", "note": "goo",
         "amount": None},
    ]
    assert rows[1]["_before"] == {"id": 1, "email": _hash("ann@example.com"), "card": "****",
                                  "note": "hel", "amount": Decimal("1.50")}
    assert all("bio" not in r for r in rows)
    _no_secret_anywhere(lake)

    (schema_file,) = (lake / "shop" / "customers" / "_schema").iterdir()
    doc = json.loads(schema_file.read_text())
    assert doc["excluded_columns"] == ["bio"]
    assert {c["name"]: c.get("transform") for c in doc["columns"]} == {
        "id": None, "email": "hash:hmac-sha256", "card": "mask", "note": "truncate:3",
        "amount": None}
    (first, *_) = sorted(lake.rglob("*.parquet"))
    schema = pq.read_schema(first)
    assert schema.field("email").metadata[b"transform"] == b"hash:hmac-sha256"
    assert schema.metadata[b"binlake.excluded_columns"] == b'["bio"]'


def test_a_changed_rule_starts_a_new_schema_version(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    b = StreamBuilder()
    customers = _customers(b)
    row = (1, "ann@example.com", "bio", "4111111111111111", "hello world", None)
    for n, rules in enumerate((RULES, (ColumnRule("shop.customers.email", "hash"),),
                               (ColumnRule("shop.customers.email", "hash"),)), 1):
        sink = ParquetSink(str(lake), SinkOptions(transform=Transform(rules, KEY)))
        sink.open()
        _feed(sink, [b.begin(), b.insert(customers, [(n, *row[1:])]), b.commit()])
        sink.close()
    versions = sorted(p.name for p in (lake / "shop" / "customers").iterdir()
                      if p.name.startswith("schema_version="))
    assert versions == ["schema_version=1", "schema_version=2"]  # the same rules: same version


def test_a_hashed_key_is_the_key(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    b = StreamBuilder()
    users = b.table("shop", "users", [col(0, T.VARCHAR, "email", charset=45, pk=True),
                                      col(1, T.LONG, "n")])
    sink = ParquetSink(str(lake), SinkOptions(transform=Transform(
        (ColumnRule("shop.users.email", "hash"),), KEY)))
    sink.open()
    _feed(sink, [b.begin(), b.insert(users, [("ann@example.com", 1)]), b.commit(),
                 b.begin(), b.update(users, [(("ann@example.com", 1), ("bob@example.com", 1))]),
                 b.commit()])
    sink.close()
    (schema_file,) = (lake / "shop" / "users" / "_schema").iterdir()
    assert json.loads(schema_file.read_text())["primary_key"] == ["email"]
    ops = [(r["_op"], r["email"]) for r in _rows(lake)]
    # a key change lands as D(old) + I(new), by the hashed key
    assert ops == [("I", _hash("ann@example.com")), ("D", _hash("ann@example.com")),
                   ("I", _hash("bob@example.com"))]


def test_an_excluded_key_or_an_unhashable_type_is_refused_with_exit_2(tmp_path: Path) -> None:
    b = StreamBuilder()
    t = b.table("shop", "t", [col(0, T.LONG, "id", pk=True), col(1, T.DOUBLE, "f"),
                              col(2, T.TIMESTAMP2, "ts")])
    for rule, words in ((ColumnRule("shop.t.id", "exclude"), "primary key"),
                        (ColumnRule("shop.t.f", "hash"), "cannot be hashed"),
                        (ColumnRule("shop.t.ts", "hash"), "cannot be hashed"),
                        (ColumnRule("shop.t.id", "truncate", length=2), "cannot be truncated")):
        sink = ParquetSink(str(tmp_path / "lake"), SinkOptions(transform=Transform((rule,), KEY)))
        sink.open()
        sink.handle(b.begin())
        with pytest.raises(TransformRefused, match=words) as caught:
            sink.handle(b.insert(t, [(1, 1.5, None)]))
        assert exit_code_for(caught.value) == 2 and hint_for(caught.value)
        sink.close()


@pytest.mark.parametrize(("column", "value", "text"), [
    (col(0, T.LONG, "c"), -7, "-7"),
    (col(0, T.LONGLONG, "c", unsigned=True), 18446744073709551615, "18446744073709551615"),
    (col(0, T.YEAR, "c"), 0, "0000"),
    (col(0, T.NEWDECIMAL, "c", precision=10, scale=2), Decimal("-0.50"), "-0.50"),
    (col(0, T.NEWDECIMAL, "c", precision=10, scale=0), Decimal("12"), "12"),
    (col(0, T.DATE, "c"), dt.date(2024, 2, 29), "2024-02-29"),
    (col(0, T.DATETIME2, "c", scale=3), dt.datetime(2024, 1, 2, 3, 4, 5, 120000),
     "2024-01-02 03:04:05.120"),
    (col(0, T.DATETIME2, "c", scale=0), dt.datetime(999, 1, 2, 3, 4, 5), "0999-01-02 03:04:05"),
    (col(0, T.TIME2, "c", scale=2), dt.timedelta(hours=-838), "-838:00:00.00"),
    (col(0, T.VARCHAR, "c", charset=45), "café", "café"),
    (col(0, T.BLOB, "c", binary=True), b"\x00\xff", b"\x00\xff"),
    (col(0, T.ENUM, "c", enum_values=("a", "b")), 2, "b"),
    (col(0, T.SET, "c", set_values=("a", "b", "c")), 5, "a,c"),
])
def test_the_text_form_of_each_hashable_type(column: Any, value: Any, text: str | bytes) -> None:
    form = text_form(column)
    assert form is not None
    assert form(value) == (text.encode() if isinstance(text, str) else text)


def test_config_rules_key_and_refusals(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-key\n")
    config_file = tmp_path / "binlake.toml"
    config_file.write_text(f"""
[replica]
server_id = 7
[transform]
hash_key_file = "{key_file}"
[[transform.column]]
match = "shop.customers.email"
action = "hash"
[[transform.column]]
match = "shop.*.card"
action = "mask"
mask = "****"
[[transform.column]]
match = "*.*.note"
action = "truncate"
length = 8
""")
    config = load_config(config_file, env={})
    assert config.transform_rules == (
        ColumnRule("shop.customers.email", "hash"), ColumnRule("shop.*.card", "mask", "****"),
        ColumnRule("*.*.note", "truncate", length=8))
    assert "s3cret-key" in config.secrets() and "s3cret-key" not in repr(config)
    transform = config.column_transform()
    assert transform is not None and "s3cret-key" not in repr(transform)
    assert transform.rule_for("shop", "orders", "card") == ColumnRule("shop.*.card", "mask",
                                                                      "****")
    env = {"BINLAKE_TRANSFORM_HASH_KEY": "from-env"}
    no_file = config_file.read_text().replace(f'hash_key_file = "{key_file}"', "")
    config_file.write_text(no_file)
    assert load_config(config_file, env=env).transform.hash_key.reveal() == "from-env"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="need a key"):
        load_config(config_file, env={})
    for bad, words in (('match = "email"\naction = "hash"', "db.table.column"),
                       ('match = "a.b.c"\naction = "scramble"', "action must be"),
                       ('match = "a.b.c"\naction = "truncate"', "needs length"),
                       ('match = "a.b.c"\naction = "hash"\nmask = "x"', "replacement"),
                       ('match = "a.b.c"\naction = "mask"\ncolor = 1', "unknown key")):
        config_file.write_text(f"[replica]\nserver_id = 7\n[[transform.column]]\n{bad}\n")
        with pytest.raises(ConfigError, match=words):
            load_config(config_file, env=env)


def test_a_ruled_table_without_column_names_is_refused(tmp_path: Path) -> None:
    b = StreamBuilder()
    t = b.table("shop", "customers", [col(0, T.LONG, "id", pk=True),
                                      col(1, T.VARCHAR, "email", charset=45)],
                full_metadata=False)
    sink = ParquetSink(str(tmp_path / "lake"), SinkOptions(transform=Transform(RULES, KEY)))
    sink.open()
    sink.handle(b.begin())
    with pytest.raises(TransformRefused, match="names no columns"):
        sink.handle(b.insert(t, [(1, "ann@example.com")]))
    sink.close()


def test_tinyint1_as_boolean_in_every_path(tmp_path: Path) -> None:
    """A TINYINT described as TINYINT(1) lands as boolean (0 false, any other value true) in
    streamed rows, before images, XA parts and snapshot chunks; a TINYINT of another width, of
    no known width, or unsigned lands as the integer it is."""
    lake = tmp_path / "lake"
    b = StreamBuilder()
    flags = b.table("shop", "flags", [
        col(0, T.LONG, "id", pk=True), col(1, T.TINY, "on", display_width=1),
        col(2, T.TINY, "u", unsigned=True, display_width=1), col(3, T.TINY, "n", display_width=4),
        col(4, T.TINY, "w")])
    types = TypeOptions(tinyint1_as_boolean=True)
    sink = ParquetSink(str(lake), SinkOptions(transform=Transform((), None, types)))
    sink.open()
    _feed(sink, [b.begin(), b.insert(flags, [(1, 0, 0, 5, 6), (2, 2, 255, 0, 0),
                                             (3, -1, None, None, None)]), b.commit()])
    _feed(sink, [b.begin(), b.update(flags, [((1, 0, 0, 5, 6), (1, 1, 1, 1, 1))]),
                 b.prepare("x1")])
    _feed(sink, b.xa_outcome("x1", commit=True))
    read = RowsEvent(header=EventHeader(0, 0, 0, 0, 0, 0), kind=RowsKind.READ, table=flags,
                     flags=0, row_count=2, before_columns=(), after_columns=tuple(range(5)),
                     before=None, after=([4, 5], [0, 7], [0, 1], [0, 7], [127, None]))
    sink.land_chunk(SnapshotChunk(SnapshotProgress(), BinlogPosition("binlog.000001", b.pos), 1_767_300_000_000_000,
                                  read))
    sink.close()
    rows = _rows(lake)
    assert [(r["_op"], r["id"], r["on"], r["u"], r["n"], r["w"]) for r in rows] == [
        ("I", 1, False, 0, 5, 6), ("I", 2, True, 255, 0, 0), ("I", 3, True, None, None, None),
        ("U", 1, True, 1, 1, 1), ("R", 4, False, 0, 0, 127), ("R", 5, True, 1, 7, None)]
    assert rows[3]["_before"] == {"id": 1, "on": False, "u": 0, "n": 5, "w": 6}
    schema = pq.read_schema(sorted(lake.rglob("*.parquet"))[0])
    assert [str(schema.field(n).type) for n in ("on", "u", "n", "w")] == [
        "bool", "int16", "int8", "int8"]
    assert schema.field("on").metadata[b"transform"] == b"type:boolean"
    versions = [p.name for p in (lake / "shop" / "flags").iterdir()
                if p.name.startswith("schema_version=")]
    assert versions == ["schema_version=1"]  # snapshot and stream: one version
    (schema_file,) = (lake / "shop" / "flags" / "_schema").iterdir()
    assert [c.get("transform") for c in json.loads(schema_file.read_text())["columns"]] == [
        None, "type:boolean", None, None, None]


class _Untouchable:
    """An image whose Python values must not be asked for (each column lands from its chunk)."""

    def __getitem__(self, index: Any) -> Any:
        raise AssertionError(f"column {index}'s Python values were decoded")

    def __len__(self) -> int:
        return 3


def test_a_rule_keeps_the_other_columns_chunks_and_reads_its_own_from_its_chunk() -> None:
    """A hash rule on one column leaves the native Arrow chunks of the others as they are (no
    Python value of any column is decoded) and drops the ruled column's chunk (its clear
    value), whose hash is taken of the chunk's values."""
    b = StreamBuilder()
    table = b.table("shop", "customers", [col(0, T.LONG, "id", pk=True),
                                          col(1, T.VARCHAR, "email", charset=45),
                                          col(2, T.VARCHAR, "bio", charset=45)])
    offsets = struct.pack("<3i", 0, 3, 6)
    chunks = (("i4", 0, None, struct.pack("<2i", 1, 2), None),
              ("str", 0, None, b"annbob", offsets), ("str", 0, None, b"xxyyyy", offsets))
    event = RowsEvent(header=EventHeader(0, 0, 0, 0, 0, 0), kind=RowsKind.INSERT, table=table,
                      flags=0, row_count=2, before_columns=(), after_columns=(0, 1, 2),
                      before=None, after=_Untouchable(), arrow=(None, chunks))  # type: ignore[arg-type]
    ruled = Transform((ColumnRule("shop.customers.email", "hash"),), KEY).rows(event)
    assert ruled.arrow == (None, (chunks[0], None, chunks[2]))
    assert ruled.after is not None and ruled.after[1] == [_hash("ann"), _hash("bob")]
    assert len(ruled.after) == 3
    with pytest.raises(AssertionError, match="column 0's Python values were decoded"):
        ruled.after[0]  # noqa: B018 - asked for only when its chunk cannot land
