"""``XaStore``: the lake's XA transactions in doubt, from PREPARE to their outcome.

``xa.py`` says why and how a prepared part is kept (durable, invisible, listed in the
checkpoint); this is the sink's side of it: which XA ids are in doubt, the files a PREPARE
writes, the rows an ``XA COMMIT`` lands, and which ``_xa`` files the next commit moves into
place or deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from protocol.binlog.model import BinlogPosition

from . import layout as L
from . import xa as X
from .buffer import TxnTable
from .schema import TableVersion
from .workspace import Workspace

__all__ = ["XaStore"]

log = logging.getLogger("binlake.sinks.parquet")


class XaStore:
    """See the module docstring. ``stored(database, table, number)`` reads a schema version
    from the lake (a prepared part of a version this sink has not met)."""

    def __init__(self, workspace: Workspace,
                 stored: Callable[[str, str, int], TableVersion]) -> None:
        self._workspace = workspace
        self._stored = stored
        self._prepared: dict[str, X.Prepared] = {}  # in doubt: prepared, no outcome yet
        self._deletes: list[str] = []  # committed files whose outcome came: deleted next commit
        self._versions: dict[tuple[str, str, int], TableVersion] = {}

    def restore(self, records: Iterable[X.XaRecord]) -> None:
        """Continue with the checkpoint's ``xa_prepared``."""
        for record in records:
            self._prepared[record.xid] = X.Prepared.from_record(record)

    def prepare(self, xid: str, seq: int, gtid: str | None, tables: Iterable[TxnTable],
                drain: Callable[[TxnTable], Iterator[pa.RecordBatch]],
                position: BinlogPosition) -> None:
        """XA PREPARE of transaction ``seq``: write its rows, one staged file per table."""
        workspace = self._workspace
        entry = X.Prepared(xid, seq, gtid)
        for index, table in enumerate(tables):
            version = table.version
            staged = workspace.staged_name(L.staged_xa)
            workspace.io_path = workspace.path(staged)
            X.write_batches(workspace.io_path, version.staging_schema, drain(table),
                            workspace.options.spill_compression, workspace.storage)
            entry.files.append(X.PreparedFile(L.xa_file(seq, index), version.database,
                                              version.table, version.version, staged))
            self._versions[(version.database, version.table, version.version)] = version
        if xid in self._prepared:  # the server refuses a second one: a lake from elsewhere
            log.warning("XA %s prepared again at %s; the earlier prepared part is dropped",
                        xid, position)
            self._forget(self._prepared.pop(xid))
        self._prepared[xid] = entry
        workspace.stats.xa_prepared += 1

    def rollback(self, xid: str) -> None:
        """XA ROLLBACK: the prepared rows go."""
        prepared = self._prepared.pop(xid, None)
        if prepared is not None:
            self._forget(prepared)
            self._workspace.stats.xa_rolled_back += 1

    def commit(self, xid: str, position: BinlogPosition
               ) -> Iterator[tuple[TableVersion, pa.RecordBatch]]:
        """XA COMMIT: the prepared rows, one batch at a time (staging schema), to land now."""
        prepared = self._prepared.pop(xid, None)
        if prepared is None:
            log.warning("XA COMMIT %s at %s: its prepared part is not in the lake (it was "
                        "prepared before the lake's start position); its rows are missing",
                        xid, position)
            return
        workspace = self._workspace
        for f in prepared.files:
            version = self._version(f)
            workspace.io_path = workspace.path(f.path)
            for batch in X.read_batches(workspace.io_path, workspace.storage):
                yield version, batch
        self._forget(prepared)
        workspace.stats.xa_committed += 1

    def _forget(self, prepared: X.Prepared) -> None:
        """A prepared part's outcome came: a staged file goes now (no commit ever named it);
        a committed one goes with the next commit (its checkpoint no longer lists it)."""
        for f in prepared.files:
            if f.staged is not None:
                X.remove(self._workspace.path(f.staged), self._workspace.storage)
            else:
                self._deletes.append(f.final)

    def _version(self, f: X.PreparedFile) -> TableVersion:
        key = (f.database, f.table, f.version)
        version = self._versions.get(key)
        if version is None:
            version = self._versions[key] = self._stored(*key)
        return version

    def tables(self, xid: str) -> frozenset[tuple[str, str]] | None:
        """The ``(database, table)`` pairs ``xid``'s prepared part changed; None when the lake
        holds no prepared part of ``xid``."""
        prepared = self._prepared.get(xid)
        if prepared is None:
            return None
        return frozenset((f.database, f.table) for f in prepared.files)

    # --- the flush ----------------------------------------------------------------------------

    @property
    def deletes(self) -> list[str]:
        """Committed files the next commit deletes (relative to the lake)."""
        return self._deletes

    def renames(self) -> list[tuple[str, str]]:
        """(staged, final) of the prepared files not committed yet."""
        return [(f.staged, f.final) for prepared in self._prepared.values()
                for f in prepared.files if f.staged is not None]

    def records(self) -> tuple[X.XaRecord, ...]:
        """The checkpoint's ``xa_prepared`` (empty: no XA transaction in doubt)."""
        return tuple(prepared.record() for prepared in self._prepared.values())

    def committed(self) -> None:
        """The commit moved the staged files into ``_xa`` and deleted :attr:`deletes`."""
        for prepared in self._prepared.values():
            for f in prepared.files:
                f.staged = None
        self._deletes.clear()
