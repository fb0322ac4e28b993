"""Complete a TABLE_MAP from a schema source, but only if the description fits the TABLE_MAP.

Without ``binlog_row_metadata=FULL`` a TABLE_MAP carries no column names, ENUM/SET labels or
primary key, and with MariaDB's default (``NO_LOG``) no signedness or character sets either.
The layer above can describe the table another way — ``information_schema``, *as of now* — and
:func:`enrich_table_map` merges that :class:`TableDescription` into the TABLE_MAP.

The danger is applying today's schema to yesterday's events: while a replica catches up, the
table may have been ALTERed since the event was written. So a description is applied only when
it is consistent with everything the TABLE_MAP itself says:

* the same number of columns;
* per column, a compatible type: the binlog type code against ``information_schema``'s
  ``DATA_TYPE`` (MYSQL_TYPE_STRING is CHAR or BINARY — ENUM/SET are already resolved from the
  metadata; VARCHAR is varchar or varbinary; a BLOB's length-prefix width picks
  tiny/-/medium/long text or blob), and the same sizes where both sides know them (DECIMAL
  precision and scale, fractional-second digits, BIT width, CHAR/VARCHAR byte length, ENUM/SET
  storage width against the number of labels);
* the same nullability (the TABLE_MAP always has the null bits);
* whatever optional metadata the TABLE_MAP did carry (``MINIMAL``: signedness, character sets,
  geometry types; ``FULL``: labels too) agrees with the description.

Anything else returns the TABLE_MAP unchanged together with the reason, so the caller can say
why the columns stay unnamed. What the binlog says always wins over the description; the
description only fills in what the binlog left out. An enriched TABLE_MAP has
``has_full_metadata=True``, ``described_by`` naming the source, and new columns, so the
stream's decoder cache builds it a row decoder of its own (the decoder resolves names,
signedness and charsets once).

This module is pure: the description is plain data, however the caller obtained it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .coltypes import (
    CHARACTER_TYPES,
    COLLATION_CHARSET,
    ENUM_SET_TYPES,
    INTEGER_TYPES,
    NUMERIC_TYPES,
    FieldType,
    charset_name,
)
from .model import Column, ColumnFlag, TableMapEvent
from .tablemap import OptionalMetadata

__all__ = [
    "ColumnDescription",
    "TableDescription",
    "Enrichment",
    "enrich_table_map",
    "with_display_widths",
    "inconsistency",
    "collation_for_charset",
]


@dataclass(frozen=True, slots=True)
class ColumnDescription:
    """One column as a schema source describes it (``information_schema.COLUMNS`` terms).

    ``data_type`` is ``DATA_TYPE`` in lower case (``int``, ``varchar``, ``enum``, …).
    ``collation`` is the collation id of a character column and ``charset`` its character set
    name; both ``None`` for columns without a character set. The size fields are ``None`` when
    unknown and are then not compared.
    """

    name: str
    data_type: str
    nullable: bool
    unsigned: bool = False
    charset: str | None = None
    collation: int | None = None
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    precision: int | None = None  # NUMERIC_PRECISION: DECIMAL digits, BIT width
    scale: int | None = None  # NUMERIC_SCALE
    fsp: int | None = None  # DATETIME_PRECISION
    octet_length: int | None = None  # CHARACTER_OCTET_LENGTH
    unique: bool = False  # alone a UNIQUE key (COLUMN_KEY = 'UNI')
    generated: bool = False
    invisible: bool = False
    #: An integer's declared display width from COLUMN_TYPE (``tinyint(1)`` → 1); None when
    #: COLUMN_TYPE gives none (MySQL 8.0.19 and later print one only for ``tinyint(1)``).
    display_width: int | None = None


@dataclass(frozen=True, slots=True)
class TableDescription:
    """A table as a schema source describes it: columns in ordinal order, PK column names."""

    schema: str
    table: str
    columns: tuple[ColumnDescription, ...]
    primary_key: tuple[str, ...] = ()  # in key order
    source: str = "information_schema"


@dataclass(frozen=True, slots=True)
class Enrichment:
    """The result of :func:`enrich_table_map`: the TABLE_MAP to use, and why it was not enriched.

    ``reason`` is ``None`` when ``table`` is the enriched TABLE_MAP.
    """

    table: TableMapEvent
    reason: str | None = None

    @property
    def applied(self) -> bool:
        return self.reason is None


# --- type compatibility ------------------------------------------------------------------------

_BLOB_TYPES = frozenset({FieldType.BLOB, FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB,
                         FieldType.LONG_BLOB})
_GEOMETRY_CODES = {
    "geometry": 0, "point": 1, "linestring": 2, "polygon": 3, "multipoint": 4,
    "multilinestring": 5, "multipolygon": 6, "geometrycollection": 7, "geomcollection": 7,
}
# DATA_TYPEs of a BLOB column by the width of its length prefix (the TABLE_MAP metadata).
# MariaDB's JSON is a LONGTEXT.
_BLOB_BY_WIDTH = {
    1: frozenset({"tinyblob", "tinytext"}),
    2: frozenset({"blob", "text"}),
    3: frozenset({"mediumblob", "mediumtext"}),
    4: frozenset({"longblob", "longtext", "json"}),
}
_COMPATIBLE: dict[int, frozenset[str]] = {
    FieldType.TINY: frozenset({"tinyint", "bool", "boolean"}),
    FieldType.SHORT: frozenset({"smallint"}),
    FieldType.INT24: frozenset({"mediumint"}),
    FieldType.LONG: frozenset({"int", "integer"}),
    FieldType.LONGLONG: frozenset({"bigint"}),
    FieldType.FLOAT: frozenset({"float"}),
    FieldType.DOUBLE: frozenset({"double", "double precision", "real"}),
    FieldType.NEWDECIMAL: frozenset({"decimal", "numeric", "fixed"}),
    FieldType.DECIMAL: frozenset({"decimal", "numeric"}),
    FieldType.YEAR: frozenset({"year"}),
    FieldType.DATE: frozenset({"date"}),
    FieldType.NEWDATE: frozenset({"date"}),
    FieldType.TIME: frozenset({"time"}),
    FieldType.TIME2: frozenset({"time"}),
    FieldType.DATETIME: frozenset({"datetime"}),
    FieldType.DATETIME2: frozenset({"datetime"}),
    FieldType.TIMESTAMP: frozenset({"timestamp"}),
    FieldType.TIMESTAMP2: frozenset({"timestamp"}),
    FieldType.BIT: frozenset({"bit"}),
    # MariaDB 11.7+ VECTOR travels as a binary VARCHAR.
    FieldType.VARCHAR: frozenset({"varchar", "varbinary", "vector"}),
    FieldType.VAR_STRING: frozenset({"varchar", "varbinary"}),
    # MariaDB UUID, INET4 and INET6 travel as BINARY(16)/BINARY(4).
    FieldType.STRING: frozenset({"char", "binary", "uuid", "inet4", "inet6"}),
    FieldType.ENUM: frozenset({"enum"}),
    FieldType.SET: frozenset({"set"}),
    FieldType.JSON: frozenset({"json"}),
    FieldType.GEOMETRY: frozenset(_GEOMETRY_CODES),
    FieldType.VECTOR: frozenset({"vector"}),
}
# DATA_TYPEs whose values are bytes: their binlog charset, when sent, is binary (63).
_BINARY_DATA_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob",
                                "longblob", "uuid", "inet4", "inet6", "vector"})
_BINARY_COLLATION = 63


def _type_name(column: Column) -> str:
    try:
        name = FieldType(column.type_code).name
    except ValueError:
        name = f"type {column.type_code}"
    if column.type_code == FieldType.NEWDECIMAL:
        return f"DECIMAL({column.precision},{column.scale})"
    if column.type_code in _BLOB_TYPES:
        return f"BLOB/TEXT with a {column.meta}-byte length"
    if column.length is not None and column.type_code in (
            FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING, FieldType.BIT):
        unit = "bits" if column.type_code == FieldType.BIT else "bytes"
        return f"{name}({column.length} {unit})"
    if column.scale is not None:
        return f"{name}(fsp {column.scale})"
    return name


def _described_type(d: ColumnDescription) -> str:
    if d.precision is not None and d.data_type in ("decimal", "numeric"):
        return f"{d.data_type}({d.precision},{d.scale})"
    if d.octet_length is not None and d.data_type in ("char", "varchar", "binary", "varbinary"):
        return f"{d.data_type} of {d.octet_length} bytes"
    if d.precision is not None and d.data_type == "bit":
        return f"bit({d.precision})"
    if d.fsp is not None and d.data_type in ("time", "datetime", "timestamp"):
        return f"{d.data_type}({d.fsp})"
    return d.data_type


def _enum_width(labels: int) -> int:
    return 1 if labels < 256 else 2


def _set_width(labels: int) -> int:
    width = (labels + 7) // 8
    return 8 if width > 4 else width


def _type_mismatch(column: Column, d: ColumnDescription) -> bool:
    """True when the binlog's type and size for the column cannot be the described one."""
    t = column.type_code
    if t in _BLOB_TYPES:
        return d.data_type not in _BLOB_BY_WIDTH.get(column.meta, frozenset())
    if d.data_type not in _COMPATIBLE.get(t, frozenset()):
        return True
    if t == FieldType.NEWDECIMAL:
        return ((d.precision is not None and d.precision != column.precision)
                or (d.scale is not None and d.scale != column.scale))
    if t in (FieldType.TIME2, FieldType.DATETIME2, FieldType.TIMESTAMP2):
        return d.fsp is not None and d.fsp != column.scale
    if t == FieldType.BIT:
        return d.precision is not None and d.precision != column.length
    if t in (FieldType.VARCHAR, FieldType.VAR_STRING) or (
            t == FieldType.STRING and d.data_type in ("char", "binary")):
        return d.octet_length is not None and d.octet_length != column.length
    if t == FieldType.ENUM and d.enum_values is not None:
        return column.length is not None and column.length != _enum_width(len(d.enum_values))
    if t == FieldType.SET and d.set_values is not None:
        return column.length is not None and column.length != _set_width(len(d.set_values))
    return False


def _same_charset(binlog_collation: int, d: ColumnDescription) -> bool:
    binlog_binary = binlog_collation == _BINARY_COLLATION
    described_binary = d.data_type in _BINARY_DATA_TYPES or d.charset == "binary"
    if binlog_binary or described_binary:
        return binlog_binary == described_binary
    described = d.charset or (charset_name(d.collation) if d.collation is not None else None)
    binlog = charset_name(binlog_collation)
    return described is None or binlog is None or described == binlog


def _column_inconsistency(column: Column, d: ColumnDescription,
                          has_signedness: bool) -> str | None:
    where = f"column {column.index + 1} ({d.name!r})"
    if _type_mismatch(column, d):
        return f"{where}: the binlog has {_type_name(column)}, the schema {_described_type(d)}"
    if column.nullable != d.nullable:
        said = "NULL" if column.nullable else "NOT NULL"
        return f"{where}: the binlog says {said}, the schema the opposite"
    if has_signedness and column.type_code in NUMERIC_TYPES and column.unsigned != d.unsigned:
        said = "UNSIGNED" if column.unsigned else "signed"
        return f"{where}: the binlog says {said}, the schema the opposite"
    if column.charset is not None and (column.type_code in CHARACTER_TYPES
                                       or column.type_code in ENUM_SET_TYPES):
        if not _same_charset(column.charset, d):
            return (f"{where}: the binlog's collation {column.charset} is not the schema's "
                    f"{d.charset or d.collation or 'binary'}")
    if column.enum_values is not None and d.enum_values is not None \
            and column.enum_values != d.enum_values:
        return f"{where}: the binlog's ENUM labels differ from the schema's"
    if column.set_values is not None and d.set_values is not None \
            and column.set_values != d.set_values:
        return f"{where}: the binlog's SET labels differ from the schema's"
    if column.geometry_type is not None and column.type_code == FieldType.GEOMETRY:
        if _GEOMETRY_CODES[d.data_type] != column.geometry_type:
            return f"{where}: the binlog's geometry type {column.geometry_type} is not {d.data_type}"
    return None


def inconsistency(table_map: TableMapEvent, description: TableDescription) -> str | None:
    """Why ``description`` cannot describe the rows of ``table_map``; ``None`` if it can."""
    if (table_map.schema, table_map.table) != (description.schema, description.table):
        return (f"the description is of {description.schema}.{description.table}, not "
                f"{table_map.schema}.{table_map.table}")
    if len(table_map.columns) != len(description.columns):
        return (f"the binlog has {len(table_map.columns)} columns, the schema "
                f"{len(description.columns)}")
    names = [d.name for d in description.columns]
    if len(set(names)) != len(names):
        return "the schema names a column twice"
    if not set(description.primary_key) <= set(names):
        return "the schema's primary key names a column it does not have"
    has_signedness = OptionalMetadata.SIGNEDNESS in table_map.optional_metadata
    for column, d in zip(table_map.columns, description.columns, strict=True):
        reason = _column_inconsistency(column, d, has_signedness)
        if reason is not None:
            return reason
    return None


# --- enrichment --------------------------------------------------------------------------------


def _enriched_column(column: Column, d: ColumnDescription, primary_key: frozenset[int],
                     has_signedness: bool) -> Column:
    flags = column.flags
    if column.index in primary_key:
        flags |= ColumnFlag.PRIMARY_KEY
    if d.unique:
        flags |= ColumnFlag.UNIQUE
    if d.generated:
        flags |= ColumnFlag.GENERATED
    if d.invisible:
        flags &= ~ColumnFlag.VISIBLE
    if not has_signedness and column.type_code in NUMERIC_TYPES and d.unsigned:
        flags |= ColumnFlag.UNSIGNED
    t = column.type_code
    charset = column.charset
    if charset is None and (t in CHARACTER_TYPES or t in ENUM_SET_TYPES):
        if d.data_type in _BINARY_DATA_TYPES or d.charset == "binary":
            charset = _BINARY_COLLATION
        elif d.collation is not None:
            charset = d.collation
        elif d.charset is not None:
            charset = collation_for_charset(d.charset)
    if charset == _BINARY_COLLATION and t in CHARACTER_TYPES:
        flags |= ColumnFlag.BINARY
    geometry_type = column.geometry_type
    if geometry_type is None and t == FieldType.GEOMETRY:
        geometry_type = _GEOMETRY_CODES[d.data_type]
    return replace(
        column, name=column.name if column.name is not None else d.name, flags=flags,
        charset=charset, geometry_type=geometry_type,
        display_width=d.display_width if t in INTEGER_TYPES else None,
        enum_values=column.enum_values if column.enum_values is not None else (
            d.enum_values if t == FieldType.ENUM else None),
        set_values=column.set_values if column.set_values is not None else (
            d.set_values if t == FieldType.SET else None),
    )


def enrich_table_map(table_map: TableMapEvent, description: TableDescription) -> Enrichment:
    """``table_map`` completed from ``description``, or unchanged with the reason.

    A TABLE_MAP that already has column names (``binlog_row_metadata=FULL``) is returned
    unchanged, with a reason saying so: the binlog's own description is the better one.
    """
    if table_map.has_full_metadata:
        return Enrichment(table_map, "the TABLE_MAP already names its columns")
    reason = inconsistency(table_map, description)
    if reason is not None:
        return Enrichment(table_map, reason)
    index_of = {d.name: i for i, d in enumerate(description.columns)}
    primary_key = table_map.primary_key or tuple(index_of[n] for n in description.primary_key)
    has_signedness = OptionalMetadata.SIGNEDNESS in table_map.optional_metadata
    pk_set = frozenset(primary_key)
    columns = tuple(_enriched_column(c, d, pk_set, has_signedness)
                    for c, d in zip(table_map.columns, description.columns, strict=True))
    enriched = replace(table_map, columns=columns, primary_key=primary_key,
                       has_full_metadata=True, described_by=description.source)
    return Enrichment(enriched)


def with_display_widths(table_map: TableMapEvent, description: TableDescription) -> Enrichment:
    """A named TABLE_MAP (``binlog_row_metadata=FULL``) with its integer columns' declared
    display widths from ``description``, the one thing FULL metadata leaves out; unchanged, with
    the reason, unless the description has the same columns (names and count) and fits it.

    Only widths are taken: the binlog's own names, types and flags stay as they are.
    """
    if not any(c.type_code in INTEGER_TYPES for c in table_map.columns):
        return Enrichment(table_map)
    if [c.name for c in table_map.columns] != [d.name for d in description.columns]:
        return Enrichment(table_map, "its columns are not the ones information_schema lists now")
    reason = inconsistency(table_map, description)
    if reason is not None:
        return Enrichment(table_map, reason)
    columns = tuple(
        replace(c, display_width=d.display_width)
        if c.type_code in INTEGER_TYPES and c.display_width != d.display_width else c
        for c, d in zip(table_map.columns, description.columns, strict=True))
    return Enrichment(replace(table_map, columns=columns))


# --- collations ----------------------------------------------------------------------------------

# One collation id per character set (its lowest): enough to pick the codec when a schema source
# names a character set but not the collation's id (MariaDB 11's UCA-14 collations have none in
# information_schema.COLLATIONS).
_COLLATION_FOR_CHARSET: dict[str, int] = {}
for _collation_id in sorted(COLLATION_CHARSET):
    _COLLATION_FOR_CHARSET.setdefault(COLLATION_CHARSET[_collation_id], _collation_id)


def collation_for_charset(charset: str) -> int | None:
    """A collation id of ``charset`` (e.g. ``utf8mb4`` → 45), or ``None`` if it is unknown."""
    name = charset.lower()
    if name == "utf8":  # MySQL 5.7 and MariaDB before 10.6 call utf8mb3 so
        name = "utf8mb3"
    return _COLLATION_FOR_CHARSET.get(name)
