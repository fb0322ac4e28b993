"""Column names, labels and keys from ``information_schema`` when the binlog does not carry them.

With ``binlog_row_metadata=FULL`` every TABLE_MAP names its columns and there is nothing to do
here. Otherwise (MariaDB's default ``NO_LOG``, MySQL's default ``MINIMAL``) a TABLE_MAP gives
types only, and :class:`SchemaSource` asks the server, over a connection of its own, how the
table looks *now*: names, signedness, collations, ENUM/SET labels, nullability and the primary
key. ``protocol.binlog.enrich`` then merges that into the TABLE_MAP — only if it is consistent
with what the TABLE_MAP says (column count, types, sizes, nullability, and whatever optional
metadata was sent). A description that does not fit leaves the columns unnamed (``col_N``) with
a warning; it is never applied to events it does not describe.

"Now" is the weak point, and the warnings say so: while a replica catches up, the events are
older than the schema it reads. Two things keep that honest:

* the description is cached per table until a DDL statement for the table passes through the
  pipeline (:meth:`SchemaSource.note_statement`; a statement ``protocol.binlog.ddl`` cannot place
  invalidates every table), so the next TABLE_MAP re-reads it — events after an ALTER get the
  new description, and events before it are checked against the description as it is today;
* that check: an ALTER that added, dropped or retyped a column makes today's description
  inconsistent with yesterday's TABLE_MAPs, which then stay unnamed with a warning. (A change
  the binlog cannot show — a column renamed without a type change — is not detectable; the
  first warning for each table says the names are "as of now".)

Use it as the event stream's ``table_map_hook`` (:meth:`enrich`, synchronous, cache only) and
call :meth:`prepare` with :meth:`~protocol.binlog.stream.EventStream.tables_mapped_by` before
feeding each event, so the cache already holds what the hook needs — also for the TABLE_MAPs
inside a MySQL TRANSACTION_PAYLOAD, whose rows are decoded in the same ``feed``.

A failing query (privileges, a lost connection) is not fatal: the table stays unnamed, the
connection is dropped, and the table is asked about again after ``retry_after`` seconds.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import trio

from protocol.binlog.ddl import DdlKind, classify
from protocol.binlog.enrich import (
    ColumnDescription,
    TableDescription,
    collation_for_charset,
    enrich_table_map,
    with_display_widths,
)
from protocol.binlog.model import TableMapEvent
from protocol.binlog.transactions import Statement
from protocol.errors import ProtocolError
from replica.core.connection import Connection, ConnectOptions

__all__ = ["SchemaSource", "columns_query", "primary_key_query", "describe_rows",
           "parse_labels"]

log = logging.getLogger("binlake.schema")

_COLUMNS = (
    "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, "
    "c.IS_NULLABLE, c.CHARACTER_SET_NAME, co.ID, c.COLUMN_KEY, c.EXTRA, c.NUMERIC_PRECISION, "
    "c.NUMERIC_SCALE, c.DATETIME_PRECISION, c.CHARACTER_OCTET_LENGTH "
    "FROM information_schema.COLUMNS c "
    "LEFT JOIN information_schema.COLLATIONS co ON co.COLLATION_NAME = c.COLLATION_NAME "
    "WHERE c.TABLE_SCHEMA = {schema} AND c.TABLE_NAME = {table} ORDER BY c.ORDINAL_POSITION"
)
_PRIMARY_KEY = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = {table} AND INDEX_NAME = 'PRIMARY' "
    "ORDER BY SEQ_IN_INDEX"
)
_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
#: ``tinyint(1)``, ``int(11) unsigned``: the declared display width (MySQL 8.0.19 and later
#: print one only for ``tinyint(1)``; MariaDB for every integer).
_DISPLAY_WIDTH = re.compile(r"[a-z]+\((\d+)\)", re.IGNORECASE)
_NUMERIC = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal",
                      "numeric", "float", "double", "real"})

Row = tuple[str | bytes | None, ...]


def _literal(text: str) -> str:
    """A SQL string literal for ``text`` that no sql_mode or quoting can misread."""
    return f"CONVERT(X'{text.encode('utf-8', 'surrogateescape').hex()}' USING utf8mb4)"


def columns_query(schema: str, table: str) -> str:
    return _COLUMNS.format(schema=_literal(schema), table=_literal(table))


def primary_key_query(schema: str, table: str) -> str:
    return _PRIMARY_KEY.format(schema=_literal(schema), table=_literal(table))


def _text(value: str | bytes | None) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def _int(value: str | bytes | None) -> int | None:
    text = _text(value)
    return int(text) if text not in (None, "") else None


_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "b": "\b"}


def parse_labels(column_type: str) -> tuple[str, ...]:
    """The labels of an ``enum('a','b')``/``set(...)`` COLUMN_TYPE, unquoted.

    The server writes each label as an SQL literal (its ``append_unescaped``): a quote doubled
    (``'it''s'``), a backslash doubled, NUL, newline and carriage return as ``\\0``, ``\\n``,
    ``\\r``; everything else, commas included, as it is.

    Raises:
        ValueError: the text is not a parenthesised list of quoted labels.
    """
    text = column_type
    i = text.index("(") + 1
    end = len(text)
    labels: list[str] = []
    while True:
        if i >= end or text[i] != "'":
            raise ValueError(f"no quoted label at {i} in {column_type!r}")
        i += 1
        label: list[str] = []
        while True:
            if i >= end:
                raise ValueError(f"unterminated label in {column_type!r}")
            char = text[i]
            if char == "'":
                if i + 1 < end and text[i + 1] == "'":
                    label.append("'")
                    i += 2
                    continue
                i += 1
                break
            if char == "\\" and i + 1 < end:
                label.append(_ESCAPES.get(text[i + 1], text[i + 1]))
                i += 2
                continue
            label.append(char)
            i += 1
        labels.append("".join(label))
        if i < end and text[i] == ",":
            i += 1
            continue
        if i < end and text[i] == ")":
            return tuple(labels)
        raise ValueError(f"unexpected end of label list in {column_type!r}")


def _column(row: Row) -> ColumnDescription:
    (_, _, name, data_type, column_type, nullable, charset, collation, key, extra, precision,
     scale, fsp, octets) = (_text(v) for v in row)
    if name is None or data_type is None:
        raise ValueError("information_schema gave a column without a name or type")
    data_type = data_type.lower()
    column_type = column_type or ""
    extra = (extra or "").upper()
    labels = parse_labels(column_type) if data_type in ("enum", "set") else None
    width = _DISPLAY_WIDTH.match(column_type) if data_type in _INTEGERS else None
    return ColumnDescription(
        name=name,
        data_type=data_type,
        nullable=(nullable or "").upper() == "YES",
        unsigned=data_type in _NUMERIC and " unsigned" in column_type.lower(),
        charset=charset.lower() if charset else None,
        collation=int(collation) if collation else (
            collation_for_charset(charset) if charset else None),
        enum_values=labels if data_type == "enum" else None,
        set_values=labels if data_type == "set" else None,
        precision=_int(precision) if data_type in ("decimal", "numeric", "bit") else None,
        scale=_int(scale) if data_type in ("decimal", "numeric") else None,
        fsp=_int(fsp),
        octet_length=_int(octets),
        unique=(key or "").upper() == "UNI",
        generated="GENERATED" in extra,
        invisible="INVISIBLE" in extra,
        display_width=int(width.group(1)) if width else None,
    )


def describe_rows(schema: str, table: str, column_rows: Iterable[Row],
                  key_rows: Iterable[Row]) -> TableDescription | None:
    """A :class:`TableDescription` from the rows of :func:`columns_query` and
    :func:`primary_key_query`; ``None`` when information_schema knows no such table.

    Rows of another table are ignored: on a case-insensitive file system the server compares
    table names without case, the binlog names the table exactly.
    """

    def exact(row: Row) -> bool:
        return (_text(row[0]), _text(row[1])) == (schema, table)

    columns = tuple(_column(r) for r in column_rows if exact(r))
    if not columns:
        return None
    primary_key = tuple(name for r in key_rows if exact(r) and (name := _text(r[2])) is not None)
    return TableDescription(schema, table, columns, primary_key)


@dataclass(slots=True)
class _Entry:
    description: TableDescription | None
    retry_at: float | None = None  # a failed query: ask again after this trio time
    reasons: set[str] = field(default_factory=set)  # mismatches already warned about


Opener = Callable[[ConnectOptions], Awaitable[Connection]]


class SchemaSource:
    """Table descriptions from ``information_schema``, cached until DDL says otherwise.

    Args:
        options: how to connect (the replication session's own options); the connection is
            opened on the first question, so a server with FULL metadata never sees it.
        retry_after: seconds before a table whose query failed is asked about again.
        opener: replaces :meth:`Connection.open` (tests).
        display_widths: also complete TABLE_MAPs that name their columns (FULL metadata) with
            the integer columns' declared display widths, which no TABLE_MAP carries
            (``[types] tinyint1_as_boolean`` needs to tell ``TINYINT(1)`` from ``TINYINT(4)``).
    """

    def __init__(self, options: ConnectOptions, *, retry_after: float = 30.0,
                 opener: Opener | None = None, display_widths: bool = False) -> None:
        self._options = options
        self._display_widths = display_widths
        # What a table without a description loses, for the warnings.
        self._loss = ("its columns stay unnamed (col_N)" if not display_widths else
                      "its columns stay unnamed (col_N), or, named by the binlog, its "
                      "TINYINT(1) columns land as integers rather than booleans")
        self._open: Opener = opener or Connection.open
        self._retry_after = retry_after
        self._conn: Connection | None = None
        self._cache: dict[tuple[str, str], _Entry] = {}
        self._announced: set[tuple[str, str]] = set()
        #: Statistics, for tests and logs: TABLE_MAPs enriched / left unnamed, queries run.
        self.enriched = 0
        self.unmatched = 0
        self.queries = 0

    # --- answers -------------------------------------------------------------------------------

    async def prepare(self, tables: Iterable[tuple[str, str]]) -> None:
        """Make sure the cache holds a description (or a known absence) of each table."""
        for schema, table in tables:
            await self.describe(schema, table)

    async def describe(self, schema: str, table: str) -> TableDescription | None:
        """The table as information_schema shows it now (cached); ``None`` if unknown."""
        key = (schema, table)
        entry = self._cache.get(key)
        if entry is not None and (entry.retry_at is None or trio.current_time() < entry.retry_at):
            return entry.description
        try:
            description = await self._query(schema, table)
        except (ProtocolError, OSError, ValueError) as exc:
            # ConnectionLost/ReadTimeout are OSErrors; a ServerError is e.g. a missing privilege.
            log.warning("cannot read the columns of %s.%s from information_schema (%s: %s); "
                        "%s until it is asked again in %.0f s",
                        schema, table, type(exc).__name__, exc, self._loss, self._retry_after)
            await self._drop_connection()
            self._cache[key] = _Entry(None, retry_at=trio.current_time() + self._retry_after)
            return None
        if description is None:
            log.warning("%s.%s is not in information_schema (dropped or renamed since, or no "
                        "privilege to see it): %s", schema, table, self._loss)
        self._cache[key] = _Entry(description)
        return description

    async def _query(self, schema: str, table: str) -> TableDescription | None:
        if self._conn is None:
            self._conn = await self._open(self._options)
        conn = self._conn
        try:
            self.queries += 1
            columns = await conn.query(columns_query(schema, table))
            keys = await conn.query(primary_key_query(schema, table)) if columns else []
        except BaseException:
            # Cancelled or failed mid-query: the connection's state is unknown.
            await self._drop_connection()
            raise
        return describe_rows(schema, table, columns, keys)

    def enrich(self, table_map: TableMapEvent) -> TableMapEvent:
        """``table_map`` completed from the cached description, if it fits; else unchanged.

        Synchronous, for ``EventStream(table_map_hook=...)``: call :meth:`prepare` first.
        """
        if table_map.has_full_metadata:
            return self._widths(table_map) if self._display_widths else table_map
        key = (table_map.schema, table_map.table)
        entry = self._cache.get(key)
        if entry is None or entry.description is None:
            self.unmatched += 1
            if entry is None:
                log.debug("%s.%s: no description prepared for this TABLE_MAP", *key)
            return table_map
        result = enrich_table_map(table_map, entry.description)
        if result.reason is not None:
            self.unmatched += 1
            if result.reason not in entry.reasons:
                entry.reasons.add(result.reason)
                log.warning("%s.%s at %s:%d: information_schema's description does not match "
                            "this event (%s), likely an ALTER after it; its columns stay unnamed "
                            "(col_N) rather than get today's names", key[0], key[1],
                            table_map.header.file, table_map.header.position, result.reason)
            return table_map
        self.enriched += 1
        if key not in self._announced:
            self._announced.add(key)
            log.warning("binlog_row_metadata is not FULL: column names for %s.%s come from "
                        "information_schema as of now", *key)
        return result.table

    def _widths(self, table_map: TableMapEvent) -> TableMapEvent:
        """A named TABLE_MAP with its integer columns' display widths (see ``display_widths``)."""
        entry = self._cache.get((table_map.schema, table_map.table))
        if entry is None or entry.description is None:
            return table_map  # (described() warned)
        result = with_display_widths(table_map, entry.description)
        if result.reason is not None and result.reason not in entry.reasons:
            entry.reasons.add(result.reason)
            log.warning("%s.%s at %s:%d: information_schema's description does not match this "
                        "event (%s), likely an ALTER after it: its TINYINT columns carry no "
                        "display width, so TINYINT(1) lands as an integer in this event's "
                        "schema version", table_map.schema, table_map.table,
                        table_map.header.file, table_map.header.position, result.reason)
        return result.table

    # --- invalidation --------------------------------------------------------------------------

    def note_statement(self, statement: Statement) -> None:
        """Forget what a DDL statement may have changed (no-op for statement-based DML)."""
        if not statement.is_ddl:
            return
        ddl = classify(statement.query, statement.schema)
        if ddl is None:
            return
        if ddl.kind in (DdlKind.DROP_SCHEMA, DdlKind.CREATE_SCHEMA,
                        DdlKind.MODIFY_SCHEMA_CHARSET):
            self.invalidate(ddl.schema)
        elif ddl.tables:  # every table it touches: all DROP names, both sides of each RENAME
            for schema, table in ddl.tables:
                self.invalidate(schema, table)
        elif ddl.table:  # views, sequences
            self.invalidate(ddl.schema, ddl.table)
        else:  # DDL the classifier cannot place: it may have changed anything
            self.invalidate()

    def invalidate(self, schema: str | None = None, table: str | None = None) -> None:
        """Forget one table, every table of a schema, or (no arguments) everything."""
        if schema is None:
            self._cache.clear()
        elif table is None:
            for key in [k for k in self._cache if k[0] == schema]:
                del self._cache[key]
        else:
            self._cache.pop((schema, table), None)

    # --- closing -------------------------------------------------------------------------------

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.close()

    async def aclose(self) -> None:
        await self._drop_connection()
