"""Row images wider than 8 columns: each group of 8 (one null-bitmap byte) takes the no-NULL
fast path on its own, so NULLs anywhere must still land in the right column."""

from __future__ import annotations

import random
import struct

from protocol.binlog.coltypes import FieldType as T
from protocol.binlog.model import RowsKind
from protocol.binlog.rows import decode_rows_event
from protocol.binlog.tablemap import decode_table_map
from tests.unit.rowbuild import Col, header, image, rows_body, table_map_body

# INT, BIGINT, DOUBLE, SMALLINT UNSIGNED, TINYINT, VARCHAR(32), INT, BLOB (binary), repeated:
# runs of fixed-width numbers, read with the length prefix of the string after them, cross the
# 8-column group boundaries.
_KINDS = [
    (Col(T.LONG), struct.Struct("<i"), lambda r: r.randint(-(2**31), 2**31 - 1)),
    (Col(T.LONGLONG), struct.Struct("<q"), lambda r: r.randint(-(2**63), 2**63 - 1)),
    (Col(T.DOUBLE, b"\x08"), struct.Struct("<d"), lambda r: r.uniform(-1e9, 1e9)),
    (Col(T.SHORT, unsigned=True), struct.Struct("<H"), lambda r: r.randrange(65536)),
    (Col(T.TINY), struct.Struct("<b"), lambda r: r.randint(-128, 127)),
    (Col(T.VARCHAR, b"\x20\x00"), None, lambda r: bytes(r.choices(b"abc", k=r.randint(0, 32)))),
    (Col(T.LONG), struct.Struct("<i"), lambda r: r.randint(-(2**31), 2**31 - 1)),
    (Col(T.BLOB, b"\x02"), None, lambda r: bytes(r.choices(b"xyz", k=r.randint(0, 300)))),
]


def _encode(kind: int, value: object) -> bytes:
    col, packer, _ = _KINDS[kind]
    if packer is None:  # a 1-byte (VARCHAR(32)) or 2-byte (BLOB) length prefix
        assert isinstance(value, bytes)
        return len(value).to_bytes(2 if col.type_code == T.BLOB else 1, "little") + value
    return packer.pack(value)


def test_nulls_in_any_group_of_a_wide_image_land_in_their_columns() -> None:
    rng = random.Random(8)
    width = 29  # four groups, the last one partial
    kinds = [i % len(_KINDS) for i in range(width)]
    cols = [_KINDS[k][0] for k in kinds]
    table = decode_table_map(header(), table_map_body(cols, table_id=77, numeric=[
        i for i, k in enumerate(kinds) if _KINDS[k][1] is not None]), 8)
    expected: list[list[object]] = []
    images = []
    for row in range(60):
        null_rate = (0.0, 0.05, 0.5)[row % 3]
        values = [None if rng.random() < null_rate else _KINDS[k][2](rng) for k in kinds]
        expected.append(values)
        images.append(image([None if v is None else _encode(k, v)
                             for k, v in zip(kinds, values, strict=True)]))
    body = rows_body(width, images, table_id=77)
    event = decode_rows_event(header(23), memoryview(body), 8, {77: table}, version=1,
                              kind=RowsKind.INSERT)
    assert event.row_count == 60 and event.after is not None
    got = [[event.after[c][r] for c in range(width)] for r in range(60)]
    assert got == expected


def test_a_wide_update_keeps_before_and_after_apart() -> None:
    width = 12
    cols = [Col(T.LONG) for _ in range(width)]
    table = decode_table_map(header(), table_map_body(cols, table_id=78), 8)
    before = [None if i == 9 else i for i in range(width)]
    after = [None if i in (0, 11) else 100 + i for i in range(width)]
    enc = [image([None if v is None else struct.pack("<i", v) for v in img])
           for img in (before, after)]
    body = rows_body(width, [enc[0] + enc[1]], table_id=78, present2=range(width))
    event = decode_rows_event(header(24), memoryview(body), 8, {78: table}, version=1,
                              kind=RowsKind.UPDATE)
    assert event.before is not None and event.after is not None
    assert [c[0] for c in event.before] == before and [c[0] for c in event.after] == after
