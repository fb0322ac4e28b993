"""A ``RowsEvent`` → one Arrow record batch in a table version's staging schema.

Values arrive column-wise, so each column is converted with one ``pa.array`` call; the per-row
Python work is limited to UPDATEs of tables with a primary key, where each row's key is compared
to decide whether the update moved the row.

An UPDATE that changes the primary key is landed as two rows: ``D`` carrying the old row, then
``I`` carrying the new row, with consecutive ``_row`` numbers; both carry the old row in
``_before`` (an ``I`` with a ``_before`` is the second half of a key change). A consumer that
keys on the primary key therefore sees the old key disappear and the new one appear, exactly as
if the application had deleted and re-inserted the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from protocol.binlog.model import RowsEvent, RowsKind

from .schema import TableVersion, constant

_STRING = pa.string()
_INT64 = pa.int64()
_MISSING = pa.list_(pa.string())


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


def _image(version: TableVersion, present: tuple[int, ...],
           values: tuple[list[Any], ...] | None, n: int) -> tuple[list[pa.Array], list[str]]:
    """Arrays for every table column from one image; absent columns are null and named."""
    arrays: list[pa.Array] = []
    missing: list[str] = []
    slots = version.slots_for(present)
    for slot, convert, arrow_type, name in zip(slots, version.converters, version.arrow_types,
                                               version.names, strict=True):
        if slot is None or values is None:
            arrays.append(pa.nulls(n, arrow_type))
            missing.append(name)
        else:
            arrays.append(convert(values[slot]))
    return arrays, missing


def _key_changed_rows(version: TableVersion, event: RowsEvent) -> list[int]:
    """Rows of an UPDATE whose primary key differs between the before and after image."""
    if not version.primary_key or event.before is None or event.after is None:
        return []
    pairs = []
    for column_index in version.primary_key:
        try:
            b = event.before_columns.index(column_index)
            a = event.after_columns.index(column_index)
        except ValueError:
            continue  # a key column absent from an image did not change (MINIMAL after image)
        pairs.append((event.before[b], event.after[a]))
    if not pairs:
        return []
    if len(pairs) == 1:
        old, new = pairs[0]
        return [i for i in range(event.row_count) if old[i] != new[i]]
    return [i for i in range(event.row_count) if any(old[i] != new[i] for old, new in pairs)]


def _missing_array(missing: list[str], n: int) -> pa.Array:
    return pa.nulls(n, _MISSING) if not missing else pa.repeat(pa.scalar(missing, _MISSING), n)


def rows_batch(version: TableVersion, event: RowsEvent, tags: TransactionTags,
               first_row: int) -> pa.RecordBatch:
    """The event's rows as a batch in ``version.staging_schema`` (everything but ``_commit_ts``).

    ``first_row`` is the ``_row`` of the batch's first row; the batch may hold more rows than
    the event (primary-key changes land as two rows), so callers advance by ``num_rows``.
    """
    n = event.row_count
    kind = event.kind
    before_struct: pa.Array
    if kind is RowsKind.INSERT:
        main, missing = _image(version, event.after_columns, event.after, n)
        before_struct = pa.nulls(n, version.before_type)
        op = constant("I", _STRING, n)
        missing_col = _missing_array(missing, n)
    else:
        before, before_missing = _image(version, event.before_columns, event.before, n)
        before_struct = pa.StructArray.from_arrays(before, fields=list(version.data_fields))
        if kind is RowsKind.DELETE:
            main, missing = before, before_missing
            op = constant("D", _STRING, n)
            missing_col = _missing_array(missing, n)
        else:
            main, missing = _image(version, event.after_columns, event.after, n)
            moved = _key_changed_rows(version, event)
            if not moved:
                op = constant("U", _STRING, n)
                missing_col = _missing_array(missing, n)
            else:
                main, before_struct, op, missing_col = _split_key_changes(
                    main, before, before_struct, moved, n, missing, before_missing)
    count = len(op)
    columns = [
        *main,
        op,
        constant(tags.seq, _INT64, count),
        pa.array(range(first_row, first_row + count), _INT64),
        constant(tags.gtid, _STRING, count),
        constant(tags.gtid_domain, _INT64, count),
        constant(tags.gtid_server_id, _INT64, count),
        constant(tags.gtid_uuid, _STRING, count),
        constant(tags.gtid_tag, _STRING, count),
        constant(tags.gtid_seq, _INT64, count),
        constant(event.header.file or tags.file, _STRING, count),
        constant(event.header.position or tags.pos, _INT64, count),
        missing_col,
        before_struct,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=version.staging_schema)


def _split_key_changes(after: list[pa.Array], before: list[pa.Array], before_struct: pa.Array,
                       moved: list[int], n: int, after_missing: list[str],
                       before_missing: list[str],
                       ) -> tuple[list[pa.Array], pa.Array, pa.Array, pa.Array]:
    """Turn each key-changing UPDATE row into D(old) + I(new); other rows stay U."""
    moved_set = set(moved)
    main_take: list[int] = []  # indexes into concat(after, before)
    before_take: list[int | None] = []
    ops: list[str] = []
    missing: list[list[str] | None] = []
    after_m = after_missing or None
    before_m = before_missing or None
    for i in range(n):
        if i in moved_set:
            main_take += (n + i, i)
            before_take += (i, i)
            ops += ("D", "I")
            missing += (before_m, after_m)
        else:
            main_take.append(i)
            before_take.append(i)
            ops.append("U")
            missing.append(after_m)
    take = pa.array(main_take, _INT64)
    main = [pa.concat_arrays([a, b]).take(take) for a, b in zip(after, before, strict=True)]
    return (main, before_struct.take(pa.array(before_take, _INT64)), pa.array(ops, _STRING),
            pa.array(missing, _MISSING))
