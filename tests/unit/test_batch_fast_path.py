"""The batch conversion's C helpers against the Python way they replace (server-free).

``rows_batch`` gathers every table column of a batch in one call (``native.gather_all``) and
fills the per-event metadata columns (``_seq`` … ``_commit_ts``, ``_row``) in another
(``native.meta_columns``): the per-part cost of a flush over thousands of small tables. Both
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

from protocol.binlog import native
from protocol.binlog.model import RowsEvent, RowsKind
from sinks.parquet.rows import PendingRows, TransactionTags, key_changed_rows, rows_batch
from sinks.parquet.schema import TableVersion, VersionOrigin
from sinks.parquet.types import new_counter
from tests.unit.rowbuild import image, rows_body
from tests.unit.test_native_arrow import NAMED, TABLE, _decode

pytestmark = pytest.mark.skipif(native.gather_all is None or native.meta_columns is None,
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
    with mock.patch.object(native, "gather_all", None), \
            mock.patch.object(native, "meta_columns", None):
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
    real = native.meta_columns

    def meta(*args: Any) -> Any:
        filled.append(real(*args))  # type: ignore[misc]
        return filled[-1]

    for seed in range(60):
        group = _group(seed, arrow, version)
        with mock.patch.object(native, "meta_columns", meta):
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
    meta = native.meta_columns
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
    meta = native.meta_columns
    assert meta is not None
    with pytest.raises(error):
        meta(*args)


def test_gather_all_is_gather_per_column() -> None:
    gather_all = native.gather_all
    assert gather_all is not None
    chunk = ("i4", 0, None, b"\1\0\0\0", None)
    entries = [(None, (chunk, None, chunk), [[1], ["x"], [1]], 1), (None, None, None, 2)]
    assert gather_all(("i4", "str", "i8", None), [(*e[:3], e[3]) for e in entries[:1]]
                      + entries[1:]) == [
        native.gather("i4", 0, entries), None, None, None]
    with pytest.raises(TypeError):
        gather_all(["i4"], entries)
    with pytest.raises(ValueError):
        gather_all(("i4",), [(None, (chunk,), [[1]])])
