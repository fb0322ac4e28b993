"""Rows events → Arrow record batches in a table version's schema.

Values arrive column-wise, so a group of events is turned into one batch column by column.
The batch keeps one *entry* per event image (which table column is where in it, its Arrow
chunks — ``RowsEvent.arrow``, filled by the native decoder straight from the event's bytes —
and its Python values), so the per-event work does not grow with the table's width. A column
whose rows are all in chunks of the layout its Arrow type needs (``TableVersion.native_tags``)
or NULL (absent from an image) is gathered and concatenated in C and wrapped with
``pa.Array.from_buffers``: no Python object per value (a batch of one image in table order —
a snapshot chunk — wraps that image's chunk as it is, without the copy). Any other column (a type the native
decoder does not cover, a value it leaves to Python: a zero date, a string that is not
well-formed in its charset) gathers the Python values with C-speed ``list.extend`` and is
converted with a single ``pa.array`` call — the same array either way
(tests/unit/test_native_arrow.py). Every column of a batch is gathered in one C call
(``native_batch.gather_all``), and the metadata columns that vary per event (``_seq``, ``_row``, the
GTID's parts, ``_binlog_file``/``_pos``, ``_commit_ts``) are filled in another
(``native_batch.meta_columns``): a flush over thousands of tables converts thousands of parts of a few
dozen rows, where one Python step per column and per event was most of the cost. A small batch
whose columns all come so (INSERTs with complete images) is handed to Arrow whole through the C
data interface (``native_batch.export_batch``), with no array per column
(tests/unit/test_batch_fast_path.py: the same batches as the per-column Python way). Grouping matters for OLTP streams: thousands of one-row
transactions cost one conversion per few hundred events, not one per event. Per-row Python work
is limited to UPDATEs that change a primary key.

An UPDATE that changes the primary key is landed as two rows: ``D`` carrying the old row, then
``I`` carrying the new row, with consecutive ``_row`` numbers; both carry the old row in
``_before`` (an ``I`` with a ``_before`` is the second half of a key change). A consumer that
keys on the primary key therefore sees the old key disappear and the new one appear, exactly as
if the application had deleted and re-inserted the row; the I's ``_before`` links the two.

A MySQL PARTIAL_UPDATE_ROWS row whose JSON column holds a diff with no before value to apply it
to (``binlog_row_image=MINIMAL``) lands that column as absent (in ``_missing``) with the diff's
operations in ``_json_diff`` (``JsonDiff.to_json_text``, keyed by column name).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
from pyarrow._compute import get_function

from protocol.binlog.events import EventType
from protocol.binlog.model import RowsEvent, RowsKind
from protocol.binlog.values import JsonDiff
from protocol.frozen import fast_init

from . import native_batch as _batch
from .chunk_arrays import wrap_chunk
from .schema import COMMIT_TS_FIELD, TableVersion

_STRING = pa.string()
_INT64 = pa.int64()
_INT32 = pa.int32()
_MISSING = pa.list_(pa.string())
_IOTA: pa.Array = pa.array(range(8192), _INT64)  # 0, 1, 2, …: sliced for ``_row``
_IDENTITY: dict[int, tuple[int, ...]] = {}  # width → (0, 1, …, width - 1)
_NO_NAMES: list[str] = []  # shared, never mutated
# Arrow's compute functions called directly: ``pyarrow.compute`` wraps all ~290 of them in
# Python functions with generated docstrings at import, a noticeable part of every start-up,
# for the two this module needs.
_run_end_decode = get_function("run_end_decode").call
_add_function = get_function("add")
_INSERT = RowsKind.INSERT
_DELETE = RowsKind.DELETE
_READ = RowsKind.READ
_PARTIAL_UPDATE_ROWS = EventType.PARTIAL_UPDATE_ROWS


@fast_init  # one per transaction
@dataclass(frozen=True, slots=True)
class TransactionTags:
    """The metadata columns every row of one transaction shares (known at its begin).

    ``seq`` (the ``_seq`` column) numbers every committed transaction the sink is handed, one
    more than the last: unique and strictly increasing in commit order, but with gaps in the
    data, because a transaction that lands no rows (filtered, skipped, DDL-only, statement-only)
    takes a number too.
    """

    seq: int
    gtid: str | None
    gtid_domain: int | None
    gtid_server_id: int | None
    gtid_uuid: str | None
    gtid_tag: str | None
    gtid_seq: int | None
    file: str | None
    pos: int | None


@dataclass(slots=True)
class PendingRows:
    """One rows event waiting to be converted, with what it needs from its transaction.

    Not frozen: ``commit_time_us`` is filled in when the transaction commits (one of these per
    rows event, so rebuilding them at every commit showed in profiles).
    """

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
    chunks = event.arrow
    for column_index in version.primary_key:
        try:
            b = event.before_columns.index(column_index)
            a = event.after_columns.index(column_index)
        except ValueError:
            continue  # a key column absent from an image did not change (MINIMAL after image)
        if chunks is not None and chunks[0][b] is not None and chunks[0][b] == chunks[1][a]:
            continue  # the same bytes: the same values, compared without decoding them
        pairs.append((event.before[b], event.after[a]))
    if not pairs:
        return ()
    if all(old == new for old, new in pairs):  # the usual case, compared in C
        return ()
    if len(pairs) == 1:
        old, new = pairs[0]
        return tuple(i for i in range(event.row_count) if old[i] != new[i])
    return tuple(i for i in range(event.row_count)
                 if any(old[i] != new[i] for old, new in pairs))


def _identity(width: int) -> tuple[int, ...]:
    identity = _IDENTITY.get(width)
    if identity is None:
        identity = _IDENTITY[width] = tuple(range(width))
    return identity


Entry = tuple[Any, Any, Any, int]
"""One image of one event in a batch: (slots: each table column's position in the image, None
for the table's own order; the image's Arrow chunks or None; its per-column values, None when
the rows have no such image (all NULL); rows)."""


def _image(version: TableVersion, present: tuple[int, ...], values: Sequence[list[Any]] | None,
           n: int) -> tuple[Sequence[Sequence[Any]], list[str]]:
    """Every table column's values in one image; absent columns are ``None``s and named."""
    if values is None:
        return [[None] * n for _ in version.names], list(version.names)
    slots = version.slots_for(present)
    if slots == _identity(len(slots)):  # a full image, in table order: the usual case
        return values, _NO_NAMES
    columns: list[Sequence[Any]] = []
    missing: list[str] = []
    for slot, name in zip(slots, version.names, strict=True):
        if slot is None:
            columns.append([None] * n)
            missing.append(name)
        else:
            columns.append(values[slot])
    return columns, missing


def _entry(version: TableVersion, present: tuple[int, ...], values: Sequence[list[Any]] | None,
           chunks: Sequence[Any] | None, n: int) -> tuple[Entry, list[str]]:
    """One image as a batch entry, and the table columns absent from it. Nothing is decoded."""
    if values is None:
        return (None, None, None, n), list(version.names)
    slots = version.slots_for(present)
    if slots == _identity(len(slots)):  # a full image, in table order: the usual case
        return (None, chunks, values, n), _NO_NAMES
    return (slots, chunks, values, n), [name for slot, name in zip(slots, version.names,
                                                                    strict=True) if slot is None]


class _Runs:
    """One metadata column of a batch as runs of equal values (value, run end)."""

    __slots__ = ("values", "ends")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.ends: list[int] = []

    def add(self, value: Any, end: int) -> None:
        """Rows up to ``end`` (exclusive, batch-wide) carry ``value``."""
        values = self.values
        if values and values[-1] == value and type(values[-1]) is type(value):
            self.ends[-1] = end
        else:
            values.append(value)
            self.ends.append(end)

    def array(self, arrow_type: pa.DataType) -> pa.Array:
        """The column, expanded in C: one value repeated, or run-end decoded."""
        if len(self.values) == 1:
            value = self.values[0]
            if value is None:  # no _missing, no _json_diff: the usual case
                return pa.nulls(self.ends[0], arrow_type)
            scalar = _OP_SCALARS.get(value) if arrow_type == _STRING else None
            if scalar is None:
                scalar = pa.scalar(value, arrow_type)
            return pa.repeat(scalar, self.ends[0])
        return _runs_array(self.values, self.ends, arrow_type)


#: The ``_op`` values as scalars, made once (a batch of one op repeats one of them).
_OP_SCALARS = {op: pa.scalar(op, _STRING) for op in ("I", "U", "D", "R")}


#: Up to this many rows a run-length column is expanded by Python into a plain list: a batch of
#: a few rows (one table's share of a flush over thousands of tables) otherwise pays more per
#: column for the run-end arrays and Arrow's decode call.
SMALL_EXPAND = 256


def _expand(values: Sequence[Any], ends: Sequence[int], arrow_type: pa.DataType) -> pa.Array:
    """``values[i]`` repeated up to ``ends[i]``, as a plain array (small batches)."""
    rows: list[Any] = []
    start = 0
    for value, end in zip(values, ends, strict=True):
        rows += [value] * (end - start)
        start = end
    return pa.array(rows, arrow_type)


def _runs_array(values: Sequence[Any], ends: list[int], arrow_type: pa.DataType) -> pa.Array:
    """``values[i]`` repeated up to ``ends[i]``: expanded by Python for a small batch, else
    run-end decoded in C."""
    if len(ends) == ends[-1]:  # one row per run (one-row transactions): the values as they are
        return pa.array(values, arrow_type)
    if ends[-1] <= SMALL_EXPAND:
        return _expand(values, ends, arrow_type)
    encoded = pa.RunEndEncodedArray.from_arrays(pa.array(ends, _INT32),
                                                pa.array(values, arrow_type))
    return _run_end_decode([encoded])


def _per_event(values: Sequence[Any], ends: list[int], arrow_type: pa.DataType) -> pa.Array:
    """A column with one value per rows event (``ends``: each event's last row + 1)."""
    if values.count(values[0]) == len(values):
        return pa.repeat(pa.scalar(values[0], arrow_type), ends[-1])
    return _runs_array(values, ends, arrow_type)


class _Builder:
    """The entries of every image of one batch, runs for the metadata columns.

    Data columns are converted once per column (see the module docstring). Metadata columns
    are constant per rows event (most of them per transaction), so they are kept as runs and
    expanded by Arrow: their cost is per event, not per row.
    """

    def __init__(self) -> None:
        self.count = 0  # rows so far
        self.main: list[Entry] = []
        self.before: list[Entry] | None = None  # until the first before image
        self.before_null: list[bool] = []
        self.ops = _Runs()
        self.missing = _Runs()
        self.json_diffs = _Runs()
        # Per rows event: its tags (seq, gtid…, file, pos, commit time, ``_row`` minus the
        # row's index in the batch) and where its rows end in the batch.
        self.tags: list[tuple[Any, ...]] = []
        self.ends: list[int] = []

    def images(self, main: Entry, before: Entry | None, n: int) -> None:
        self.main.append(main)
        if before is None:
            if self.before is not None:
                self.before.append((None, None, None, n))
                self.before_null.extend([True] * n)
        else:
            if self.before is None:  # first before image: earlier rows had none
                self.before = [(None, None, None, self.count)] if self.count else []
                self.before_null = [True] * self.count
            self.before.append(before)
            self.before_null.extend([False] * n)
        self.count += n

    def tag(self, op: str, missing: list[str] | None, json_diff: str | None = None) -> None:
        """The rows added last (up to ``count``) are ``op`` rows with these absent columns
        (and these JSON diffs)."""
        self.ops.add(op, self.count)
        self.missing.add(missing, self.count)
        self.json_diffs.add(json_diff, self.count)


Gathered = list[tuple[int, int, bytes | None, bytes, bytes | None] | None]


def _gathered(version: TableVersion, entries: list[Entry], small: bool) -> Gathered | None:
    """Every table column's buffers, gathered in one C call (None per column left to Python);
    None when the extension lacks it, or for one image in table order (unless ``small``: a
    batch that may be exported whole), whose chunks :func:`_column` wraps as they are."""
    gather_all = _batch.gather_all
    slots, chunks, image, _ = entries[0]
    if gather_all is None or (
            not small and len(entries) == 1 and slots is None and chunks is not None
            and image is not None):
        return None
    return gather_all(version.native_tags, entries)


def _columns(version: TableVersion, entries: list[Entry],
             gathered: Gathered | None) -> list[pa.Array]:
    """Every table column of a batch (:func:`_column`) from what :func:`_gathered` gave."""
    if gathered is None:
        return [_column(version, k, entries) for k in range(len(version.names))]
    types = version.arrow_types
    return [_python_column(version, k, entries) if native is None else wrap_chunk(types[k], *native)
            for k, native in enumerate(gathered)]


def _column(version: TableVersion, k: int, entries: list[Entry]) -> pa.Array:
    """Table column ``k`` of a batch: its chunks gathered and concatenated in C when they all
    have the layout its Arrow type needs, else its Python values converted as one list."""
    tag = version.native_tags[k]
    if tag is not None and _batch.ACTIVE:  # else no event holds chunks (or no gather built)
        native: Any = None
        slots, chunks, image, count = entries[0]
        if len(entries) == 1 and slots is None and chunks is not None and image is not None:
            chunk = chunks[k]  # one image in table order (a snapshot chunk): its buffers as
            if chunk is not None and chunk[0] == tag:  # they are, not copied by gather
                native = (count, *chunk[1:])
        if native is None:
            try:
                native = _batch.gather(tag, k, entries)
            except OverflowError:  # strings over 2 GiB: pa.array below splits them as ever
                native = None
        if native is not None:
            return wrap_chunk(version.arrow_types[k], *native)
    return _python_column(version, k, entries)


def _python_column(version: TableVersion, k: int, entries: list[Entry]) -> pa.Array:
    """Table column ``k`` of a batch from its Python values, converted as one list."""
    if len(entries) == 1 and entries[0][0] is None and entries[0][2] is not None:
        values: Sequence[Any] = entries[0][2][k]
    else:
        gathered: list[Any] = []
        for slots, _, image, n in entries:
            slot = k if slots is None else slots[k]
            gathered.extend([None] * n if image is None or slot is None else image[slot])
        values = gathered
    return version.converters[k](values)


def rows_batch(version: TableVersion, group: Sequence[PendingRows],
               with_commit_time: bool) -> pa.RecordBatch:
    """Convert a group of rows events of one table version into one record batch.

    With ``with_commit_time`` the batch is in ``version.schema`` (every entry must carry its
    commit time); without, in ``version.staging_schema`` (no ``_commit_ts``), for rows of a
    transaction that has not committed yet.
    """
    batch = _to_batch(version, _built(version, group), with_commit_time)
    assert isinstance(batch, pa.RecordBatch)  # not asked to stay exported
    return batch


def rows_export(version: TableVersion, group: Sequence[PendingRows]) -> pa.RecordBatch | Exported:
    """As :func:`rows_batch` with commit times, for a flush's small file: a small batch of
    complete images (the one :func:`_exported` makes) stays in the C data interface
    (:class:`Exported`), any other is a pyarrow batch."""
    return _to_batch(version, _built(version, group), True, exported=True)


def _built(version: TableVersion, group: Sequence[PendingRows]) -> _Builder:
    """The group's rows gathered for :func:`_to_batch`."""
    out = _Builder()
    add_tags = out.tags.append
    add_end = out.ends.append
    add_main = out.main.append
    # A run of INSERT (or READ) events with full images in table order — one-row transactions
    # are thousands of them — takes the short way: its entries are appended as they are and its
    # metadata runs are tagged once, when the run ends (``run_op``), not per event.
    full = _identity(len(version.names))
    run_op: str | None = None
    last_present: tuple[int, ...] | None = None  # the decoder shares an unchanged table's tuple
    last_full = False
    for entry in group:
        event = entry.event
        n = event.row_count
        kind = event.kind
        start = out.count
        chunks = event.arrow or (None, None)
        present = event.after_columns
        if present is not last_present:
            last_present = present
            last_full = version.slots_for(present) == full
        if ((kind is _INSERT or kind is _READ) and last_full and out.before is None
                and event.after is not None):
            op = "I" if kind is _INSERT else "R"
            if run_op != op:
                if run_op is not None:
                    out.tag(run_op, None)
                run_op = op
            add_main((None, chunks[1], event.after, n))
            out.count = start + n
        else:
            if run_op is not None:
                out.tag(run_op, None)
                run_op = None
            _add_images(version, out, entry, event, kind, n, chunks)
        tags = entry.tags
        add_tags((tags.seq, tags.gtid, tags.gtid_domain, tags.gtid_server_id, tags.gtid_uuid,
                  tags.gtid_tag, tags.gtid_seq, event.header.file or tags.file,
                  event.header.position or tags.pos, entry.commit_time_us,
                  entry.first_row - start))
        add_end(out.count)
    if run_op is not None:
        out.tag(run_op, None)
    return out


def _add_images(version: TableVersion, out: _Builder, entry: PendingRows, event: RowsEvent,
                kind: RowsKind, n: int, chunks: Sequence[Any]) -> None:
    """One event's images and metadata runs, any kind (the general way of :func:`rows_batch`)."""
    if kind is _INSERT or kind is _READ:
        main, missing = _entry(version, event.after_columns, event.after, chunks[1], n)
        out.images(main, None, n)
        out.tag(kind.value, missing or None)
    elif kind is _DELETE:
        before, missing = _entry(version, event.before_columns, event.before, chunks[0], n)
        out.images(before, before, n)
        out.tag("D", missing or None)
    elif not entry.moved and event.header.type_code != _PARTIAL_UPDATE_ROWS:
        before, _ = _entry(version, event.before_columns, event.before, chunks[0], n)
        main, missing = _entry(version, event.after_columns, event.after, chunks[1], n)
        out.images(main, before, n)
        out.tag("U", missing or None)
    else:
        old, before_missing = _image(version, event.before_columns, event.before, n)
        new, missing = _image(version, event.after_columns, event.after, n)
        diffs = None
        if event.header.type_code == _PARTIAL_UPDATE_ROWS:
            new, diffs = _json_diffs(version, new, n)
        if not entry.moved and diffs is None:
            out.images((None, None, new, n), (None, None, old, n), n)
            out.tag("U", missing or None)
        else:
            _row_by_row(out, new, old, set(entry.moved), n, missing, before_missing or None,
                        diffs)


def _json_diffs(version: TableVersion, main: Sequence[Sequence[Any]], n: int
                ) -> tuple[Sequence[Sequence[Any]], list[tuple[list[str], str] | None] | None]:
    """A PARTIAL_UPDATE_ROWS after image with its JSON diffs taken out, and per row the JSON
    columns that held a diff instead of a value (MySQL MINIMAL image + PARTIAL_JSON: no before
    value to apply it to) with the row's ``_json_diff`` text; ``None`` when no row has one.
    Those columns become ``None`` and are listed in ``_missing``; the event is not changed."""
    names: list[list[str]] = [[] for _ in range(n)]
    texts: list[list[str]] = [[] for _ in range(n)]
    columns = list(main)
    for slot, name in enumerate(version.names):
        values = columns[slot]
        if not any(isinstance(v, JsonDiff) for v in values):
            continue
        copy = list(values)
        for i, value in enumerate(copy):
            if isinstance(value, JsonDiff):
                copy[i] = None
                names[i].append(name)
                texts[i].append(f"{json.dumps(name, ensure_ascii=False)}: "
                                f"{value.to_json_text()}")
        columns[slot] = copy
    if not any(names):
        return main, None
    return columns, [(names[i], "{" + ", ".join(texts[i]) + "}") if names[i] else None
                     for i in range(n)]


def _row_by_row(out: _Builder, main: Sequence[Sequence[Any]], before: Sequence[Sequence[Any]],
                moved: set[int], n: int, missing: list[str],
                before_missing: list[str] | None,
                diffs: list[tuple[list[str], str] | None] | None) -> None:
    """UPDATE rows one by one: each key-changing row becomes D(old) + I(new) (the I keeps the
    old row in ``_before``); a row with JSON diffs lists those columns in ``_missing`` and
    carries the diffs in ``_json_diff``; other rows stay U."""
    for i in range(n):
        old = (None, None, [[values[i]] for values in before], 1)
        if i in moved:
            out.images(old, old, 1)
            out.tag("D", before_missing)
        out.images((None, None, [[values[i]] for values in main], 1), old, 1)
        diff = diffs[i] if diffs is not None else None
        row_missing = [*missing, *diff[0]] if diff is not None else missing
        out.tag("I" if i in moved else "U", row_missing or None,
                diff[1] if diff is not None else None)


def _row_numbers(offsets: Sequence[int], ends: list[int]) -> pa.Array:
    """``_row``: the row's index in the batch plus its event's offset, computed by Arrow."""
    global _IOTA
    count = ends[-1]
    if len(_IOTA) < count:
        _IOTA = pa.array(range(max(count, 2 * len(_IOTA))), _INT64)
    if offsets.count(0) == len(offsets):
        return _IOTA.slice(0, count)
    if len(offsets) == count:  # one row per event: its ``_row`` is its offset plus its index
        return pa.array([offset + i for i, offset in enumerate(offsets)], _INT64)
    if count <= SMALL_EXPAND:
        rows: list[int] = []
        start = 0
        for offset, end in zip(offsets, ends, strict=True):
            rows += range(start + offset, end + offset)
            start = end
        return pa.array(rows, _INT64)
    return _add_function.call([_IOTA.slice(0, count), _per_event(offsets, ends, _INT64)])


#: The per-event tags of a batch (``_Builder.tags``) as ``native_batch.meta_columns`` kinds, and the
#: Arrow type of each: seq, gtid, domain, server id, uuid, tag, gtid seq, file, pos, commit
#: time (``-``: not wanted, the staging schema has no ``_commit_ts``), row offset.
_META_KINDS = {True: b"isiissisiir", False: b"isiissisi-r"}
_META_TYPES = (_INT64, _STRING, _INT64, _INT64, _STRING, _STRING, _INT64, _STRING, _INT64,
               COMMIT_TS_FIELD.type, _INT64)
#: Where each metadata column of the batch comes from in the tags: _seq, _row, _gtid…
_META_ORDER = {True: (0, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9), False: (0, 10, 1, 2, 3, 4, 5, 6, 7, 8)}


MetaBuffers = tuple[tuple[int, bytes | None, bytes, bytes | None] | None, ...]


def _meta_buffers(out: _Builder, with_commit_time: bool) -> MetaBuffers | None:
    """The per-event metadata columns' buffers (``_seq`` … ``_commit_ts``, in tag order),
    filled in C in one call; None when the extension lacks it or a value does not fit (the
    Python way then converts, or raises, as ever)."""
    meta_columns = _batch.meta_columns
    if meta_columns is None:
        return None
    try:
        return meta_columns(out.tags, out.ends, _META_KINDS[with_commit_time])
    except (TypeError, ValueError, OverflowError):
        return None


def _meta_columns(buffers: MetaBuffers, count: int, with_commit_time: bool) -> list[pa.Array]:
    """The metadata columns from :func:`_meta_buffers`, in the batch's order: one Arrow array
    each, whatever the events."""
    columns = []
    for c in _META_ORDER[with_commit_time]:
        arrow_type = _META_TYPES[c]
        column = buffers[c]
        columns.append(pa.nulls(count, arrow_type) if column is None
                       else wrap_chunk(arrow_type, count, *column))
    return columns


#: Bytes per value of each native layout with a fixed width (the others: offsets and bytes).
_WIDTHS = {"i1": 1, "i2": 2, "i4": 4, "i8": 8, "dec": 16, "f4": 4, "f8": 8, "date": 4, "ts": 8}
_META_WIDTHS = (8, 0, 8, 8, 0, 0, 8, 0, 8, 8, 8)  # of _META_TYPES; 0: a string


@functools.lru_cache(maxsize=1024)
def _null_spec(count: int, width: int) -> tuple[Any, ...]:
    """An all-NULL column's ``native_batch.export_batch`` spec (``width`` 0: a string)."""
    buffers = (width * count,) if width else (4 * (count + 1), 0)
    return (count, count, (count + 7) // 8, buffers, ())


def _spec(count: int, nulls: int, valid: bytes | None, data: bytes,
          offsets: bytes | None) -> tuple[Any, ...]:
    return (count, nulls, valid, (data,) if offsets is None else (offsets, data), ())


@functools.lru_cache(maxsize=256)
def _null_tail(tags: tuple[str | None, ...], count: int) -> tuple[tuple[Any, ...], ...]:
    """The specs of ``_missing``, ``_json_diff`` and ``_before`` all NULL, for a batch of
    ``count`` rows of a table with these native tags (cached: tables share shapes)."""
    nulls = (count + 7) // 8
    return (
        (count, count, nulls, (4 * (count + 1),), ((0, 0, None, (4, 0), ()),)),  # _missing
        _null_spec(count, 0),  # _json_diff
        (count, count, nulls, (), tuple(_null_spec(count, _WIDTHS.get(tag or "", 0))
                                        for tag in tags)),  # _before
    )


@functools.lru_cache(maxsize=1024)
def _op_spec(op: str, count: int) -> tuple[Any, ...]:
    """The spec of an ``_op`` column of ``count`` rows of one op — the usual small batch —
    filled in C once per (op, count), as for any batch (``export_batch`` copies its buffers)."""
    meta_columns = _batch.meta_columns
    assert meta_columns is not None  # _exported's caller checked
    column = meta_columns([(op,)], [count], b"s")[0]
    assert column is not None
    return _spec(count, *column)


class Exported:
    """A small batch left in the C data interface (``native_batch.export_batch``), not imported into
    pyarrow: what a flush's small file needs, handed to the native writer's pool as it is
    (``files.NativeFiles``). Importing it and exporting it again for the pool were a tenth of
    the flush's thread time over 2,000 tables. ``array``: the
    ``arrow_array`` capsule (it owns the rows: freed with it, on whichever thread lets go of it
    last, holding the GIL); ``size``: an upper bound of the rows' bytes (the export's block).
    :meth:`batch` imports it when pyarrow is to write the file after all — once: the import
    moves the rows out of the capsule."""

    __slots__ = ("array", "num_rows", "schema", "size")

    def __init__(self, array: object, num_rows: int, schema: pa.Schema, size: int) -> None:
        self.array = array
        self.num_rows = num_rows
        self.schema = schema
        self.size = size

    def batch(self) -> pa.RecordBatch:
        """The rows as a pyarrow batch (the capsule is left empty: call once)."""
        return pa.RecordBatch._import_from_c_capsule(self.schema.__arrow_c_schema__(),
                                                     self.array)


def _exported(version: TableVersion, out: _Builder, gathered: Gathered, meta: MetaBuffers,
              schema: pa.Schema, with_commit_time: bool,
              exported: bool = False) -> pa.RecordBatch | Exported:
    """A batch whose every column has buffers filled in C, handed to Arrow in one import
    (``native_batch.export_batch``): no array per column, no ``from_arrays``. For small batches of
    complete images without before images (each buffer is copied once more). What does not
    depend on the rows' values — an all-NULL column's spec, a one-op ``_op`` column's, the
    NULL ``_missing``/``_json_diff``/``_before`` — is made once per shape and row count: a
    flush over thousands of tables exports thousands of batches of a few dozen rows.
    ``exported``: left in the C data interface (:class:`Exported`), not imported."""
    count = out.count
    meta_columns, export_batch = _batch.meta_columns, _batch.export_batch
    assert meta_columns is not None and export_batch is not None  # the caller checked
    ops = out.ops.values
    if len(ops) == 1:
        op_spec = _op_spec(ops[0], count)
    else:
        op = meta_columns([(value,) for value in ops], out.ops.ends, b"s")[0]
        assert op is not None  # every row has an op
        op_spec = _spec(count, *op)
    columns = cast("list[tuple[int, int, bytes | None, bytes, bytes | None]]",
                   gathered)  # none is None: the caller checked
    children = [_spec(count, *native[1:]) for native in columns]
    children.append(op_spec)
    for c in _META_ORDER[with_commit_time]:
        column = meta[c]
        children.append(_null_spec(count, _META_WIDTHS[c]) if column is None
                        else _spec(count, *column))
    children += _null_tail(version.native_tags, count)
    capsule, address, size = export_batch((count, 0, None, (), tuple(children)))
    if exported:
        return Exported(capsule, count, schema, size)
    batch: pa.RecordBatch = pa.RecordBatch._import_from_c(address, schema)
    del capsule  # the struct: the buffers are Arrow's now
    return batch


def _to_batch(version: TableVersion, out: _Builder, with_commit_time: bool,
              exported: bool = False) -> pa.RecordBatch | Exported:
    count = out.count
    schema = version.schema if with_commit_time else version.staging_schema
    small = count <= SMALL_EXPAND and out.before is None and _batch.export_batch is not None
    gathered = _gathered(version, out.main, small)
    meta = _meta_buffers(out, with_commit_time)
    if (small and meta is not None and gathered is not None
            and out.missing.values == [None] and out.json_diffs.values == [None]
            and None not in gathered):
        return _exported(version, out, gathered, meta, schema, with_commit_time, exported)
    arrays = _columns(version, out.main, gathered)
    if out.before is not None:
        before_arrays = _columns(version, out.before, _gathered(version, out.before, False))
        before = pa.StructArray.from_arrays(before_arrays, fields=list(version.data_fields),
                                            mask=pa.array(out.before_null, pa.bool_()))
    else:
        before = pa.nulls(count, version.before_type)
    if meta is not None:
        return pa.RecordBatch.from_arrays(
            [*arrays, out.ops.array(_STRING), *_meta_columns(meta, count, with_commit_time),
             out.missing.array(_MISSING), out.json_diffs.array(_STRING), before], schema=schema)
    ends = out.ends
    (seq, gtid, domain, server_id, uuid, tag, gtid_seq, file, pos, commit_time,
     row_offsets) = zip(*out.tags, strict=True)
    columns = [
        *arrays,
        out.ops.array(_STRING),
        _per_event(seq, ends, _INT64),
        _row_numbers(row_offsets, ends),
        _per_event(gtid, ends, _STRING),
        _per_event(domain, ends, _INT64),
        _per_event(server_id, ends, _INT64),
        _per_event(uuid, ends, _STRING),
        _per_event(tag, ends, _STRING),
        _per_event(gtid_seq, ends, _INT64),
        _per_event(file, ends, _STRING),
        _per_event(pos, ends, _INT64),
    ]
    if with_commit_time:
        columns.append(_per_event(commit_time, ends, COMMIT_TS_FIELD.type))
    columns += [out.missing.array(_MISSING), out.json_diffs.array(_STRING), before]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
