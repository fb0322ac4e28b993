"""The snapshots' progress as typed records, one serialiser each.

It is the ``snapshot`` key of ``_checkpoint.json`` and commits with the chunks it
describes, so after a crash it says exactly which chunks are in the lake and where each
table's read resumes. The snapshot coordinator (``replica.core.snapshot``) plans and advances
it; the sink keeps it and writes it.

Its JSON is part of the lake format, so a key that is absent stays absent: ``tables`` before
any table was planned, ``key``/``high_key`` before a table was first described,
``exact_chunks`` before its first chunk landed, ``message`` unless its snapshot ended with
one, ``condition`` unless its rows are limited by one. ``None`` marks an absent key here; only ``high_key`` and ``last_key`` are also written as
``null`` (no key read yet). The nine keys a plan gives every table are always written (an
entry without them reads as planned by nobody: no reason, no requests, nothing read).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["FilterRecord", "SnapshotProgress", "TableProgress"]


def _strings(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


@dataclass(frozen=True, slots=True)
class TableProgress:
    """One table's snapshot: its plan, how far its read got, and how it ended."""

    database: str
    table: str
    status: str  # "pending", "running", "done" or "failed"
    reason: str  # why it is snapshotted (a command, a signal, a config key)
    one_time: bool  # excluded by the filters: a one-time copy, its changes do not land
    #: The key of the last landed chunk's last row, as SQL literals (None: from the start).
    last_key: tuple[str, ...] | None
    rows: int
    chunks: int
    requests: tuple[str, ...]  # the requests (``binlake snapshot``, signals) waiting for it
    #: The key's column names, once described ((): no usable key); None: not described yet.
    key: tuple[str, ...] | None = None
    #: The last key when its read began; ``()`` an empty table, None not read yet.
    high_key: tuple[str, ...] | None = None
    #: Whether ``high_key`` is in the document (written as ``null`` while None).
    has_high_key: bool = False
    exact_chunks: int | None = None  # chunks read at an exact binlog point (None: no chunk yet)
    message: str | None = None  # why it ended as it did, when that needs saying
    #: A WHERE condition limiting the rows read (a signal's ``condition``); None: every row.
    condition: str | None = None

    @property
    def name(self) -> str:
        """The name it is filed under: ``database.table``."""
        return f"{self.database}.{self.table}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "database": self.database, "table": self.table, "status": self.status,
            "reason": self.reason, "one_time": self.one_time,
            "last_key": None if self.last_key is None else list(self.last_key),
            "rows": self.rows, "chunks": self.chunks, "requests": list(self.requests)}
        if self.key is not None:
            doc["key"] = list(self.key)
        if self.has_high_key:
            doc["high_key"] = None if self.high_key is None else list(self.high_key)
        if self.exact_chunks is not None:
            doc["exact_chunks"] = self.exact_chunks
        if self.message is not None:
            doc["message"] = self.message
        if self.condition is not None:
            doc["condition"] = self.condition
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TableProgress:
        exact = doc.get("exact_chunks")
        message = doc.get("message")
        condition = doc.get("condition")
        return cls(
            database=str(doc["database"]), table=str(doc["table"]), status=str(doc["status"]),
            reason=str(doc.get("reason", "")), one_time=bool(doc.get("one_time", False)),
            last_key=_strings(doc.get("last_key")), rows=int(doc.get("rows", 0)),
            chunks=int(doc.get("chunks", 0)),
            requests=tuple(str(r) for r in doc.get("requests", ())),
            key=_strings(doc.get("key")), high_key=_strings(doc.get("high_key")),
            has_high_key="high_key" in doc,
            exact_chunks=None if exact is None else int(exact),
            message=None if message is None else str(message),
            condition=None if condition is None else str(condition))


@dataclass(frozen=True, slots=True)
class FilterRecord:
    """The filters the lake last ran with: tables ``filter.include`` gains later are
    snapshotted (``snapshot.on_new_tables``)."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"include": list(self.include), "exclude": list(self.exclude)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FilterRecord:
        return cls(tuple(str(p) for p in doc.get("include", ())),
                   tuple(str(p) for p in doc.get("exclude", ())))


@dataclass(frozen=True, slots=True)
class SnapshotProgress:
    """Every table ever snapshotted in this lake (in plan order), and the recorded filters."""

    #: None: no table was ever planned (the document has no ``tables`` key).
    tables: tuple[TableProgress, ...] | None = None
    filter: FilterRecord | None = None

    def __bool__(self) -> bool:
        return self.tables is not None or self.filter is not None

    def to_json(self) -> dict[str, Any]:
        """The checkpoint's ``snapshot`` document (empty: the key is left out)."""
        doc: dict[str, Any] = {}
        if self.tables is not None:
            doc["tables"] = {entry.name: entry.to_json() for entry in self.tables}
        if self.filter is not None:
            doc["filter"] = self.filter.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SnapshotProgress:
        progress = cls()
        if doc.get("tables") is not None:
            progress = replace(progress, tables=tuple(
                TableProgress.from_json(entry) for entry in doc["tables"].values()))
        if doc.get("filter") is not None:
            progress = replace(progress, filter=FilterRecord.from_json(doc["filter"]))
        return progress
