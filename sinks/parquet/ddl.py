"""What the lake's DDL log records about a statement: its DDL type code and the tables it names.

The classification is :mod:`protocol.binlog.ddl`'s, binlake's one DDL classifier (TiCDC DDL type
codes, tables of multi-table DROP/RENAME, ADD COLUMN defaults). This module only fixes the log's
vocabulary: a statement the server flagged as DDL that the classifier does not know is type 0
with no tables. It labels the log and notices TRUNCATE/DROP/CREATE (which reset a table's rows);
it never decides what data lands — the TABLE_MAP decides that.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.binlog.ddl import RESETS_TABLE, DdlKind, added_column_defaults
from protocol.binlog.ddl import classify as classify_statement

__all__ = ["DROP_TABLE", "RESETS_TABLE", "UNKNOWN", "DdlInfo", "added_column_defaults",
           "classify"]

UNKNOWN = DdlKind.OTHER
DROP_TABLE = DdlKind.DROP_TABLE


@dataclass(frozen=True, slots=True)
class DdlInfo:
    """A DDL log entry's classification: its type code, the (database, table) pairs it names,
    and the database it is about (the one it names, else the session's default; "" if none)."""

    ddl_type: int
    tables: tuple[tuple[str, str], ...]
    database: str = ""


def classify(query: str, default_db: str) -> DdlInfo:
    """Classify one DDL statement; unknown statements get type 0 and no tables."""
    parsed = classify_statement(query, default_db)
    if parsed is None:
        return DdlInfo(int(UNKNOWN), (), default_db)
    return DdlInfo(int(parsed.kind), parsed.tables, parsed.schema or default_db)
