"""Spark schemas of a landed table, from its ``_schema/v<N>.json`` files — never inferred.

Each schema version directory is read with that version's exact schema. Versions are then
aligned on one *union* schema: columns by name (the latest version's order first), each column's
type the narrowest type that holds every version's values (integers widen, decimals widen,
integer + decimal → decimal, anything else that disagrees → string).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from pyspark.sql import types as S

from ..parquet import layout as L
from ..parquet.commit import OS
from ..parquet.state import check_format, read_document
from ..storage import Storage

_SIMPLE: dict[str, S.DataType] = {
    "tinyint": S.ByteType(), "smallint": S.ShortType(), "int": S.IntegerType(),
    "bigint": S.LongType(), "float": S.FloatType(), "double": S.DoubleType(),
    "timestamp": S.TimestampType(), "timestamp_ntz": S.TimestampNTZType(),
    "date": S.DateType(), "string": S.StringType(), "binary": S.BinaryType(),
    "boolean": S.BooleanType(),
}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_INTEGRAL_DIGITS: dict[type[S.DataType], int] = {S.ByteType: 3, S.ShortType: 5, S.IntegerType: 10, S.LongType: 20}
_INTEGRAL_ORDER: list[type[S.DataType]] = [S.ByteType, S.ShortType, S.IntegerType, S.LongType]
MAX_DECIMAL = 38

PARTITION_FIELDS = (S.StructField("schema_version", S.IntegerType()),
                    S.StructField("commit_date", S.DateType()))


def spark_type(name: str) -> S.DataType:
    """Parse the ``spark_type`` strings written into ``_schema/v<N>.json``."""
    if name in _SIMPLE:
        return _SIMPLE[name]
    m = _DECIMAL.fullmatch(name)
    if m:
        return S.DecimalType(int(m.group(1)), int(m.group(2)))
    if name.startswith("array<") and name.endswith(">"):
        return S.ArrayType(spark_type(name[6:-1]))
    raise ValueError(f"unknown Spark type {name!r}")


def load_versions(lake: str, database: str, table: str,
                  storage: Storage = OS) -> dict[int, dict[str, Any]]:
    """Every ``_schema/v<N>.json`` of a table, by version number. A lake written by a newer
    binlake, or a schema file of a newer format, is refused
    (:class:`~sinks.errors.LakeFormatTooNew`): its rules are not these."""
    read_document(lake, storage)
    directory = os.path.join(lake, L.table_dir(database, table), L.SCHEMA_DIR)
    try:
        names = storage.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):  # no such table
        names = []
    versions = {}
    for name in names:
        number = L.schema_version_of(name)
        if number is not None:
            versions[number] = json.loads(storage.read(os.path.join(directory, name)))
            check_format(versions[number], lake)
    return dict(sorted(versions.items()))


def data_fields(doc: dict[str, Any]) -> list[S.StructField]:
    return [S.StructField(c["name"], spark_type(c["spark_type"]), True,
                          {"mysql_type": c["mysql_type_name"], "flags": c["flag_names"]})
            for c in doc["columns"]]


def version_schema(doc: dict[str, Any], *, with_partitions: bool = True) -> S.StructType:
    """The exact schema of one version's files (plus ``commit_date``, read from the path)."""
    fields = data_fields(doc)
    meta = [S.StructField(m["name"], spark_type(m["spark_type"]), True)
            for m in doc["metadata_columns"]]
    before = S.StructField("_before", S.StructType([S.StructField(f.name, f.dataType, True)
                                                    for f in fields]), True)
    schema = S.StructType([*fields, *meta, before])
    if with_partitions:
        schema = schema.add(PARTITION_FIELDS[1])
    return schema


def unify(a: S.DataType, b: S.DataType) -> S.DataType:
    """The narrowest type holding values of both ``a`` and ``b`` (string when nothing fits)."""
    if a == b:
        return a
    ta, tb = type(a), type(b)
    if ta in _INTEGRAL_DIGITS and tb in _INTEGRAL_DIGITS:
        return max(a, b, key=lambda t: _INTEGRAL_ORDER.index(type(t)))
    if ta in _INTEGRAL_DIGITS and isinstance(b, S.DecimalType):
        return unify(S.DecimalType(_INTEGRAL_DIGITS[ta], 0), b)
    if isinstance(a, S.DecimalType) and tb in _INTEGRAL_DIGITS:
        return unify(a, S.DecimalType(_INTEGRAL_DIGITS[tb], 0))
    if isinstance(a, S.DecimalType) and isinstance(b, S.DecimalType):
        scale = max(a.scale, b.scale)
        digits = max(a.precision - a.scale, b.precision - b.scale)
        return S.DecimalType(digits + scale, scale) if digits + scale <= MAX_DECIMAL \
            else S.StringType()
    numeric = (*_INTEGRAL_DIGITS, S.FloatType, S.DoubleType)
    if ta in numeric and tb in numeric and (ta in (S.FloatType, S.DoubleType)
                                            or tb in (S.FloatType, S.DoubleType)):
        return S.DoubleType()
    if {ta, tb} == {S.DateType, S.TimestampNTZType}:
        return S.TimestampNTZType()
    if isinstance(a, S.StructType) and isinstance(b, S.StructType):
        return union_struct([a, b])
    return S.StringType()


def union_struct(structs: list[S.StructType]) -> S.StructType:
    """Fields by name across ``structs``; the *last* struct's order first, then older fields."""
    order: list[str] = []
    types: dict[str, S.DataType] = {}
    for struct in reversed(structs):
        for f in struct.fields:
            if f.name not in types:
                order.append(f.name)
                types[f.name] = f.dataType
            else:
                types[f.name] = unify(types[f.name], f.dataType)
    return S.StructType([S.StructField(n, types[n], True) for n in order])


def union_schema(versions: dict[int, dict[str, Any]]) -> S.StructType:
    """The schema every version is aligned to: data columns, metadata, ``_before``,
    ``schema_version``, ``commit_date``."""
    docs = list(versions.values())
    latest = docs[-1]
    keys = set(latest["primary_key"])
    current = {c["name"] for c in latest["columns"]}
    merged = union_struct([S.StructType(data_fields(d)) for d in docs])
    # Field metadata tells current_state() the key and today's columns without the JSON files.
    data = S.StructType([
        S.StructField(f.name, f.dataType, True,
                      {"binlake.primary_key": f.name in keys, "binlake.current": f.name in current})
        for f in merged.fields
    ])
    meta = [S.StructField(m["name"], spark_type(m["spark_type"]), True)
            for m in docs[-1]["metadata_columns"]]
    before = S.StructField("_before", S.StructType([S.StructField(f.name, f.dataType, True)
                                                    for f in data.fields]), True)
    return S.StructType([*data.fields, *meta, before, *PARTITION_FIELDS])
