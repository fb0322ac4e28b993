"""Describe a table for a snapshot, from the server's ``information_schema``.

It asks what the daemon's schema source asks, plus the exact collation ids and the unique keys,
and builds the :class:`~protocol.snapshot.SnapshotTable` (the pure part is ``protocol.snapshot``).

The answer depends on ``@@GLOBAL.binlog_row_metadata`` because the daemon's TABLE_MAPs do:
with ``FULL`` they come from the binlog, otherwise they are completed from ``information_schema``
(see ``protocol.snapshot.tablemap``). Ask on the connection the snapshot reads with, so the
description is of the table the rows come from.
"""

from __future__ import annotations

from protocol.errors import ServerError
from protocol.snapshot import SnapshotTable, TableNotFound, snapshot_table
from replica.core.connection import Connection
from replica.core.schema_source import columns_query, describe_rows, primary_key_query

__all__ = ["describe_table", "SnapshotTable"]

_WHERE = "WHERE c.TABLE_SCHEMA = {schema} AND c.TABLE_NAME = {table}"
# MariaDB 10.10+: a collation's id by its full name (information_schema.COLLATIONS lacks the
# UCA-14 collations of MariaDB 11 that a FULL TABLE_MAP names by id).
_MARIADB_COLLATIONS = (
    "SELECT c.COLUMN_NAME, a.ID FROM information_schema.COLUMNS c "
    "JOIN information_schema.COLLATION_CHARACTER_SET_APPLICABILITY a "
    "ON a.FULL_COLLATION_NAME = c.COLLATION_NAME " + _WHERE)
_UNIQUE_KEYS = (
    "SELECT c.INDEX_NAME, c.COLUMN_NAME FROM information_schema.STATISTICS c "
    + _WHERE + " AND c.NON_UNIQUE = 0 ORDER BY c.INDEX_NAME, c.SEQ_IN_INDEX")


def _text(value: str | bytes | None) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def _literal(text: str) -> str:
    return f"CONVERT(X'{text.encode('utf-8', 'surrogateescape').hex()}' USING utf8mb4)"


async def _row_metadata(conn: Connection) -> str:
    try:
        rows = await conn.query("SELECT @@GLOBAL.binlog_row_metadata")
        return (_text(rows[0][0]) or "").upper()
    except (ServerError, IndexError):  # older servers: no optional metadata at all
        return "absent"


async def describe_table(conn: Connection, database: str, table: str) -> SnapshotTable:
    """``database.table`` described for a snapshot (see :class:`SnapshotTable`).

    Raises:
        TableNotFound: ``information_schema`` shows no such table to this user.
        UnsupportedColumn: a column type binlake cannot describe as the binlog would.
        ServerError, ReplicaError: the queries failed.
    """
    row_metadata = await _row_metadata(conn)
    column_rows = await conn.query(columns_query(database, table))
    key_rows = await conn.query(primary_key_query(database, table)) if column_rows else []
    description = describe_rows(database, table, column_rows, key_rows)
    if description is None:
        raise TableNotFound(f"{database}.{table} is not in information_schema (no such table, "
                            "or no privilege to see it)")
    where = {"schema": _literal(database), "table": _literal(table)}
    collations: dict[str, int] = {}
    if conn.is_mariadb:
        try:
            for name, ident in await conn.query(_MARIADB_COLLATIONS.format(**where)):
                if name is not None and ident is not None:
                    collations[_text(name) or ""] = int(_text(ident) or 0)
        except ServerError:  # before 10.10: the ids of information_schema.COLLATIONS
            pass
    unique: dict[str, list[str]] = {}
    if not description.primary_key:
        broken: set[str] = set()
        for index_name, column in await conn.query(_UNIQUE_KEYS.format(**where)):
            name = _text(index_name) or ""
            if column is None:
                broken.add(name)  # a functional key part
            else:
                unique.setdefault(name, []).append(_text(column) or "")
        for name in broken:
            unique.pop(name, None)
    return snapshot_table(description, mysql=not conn.is_mariadb, row_metadata=row_metadata,
                          collations=collations, unique_keys=list(unique.items()))
