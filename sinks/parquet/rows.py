"""Rows events → Arrow record batches in a table version's schema.

Values arrive column-wise, so a group of events is turned into one batch by extending one
Python list per column (C-speed ``list.extend`` of the event's own lists) and converting each
column with a single ``pa.array`` call. Grouping matters for OLTP streams: thousands of
one-row transactions cost one conversion per few thousand rows, not one per event. Per-row
Python work is limited to UPDATEs that change a primary key.

An UPDATE that changes the primary key is landed as two rows: ``D`` carrying the old row, then
``I`` carrying the new row, with consecutive ``_row`` numbers; both carry the old row in
``_before`` (an ``I`` with a ``_before`` is the second half of a key change). A consumer that
keys on the primary key therefore sees the old key disappear and the new one appear, exactly as
if the application had deleted and re-inserted the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from protocol.binlog.model import RowsEvent, RowsKind

from .schema import COMMIT_TS_FIELD, TableVersion

_STRING = pa.string()
_INT64 = pa.int64()
_MISSING = pa.list_(pa.string())
_INSERT = RowsKind.INSERT
_DELETE = RowsKind.DELETE


@dataclass(frozen=True, slots=True)
class TransactionTags:
    """The metadata columns every row of one transaction shares (known at its begin)."""

    seq: int
    gtid: str | None
    gtid_domain: int | None
    gtid_server_id: int | None
    gtid_uuid: str | None
    gtid_tag: str | None
    gtid_seq: int | None
    file: str | None
    pos: int | None


@dataclass(frozen=True, slots=True)
class PendingRows:
    """One rows event waiting to be converted, with what it needs from its transaction."""

    event: RowsEvent
    tags: TransactionTags
    first_row: int  # ``_row`` of its first landed row
    moved: tuple[int, ...]  # UPDATE rows whose primary key changed (land as D + I)
    commit_time_us: int | None = None

    @property
    def landed_rows(self) -> int:
        return self.event.row_count + len(self.moved)


def key_changed_rows(version: TableVersion, event: RowsEvent) -> tuple[int, ...]:
    """Rows of an UPDATE whose primary key differs between the before and after image."""
    if (event.kind is not RowsKind.UPDATE or not version.primary_key or event.before is None
            or event.after is None):
        return ()
    pairs = []
    for column_index in version.primary_key:
        try:
            b = event.before_columns.index(column_index)
            a = event.after_columns.index(column_index)
        except ValueError:
            continue  # a key column absent from an image did not change (MINIMAL after image)
        pairs.append((event.before[b], event.after[a]))
    if not pairs:
        return ()
    if len(pairs) == 1:
        old, new = pairs[0]
        return tuple(i for i in range(event.row_count) if old[i] != new[i])
    return tuple(i for i in range(event.row_count)
                 if any(old[i] != new[i] for old, new in pairs))


def _image(version: TableVersion, present: tuple[int, ...],
           values: tuple[list[Any], ...] | None, n: int) -> tuple[list[Sequence[Any]], list[str]]:
    """Every table column's values in one image; absent columns are ``None``s and named."""
    columns: list[Sequence[Any]] = []
    missing: list[str] = []
    if values is None:
        return [[None] * n for _ in version.names], list(version.names)
    for slot, name in zip(version.slots_for(present), version.names, strict=True):
        if slot is None:
            columns.append([None] * n)
            missing.append(name)
        else:
            columns.append(values[slot])
    return columns, missing


class _Builder:
    """Python lists for every landed column of one batch."""

    def __init__(self, width: int) -> None:
        self.main: list[list[Any]] = [[] for _ in range(width)]
        self.before: list[list[Any]] = [[] for _ in range(width)]
        self.before_null: list[bool] = []
        self.has_before = False
        self.ops: list[str] = []
        self.missing: list[list[str] | None] = []
        self.constants: list[list[Any]] = [[] for _ in range(10)]  # seq … pos, commit time
        self.rows: list[int] = []

    def images(self, main: list[Sequence[Any]], before: list[Sequence[Any]] | None,
               n: int) -> None:
        for target, values in zip(self.main, main, strict=True):
            target.extend(values)
        if before is None:
            for target in self.before:
                target.extend([None] * n)
            self.before_null.extend([True] * n)
        else:
            self.has_before = True
            for target, values in zip(self.before, before, strict=True):
                target.extend(values)
            self.before_null.extend([False] * n)


def rows_batch(version: TableVersion, group: Sequence[PendingRows],
               with_commit_time: bool) -> pa.RecordBatch:
    """Convert a group of rows events of one table version into one record batch.

    With ``with_commit_time`` the batch is in ``version.schema`` (every entry must carry its
    commit time); without, in ``version.staging_schema`` (no ``_commit_ts``), for rows of a
    transaction that has not committed yet.
    """
    width = len(version.names)
    out = _Builder(width)
    for entry in group:
        event = entry.event
        n = event.row_count
        kind = event.kind
        if kind is _INSERT:
            main, missing = _image(version, event.after_columns, event.after, n)
            out.images(main, None, n)
            out.ops.extend(["I"] * n)
            out.missing.extend([missing or None] * n)
        elif kind is _DELETE:
            before, missing = _image(version, event.before_columns, event.before, n)
            out.images(before, before, n)
            out.ops.extend(["D"] * n)
            out.missing.extend([missing or None] * n)
        else:
            before, before_missing = _image(version, event.before_columns, event.before, n)
            main, missing = _image(version, event.after_columns, event.after, n)
            if not entry.moved:
                out.images(main, before, n)
                out.ops.extend(["U"] * n)
                out.missing.extend([missing or None] * n)
            else:
                _split_key_changes(out, main, before, set(entry.moved), n,
                                   missing or None, before_missing or None)
        count = entry.landed_rows
        tags = entry.tags
        for target, value in zip(out.constants, (
                tags.seq, tags.gtid, tags.gtid_domain, tags.gtid_server_id, tags.gtid_uuid,
                tags.gtid_tag, tags.gtid_seq, event.header.file or tags.file,
                event.header.position or tags.pos, entry.commit_time_us), strict=True):
            target.extend([value] * count)
        out.rows.extend(range(entry.first_row, entry.first_row + count))
    return _to_batch(version, out, with_commit_time)


def _split_key_changes(out: _Builder, main: list[Sequence[Any]], before: list[Sequence[Any]],
                       moved: set[int], n: int, missing: list[str] | None,
                       before_missing: list[str] | None) -> None:
    """Each key-changing UPDATE row becomes D(old) + I(new); other rows stay U."""
    for i in range(n):
        old = [values[i] for values in before]
        if i in moved:
            out.images([[v] for v in old], [[v] for v in old], 1)
            out.ops.append("D")
            out.missing.append(before_missing)
        out.images([[values[i]] for values in main], [[v] for v in old], 1)
        out.ops.append("I" if i in moved else "U")
        out.missing.append(missing)


def _to_batch(version: TableVersion, out: _Builder, with_commit_time: bool) -> pa.RecordBatch:
    count = len(out.ops)
    arrays = [convert(values) for convert, values in zip(version.converters, out.main,
                                                         strict=True)]
    if out.has_before:
        before_arrays = [convert(values) for convert, values in zip(version.converters,
                                                                    out.before, strict=True)]
        before = pa.StructArray.from_arrays(before_arrays, fields=list(version.data_fields),
                                            mask=pa.array(out.before_null, pa.bool_()))
    else:
        before = pa.nulls(count, version.before_type)
    c = out.constants
    columns = [
        *arrays,
        pa.array(out.ops, _STRING),
        pa.array(c[0], _INT64),
        pa.array(out.rows, _INT64),
        pa.array(c[1], _STRING),
        pa.array(c[2], _INT64),
        pa.array(c[3], _INT64),
        pa.array(c[4], _STRING),
        pa.array(c[5], _STRING),
        pa.array(c[6], _INT64),
        pa.array(c[7], _STRING),
        pa.array(c[8], _INT64),
    ]
    if with_commit_time:
        columns.append(pa.array(c[9], _INT64).cast(COMMIT_TS_FIELD.type))
    columns += [pa.array(out.missing, _MISSING), before]
    schema = version.schema if with_commit_time else version.staging_schema
    return pa.RecordBatch.from_arrays(columns, schema=schema)
