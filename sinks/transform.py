"""Column rules: what of a ruled column may leave the daemon (excluded, masked, hashed, truncated).

A compliance review asks that some columns never land in clear. The rules are applied to the
decoded rows *events* — one function, :meth:`Transform.rows`, that every path calls before it
does anything else with an event: the Parquet sink for streamed rows, before images, XA parts
and snapshot chunks (``ParquetSink._on_rows`` / ``stage_piece``), and ``binlake decode`` for
its text and Open Protocol output. What comes out is an ordinary :class:`RowsEvent` of an
ordinary :class:`TableMapEvent`, so nothing downstream needs to know rules exist:

* ``exclude``: the column is gone from the table map and from both images (indexes renumbered).
* ``mask``: every non-NULL value becomes the replacement text (a ``VARCHAR`` column), or, with
  no replacement, every value is NULL (the column keeps its type).
* ``hash``: lowercase hex of HMAC-SHA-256(key, value) (a ``VARCHAR`` column), where value is
  the UTF-8 text the server's text protocol prints for it (``CAST(col AS CHAR)``), or the raw
  bytes of a binary column; NULL stays NULL. Only types whose text form is reproduced exactly
  are accepted (:func:`_text_form`); any other refuses the rule (:class:`TransformRefused`)
  rather than land a hash nobody can recompute.
* ``truncate``: the first N characters of a text column (N bytes of a binary one).

Each ruled column's :attr:`Column.transform` names the rule that applied, so the sink's schema
signature, ``_schema/v<N>.json`` and the Parquet field metadata record it, and a changed rule
starts a new schema version. A ruled table's events keep the native Arrow chunks of the
columns no rule changes; a ruled column's chunk (its clear value) is dropped, and that column
lands from the Python values the rule made (tables without rules are returned as they are).
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import hashlib
import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from protocol.binlog.coltypes import FieldType
from protocol.binlog.model import Column, ColumnFlag, RowsEvent, TableMapEvent
from protocol.binlog.values import time_text

from .errors import TransformRefused, ValueOutOfRange

__all__ = ["ACTIONS", "BOOLEAN", "ColumnRule", "Transform", "TypeOptions", "hash_hex", "text_form"]

ACTIONS = ("exclude", "mask", "hash", "truncate")

#: The landed column of a hashed or text-masked value: VARCHAR in utf8mb4 (collation 45).
_UTF8MB4 = 45
_HASH_CHARS = 64

_INTEGERS = frozenset({FieldType.TINY, FieldType.SHORT, FieldType.INT24, FieldType.LONG,
                       FieldType.LONGLONG})
_TEXT = frozenset({FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING})
_BLOBS = frozenset({FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB,
                    FieldType.BLOB})


@dataclass(frozen=True, slots=True)
class ColumnRule:
    """One ``[[transform.column]]``: a ``db.table.column`` shell pattern and its action."""

    match: str
    action: str
    mask: str | None = None  # action "mask": the replacement (None: NULL)
    length: int | None = None  # action "truncate": characters (bytes, for binary) kept

    @property
    def label(self) -> str:
        """What :attr:`Column.transform` records: ``hash:hmac-sha256``, ``mask``, ``mask:null``,
        ``truncate:8``, ``exclude``."""
        if self.action == "hash":
            return "hash:hmac-sha256"
        if self.action == "mask":
            return "mask" if self.mask is not None else "mask:null"
        if self.action == "truncate":
            return f"truncate:{self.length}"
        return self.action


@dataclass(frozen=True, slots=True)
class TypeOptions:
    """``[types]``: how some source types land, fixed per lake at its creation (the lake
    records them: ``sinks.parquet.type_record``). The defaults are binlake's own mapping."""

    tinyint1_as_boolean: bool = False
    bigint_unsigned: str = "decimal"  # "decimal": decimal(20,0); "int64": out of range is an error
    wide_decimal: str = "string"  # DECIMAL(39..65): "string", or "error" (refused)
    zero_date: str = "null"  # DATE/DATETIME/TIMESTAMP: "null" for zero dates, or "string" (text)

    @property
    def is_default(self) -> bool:
        return self == TypeOptions()

    def to_json(self) -> dict[str, Any]:
        return {"tinyint1_as_boolean": self.tinyint1_as_boolean,
                "bigint_unsigned": self.bigint_unsigned, "wide_decimal": self.wide_decimal,
                "zero_date": self.zero_date}


#: The label of a ``TINYINT(1)`` that ``tinyint1_as_boolean`` lands as a boolean (0 is false,
#: any other value true). Its width comes from a schema source (``Column.display_width``): a
#: TINYINT whose width nobody described lands as the integer it is. Signed only: MySQL
#: (8.0.19 and later) keeps no width for ``TINYINT(1) UNSIGNED``, so an unsigned one lands as an
#: integer on every server alike.
BOOLEAN = "type:boolean"
_INT64_MAX = (1 << 63) - 1
_TEMPORAL = frozenset({FieldType.DATE, FieldType.NEWDATE, FieldType.DATETIME,
                       FieldType.DATETIME2, FieldType.TIMESTAMP, FieldType.TIMESTAMP2})


def _temporal_text(column: Column) -> Callable[[Any], str]:
    """``zero_date = "string"``: a DATE/DATETIME's text as the server prints it (a zero or
    invalid date as it is); a TIMESTAMP's in UTC."""
    code = column.type_code
    if code in (FieldType.TIMESTAMP, FieldType.TIMESTAMP2):
        fsp = (column.scale or 0) if code == FieldType.TIMESTAMP2 else 0
        return lambda v: (_datetime_text(v.astimezone(_dt.UTC), fsp)
                          if isinstance(v, _dt.datetime) else str(v))
    form = text_form(column)
    assert form is not None  # every DATE and DATETIME has one
    return lambda v: form(v).decode()


def hash_hex(key: bytes, value: bytes) -> str:
    """The landed form of a hashed value: lowercase hex HMAC-SHA-256."""
    return hmac.new(key, value, hashlib.sha256).hexdigest()


def _is_binary(column: Column) -> bool:
    return bool(column.flags & ColumnFlag.BINARY) or column.charset == 63


def _datetime_text(value: _dt.datetime, fsp: int) -> str:
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    return f"{text}.{value.microsecond:06d}"[:len(text) + 1 + fsp] if fsp else text


def text_form(column: Column) -> Callable[[Any], bytes] | None:
    """The bytes a hash is taken of, per value (never NULL) of ``column``: the UTF-8 text of
    ``CAST(col AS CHAR)``, or a binary column's raw bytes; None for a type whose text form
    cannot be reproduced exactly here (FLOAT/DOUBLE: the server's shortest-digits printing;
    TIMESTAMP: the session time zone's; JSON: the server's normalized text; BIT, fixed
    BINARY(n) (padded by the server), spatial and vector types, ENUM/SET without labels)."""
    code = column.type_code
    if code in _INTEGERS:
        return lambda v: str(int(v)).encode()
    if code == FieldType.YEAR:
        return lambda v: f"{int(v):04d}".encode()
    if code == FieldType.NEWDECIMAL:
        return lambda v: (format(v, "f") if isinstance(v, Decimal) else str(v)).encode()
    if code in (FieldType.DATE, FieldType.NEWDATE):
        return lambda v: (v.isoformat() if isinstance(v, _dt.date) else str(v)).encode()
    if code in (FieldType.DATETIME, FieldType.DATETIME2):
        fsp = (column.scale or 0) if code == FieldType.DATETIME2 else 0
        return lambda v: (_datetime_text(v, fsp) if isinstance(v, _dt.datetime)
                          else str(v)).encode()
    if code in (FieldType.TIME, FieldType.TIME2):
        tfsp = (column.scale or 0) if code == FieldType.TIME2 else 0
        return lambda v: (time_text(v, tfsp) if isinstance(v, _dt.timedelta)
                          else str(v)).encode()
    if code in _TEXT or code in _BLOBS:
        if code == FieldType.STRING and _is_binary(column):
            return None  # BINARY(n): the server pads with zero bytes the binlog leaves out
        if code in _BLOBS and column.charset is None and not column.flags & ColumnFlag.BINARY:
            return None  # TEXT or BLOB? without charset metadata nobody can tell
        return _raw_or_utf8
    if code == FieldType.ENUM and column.enum_values is not None:
        labels = column.enum_values
        return lambda v: (v if isinstance(v, str)
                          else labels[v - 1] if 0 < v <= len(labels) else "").encode()
    if code == FieldType.SET and column.set_values is not None:
        members = column.set_values
        return lambda v: (v if isinstance(v, str) else ",".join(
            label for bit, label in enumerate(members) if v >> bit & 1)).encode()
    return None


_INTEGER_TAGS = {FieldType.TINY: ("i1", "u1"), FieldType.SHORT: ("i2", "u2"),
                 FieldType.INT24: ("i4", "u4"), FieldType.LONG: ("i4", "u4"),
                 FieldType.LONGLONG: ("i8", "u8")}


def _chunk_tag(column: Column) -> str | None:
    """The native chunk layout a source column's values are read back from, giving exactly
    the row decoder's Python values (see :data:`_CHUNK_TYPES`); None for any other column."""
    code = column.type_code
    if code in _INTEGER_TAGS:
        return _INTEGER_TAGS[FieldType(code)][column.unsigned]
    if code == FieldType.STRING and _is_binary(column):
        return None  # BINARY(n): the landed value is padded, the binlog's is not
    if code in _TEXT or code in _BLOBS:
        return "bin" if _is_binary(column) else "str"
    return None


def _raw_or_utf8(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _type_text(column: Column) -> str:
    try:
        name = FieldType(column.type_code).name
    except ValueError:
        name = f"type {column.type_code}"
    return f"{name}{' BINARY' if _is_binary(column) else ''}"


def _text_column(column: Column, index: int, label: str, chars: int) -> Column:
    """The landed column of a hashed or text-masked one: a VARCHAR(``chars``) in utf8mb4."""
    flags = column.flags & ~(ColumnFlag.UNSIGNED | ColumnFlag.BINARY)
    return Column(index=index, type_code=int(FieldType.VARCHAR), meta=chars * 4,
                  name=column.name, flags=flags, charset=_UTF8MB4, length=chars * 4,
                  transform=label)


Mapper = Callable[[list[Any]], list[Any]]


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the rules make of one table map: the landed table map, and per source column its
    new index (None: excluded), the function its values go through (None: unchanged), and
    the native chunk layout its values are read back from for that function (None: from its
    Python values)."""

    table: TableMapEvent
    new_index: tuple[int | None, ...]
    mappers: tuple[Mapper | None, ...]
    chunk_tags: tuple[str | None, ...]


#: The chunk layouts (``protocol.binlog.native``) whose values read back through Arrow are the
#: very Python values the row decoder gives: text and binary strings, integers. Any other
#: ruled column's values come from the decoder's Python values.
_CHUNK_TYPES = {"str": "string", "bin": "binary", "i1": "int8", "i2": "int16", "i4": "int32",
                "i8": "int64", "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64"}


def _chunk_values(chunk: Any, rows: int) -> list[Any]:
    """A native chunk ``(tag, nulls, validity, data, offsets)``'s values as Python objects."""
    # Not before the daemon chose Arrow's allocator: both load pyarrow.
    import pyarrow as pa  # noqa: PLC0415

    from .parquet.chunk_arrays import wrap_chunk  # noqa: PLC0415

    tag, nulls, valid, data, offsets = chunk
    values: list[Any] = wrap_chunk(getattr(pa, _CHUNK_TYPES[tag])(), rows, nulls, valid, data,
                                   offsets).to_pylist()
    return values


class _RuledImage:
    """One image of a ruled event as it lands, read like the tuple of per-column lists it
    stands for (index, iterate, ``len``, ``==``). A column no rule changes is the source
    image's own, decoded only if the sink asks for it (it lands from its chunk otherwise); a
    ruled column is its rule's values, made when first asked, from the column's native chunk
    where that reads back exactly, else from the source image's values. So a rule on one
    column does not make the decoder's Python values of every column."""

    __slots__ = ("_cache", "_chunks", "_plan", "_rows", "_source", "_sources")

    def __init__(self, plan: _Plan, source: Any, sources: tuple[int, ...],
                 positions: tuple[int, ...], chunks: Any, rows: int) -> None:
        self._plan = plan
        self._source = source
        self._sources = tuple(zip(sources, positions, strict=True))  # (source column, k)
        self._chunks = chunks
        self._rows = rows
        self._cache: list[list[Any] | None] = [None] * len(sources)

    def __len__(self) -> int:
        return len(self._sources)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self._sources))[index])
        found = self._cache[index]
        if found is None:
            column, k = self._sources[index]
            mapper = self._plan.mappers[column]
            if mapper is None:
                found = self._source[k]
            else:
                chunk = self._chunks[k] if self._chunks is not None else None
                tag = self._plan.chunk_tags[column]
                found = mapper(_chunk_values(chunk, self._rows)
                               if chunk is not None and tag is not None and chunk[0] == tag
                               else self._source[k])
            self._cache[index] = found
        return found

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self._sources)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _RuledImage | tuple) or hasattr(other, "__getitem__"):
            return tuple(self) == tuple(other)  # type: ignore[arg-type]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(tuple(self))


class Transform:
    """The configured rules with their key; :meth:`rows` / :meth:`table_map` apply them."""

    def __init__(self, rules: Sequence[ColumnRule], key: bytes | None,
                 types: TypeOptions | None = None) -> None:
        self.rules = tuple(rules)
        self.types = types or TypeOptions()
        for rule in self.rules:
            if rule.action not in ACTIONS:
                raise ValueError(f"unknown action {rule.action!r}")
            if rule.action == "truncate" and (rule.length is None or rule.length < 0):
                raise ValueError("truncate needs a length >= 0")
        if key is None and any(rule.action == "hash" for rule in self.rules):
            raise ValueError("hash rules need a key")
        self._key = key or b""
        self._patterns = tuple(
            (re.compile(fnmatch.translate(rule.match)), rule) for rule in self.rules)
        # db.table part of each pattern (everything up to the last dot): a table none of them
        # can match costs one dict lookup per event.
        self._table_patterns = re.compile("|".join(
            f"(?:{fnmatch.translate(rule.match.rsplit('.', 1)[0])})" for rule in self.rules)
            or r"(?!)")
        self._ruled_tables: dict[tuple[str, str], bool] = {}
        # Per table: the source columns tuple (the decoder shares it between the TABLE_MAPs of
        # an unchanged table), its key and metadata flags, and the plan made for them.
        self._plans: dict[tuple[str, str], tuple[Any, tuple[int, ...], bool, _Plan | None]] = {}

    def __repr__(self) -> str:
        return f"Transform({len(self.rules)} rules)"  # never the key

    @property
    def active(self) -> bool:
        return bool(self.rules) or not self.types.is_default

    def rule_for(self, database: str, table: str, column: str) -> ColumnRule | None:
        """The first rule whose pattern matches ``db.table.column``."""
        qualified = f"{database}.{table}.{column}"
        for pattern, rule in self._patterns:
            if pattern.fullmatch(qualified):
                return rule
        return None

    def _ruled(self, database: str, table: str) -> bool:
        key = (database, table)
        found = self._ruled_tables.get(key)
        if found is None:
            found = self._ruled_tables[key] = bool(
                self._table_patterns.fullmatch(f"{database}.{table}"))
        return found

    # --- table maps -----------------------------------------------------------------------

    def table_map(self, table: TableMapEvent) -> TableMapEvent:
        """``table`` as it lands: excluded columns gone, ruled columns retyped and labelled."""
        plan = self._plan(table)
        return table if plan is None else plan.table

    def _plan(self, table: TableMapEvent) -> _Plan | None:
        if self.types.is_default and not self._ruled(table.schema, table.table):
            return None
        key = (table.schema, table.table)
        found = self._plans.get(key)
        if (found is not None and found[0] is table.columns and found[1] == table.primary_key
                and found[2] == table.has_full_metadata):
            return found[3]
        plan = self._make_plan(table)
        if len(self._plans) > 4096:
            self._plans.clear()
        self._plans[key] = (table.columns, table.primary_key, table.has_full_metadata, plan)
        return plan

    def _make_plan(self, table: TableMapEvent) -> _Plan | None:
        columns: list[Column] = []
        new_index: list[int | None] = []
        mappers: list[Mapper | None] = []
        excluded: list[str] = []
        ruled = False
        key_columns = set(table.primary_key)
        if self._ruled(table.schema, table.table) and any(
                column.name is None for column in table.columns):
            raise TransformRefused(
                f"{table.schema}.{table.table} has column rules but its TABLE_MAP names no "
                "columns, so no rule could be matched: its values would land in clear",
                fix="set binlog_row_metadata=FULL on the server (or let the daemon read names "
                    "from information_schema), then restart")
        for column in table.columns:
            name = column.name or ""
            rule = self.rule_for(table.schema, table.table, name) if column.name else None
            typed = self._typed(table, column, len(columns)) if rule is None else None
            if typed is not None:
                ruled = True
                new_index.append(len(columns))
                columns.append(typed[0])
                mappers.append(typed[1])
                continue
            if rule is None:
                new_index.append(len(columns))
                columns.append(column if column.index == len(columns)
                               else replace(column, index=len(columns)))
                mappers.append(None)
                continue
            ruled = True
            where = f"{table.schema}.{table.table}.{name}"
            if rule.action == "exclude":
                if column.index in key_columns:
                    raise TransformRefused(
                        f"{where} is part of the primary key and cannot be excluded: its rows "
                        "could no longer be told apart",
                        fix=f"hash {where} instead (the hash of the key is the key), or mask a "
                            "column that is not part of the key")
                new_index.append(None)
                mappers.append(None)
                excluded.append(name)
                continue
            index = len(columns)
            new_index.append(index)
            column_out, mapper = self._ruled_column(rule, column, index, where)
            columns.append(column_out)
            mappers.append(mapper)
        if not ruled:
            return None
        primary_key = tuple(i for i in (new_index[k] for k in table.primary_key) if i is not None)
        landed = replace(table, columns=tuple(columns), primary_key=primary_key,
                         excluded=(*table.excluded, *excluded))
        return _Plan(landed, tuple(new_index), tuple(mappers),
                     tuple(_chunk_tag(c) if m is not None else None
                           for c, m in zip(table.columns, mappers, strict=True)))

    def _typed(self, table: TableMapEvent, column: Column, index: int
               ) -> tuple[Column, Mapper] | None:
        """A column ``[types]`` lands otherwise than by default, or None."""
        types, code = self.types, column.type_code
        where = f"{table.schema}.{table.table}.{column.name or f'col_{column.index + 1}'}"
        if (code == FieldType.TINY and column.display_width == 1 and not column.unsigned
                and types.tinyint1_as_boolean):
            return (replace(column, index=index, transform=BOOLEAN),
                    lambda values: [None if v is None else v != 0 for v in values])
        if code == FieldType.LONGLONG and column.unsigned and types.bigint_unsigned == "int64":

            def checked(values: list[Any]) -> list[Any]:
                for v in values:
                    if v is not None and v > _INT64_MAX:
                        raise ValueOutOfRange(
                            f"{where}: {v} does not fit the int64 that [types] "
                            "bigint_unsigned = \"int64\" lands BIGINT UNSIGNED as",
                            fix="a lake whose BIGINT UNSIGNED values may pass 2^63-1 needs "
                                "bigint_unsigned = \"decimal\" (a new lake)")
                return values

            return (replace(column, index=index, flags=column.flags & ~ColumnFlag.UNSIGNED,
                            transform="type:int64"), checked)
        if (code == FieldType.NEWDECIMAL and (column.precision or 0) > 38
                and types.wide_decimal == "error"):
            raise TransformRefused(
                f"{where} is DECIMAL({column.precision},{column.scale or 0}), wider than the 38 "
                "digits Spark reads, and [types] wide_decimal = \"error\"",
                fix="narrow the column, exclude it with a column rule, or use a lake made with "
                    "wide_decimal = \"string\"")
        if code in _TEMPORAL and types.zero_date == "string":
            text = _temporal_text(column)
            return (_text_column(column, index, "type:string", 32),
                    lambda values: [None if v is None else text(v) for v in values])
        return None

    def _ruled_column(self, rule: ColumnRule, column: Column, index: int,
                      where: str) -> tuple[Column, Mapper]:
        if rule.action == "hash":
            form = text_form(column)
            if form is None:
                raise TransformRefused(
                    f"{where} ({_type_text(column)}) cannot be hashed: binlake cannot reproduce "
                    "its text form (CAST(col AS CHAR)) exactly, so no one could recompute the "
                    "hash",
                    fix=f"exclude or mask {where} instead, or hash a generated text column")
            key = self._key

            def hashed(values: list[Any]) -> list[Any]:
                return [None if v is None else hmac.new(key, form(v), hashlib.sha256).hexdigest()
                        for v in values]

            return _text_column(column, index, rule.label, _HASH_CHARS), hashed
        if rule.action == "mask":
            replacement = rule.mask
            if replacement is None:
                return (replace(column, index=index, transform=rule.label),
                        lambda values: [None] * len(values))
            return (_text_column(column, index, rule.label, max(len(replacement), 1)),
                    lambda values: [None if v is None else replacement for v in values])
        # truncate
        length = rule.length or 0
        if column.type_code not in _TEXT and column.type_code not in _BLOBS:
            raise TransformRefused(
                f"{where} ({_type_text(column)}) cannot be truncated: only text and binary "
                "string columns can",
                fix=f"mask or hash {where} instead")

        def truncated(values: list[Any]) -> list[Any]:
            return [v[:length] if isinstance(v, str | bytes) else
                    bytes(v)[:length] if isinstance(v, bytearray | memoryview) else v
                    for v in values]

        return replace(column, index=index, transform=rule.label), truncated

    # --- rows -----------------------------------------------------------------------------

    def rows(self, event: RowsEvent) -> RowsEvent:
        """``event`` as it lands (itself when no rule touches its table)."""
        plan = self._plan(event.table)
        if plan is None:
            return event
        arrow = event.arrow
        source_chunks = arrow if arrow is not None else (None, None)
        before_columns, before = self._image(plan, event.before_columns, event.before,
                                             source_chunks[0], event.row_count)
        after_columns, after = self._image(plan, event.after_columns, event.after,
                                           source_chunks[1], event.row_count)
        if arrow is not None:
            arrow = (self._chunks(plan, event.before_columns, arrow[0]),
                     self._chunks(plan, event.after_columns, arrow[1]))
        return RowsEvent(header=event.header, kind=event.kind, table=plan.table,
                         flags=event.flags, row_count=event.row_count,
                         before_columns=before_columns, after_columns=after_columns,
                         before=before, after=after, extra=event.extra, arrow=arrow)

    @staticmethod
    def _chunks(plan: _Plan, present: tuple[int, ...], chunks: Any) -> Any:
        """An image's native Arrow chunks as it lands: those of the columns no rule changes,
        renumbered; None for a ruled or retyped column, whose values (the ruled ones) must
        land from Python — its chunk holds the clear value."""
        if chunks is None:
            return None
        mappers, new_index = plan.mappers, plan.new_index
        return tuple(None if mappers[source] is not None else chunks[k]
                     for k, source in enumerate(present) if new_index[source] is not None)

    @staticmethod
    def _image(plan: _Plan, present: tuple[int, ...], values: Any, chunks: Any, rows: int
               ) -> tuple[tuple[int, ...], Any]:
        """An image's landed column indexes, and its values (a :class:`_RuledImage`)."""
        columns: list[int] = []
        sources: list[int] = []
        positions: list[int] = []
        for k, source in enumerate(present):
            index = plan.new_index[source]
            if index is None:
                continue
            columns.append(index)
            sources.append(source)
            positions.append(k)
        if values is None:
            return tuple(columns), None
        return tuple(columns), _RuledImage(plan, values, tuple(sources), tuple(positions),
                                           chunks, rows)
