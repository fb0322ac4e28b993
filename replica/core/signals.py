"""Snapshot signals: rows inserted into ``snapshot.signal_table`` that ask for a snapshot.

Where no shell reaches the daemon (a sidecar in a pod), a user asks for a snapshot the way
Debezium users know: ``INSERT INTO signals VALUES ('any-id', 'snapshot',
'{"tables": ["shop.orders"]}')``. The row reaches the daemon through the binlog itself, in
order with the changes around it; the pipeline reads it (whether or not the signal table's rows
land) and hands each committed signal to the daemon, which plans the snapshot as it plans a
``binlake snapshot --table`` request. The request id is the signal's id and its transaction's
GTID (or binlog position), so a signal replayed after a restart is recognised, never taken
twice, while the same id inserted again later is a new request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from protocol.binlog.model import RowsEvent

__all__ = ["Signal", "signals_in"]


@dataclass(frozen=True, slots=True)
class Signal:
    """One snapshot signal: its id, the tables it names, and the request id it is planned as."""

    id: str
    tables: tuple[tuple[str, str], ...]
    request: str


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
            if not isinstance(names, list) or not names or set(doc) - {"tables"}:
                raise ValueError
            tables = tuple(_table(str(name)) for name in names)
        except (ValueError, KeyError, TypeError):
            problems.append(f"signal {signal_id!r}: data must be {{\"tables\": [\"db.table\", "
                            f"...]}} (no other key), got {data!r}")
            continue
        signals.append(Signal(signal_id, tables, f"signal {signal_id} at {where}"))
    return signals, problems


def _table(name: str) -> tuple[str, str]:
    database, dot, table = name.partition(".")
    if not dot or not database or not table or "." in table:
        raise ValueError(name)
    return database, table
