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

from ..binlog import native as _native
from ..binlog.enrich import TableDescription
from ..binlog.model import TableMapEvent
from ..errors import MalformedPacket
from ..results import TEXT_BYTES, TEXT_DEFAULT, TEXT_STR, check_kept
from .tablemap import DescribeError, TableNotFound, UnsupportedColumn, snapshot_table_map
from .values import (
    SESSION_SETUP,
    ColumnConverter,
    Converter,
    column_converter,
    converter_for,
    quote_name,
    select_expression,
    text_spec,
    wire_kind,
)

__all__ = ["SESSION_SETUP", "SnapshotTable", "snapshot_table", "choose_key", "DescribeError", "TableNotFound",
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
            ``protocol.snapshot.values`` for why each is what it is), to be read on a
            connection that has run :data:`SESSION_SETUP`.
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
    _text_plan: object = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        types = self.data_types or ("",) * len(self.table_map.columns)
        object.__setattr__(self, "_converters", tuple(
            converter_for(c, t) for c, t in zip(self.table_map.columns, types, strict=True)))
        object.__setattr__(self, "_columns", tuple(map(column_converter, self._converters)))
        object.__setattr__(self, "_wire", tuple(map(wire_kind, self._converters)))
        object.__setattr__(self, "_text_plan", _native.plan(tuple(
            text_spec(c, convert) for c, convert in zip(self.table_map.columns,
                                                        self._converters, strict=True)))
                           if _native.TEXT_ARROW else None)

    @property
    def reads_kept(self) -> bool:
        """Whether chunks are read kept (``Connection.read_columns(keep=True)``) and decoded
        by :meth:`decode_kept` into Arrow chunks; else read with :attr:`wire_kinds` and
        decoded by :meth:`decode_columns` (``BINLAKE_NATIVE=0``, ``BINLAKE_NATIVE_ARROW=0``,
        or an extension built without ``text_arrow``)."""
        return self._text_plan is not None

    def decode_kept(self, kept: bytes | bytearray, rows: int, binary: tuple[bool, ...]
                    ) -> tuple[KeptImage, tuple[Any, ...]]:
        """The rows of a kept read of ``SELECT {select_list}, …`` (``ResultSet.kept``;
        ``binary``: each result column's binary flag, extra trailing columns ignored) as the
        after image of a ``RowsEvent`` and its Arrow chunks (``RowsEvent.arrow[1]``): the
        chunk of a column is what the binlog decoder makes of the same values, or None where
        the image's Python values land instead; the image decodes a column's Python values
        only when asked (a column without chunk, the chunking key of a chunk the stream
        touched): the same values as :meth:`decode_rows` of the same rows.

        Raises:
            MalformedPacket: a malformed row (the error :func:`~protocol.results.parse_text_row`
                raises for it).
            ValueError: fewer values per row than columns.
        """
        width = len(self._converters)
        if len(binary) < width:
            raise ValueError(f"{self.database}.{self.name}: {len(binary)} values a row for "
                             f"{width} columns")
        try:
            chunks = _native.text_arrow(kept, self._text_plan, len(binary))  # type: ignore[misc]
        except ValueError as exc:
            check_kept(kept, binary)
            raise MalformedPacket(str(exc)) from exc
        return KeptImage(self, kept, rows, binary), chunks

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
        for k, values in enumerate(columns):
            out[k].extend(self._from_text(k, values))
        return out

    def _from_text(self, k: int, values: Sequence[Any]) -> list[Any]:
        """Column ``k``'s values made from their text (``str``/``bytes``; None is NULL) by its
        converter: the whole column at once when it holds no NULL."""
        if None in values:
            convert = self._converters[k]
            return [None if v is None else convert(v) for v in values]
        return self._columns[k](values)


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
        for k, ((kind, post), column) in enumerate(zip(self._wire, values[:width], strict=True)):
            if converted and kind != TEXT_DEFAULT:
                out.append(column if post is None else post(column))
            else:
                out.append(self._from_text(k, column))
        return tuple(out)


class KeptImage(Sequence[list[Any]]):
    """The after image of a kept read (:meth:`SnapshotTable.decode_kept`): reads like the
    tuple of per-column lists of :meth:`SnapshotTable.decode_rows` (index, iterate, ``len``),
    making a column's Python values on first use — most columns land from Arrow chunks and
    never need them."""

    __slots__ = ("_table", "_kept", "_rows", "_binary", "_lists")

    def __init__(self, table: SnapshotTable, kept: bytes | bytearray, rows: int,
                 binary: tuple[bool, ...]) -> None:
        self._table = table
        self._kept = kept
        self._rows = rows
        self._binary = binary
        self._lists: list[list[Any] | None] = [None] * len(table._converters)

    def __len__(self) -> int:
        return len(self._lists)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[k] for k in range(len(self._lists))[index]]
        values = self._lists[index]
        if values is None:
            self._decode([index % len(self._lists)])
            values = self._lists[index]
            assert values is not None
        return values

    def __iter__(self) -> Any:
        self._decode([k for k, values in enumerate(self._lists) if values is None])
        return iter(self._lists)

    def decode_where(self, chunks: Sequence[Any]) -> None:
        """Make now the Python values of every column without an Arrow chunk (so a value the
        reference refuses raises here, where a chunk is decoded, not when it lands)."""
        self._decode([k for k, chunk in enumerate(chunks[:len(self._lists)])
                      if chunk is None and self._lists[k] is None])

    def _decode(self, wanted: list[int]) -> None:
        """The Python values of the ``wanted`` columns, in one pass over the kept rows."""
        if not wanted:
            return
        binary = self._binary
        kinds = bytearray([_native.TEXT_SKIP]) * len(binary)
        for k in wanted:
            kinds[k] = TEXT_BYTES if binary[k] else TEXT_STR
        columns: list[list[Any]] = [[] for _ in binary]
        try:
            _native.text_lists(self._kept, bytes(kinds), columns)  # type: ignore[misc]
        except ValueError as exc:
            check_kept(self._kept, binary)
            raise MalformedPacket(str(exc)) from exc
        for k in wanted:
            self._lists[k] = self._table._from_text(k, columns[k])


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
