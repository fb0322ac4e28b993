"""XA transactions: a prepared part is kept durable but invisible until its outcome.

``XA PREPARE`` ends the first event group of an XA transaction; its outcome — ``XA COMMIT`` or
``XA ROLLBACK`` — is a later group, possibly much later and possibly after a restart. Landing
the prepared rows at PREPARE would show rows that may never commit; holding them in memory
would pin the resume position before the PREPARE for as long as the transaction is in doubt
(and the server does not send a prepared part again to a replica that resumes after it).

So the sink writes the prepared part's rows (Arrow IPC, the staging schema: no commit time
yet) to ``<lake>/_xa/xa-<seq>-<k>.arrow`` — one file per table version — in the same crash-safe
commit as the checkpoint, which lists every prepared XA id and its files (``xa_prepared``) and
moves past the PREPARE. ``_xa`` starts with ``_``: Spark and every reader skip it. At
``XA COMMIT`` the rows are read back, given the commit's ``_seq`` and ``_commit_ts``, and land
like any committed transaction; at ``XA ROLLBACK`` they are dropped. Either way the ``_xa`` files
are deleted by the commit that carries the outcome's checkpoint (the manifest's ``deletes``),
so a crash at any instant leaves either the prepared part and the old checkpoint, or the
outcome and the new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..storage import Storage

__all__ = ["PreparedFile", "Prepared", "XaFileRecord", "XaRecord", "write_batches",
           "read_batches"]


@dataclass(frozen=True, slots=True)
class XaFileRecord:
    """One table version's prepared rows, as the checkpoint records them."""

    path: str  # relative to the lake: _xa/xa-<seq>-<k>.arrow
    database: str
    table: str
    version: int


@dataclass(frozen=True, slots=True)
class XaRecord:
    """An XA transaction in doubt, as the checkpoint records it (``xa_prepared``)."""

    xid: str
    seq: int  # the prepared part's transaction number
    gtid: str | None
    files: tuple[XaFileRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"xid": self.xid, "seq": self.seq, "gtid": self.gtid,
                "files": [{"path": f.path, "database": f.database, "table": f.table,
                           "version": f.version} for f in self.files]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> XaRecord:
        files = tuple(XaFileRecord(f["path"], f["database"], f["table"], int(f["version"]))
                      for f in doc.get("files", []))
        return cls(str(doc["xid"]), int(doc["seq"]), doc.get("gtid"), files)


@dataclass(slots=True)
class PreparedFile:
    """One table version's prepared rows."""

    final: str  # relative to the lake: _xa/xa-<seq>-<k>.arrow
    database: str
    table: str
    version: int
    staged: str | None = None  # in _staging until the next commit moves it to ``final``

    @property
    def path(self) -> str:
        return self.staged if self.staged is not None else self.final


@dataclass(slots=True)
class Prepared:
    """An XA transaction in doubt: prepared, its outcome not seen yet."""

    xid: str
    seq: int  # the prepared part's transaction number
    gtid: str | None
    files: list[PreparedFile] = field(default_factory=list)

    def record(self) -> XaRecord:
        """What the checkpoint records of it (where its files will be once committed)."""
        return XaRecord(self.xid, self.seq, self.gtid, tuple(
            XaFileRecord(f.final, f.database, f.table, f.version) for f in self.files))

    @classmethod
    def from_record(cls, record: XaRecord) -> Prepared:
        """A transaction the checkpoint left in doubt (its files committed)."""
        return cls(record.xid, record.seq, record.gtid, [
            PreparedFile(f.path, f.database, f.table, f.version) for f in record.files])


def write_batches(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch],
                  compression: str | None, storage: Storage) -> int:
    """Write ``batches`` as an Arrow IPC stream file and ``fsync`` it; returns the row count."""
    rows = 0
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with storage.open_output(path) as sink, \
            pa.ipc.new_stream(sink, schema, options=options) as out:
        for batch in batches:
            out.write_batch(batch)
            rows += batch.num_rows
    storage.fsync(path)
    return rows


def read_batches(path: str, storage: Storage) -> Iterator[pa.RecordBatch]:
    """The batches :func:`write_batches` wrote, one at a time (the file is closed after)."""
    with storage.open_input(path) as source:
        yield from pa.ipc.open_stream(source)


def remove(path: str, storage: Storage) -> None:
    """Remove a staged prepared file (never committed: no manifest names it)."""
    if storage.exists(path):
        storage.remove(path)
