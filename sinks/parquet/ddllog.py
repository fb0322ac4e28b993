"""``DdlLog``: the lake's DDL log, and the DDL remembered for a table's next schema version.

Every DDL statement of a committed transaction is logged (``_ddl/<database>/ddl-<seq>.jsonl``,
one file per database per flush), filed under the database it is about. A statement that
changes a table is also remembered as *pending* for that table until its next schema version
appears — the version's origin names it — and this memory survives restarts in the checkpoint
(``pending_ddl``), bounded by :data:`MAX_PENDING_DDL` (a table that never lands rows again must
not grow the checkpoint forever).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable
from typing import Any

from protocol.binlog.transactions import Statement

from . import ddl as D
from . import layout as L
from .state import PendingDdl
from .workspace import Workspace

__all__ = ["MAX_PENDING_DDL", "DdlLog"]

#: DDL remembered for tables whose next schema version has not appeared yet.
MAX_PENDING_DDL = 1000


class DdlLog:
    """See the module docstring."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._pending: dict[tuple[str, str], PendingDdl] = {}
        self._entries: dict[str, list[dict[str, Any]]] = {}  # by database, since the flush

    def restore(self, pending: Iterable[PendingDdl]) -> None:
        """Continue with the checkpoint's pending DDL."""
        for ddl in pending:
            self._pending[(ddl.database, ddl.table)] = ddl

    def take_pending(self, key: tuple[str, str]) -> PendingDdl | None:
        """The DDL pending for ``(database, table)``, forgotten: its new version names it."""
        return self._pending.pop(key, None)

    def pending(self) -> tuple[PendingDdl, ...]:
        """The pending DDL, for the checkpoint."""
        return tuple(self._pending.values())

    def log(self, statement: Statement, seq: int, gtid: str | None, commit_time_us: int) -> None:
        """Log a DDL statement of transaction ``seq``, committed at ``commit_time_us``."""
        info = D.classify(statement.query, statement.schema)
        entry = {
            "seq": seq,
            "gtid": gtid,
            "commit_time_us": commit_time_us,
            "commit_time": _dt.datetime.fromtimestamp(
                commit_time_us / 1_000_000, _dt.UTC).isoformat(),
            "database": statement.schema,
            "query": statement.query,
            "ddl_type": info.ddl_type,
            "tables": [list(t) for t in info.tables],
            "resets_table": info.ddl_type in D.RESETS_TABLE,
            "binlog_file": statement.position.file,
            "binlog_pos": statement.position.pos,
        }
        # Filed under the database the statement is about, else the session's default (else
        # _no_database): CREATE TABLE shop.t run from another database belongs to shop.
        self._entries.setdefault(info.database, []).append(entry)
        self._workspace.stats.ddl += 1
        if info.ddl_type == D.DROP_TABLE:
            for key in info.tables:
                self._pending.pop(key, None)
            return
        for database, table in info.tables:
            self._pending.pop((database, table), None)  # re-insert: dicts keep age order
            self._pending[(database, table)] = PendingDdl(
                database, table, statement.query, info.ddl_type, seq)
        while len(self._pending) > MAX_PENDING_DDL:
            del self._pending[next(iter(self._pending))]

    def documents(self) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
        """The flush's DDL log files: (staged path, bytes) to write, and (staged, final)
        names relative to the lake."""
        documents: list[tuple[str, bytes]] = []
        renames: list[tuple[str, str]] = []
        workspace = self._workspace
        for database, entries in self._entries.items():
            staged = workspace.staged_name(L.staged_ddl)
            text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
            documents.append((workspace.path(staged), text.encode()))
            renames.append((staged, L.ddl_file(database, entries[0]["seq"])))
        return documents, renames

    def committed(self) -> None:
        """The flush's log files are in the lake."""
        self._entries.clear()
