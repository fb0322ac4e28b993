"""Snapshot reads that land exactly like the binlog: the pure (sans-I/O) part of snapshots.

A table's TABLE_MAP as the daemon would use it, the ``SELECT`` list that brings every column
back exactly, and the conversion of the rows to the column-wise Python values a ``RowsEvent``
holds.

:class:`SnapshotTable` is the contract between the snapshot engine (which chooses the chunks and
runs the queries) and the sink: feed :meth:`SnapshotTable.decode_rows` the rows of
``SELECT {select_list} FROM ...`` and hand the lists to the sink as the after image of an
insert of :attr:`SnapshotTable.table_map` — they land under the same schema version, with the
same Arrow types and values, as the same rows decoded from the binlog. Building one needs the
server (``replica.core.snapshot_describe.describe_table``); everything here is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..binlog.enrich import TableDescription
from ..binlog.model import TableMapEvent
from ..results import TEXT_DEFAULT
from .tablemap import DescribeError, TableNotFound, UnsupportedColumn, snapshot_table_map
from .values import (
    ColumnConverter,
    Converter,
    column_converter,
    converter_for,
    quote_name,
    select_expression,
    wire_kind,
)

__all__ = ["SnapshotTable", "snapshot_table", "choose_key", "DescribeError", "TableNotFound",
           "UnsupportedColumn", "quote_name"]


@dataclass(frozen=True)
class SnapshotTable:
    """One table, described for a snapshot.

    Attributes:
        database, name: the table.
        table_map: the TABLE_MAP the daemon uses for this table's binlog rows (see
            ``protocol.snapshot.tablemap``): the sink picks the same schema version for both.
        key_columns: the chunking key, column indexes in key order: the primary key, else a
            UNIQUE key whose columns are all NOT NULL, else ``()`` (no key: read in one pass).
        select_list: one SQL expression per column, in table order (see
            ``protocol.snapshot.values`` for why each is what it is).
        data_types: the columns' ``information_schema`` DATA_TYPEs (the converters need them
            where the TABLE_MAP cannot tell, e.g. MariaDB's UUID from a BINARY(16)).
    """

    database: str
    name: str
    table_map: TableMapEvent
    key_columns: tuple[int, ...]
    select_list: str
    data_types: tuple[str, ...] = ()
    _converters: tuple[Converter, ...] = field(init=False, repr=False, compare=False)
    _columns: tuple[ColumnConverter, ...] = field(init=False, repr=False, compare=False)
    _wire: tuple[tuple[int, ColumnConverter | None], ...] = field(init=False, repr=False,
                                                                 compare=False)

    def __post_init__(self) -> None:
        types = self.data_types or ("",) * len(self.table_map.columns)
        object.__setattr__(self, "_converters", tuple(
            converter_for(c, t) for c, t in zip(self.table_map.columns, types, strict=True)))
        object.__setattr__(self, "_columns", tuple(map(column_converter, self._converters)))
        object.__setattr__(self, "_wire", tuple(map(wire_kind, self._converters)))

    @property
    def wire_kinds(self) -> bytes:
        """The ``protocol.results.TEXT_*`` kinds to read ``SELECT {select_list}`` with (see
        ``Connection.query_columns``), for :meth:`decode_columns`."""
        return bytes(kind for kind, _ in self._wire)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name or f"col_{c.index + 1}" for c in self.table_map.columns)

    def decode_rows(self, raw_rows: Sequence[Sequence[bytes | str | None]]
                    ) -> tuple[list[Any], ...]:
        """Rows of ``SELECT {select_list}`` → one list per column of exactly the values
        ``RowsEvent.after`` holds for the same rows (NULL is ``None``).

        ``raw_rows`` are text-protocol rows as ``Connection.query`` returns them: ``bytes``, or
        ``str`` decoded with ``surrogateescape`` (both are accepted).

        Raises:
            ValueError: a row with the wrong number of values, or a value that is not what the
                column's expression returns.
        """
        width = len(self._converters)
        out: tuple[list[Any], ...] = tuple([] for _ in range(width))
        if not raw_rows:
            return out
        if set(map(len, raw_rows)) != {width}:
            bad = next(len(row) for row in raw_rows if len(row) != width)
            raise ValueError(f"{self.database}.{self.name}: a row of {bad} values, "
                             f"the table has {width} columns")
        columns = zip(*raw_rows, strict=True)
        for k, (convert, whole, values) in enumerate(
                zip(self._converters, self._columns, columns, strict=True)):
            if None in values:
                out[k].extend([None if v is None else convert(v) for v in values])
            else:
                out[k].extend(whole(values))
        return out


    def decode_columns(self, values: Sequence[list[Any]], converted: bool) -> tuple[list[Any], ...]:
        """:meth:`decode_rows` for a columnar read with :attr:`wire_kinds` (``values``: one list
        per column, extra trailing columns ignored; ``converted``: every column holds its
        kind's values, as ``ResultSet.converted`` says). The same values as
        :meth:`decode_rows` of the same rows: a kind's values are what the converter makes of
        the text, and a read that did not convert holds text (or a mix), which the converters
        take as well.

        Raises:
            ValueError: fewer value lists than columns, lists of different lengths, or a value
                that is not what the column's expression returns.
        """
        width = len(self._converters)
        if len(values) < width or len(set(map(len, values))) > 1:
            raise ValueError(f"{self.database}.{self.name}: {len(values)} value lists of "
                             f"{sorted(set(map(len, values)))} rows for {width} columns")
        out: list[list[Any]] = []
        for convert, whole, (kind, post), column in zip(
                self._converters, self._columns, self._wire, values[:width], strict=True):
            if converted and kind != TEXT_DEFAULT:
                out.append(column if post is None else post(column))
            elif None in column:
                out.append([None if v is None else convert(v) for v in column])
            else:
                out.append(whole(column))
        return tuple(out)


def choose_key(description: TableDescription,
               unique_keys: Sequence[tuple[str, Sequence[str]]]) -> tuple[int, ...]:
    """The chunking key: the primary key, else the UNIQUE key (``(index name, column names)``)
    with the fewest columns, all NOT NULL (ties: by index name), else ``()``."""
    index_of = {d.name: i for i, d in enumerate(description.columns)}
    if description.primary_key:
        return tuple(index_of[n] for n in description.primary_key)
    candidates = []
    for index_name, names in unique_keys:
        if not names or any(n not in index_of for n in names):
            continue  # a functional key part has no column
        if any(description.columns[index_of[n]].nullable for n in names):
            continue
        candidates.append((len(names), index_name, tuple(index_of[n] for n in names)))
    return min(candidates)[2] if candidates else ()


def snapshot_table(description: TableDescription, *, mysql: bool, row_metadata: str,
                   collations: dict[str, int] | None = None,
                   unique_keys: Sequence[tuple[str, Sequence[str]]] = ()) -> SnapshotTable:
    """A :class:`SnapshotTable` from what ``information_schema`` says (see
    :func:`~protocol.snapshot.tablemap.snapshot_table_map` for the arguments).

    Raises:
        UnsupportedColumn: a column type binlake cannot describe as the binlog would.
    """
    table_map = snapshot_table_map(description, mysql=mysql, row_metadata=row_metadata,
                                   collations=collations)
    data_types = tuple(d.data_type for d in description.columns)
    select_list = ", ".join(
        select_expression(c, d.name, d.data_type)
        for c, d in zip(table_map.columns, description.columns, strict=True))
    return SnapshotTable(description.schema, description.table, table_map,
                         choose_key(description, unique_keys), select_list, data_types)
