"""The batch conversion's C helpers against the Python way they replace (server-free).

``rows_batch`` gathers every table column of a batch in one call (``native_batch.gather_all``) and
fills the per-event metadata columns (``_seq`` … ``_commit_ts``, ``_row``) in another
(``native_batch.meta_columns``): the per-part cost of a flush over thousands of small tables. Both
must land exactly what the per-column Python way lands — the same values, types, NULLs,
column order, schema and field metadata (``equals``, not value lists) — for small parts
mixing INSERT/UPDATE/DELETE, MINIMAL images (``_missing``), primary-key changes, NULLs,
MariaDB, MySQL and absent GTIDs, and every column type of the native decoder's matrix (those
it leaves to Python included: a DECIMAL over 38 digits, zero dates). Bad input to the helpers
raises a typed error, never a crash (``bench/native_asan.sh`` runs this module under ASan).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest

from protocol.binlog.model import RowsEvent, RowsKind
from sinks.parquet import commit as C
from sinks.parquet import native_batch
from sinks.parquet.rows import PendingRows, TransactionTags, key_changed_rows, rows_batch
from sinks.parquet.schema import TableVersion, VersionOrigin
from sinks.parquet.types import new_counter
from tests.unit.rowbuild import image, rows_body
from tests.unit.test_native_arrow import NAMED, TABLE, _decode
from tests.unit.test_native_rows import _table

pytestmark = pytest.mark.skipif(native_batch.gather_all is None or native_batch.meta_columns is None,
                                reason="the native Arrow decoder is not built")

KEYED = dataclasses.replace(TABLE, primary_key=(0,))
WIDTH = len(NAMED)
GTIDS = [
    ("0-1-{n}", 0, 1, None, None),  # MariaDB
    ("3E11FA47-71CA-11E1-9E33-C80AA9429562:{n}", None, None,
     "3e11fa47-71ca-11e1-9e33-c80aa9429562", None),  # MySQL
    ("3E11FA47-71CA-11E1-9E33-C80AA9429562:tag:{n}", None, None,
     "3e11fa47-71ca-11e1-9e33-c80aa9429562", "tag"),  # MySQL 8.3+ tagged
    (None, None, None, None, None),  # no GTID
]


@contextmanager
def _python_way() -> Iterator[None]:
    with mock.patch.object(native_batch, "gather_all", None), \
            mock.patch.object(native_batch, "meta_columns", None), \
            mock.patch.object(native_batch, "export_batch", None):
        yield


def _row(rng: random.Random, present: list[int]) -> bytes:
    return image([None if rng.random() < 0.2 else NAMED[i][1](rng) for i in present])


def _event(rng: random.Random, kind: RowsKind, arrow: bool) -> RowsEvent:
    full = list(range(WIDTH))
    present = full if rng.random() < 0.5 else sorted(rng.sample(full, rng.randrange(1, WIDTH)))
    n = rng.randrange(1, 6)
    if kind is RowsKind.UPDATE:
        after = full if rng.random() < 0.5 else sorted(rng.sample(full, rng.randrange(1, WIDTH)))
        rows = []
        for _ in range(n):
            old = _row(rng, present)
            # the key (column 0) kept in half of the rows, changed in the others
            rows += [old, old if rng.random() < 0.5 and present == after else _row(rng, after)]
        body = rows_body(WIDTH, rows, present=present, present2=after)
    else:
        body = rows_body(WIDTH, [_row(rng, present) for _ in range(n)], present=present)
    event = _decode(body, kind, arrow, KEYED)
    assert isinstance(event, RowsEvent), event
    return event


def _group(seed: int, arrow: bool, version: TableVersion) -> list[PendingRows]:
    """A small part: a few transactions of a few events each, every kind and GTID flavour."""
    rng = random.Random(seed)
    group = []
    for txn in range(rng.randrange(1, 8)):
        gtid, domain, server, uuid, tag = rng.choice(GTIDS)
        n = 100 + txn
        tags = TransactionTags(seq=10 + txn, gtid=None if gtid is None else gtid.format(n=n),
                               gtid_domain=domain, gtid_server_id=server, gtid_uuid=uuid,
                               gtid_tag=tag, gtid_seq=None if gtid is None else n,
                               file=rng.choice(["bin.000001", None]),
                               pos=rng.choice([4, 1 << 40, None]))
        first = 0
        for _ in range(rng.randrange(1, 5)):
            kind = rng.choice([RowsKind.INSERT, RowsKind.INSERT, RowsKind.UPDATE,
                               RowsKind.DELETE])
            event = _event(rng, kind, arrow)
            moved = key_changed_rows(version, event)
            pending = PendingRows(event, tags, first, moved, 1_700_000_000_000_000 + txn)
            group.append(pending)
            first += pending.landed_rows
    return group


def _assert_identical(got: pa.RecordBatch, expected: pa.RecordBatch) -> None:
    assert got.schema.equals(expected.schema, check_metadata=True)
    for a, b in zip(got.schema, expected.schema, strict=True):
        assert a.metadata == b.metadata, a.name
    for name in expected.schema.names:
        assert got.column(name).equals(expected.column(name)), name
    assert got.equals(expected, check_metadata=True)


@pytest.mark.parametrize("arrow", [True, False], ids=["chunks", "python-values"])
@pytest.mark.parametrize("with_commit_time", [True, False], ids=["committed", "staging"])
def test_small_parts_land_exactly_as_the_python_way(arrow: bool, with_commit_time: bool
                                                    ) -> None:
    version = TableVersion.from_table_map(KEYED, 1, VersionOrigin(1), new_counter())
    kinds: set[str] = set()
    missing = moved = 0
    filled = []  # the helpers' results: they took every batch (no fall back to Python)
    real = native_batch.meta_columns

    def meta(*args: Any) -> Any:
        filled.append(real(*args))  # type: ignore[misc]
        return filled[-1]

    for seed in range(60):
        group = _group(seed, arrow, version)
        with mock.patch.object(native_batch, "meta_columns", meta):
            got = rows_batch(version, group, with_commit_time)
        with _python_way():
            expected = rows_batch(version, group, with_commit_time)
        _assert_identical(got, expected)
        assert got.schema.equals(version.schema if with_commit_time else version.staging_schema,
                                 check_metadata=True)
        kinds |= set(got.column("_op").to_pylist())
        missing += got.column("_missing").null_count != got.num_rows
        moved += sum(len(p.moved) for p in group)
    assert len(filled) == 60
    assert kinds == {"I", "U", "D"}  # every kind, MINIMAL images and key changes were landed
    assert missing > 10 and moved > 10


def _native_only(rng: random.Random) -> tuple[Any, list[list[bytes]]]:
    """The type matrix's columns that land from chunks (a batch of them is handed to Arrow
    whole), and per column values that do (not a zero date, not a string that is not UTF-8:
    those land from Python values, tested above)."""
    version = TableVersion.from_table_map(TABLE, 1, VersionOrigin(1), new_counter())
    cols = [(c, enc) for (c, enc), tag in zip(NAMED, version.native_tags, strict=True)
            if tag is not None]
    pools = []
    for c, enc in cols:
        one = _table([c])
        pool = []
        # random values, and an empty string's for any length prefix (long random text
        # hardly ever is UTF-8)
        for value in [enc(rng) for _ in range(40)] + [b"\0" * width for width in (1, 2, 3, 4)]:
            event = _decode(rows_body(1, [image([value])]), RowsKind.INSERT, True, one)
            if (isinstance(event, RowsEvent) and event.row_count == 1 and event.arrow
                    and event.arrow[1][0] is not None):
                pool.append(value)
        assert pool, c
        pools.append(pool)
    return _table([c for c, _ in cols]), pools


@pytest.mark.parametrize("with_commit_time", [True, False], ids=["committed", "staging"])
def test_small_insert_parts_handed_to_arrow_whole_land_alike(with_commit_time: bool) -> None:
    """A flush over thousands of tables: parts of a few INSERT events with complete images,
    every column from chunks, are exported in one piece (``native_batch.export_batch``) — the same
    batch, valid to the last buffer; a part with a column left to Python (a zero date) or
    with over ``SMALL_EXPAND`` rows takes the array-per-column way, the same batch too."""
    rng = random.Random(8)
    table, pools = _native_only(rng)
    version = TableVersion.from_table_map(table, 1, VersionOrigin(1), new_counter())
    assert None not in version.native_tags and len(pools) > 40
    exported = 0
    real = native_batch.export_batch
    assert real is not None

    def export(spec: Any) -> Any:
        nonlocal exported
        exported += 1
        return real(spec)

    for part in range(40):
        group = []
        events = rng.randrange(1, 12) if part % 10 else 60  # 60 x up to 8 rows: over 256
        for i in range(events):
            rows = [image([None if rng.random() < 0.2 else rng.choice(pool) for pool in pools])
                    for _ in range(rng.randrange(1, 9))]
            if part % 7 == 3 and i == 0:  # a zero date: that column from Python values
                rows[0] = image([b"\0\0\0" if c == 26 else pool[0]
                                 for c, pool in enumerate(pools)])
            body = rows_body(len(pools), rows)
            event = _decode(body, RowsKind.INSERT, True, table)
            assert isinstance(event, RowsEvent)
            gtid, domain, server, uuid, tag = GTIDS[(part + i // 3) % len(GTIDS)]
            tags = TransactionTags(part * 100 + i // 3, None if gtid is None else
                                   gtid.format(n=i), domain, server, uuid, tag,
                                   None if gtid is None else i, "bin.000002", 100 * i + 4)
            group.append(PendingRows(event, tags, 0, (), 1_700_000_000_000_000 + i))
        with mock.patch.object(native_batch, "export_batch", export):
            got = rows_batch(version, group, with_commit_time)
        got.validate(full=True)
        with _python_way():
            expected = rows_batch(version, group, with_commit_time)
        _assert_identical(got, expected)
    assert exported == 40 - 4 - 6 + 1  # all but the 4 over 256 rows and the 6 with a zero
    # date (one part is both)


def test_exported_parts_of_one_size_and_of_two_ops_land_alike() -> None:
    """The specs that do not depend on the rows (a one-op ``_op`` column, all-NULL columns)
    are made once per row count and reused: parts of the same size exported one after the
    other (INSERT, then snapshot READ rows, then both in one part: two ops) are each the batch
    the Python way makes."""
    rng = random.Random(11)
    table, pools = _native_only(rng)
    version = TableVersion.from_table_map(table, 1, VersionOrigin(1), new_counter())
    real = native_batch.export_batch
    assert real is not None
    exported = 0

    def export(spec: Any) -> Any:
        nonlocal exported
        exported += 1
        return real(spec)

    for kinds in ([RowsKind.INSERT] * 3, [RowsKind.READ] * 3, [RowsKind.INSERT] * 3,
                  [RowsKind.INSERT, RowsKind.READ, RowsKind.INSERT]):
        group = []
        for i, kind in enumerate(kinds):
            rows = [image([None if rng.random() < 0.2 else rng.choice(pool) for pool in pools])
                    for _ in range(4)]
            event = _decode(rows_body(len(pools), rows), RowsKind.INSERT, True, table)
            assert isinstance(event, RowsEvent) and event.arrow is not None
            event = dataclasses.replace(event, kind=kind)  # a snapshot's READ rows alike
            tags = TransactionTags(7 + i, "0-1-9", 0, 1, None, None, 9, "bin.000002", 4)
            group.append(PendingRows(event, tags, 0, (), 1_700_000_000_000_000 + i))
        with mock.patch.object(native_batch, "export_batch", export):
            got = rows_batch(version, group, True)
        got.validate(full=True)
        assert got.num_rows == 12
        assert got.column("_op").to_pylist() == [
            "I" if kind is RowsKind.INSERT else "R" for kind in kinds for _ in range(4)]
        with _python_way():
            expected = rows_batch(version, group, True)
        _assert_identical(got, expected)
    assert exported == 4


def test_export_batch_refuses_malformed_specs() -> None:
    export = native_batch.export_batch
    assert export is not None
    for bad in [(1, 0, None, ()), (1, 0, None, [], ()), (-1, 0, None, (), ()),
                (1, 2, None, (), ()), (1, 0, None, (-4,), ()), (1, 0, None, ("x",), ()),
                (1, 0, None, (), ((1, 0, None, (), (None,)),)),
                (1, 0, None, (), ((1, 0, "v", (), ()),)),
                (1, 0, None, (b"\0" * 8,), ((1, 0, None, (8,), ((0,) * 4,)),))]:
        with pytest.raises((ValueError, TypeError)):
            export(bad)
    deep: tuple[Any, ...] = (0, 0, None, (), ())
    for _ in range(6):
        deep = (0, 0, None, (), (deep,))
    with pytest.raises(ValueError):
        export(deep)
    capsule, address, size = export((2, 1, b"\2", (b"\0" * 8 + b"\7" + b"\0" * 7,), ()))
    assert address and capsule is not None
    assert size == 4 * 64  # the block: its header, the buffers' pointers, validity, data
    got = pa.Array._import_from_c(address, pa.int64())
    del capsule
    assert got.to_pylist() == [None, 7]
    assert got.nbytes <= size
    capsule, _, _ = export((2, 0, None, (b"\1" + b"\0" * 15,), ()))  # an "arrow_array" capsule
    got = pa.Array._import_from_c_capsule(pa.int64().__arrow_c_schema__(), capsule)
    assert got.to_pylist() == [1, 0]
    del capsule  # the array was moved out: only the struct is freed


def test_a_value_the_helpers_cannot_hold_takes_the_python_way() -> None:
    """A GTID seq_no over int64 (a MariaDB seq_no is unsigned): the same error either way."""
    version = TableVersion.from_table_map(KEYED, 1, VersionOrigin(1), new_counter())
    event = _event(random.Random(1), RowsKind.INSERT, True)
    tags = TransactionTags(1, "0-1-18446744073709551615", 0, 1, None, None, 2**64 - 1,
                           "bin.000001", 4)
    errors = []
    for way in (_python_way, nullcontext):
        with way():
            with pytest.raises(Exception) as info:
                rows_batch(version, [PendingRows(event, tags, 0, (), 1)], True)
        errors.append(type(info.value))
    assert errors[0] is errors[1]


def test_meta_columns_fills_each_kind() -> None:
    meta = native_batch.meta_columns
    assert meta is not None
    tags = [(1, "a", None, 5), (2, None, None, 7), (2, "ü", None, -1)]
    out = meta(tags, [2, 3, 6], b"isir")
    assert out[0] == (0, None, b"".join(v.to_bytes(8, "little") for v in (1, 1, 2, 2, 2, 2)),
                      None)
    assert out[1] == (1, bytes([0b111011]), b"aa" + "ü".encode() * 3,
                      b"".join(v.to_bytes(4, "little") for v in (0, 1, 2, 2, 4, 6, 8)))
    assert out[2] is None  # all NULL
    assert out[3] == (0, None, b"".join(v.to_bytes(8, "little", signed=True)
                                        for v in (5, 6, 9, 2, 3, 4)), None)
    assert meta([], [], b"i") == (None,)
    assert meta([(1,)], [3], b"-") == (None,)


@pytest.mark.parametrize("args, error", [
    (([(1,)], [1, 2], b"i"), ValueError),  # an end per event
    (([(1,)], [-1], b"i"), ValueError),
    (([(1,), (2,)], [2, 1], b"i"), ValueError),  # ends go back
    (([(1,)], [1], b"ii"), ValueError),  # a tag tuple too short
    (([[1]], [1], b"i"), ValueError),  # not a tuple
    (([(1,)], [1], b"x"), ValueError),  # unknown kind
    (([("1",)], [1], b"i"), TypeError),
    (([(True,)], [1], b"i"), TypeError),
    (([(1,)], [1], b"s"), TypeError),
    (([(None,)], [1], b"r"), TypeError),
    (([(2**63,)], [1], b"i"), OverflowError),
    (([(2**63 - 1,)], [2], b"r"), OverflowError),  # row 1's number
    (([("\udcff",)], [1], b"s"), UnicodeEncodeError),
    (([(1,)], (1,), b"i"), TypeError),
    (([(1,)], [1], "i"), TypeError),
])
def test_meta_columns_refuses_what_it_cannot_hold(args: tuple[Any, ...],
                                                  error: type[Exception]) -> None:
    meta = native_batch.meta_columns
    assert meta is not None
    with pytest.raises(error):
        meta(*args)


def test_gather_all_is_gather_per_column() -> None:
    gather_all = native_batch.gather_all
    assert gather_all is not None
    chunk = ("i4", 0, None, b"\1\0\0\0", None)
    entries = [(None, (chunk, None, chunk), [[1], ["x"], [1]], 1), (None, None, None, 2)]
    assert gather_all(("i4", "str", "i8", None), [(*e[:3], e[3]) for e in entries[:1]]
                      + entries[1:]) == [
        native_batch.gather("i4", 0, entries), None, None, None]
    with pytest.raises(TypeError):
        gather_all(["i4"], entries)
    with pytest.raises(ValueError):
        gather_all(("i4",), [(None, (chunk,), [[1]])])


def test_schema_files_encode_as_the_lake_document() -> None:
    """``TableVersion.to_json_bytes`` (the columns encoded once per table shape) is
    ``commit.dumps(to_json(), compact=True)`` byte for byte: every type, labels that are not
    ASCII, a DDL with quotes, a NUL, non-ASCII text and a key's text, tables of one shape (the
    cache)."""
    origins = [VersionOrigin(1), VersionOrigin(seq=7, gtid="0-1-9", commit_time_us=5,
                                               ddl='ALTER TABLE `t` COMMENT "é\x00\\\\ '
                                               '\\"metadata_columns\\":0 \"metadata_columns\":0"',
                                               ddl_type=5)]
    seen = set()
    for k, table in enumerate([TABLE, KEYED, dataclasses.replace(TABLE, table="autre_ç"),
                               dataclasses.replace(KEYED, schema="db2"), TABLE]):
        version = TableVersion.from_table_map(table, k + 1, origins[k % 2], new_counter())
        expected = C.dumps(version.to_json(), compact=True)
        assert version.to_json_bytes() == expected
        assert version.to_json_bytes() == expected  # from the cache
        seen.add(expected)
    assert len(seen) == 5
