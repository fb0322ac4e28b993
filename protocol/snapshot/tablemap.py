"""A table's TABLE_MAP as the server would write it, built from ``information_schema``.

A snapshot reads rows with ``SELECT``, but its rows must land under the same schema version,
with the same Arrow types, as the rows the binlog brings for the same table. The sink keys both
on the TABLE_MAP (``sinks.parquet.schema.signature``), so the snapshot needs the TABLE_MAP the
server would send for the table *now* — and the one the daemon would actually use, which depends
on ``binlog_row_metadata``:

* ``FULL``: the binlog names the columns, gives signedness, collation ids, ENUM/SET labels,
  geometry types and the primary key itself. :func:`snapshot_table_map` builds exactly that.
* ``MINIMAL`` / ``NO_LOG`` (or no such variable): the binlog gives less (``MINIMAL``:
  signedness, collations, geometry types; ``NO_LOG``: types, sizes and nullability only) and
  the daemon completes it from ``information_schema`` (``protocol.binlog.enrich``). Here the
  bare TABLE_MAP is built and completed by the very same :func:`enrich_table_map`, from the same
  :class:`TableDescription` the daemon's schema source reads — so both sides agree also where
  enrichment differs from ``FULL`` (UNIQUE/GENERATED flags, a charset's default collation id).

What the server writes for each ``DATA_TYPE`` (type byte and metadata word), as checked against
real TABLE_MAPs of MariaDB 10.11, 11.8 and MySQL 9.7 by ``tests/integration/
test_snapshot_values.py``: BLOB/TEXT of every size travel as BLOB with the length-prefix width as
metadata; CHAR/BINARY/ENUM/SET as STRING with the real type and the byte length (or the ENUM/SET
storage width) folded into the metadata; temporal types as their ``*2`` forms with the
fractional digits; MariaDB's JSON is a LONGTEXT, its UUID/INET4/INET6 binary CHARs.

This module is pure: the description and the collation ids are plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..binlog.coltypes import CHARACTER_TYPES, ENUM_SET_TYPES, NUMERIC_TYPES, FieldType
from ..binlog.enrich import ColumnDescription, TableDescription, enrich_table_map
from ..binlog.model import Column, ColumnFlag, EventHeader, TableMapEvent
from ..binlog.tablemap import OptionalMetadata
from ..errors import ProtocolError

__all__ = ["snapshot_table_map", "binlog_column", "DescribeError", "TableNotFound",
           "UnsupportedColumn", "GEOMETRY_CODES"]

GEOMETRY_CODES = {
    "geometry": 0, "point": 1, "linestring": 2, "polygon": 3, "multipoint": 4,
    "multilinestring": 5, "multipolygon": 6, "geometrycollection": 7, "geomcollection": 7,
}
_INTEGERS = {"tinyint": FieldType.TINY, "bool": FieldType.TINY, "boolean": FieldType.TINY,
             "smallint": FieldType.SHORT, "mediumint": FieldType.INT24, "int": FieldType.LONG,
             "integer": FieldType.LONG, "bigint": FieldType.LONGLONG}
_BLOB_WIDTH = {"tinyblob": 1, "tinytext": 1, "blob": 2, "text": 2, "mediumblob": 3,
               "mediumtext": 3, "longblob": 4, "longtext": 4}
_TEMPORAL = {"time": FieldType.TIME2, "datetime": FieldType.DATETIME2,
             "timestamp": FieldType.TIMESTAMP2}
# Binary CHARs of a fixed length: MariaDB's UUID, INET4 and INET6.
_FIXED_BINARY = {"uuid": 16, "inet4": 4, "inet6": 16}
_BINARY_DATA_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob",
                                "longblob", "uuid", "inet4", "inet6", "vector"})
_BINARY = 63
_HEADER = EventHeader(timestamp=0, type_code=19, server_id=0, event_size=0, log_pos=0, flags=0)


class DescribeError(ProtocolError):
    """A table cannot be described for a snapshot."""


class TableNotFound(DescribeError):
    """``information_schema`` knows no such table (or the user may not see it)."""


class UnsupportedColumn(DescribeError):
    """A column whose ``information_schema`` description maps to no binlog type binlake knows."""


def _string_meta(real_type: int, length: int) -> int:
    """STRING metadata: the real type with bits 8-9 of the length folded in (XOR), then the
    low byte of the length — the server's ``Field_string`` layout."""
    return ((real_type ^ ((length & 0x300) >> 4)) << 8) | (length & 0xFF)


def _enum_width(labels: int) -> int:
    return 1 if labels < 256 else 2


def _set_width(labels: int) -> int:
    width = (labels + 7) // 8
    return 8 if width > 4 else width


def binlog_column(index: int, d: ColumnDescription, *, mysql: bool) -> Column:
    """The bare column (type byte, metadata, sizes, nullability) the server's TABLE_MAP has for
    ``d`` without any optional metadata — what ``binlog_row_metadata=NO_LOG`` sends.

    Raises:
        UnsupportedColumn: a ``DATA_TYPE`` binlake does not know how the server logs.
    """
    t = d.data_type
    flags = ColumnFlag.NULLABLE if d.nullable else ColumnFlag.NONE
    flags |= ColumnFlag.VISIBLE
    precision = scale = length = None
    if t in _INTEGERS:
        code, meta = _INTEGERS[t], 0
    elif t == "float":
        code, meta, length = FieldType.FLOAT, 4, 4
    elif t in ("double", "double precision", "real"):
        code, meta, length = FieldType.DOUBLE, 8, 8
    elif t in ("decimal", "numeric", "fixed"):
        precision, scale = d.precision or 10, d.scale or 0
        code, meta = FieldType.NEWDECIMAL, precision << 8 | scale
    elif t == "year":
        code, meta = FieldType.YEAR, 0
    elif t == "date":
        code, meta = FieldType.DATE, 0
    elif t in _TEMPORAL:
        scale = d.fsp or 0
        code, meta = _TEMPORAL[t], scale
    elif t == "bit":
        length = d.precision or 1
        code, meta = FieldType.BIT, (length // 8) << 8 | (length % 8)
    elif t in ("char", "binary") or t in _FIXED_BINARY:
        length = _FIXED_BINARY.get(t) or d.octet_length or 0
        code, meta = FieldType.STRING, _string_meta(FieldType.STRING, length)
    elif t in ("varchar", "varbinary") or (t == "vector" and not mysql):
        length = d.octet_length or 0
        code, meta = FieldType.VARCHAR, length
    elif t in _BLOB_WIDTH or (t == "json" and not mysql):
        length = meta = _BLOB_WIDTH.get(t, 4)
        code = FieldType.BLOB
    elif t == "json":
        code, meta, length = FieldType.JSON, 4, 4
    elif t == "vector":  # MySQL 9: dimensions in VECTOR_DIMENSIONALITY (FULL only)
        code, meta, length = FieldType.VECTOR, 4, 4
    elif t == "enum":
        length = _enum_width(len(d.enum_values or ()))
        code, meta = FieldType.ENUM, FieldType.ENUM << 8 | length
    elif t == "set":
        length = _set_width(len(d.set_values or ()))
        code, meta = FieldType.SET, FieldType.SET << 8 | length
    elif t in GEOMETRY_CODES:
        code, meta, length = FieldType.GEOMETRY, 4, 4
    else:
        raise UnsupportedColumn(f"column {d.name!r} has type {t!r}, which binlake does not "
                                "know how the server writes into the binlog")
    return Column(index=index, type_code=int(code), meta=meta, name=None, flags=flags,
                  precision=precision, scale=scale, length=length,
                  display_width=d.display_width if t in _INTEGERS else None)


def _collation(d: ColumnDescription, exact: int | None) -> int | None:
    if d.data_type in _BINARY_DATA_TYPES or d.charset == "binary":
        return _BINARY
    return exact if exact is not None else d.collation


def _described(bare: Column, d: ColumnDescription, *, mysql: bool, names: bool,
               collation: int | None, primary_key: frozenset[int]) -> Column:
    """``bare`` with what the TABLE_MAP's optional metadata adds: MINIMAL (signedness,
    collations, geometry types, MySQL's vector dimensions) and, with ``names``, FULL (names,
    labels, key, visibility)."""
    t = bare.type_code
    flags = bare.flags
    if t in NUMERIC_TYPES and d.unsigned:
        flags |= ColumnFlag.UNSIGNED
    charset = None
    if t in CHARACTER_TYPES or t in ENUM_SET_TYPES:
        charset = collation
        if charset == _BINARY and t in CHARACTER_TYPES:
            flags |= ColumnFlag.BINARY
    geometry = GEOMETRY_CODES[d.data_type] if t == FieldType.GEOMETRY else None
    precision = bare.precision
    if t == FieldType.VECTOR and d.octet_length:  # MySQL sends the dimensions from MINIMAL on
        precision = d.octet_length // 4
    if not names:
        return replace(bare, flags=flags, charset=charset, geometry_type=geometry,
                       precision=precision)
    if bare.index in primary_key:
        flags |= ColumnFlag.PRIMARY_KEY
    if mysql and d.invisible:  # only MySQL sends COLUMN_VISIBILITY
        flags &= ~ColumnFlag.VISIBLE
    return replace(bare, name=d.name, flags=flags, charset=charset, geometry_type=geometry,
                   enum_values=d.enum_values if t == FieldType.ENUM else None,
                   set_values=d.set_values if t == FieldType.SET else None, precision=precision)


def snapshot_table_map(description: TableDescription, *, mysql: bool, row_metadata: str,
                       collations: Mapping[str, int] | None = None) -> TableMapEvent:
    """The TABLE_MAP the daemon would use for rows of ``description``'s table.

    Args:
        description: the table as the daemon's schema source reads it
            (``replica.core.schema_source.describe_rows``).
        mysql: the server is MySQL (JSON and VECTOR have their own type bytes there).
        row_metadata: the server's ``@@GLOBAL.binlog_row_metadata`` (``FULL``, ``MINIMAL``,
            ``NO_LOG``; anything else counts as no optional metadata).
        collations: column name → the exact collation id, where ``description`` only has the
            character set's default (MariaDB 11's UCA-14 collations); used for ``FULL`` and
            ``MINIMAL``, whose TABLE_MAPs carry the column's own id.

    Raises:
        UnsupportedColumn: see :func:`binlog_column`.
    """
    exact = collations or {}
    index_of = {d.name: i for i, d in enumerate(description.columns)}
    primary_key = tuple(index_of[n] for n in description.primary_key)
    bare = [binlog_column(i, d, mysql=mysql) for i, d in enumerate(description.columns)]
    mode = row_metadata.upper()
    if mode == "FULL":
        pk = frozenset(primary_key)
        columns = tuple(_described(c, d, mysql=mysql, names=True,
                                   collation=_collation(d, exact.get(d.name)), primary_key=pk)
                        for c, d in zip(bare, description.columns, strict=True))
        return TableMapEvent(header=_HEADER, table_id=0, flags=0, schema=description.schema,
                             table=description.table, columns=columns, primary_key=primary_key,
                             has_full_metadata=True,
                             optional_metadata=frozenset({OptionalMetadata.COLUMN_NAME}))
    seen: frozenset[int] = frozenset()
    if mode == "MINIMAL":
        bare = [_described(c, d, mysql=mysql, names=False,
                           collation=_collation(d, exact.get(d.name)), primary_key=frozenset())
                for c, d in zip(bare, description.columns, strict=True)]
        seen = frozenset({OptionalMetadata.SIGNEDNESS})
    table = TableMapEvent(header=_HEADER, table_id=0, flags=0, schema=description.schema,
                          table=description.table, columns=tuple(bare), optional_metadata=seen)
    result = enrich_table_map(table, description)
    if result.reason is not None:  # our own bare map contradicts the description: a bug
        raise UnsupportedColumn(f"{description.schema}.{description.table}: {result.reason}")
    return result.table
