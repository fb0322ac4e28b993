"""Snapshot signals: rows inserted into ``snapshot.signal_table`` that ask for a snapshot.

Where no shell reaches the daemon (a sidecar in a pod), a user asks for a snapshot the way
Debezium users know: ``INSERT INTO signals VALUES ('any-id', 'snapshot',
'{"tables": ["shop.orders"]}')``. The row reaches the daemon through the binlog itself, in
order with the changes around it; the pipeline reads it (whether or not the signal table's rows
land) and hands each committed signal to the daemon, which plans the snapshot as it plans a
``binlake snapshot --table`` request; an optional ``condition`` (a WHERE fragment, checked
here for shape and by the server before the table is read) limits the rows read. The request id is the signal's id and its transaction's
GTID (or binlog position), so a signal replayed after a restart is recognised, never taken
twice, while the same id inserted again later is a new request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from protocol.binlog.model import RowsEvent

__all__ = ["MAX_CONDITION", "Signal", "condition_problem", "signals_in"]


@dataclass(frozen=True, slots=True)
class Signal:
    """One snapshot signal: its id, the tables it names, and the request id it is planned as."""

    id: str
    tables: tuple[tuple[str, str], ...]
    request: str
    #: A WHERE condition limiting the rows read of each table (None: every row).
    condition: str | None = None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def signals_in(event: RowsEvent, where: str) -> tuple[list[Signal], list[str]]:
    """The snapshot signals of an INSERT into the signal table, and why any other row of it is
    not one (for the log). ``where``: the transaction's GTID or position (the request id)."""
    signals: list[Signal] = []
    problems: list[str] = []
    if event.table.columns and all(c.name is None for c in event.table.columns):
        return [], ["the signal table's TABLE_MAP names no columns (binlog_row_metadata is "
                    "not FULL): signals cannot be read"]
    for row in event.rows_after():
        signal_id, kind, data = _text(row.get("id")), _text(row.get("type")), _text(
            row.get("data"))
        if signal_id is None or kind is None:
            problems.append(f"a signal row without id or type: {sorted(row)}")
            continue
        if kind != "snapshot":
            problems.append(f"signal {signal_id!r}: type {kind!r} is not one binlake knows "
                            "(snapshot)")
            continue
        try:
            doc = json.loads(data or "")
            names = doc["tables"]
            condition = doc.get("condition")
            if (not isinstance(names, list) or not names or set(doc) - {"tables", "condition"}
                    or not isinstance(condition, str | None)):
                raise ValueError
            tables = tuple(_table(str(name)) for name in names)
        except (ValueError, KeyError, TypeError, AttributeError):
            problems.append(f"signal {signal_id!r}: data must be {{\"tables\": [\"db.table\", "
                            f"...]}}, with an optional \"condition\": \"a WHERE condition\" "
                            f"(no other key), got {data!r}")
            continue
        if condition is not None:
            why = condition_problem(condition)
            if why is not None:
                problems.append(f"signal {signal_id!r}: its condition {condition!r} {why}")
                continue
        signals.append(Signal(signal_id, tables, f"signal {signal_id} at {where}", condition))
    return signals, problems


#: The longest condition taken: a WHERE fragment, not a program.
MAX_CONDITION = 4096


def condition_problem(condition: str) -> str | None:
    """Why ``condition`` cannot be one WHERE condition of a snapshot's query, or None.

    The text is put in a chunk's query as ``… WHERE (key range) AND (condition) ORDER BY …
    LIMIT n``, so it must stay inside its parentheses: no ``;``, no comment (``--``, ``#``,
    ``/*``) and no unbalanced parenthesis outside quotes, every quote closed. What it means
    is the server's to judge: the reader asks it once before reading (an unknown column or a
    syntax error fails that table's snapshot, with the server's message)."""
    if not condition.strip():
        return "is empty"
    if len(condition) > MAX_CONDITION:
        return f"is longer than {MAX_CONDITION} characters"
    depth = 0
    quote: str | None = None
    i, end = 0, len(condition)
    while i < end:
        char = condition[i]
        if quote is not None:
            if char == "\\" and quote != "`":
                i += 2
                continue
            if char == quote:
                if i + 1 < end and condition[i + 1] == quote:  # a doubled quote
                    i += 2
                    continue
                quote = None
        elif char in "'\"`":
            quote = char
        elif char == ";":
            return "holds a ';' (one condition, not statements)"
        elif char == "#" or condition.startswith(("--", "/*"), i):
            return "holds a comment, which would hide the rest of the query"
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return "closes a parenthesis it did not open"
        i += 1
    if quote is not None:
        return f"leaves a {quote} quote open"
    if depth:
        return "leaves a parenthesis open"
    return None


def _table(name: str) -> tuple[str, str]:
    database, dot, table = name.partition(".")
    if not dot or not database or not table or "." in table:
        raise ValueError(name)
    return database, table
