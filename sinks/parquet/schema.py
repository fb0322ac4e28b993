"""One table's schema versions: the Arrow schema of its change log and its ``_schema/v<N>.json``.

A *schema version* is a table's column list as the binlog's TABLE_MAP describes it (names, types,
flags, charsets). Whenever a TABLE_MAP no longer matches the current version — after an ALTER,
or a DROP + CREATE — the table gets version N+1: old files keep their schema in their own
``schema_version=N`` directory, new files get the new one, and no reader ever has to merge two
physical types inside one directory.

The landed row is the table's columns followed by the metadata columns below. Data columns keep
their source names; one that collides with a metadata or partition column name
(``schema_version``, ``commit_date``) gets ``_`` appended (the original is
in its field metadata). Without column names (``binlog_row_metadata`` other than FULL) the
columns are called ``col_1``, ``col_2``… in table order.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from protocol.binlog.model import Column, ColumnFlag, TableMapEvent

from . import types as T
from .identity_cache import IdentityCache

#: Metadata columns, in landed order. ``_commit_ts`` is only known at commit, so rows are
#: buffered without it (the "staging schema") and it is inserted when the transaction commits.
METADATA_FIELDS: tuple[pa.Field, ...] = (
    pa.field("_op", pa.string(), nullable=False),  # I, U or D
    pa.field("_seq", pa.int64(), nullable=False),  # transaction number: unique, increasing, with gaps
    pa.field("_row", pa.int64(), nullable=False),  # row number inside the transaction
    pa.field("_gtid", pa.string()),  # D-S-N (MariaDB) or uuid[:tag]:gno (MySQL)
    pa.field("_gtid_domain", pa.int64()),  # MariaDB domain id
    pa.field("_gtid_server_id", pa.int64()),  # MariaDB server id
    pa.field("_gtid_uuid", pa.string()),  # MySQL source uuid
    pa.field("_gtid_tag", pa.string()),  # MySQL 8.3+ GTID tag
    pa.field("_gtid_seq", pa.int64()),  # MariaDB seq_no or MySQL gno
    pa.field("_binlog_file", pa.string()),
    pa.field("_binlog_pos", pa.int64()),  # start of the rows event
    pa.field("_commit_ts", T.TIMESTAMP_UTC),
    pa.field("_missing", pa.list_(pa.string())),  # columns absent from a MINIMAL/NOBLOB image
    # MySQL PARTIAL_JSON without a before image: {"column": [operations]} as JSON text (the
    # column itself is in _missing); see protocol.binlog.values.JsonDiff.to_json_text
    pa.field("_json_diff", pa.string()),
)
#: Names a data column cannot have: the metadata columns and the partition columns.
METADATA_NAMES = frozenset(f.name for f in METADATA_FIELDS) | {"_before", "schema_version",
                                                               "commit_date"}
COMMIT_TS_FIELD = next(f for f in METADATA_FIELDS if f.name == "_commit_ts")
#: The metadata columns as every ``_schema/v<N>.json`` lists them (the same in each).
_METADATA_COLUMNS = tuple({"name": f.name, "spark_type": T.spark_type_name(f.type)}
                          for f in METADATA_FIELDS)

#: The encoded ``columns`` of ``_schema/v<N>.json`` per resolved column list, by its
#: identity: see ``TableVersion.to_json_bytes``.
_COLUMNS_TEXT = IdentityCache(4096)


def _compact(value: Any) -> str:
    """``value`` as ``commit.dumps(..., compact=True)`` encodes it (without the newline)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


_METADATA_COLUMNS_TEXT = '"metadata_columns":' + _compact(_METADATA_COLUMNS)


#: (bit, name) of every column flag, as plain ints: ``Flag.__and__`` builds a Flag object per
#: test, ~200 per table (a third of the schema cost of a new table over thousands of them).
_FLAG_NAMES = [(int(flag), flag.name or "") for flag in ColumnFlag if flag is not ColumnFlag.NONE]


def _flag_names(column: Column) -> list[str]:
    flags = int(column.flags)
    return [name for bit, name in _FLAG_NAMES if flags & bit]

# The VISIBLE bit says nothing about the data; leaving it out keeps versions stable.
_SIGNATURE_FLAGS = ~int(ColumnFlag.VISIBLE)  # an int: see _FLAG_NAMES


def landed_names(table: TableMapEvent) -> tuple[str, ...]:
    """The names the table's columns get in Parquet (see the module docstring)."""
    return _landed_names(table.columns)


def _landed_names(columns: tuple[Column, ...]) -> tuple[str, ...]:
    names: list[str] = []
    taken = set(METADATA_NAMES)
    for column in columns:
        name = column.name if column.name is not None else f"col_{column.index + 1}"
        while name in taken:
            name += "_"
        taken.add(name)
        names.append(name)
    return tuple(names)


def signature(table: TableMapEvent) -> tuple[Any, ...]:
    """What makes two TABLE_MAPs the same schema version."""
    return (
        table.has_full_metadata,
        tuple(table.primary_key),
        tuple(
            (c.name, c.type_code, int(c.flags) & _SIGNATURE_FLAGS, c.charset, c.precision,
             c.scale, c.length, c.enum_values, c.set_values, str(T.arrow_type_for(c)),
             c.transform)
            for c in table.columns
        ),
    )


def _field_metadata(column: Column, name: str) -> dict[bytes, bytes]:
    meta = {
        "mysql_type": str(column.type_code),
        "mysql_type_name": T.type_description(column),
        "flags": str(int(column.flags)),
        "flag_names": ",".join(_flag_names(column)),
    }
    if column.name is not None and column.name != name:
        meta["source_name"] = column.name
    if column.charset is not None:
        meta["charset"] = str(column.charset)
    if column.transform is not None:  # the column rule that applied (sinks.transform)
        meta["transform"] = column.transform
    for key in ("precision", "scale", "length", "geometry_type"):
        value = getattr(column, key)
        if value is not None:
            meta[key] = str(value)
    if column.enum_values is not None:
        meta["enum_values"] = json.dumps(list(column.enum_values), ensure_ascii=False)
    if column.set_values is not None:
        meta["set_values"] = json.dumps(list(column.set_values), ensure_ascii=False)
    return {k.encode(): v.encode() for k, v in meta.items()}


class _Resolved(NamedTuple):
    """What a column list (and its landed names) resolves to, shared by every table of it."""

    arrow_types: tuple[pa.DataType, ...]
    native_tags: tuple[str | None, ...]
    data_fields: tuple[pa.Field, ...]
    before_type: pa.StructType
    schema: pa.Schema  # as landed, without the table's own metadata
    staging_schema: pa.Schema  # the same minus _commit_ts
    commit_ts_index: int
    json_columns: tuple[dict[str, Any], ...]  # the columns of _schema/v<N>.json


@functools.lru_cache(maxsize=4096)
def _resolved_columns(columns: tuple[Column, ...], names: tuple[str, ...]) -> _Resolved:
    """A column list's Arrow types, native tags, fields, ``_before`` type, landed schemas and
    schema-file columns.

    Cached by the columns themselves: real schemas repeat a few table shapes over thousands of
    tables (a table per customer, per month...), and building the fields with their metadata
    was most of the cost of a table's first sight; what differs per table
    (the schema's metadata) is added to the shared schemas by ``with_metadata``."""
    arrow_types = tuple(T.arrow_type_for(c) for c in columns)
    native_tags = tuple(T.native_tag(c, t) for c, t in zip(columns, arrow_types, strict=True))
    data_fields = tuple(
        pa.field(name, arrow_type, nullable=True, metadata=_field_metadata(column, name))
        for column, name, arrow_type in zip(columns, names, arrow_types, strict=True)
    )
    before_type = pa.struct(list(data_fields))
    landed = pa.schema([*data_fields, *METADATA_FIELDS, pa.field("_before", before_type)])
    commit_ts_index = landed.get_field_index("_commit_ts")
    json_columns = tuple(
        _json_column(column, name, arrow_type)
        for column, name, arrow_type in zip(columns, names, arrow_types, strict=True)
    )
    return _Resolved(arrow_types, native_tags, data_fields, before_type, landed,
                     landed.remove(commit_ts_index), commit_ts_index, json_columns)


#: Landed names and resolution per column list, by the tuple's identity: see
#: :func:`_names_and_resolved`.
_BY_COLUMNS = IdentityCache(4096)


def _names_and_resolved(columns: tuple[Column, ...]) -> tuple[tuple[str, ...], _Resolved]:
    """A column list's landed names and :func:`_resolved_columns`, by the identity of the tuple.

    The decoder hands every TABLE_MAP of one definition the same columns tuple (tables of one
    shape included: ``tablemap.TableMapCache``), so a new table of a known shape costs a
    lookup, not the names loop and the hash of every column that the cache's key needs."""

    def resolve(columns: tuple[Column, ...]) -> tuple[tuple[str, ...], _Resolved]:
        names = _landed_names(columns)
        return names, _resolved_columns(columns, names)

    found: tuple[tuple[str, ...], _Resolved] = _BY_COLUMNS.get(columns, resolve)
    return found


def _json_column(column: Column, name: str, arrow_type: pa.DataType) -> dict[str, Any]:
    """One column as ``_schema/v<N>.json`` describes it (``transform``: only for a column a
    rule changed, ``sinks.transform``)."""
    described = {
        "name": name,
        "source_name": column.name,
        "index": column.index,
        "mysql_type": column.type_code,
        "mysql_type_name": T.type_description(column),
        "meta": column.meta,
        "flags": int(column.flags),
        "flag_names": _flag_names(column),
        "charset": column.charset,
        "precision": column.precision,
        "scale": column.scale,
        "length": column.length,
        "enum_values": list(column.enum_values) if column.enum_values is not None else None,
        "set_values": list(column.set_values) if column.set_values is not None else None,
        "geometry_type": column.geometry_type,
        "arrow_type": str(arrow_type),
        "spark_type": T.spark_type_name(arrow_type),
    }
    if column.transform is not None:
        described["transform"] = column.transform
    return described


@dataclass(frozen=True, slots=True)
class VersionOrigin:
    """What created a schema version: the DDL (if one was seen) and the first transaction."""

    seq: int
    gtid: str | None = None
    commit_time_us: int | None = None
    ddl: str | None = None
    ddl_type: int | None = None


@dataclass(slots=True, eq=False)
class TableVersion:
    """One schema version of one table, with everything resolved once for the hot path."""

    database: str
    table: str
    version: int
    columns: tuple[Column, ...]
    names: tuple[str, ...]
    primary_key: tuple[int, ...]
    has_full_metadata: bool
    origin: VersionOrigin
    # What the column list resolves to (made once per list, shared: ``_resolved_as``), and
    # the parts of it the hot path reads as fields.
    _resolved: _Resolved
    arrow_types: tuple[pa.DataType, ...]
    data_fields: tuple[pa.Field, ...]
    before_type: pa.StructType
    schema: pa.Schema  # as landed
    commit_ts_index: int
    #: Per column, the native chunks' tag it lands from as they are (``types.native_tag``).
    native_tags: tuple[str | None, ...]
    #: Where column names, signedness and labels came from: "binlog" (binlog_row_metadata=FULL),
    #: "information_schema" (the daemon's schema source, checked against the TABLE_MAP) or
    #: "none" (columns are col_1…).
    described_by: str = "binlog"
    _staging_schema: pa.Schema | None = None  # see ``staging_schema``
    _converters: tuple[T.Converter, ...] | None = None  # see ``converters``
    _counter: Any = None  # counts zero dates landed as NULL (the sink's)
    # Cache: tuple of present column indexes → position of each table column in the image.
    image_slots: dict[tuple[int, ...], tuple[int | None, ...]] = field(default_factory=dict)
    signature: tuple[Any, ...] = ()
    #: Source columns a rule excluded (``sinks.transform``): in the schema file, never landed.
    excluded: tuple[str, ...] = ()

    @classmethod
    def from_table_map(cls, table: TableMapEvent, version: int, origin: VersionOrigin,
                       counter: Any, known_signature: tuple[Any, ...] | None = None
                       ) -> TableVersion:
        """The version ``table`` describes; ``known_signature``: its :func:`signature`, when the
        caller has it already."""
        names, resolved = _names_and_resolved(table.columns)
        return cls._resolved_as(
            resolved, counter, database=table.schema, table=table.table, version=version,
            columns=table.columns, names=names, primary_key=tuple(table.primary_key),
            has_full_metadata=table.has_full_metadata, origin=origin,
            described_by=table.described_by or ("binlog" if table.has_full_metadata else "none"),
            signature=known_signature or signature(table), excluded=table.excluded,
        )

    @classmethod
    def _resolved_as(cls, resolved: _Resolved, counter: Any, **fields: Any) -> TableVersion:
        """A version with ``fields`` and what its column list resolves to, made in one step
        (thousands of new tables: no placeholder schemas built only to be replaced)."""
        meta = {
            b"binlake.database": fields["database"].encode(),
            b"binlake.table": fields["table"].encode(),
            b"binlake.schema_version": str(fields["version"]).encode(),
        }
        if fields.get("excluded"):
            meta[b"binlake.excluded_columns"] = json.dumps(list(fields["excluded"])).encode()
        return cls(**fields, arrow_types=resolved.arrow_types, data_fields=resolved.data_fields,
                   before_type=resolved.before_type, schema=resolved.schema.with_metadata(meta),
                   commit_ts_index=resolved.commit_ts_index, _counter=counter,
                   _resolved=resolved, native_tags=resolved.native_tags)

    @property
    def fields_schema(self) -> pa.Schema:
        """:attr:`schema` without the table's metadata: one object shared by every version of
        the same column list (resolved once), so a key, by identity, for what depends on the
        fields only (the small-file writer's template, ``small_file.constants``)."""
        return self._resolved.schema

    @property
    def staging_schema(self) -> pa.Schema:
        """:attr:`schema` minus ``_commit_ts``, for rows of a transaction not committed yet;
        made on first use (most tables' rows are converted once committed)."""
        staging = self._staging_schema
        if staging is None:
            staging = self._staging_schema = self._resolved.staging_schema.with_metadata(
                self.schema.metadata)
        return staging

    @property
    def converters(self) -> tuple[T.Converter, ...]:
        """Per column, its Python values → Arrow (``types.converter_for``); built on first use:
        a table whose columns all land from the native decoder's chunks never needs them."""
        converters = self._converters
        if converters is None:
            qualified = f"{self.database}.{self.table}"
            converters = self._converters = tuple(
                T.converter_for(column, arrow_type, f"{qualified}.{name}", self._counter)
                for column, name, arrow_type in zip(self.columns, self.names, self.arrow_types,
                                                    strict=True)
            )
        return converters

    def slots_for(self, present: tuple[int, ...]) -> tuple[int | None, ...]:
        """For each table column, its position in an image with these present columns."""
        slots = self.image_slots.get(present)
        if slots is None:
            where = {column_index: k for k, column_index in enumerate(present)}
            slots = tuple(where.get(c.index) for c in self.columns)
            self.image_slots[present] = slots
        return slots

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.primary_key)

    # --- _schema/v<N>.json ---------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"columns": [dict(column) for column in self._resolved.json_columns],
                **self._json_but_columns()}

    def to_json_bytes(self) -> bytes:
        """:meth:`to_json` as the lake writes it (``commit.dumps(doc, compact=True)``, byte for
        byte). Its columns, the bulk of it and the same for every table of one shape, are
        encoded once per shape: a flush over thousands of new tables writes a file each."""
        columns_text: str = _COLUMNS_TEXT.get(self._resolved,
                                              lambda resolved: _compact(resolved.json_columns))
        # "columns" sorts first of the document's keys: the rest follows it, as encoded alone,
        # with the metadata columns (the same in every file) encoded once too. The key's text
        # with its quotes cannot occur inside a string value (a quote there is escaped).
        doc = self._json_but_columns(metadata_columns=0)
        rest = _compact(doc).replace('"metadata_columns":0', _METADATA_COLUMNS_TEXT, 1)
        return f'{{"columns":{columns_text},{rest[1:]}\n'.encode()

    def _json_but_columns(self, metadata_columns: Any = None) -> dict[str, Any]:
        """The schema document but its ``columns`` (``metadata_columns``: a stand-in)."""
        doc = {
            "format": 1,
            "database": self.database,
            "table": self.table,
            "version": self.version,
            "has_full_metadata": self.has_full_metadata,
            "described_by": self.described_by,
            "primary_key": list(self.key_names),
            "metadata_columns": ([dict(column) for column in _METADATA_COLUMNS]
                                 if metadata_columns is None else metadata_columns),
            "created": {
                "seq": self.origin.seq,
                "gtid": self.origin.gtid,
                "commit_time_us": self.origin.commit_time_us,
                "ddl": self.origin.ddl,
                "ddl_type": self.origin.ddl_type,
            },
        }
        if self.excluded:
            doc["excluded_columns"] = list(self.excluded)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any], counter: Any) -> TableVersion:
        columns = tuple(
            Column(
                index=c["index"], type_code=c["mysql_type"], meta=c["meta"],
                name=c["source_name"], flags=ColumnFlag(c["flags"]), charset=c["charset"],
                enum_values=tuple(c["enum_values"]) if c["enum_values"] is not None else None,
                set_values=tuple(c["set_values"]) if c["set_values"] is not None else None,
                geometry_type=c["geometry_type"], precision=c["precision"], scale=c["scale"],
                length=c["length"], transform=c.get("transform"),
            )
            for c in doc["columns"]
        )
        names = tuple(c["name"] for c in doc["columns"])
        key = tuple(names.index(n) for n in doc["primary_key"])
        pk_indexes = tuple(columns[i].index for i in key)
        created = doc["created"]
        fake = TableMapEvent(header=None, table_id=0, flags=0,  # type: ignore[arg-type]
                             schema=doc["database"], table=doc["table"], columns=columns,
                             primary_key=pk_indexes, has_full_metadata=doc["has_full_metadata"])
        return cls._resolved_as(
            _resolved_columns(columns, names), counter,
            database=doc["database"], table=doc["table"], version=doc["version"],
            columns=columns, names=names, primary_key=pk_indexes,
            has_full_metadata=doc["has_full_metadata"],
            described_by=doc.get("described_by",
                                 "binlog" if doc["has_full_metadata"] else "none"),
            origin=VersionOrigin(seq=created["seq"], gtid=created["gtid"],
                                 commit_time_us=created["commit_time_us"], ddl=created["ddl"],
                                 ddl_type=created["ddl_type"]),
            signature=signature(fake), excluded=tuple(doc.get("excluded_columns", ())),
        )
