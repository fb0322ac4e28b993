"""The lake's durable state as typed records, one serialiser each, and the lake format version.

``_checkpoint.json`` is one document (:class:`LakeState`): the last landed transaction
(:class:`~.commit.Checkpoint`), the DDL statements waiting for their table's next schema
version (:class:`PendingDdl`), the snapshots' progress
(:class:`~.snapshot_progress.SnapshotProgress`) and the XA transactions in doubt (:class:`~.xa.XaRecord`). The
sink builds it from these records and nothing else, and reads it back through
:meth:`LakeState.from_json`; the JSON keys are written here only.

The document carries ``format``, the lake format version (:data:`LAKE_FORMAT`). Every process
that opens a lake checks it first (:func:`check_format`): a lake written by a newer binlake,
whose documents this one cannot be sure to understand, is refused with
:class:`~sinks.errors.LakeFormatTooNew` before anything is read or written, rather than
misread or "recovered" into damage. An older format is read by an explicit migration to the
current one (:data:`_MIGRATIONS`, empty while 1 is the only format there has been). A document
without the key (hand-made, in tests and tools) is read as format 1, the first.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import LakeCorrupted, LakeFormatTooNew
from ..storage import Storage
from .commit import OS, Checkpoint
from .layout import CHECKPOINT, MANIFEST
from .snapshot_progress import SnapshotProgress
from .xa import XaRecord

__all__ = ["LAKE_FORMAT", "LakeState", "PendingDdl", "check_format", "check_lake",
           "read_document", "read_state"]

#: The lake format this binlake writes, and the newest it reads.
LAKE_FORMAT = 1

#: Per older format ``n``: the function turning a document of format ``n`` into format
#: ``n + 1`` (applied in turn up to :data:`LAKE_FORMAT`).
_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def check_format(doc: Mapping[str, Any], lake: str) -> int:
    """The lake format of a lake document (a missing key: 1); raises
    :class:`~sinks.errors.LakeFormatTooNew` for one newer than :data:`LAKE_FORMAT`."""
    found = doc.get("format", 1)
    if type(found) is not int or found < 1:
        raise LakeCorrupted(f"{lake}: the checkpoint's lake format is {found!r}, not a version "
                            "number")
    if found > LAKE_FORMAT:
        raise LakeFormatTooNew(lake, found, LAKE_FORMAT)
    return found


def _migrated(doc: dict[str, Any], lake: str) -> dict[str, Any]:
    """``doc`` in the current format: checked, then migrated step by step if older."""
    found = check_format(doc, lake)
    while found < LAKE_FORMAT:
        doc = _MIGRATIONS[found](doc)
        found += 1
    return doc


@dataclass(frozen=True, slots=True)
class PendingDdl:
    """A DDL statement on a table whose next schema version has not landed yet: that version
    records it as its origin."""

    database: str
    table: str
    query: str
    ddl_type: int | None  # ddl.classify's
    seq: int  # the transaction that ran it

    def to_json(self) -> dict[str, Any]:
        return {"database": self.database, "table": self.table, "query": self.query,
                "ddl_type": self.ddl_type, "seq": self.seq}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PendingDdl:
        return cls(str(doc["database"]), str(doc["table"]), str(doc["query"]),
                   doc.get("ddl_type"), int(doc["seq"]))


@dataclass(frozen=True, slots=True)
class LakeState:
    """What ``_checkpoint.json`` holds: everything a restart needs to resume exactly."""

    checkpoint: Checkpoint
    pending_ddl: tuple[PendingDdl, ...] = ()
    #: The snapshots' progress (planned and advanced by ``replica.core.snapshot``).
    snapshot: SnapshotProgress = field(default_factory=SnapshotProgress)
    xa_prepared: tuple[XaRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The checkpoint document, as ``commit.commit`` writes it."""
        doc = self.checkpoint.to_json()
        doc["format"] = LAKE_FORMAT
        us = self.checkpoint.commit_time_us
        if us is not None:
            doc["commit_time"] = _dt.datetime.fromtimestamp(us / 1_000_000, _dt.UTC).isoformat()
        doc["pending_ddl"] = [ddl.to_json() for ddl in self.pending_ddl]
        if self.snapshot:
            doc["snapshot"] = self.snapshot.to_json()
        if self.xa_prepared:
            doc["xa_prepared"] = [record.to_json() for record in self.xa_prepared]
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any], lake: str) -> LakeState:
        """The state in a checkpoint document of ``lake`` (which names it in errors)."""
        doc = _migrated(doc, lake)
        snapshot = doc.get("snapshot")
        return cls(
            checkpoint=Checkpoint.from_json(doc),
            pending_ddl=tuple(PendingDdl.from_json(entry) for entry in doc.get("pending_ddl", [])),
            snapshot=SnapshotProgress.from_json(snapshot) if isinstance(snapshot, dict)
            else SnapshotProgress(),
            xa_prepared=tuple(XaRecord.from_json(entry) for entry in doc.get("xa_prepared", [])),
        )


def read_document(lake: str, storage: Storage = OS) -> dict[str, Any] | None:
    """The lake's checkpoint document, its format checked (and migrated if older), for a
    reader that takes no lock and recovers nothing (``binlake status``, Spark): None when
    there is none yet. The checkpoint is replaced atomically, never seen half-written."""
    try:
        doc = json.loads(storage.read(os.path.join(lake, CHECKPOINT)))
    except FileNotFoundError:
        return None
    if not isinstance(doc, dict):
        return None
    return _migrated(doc, lake)


def read_state(lake: str, storage: Storage = OS) -> LakeState | None:
    """:func:`read_document` as a :class:`LakeState`."""
    doc = read_document(lake, storage)
    return None if doc is None else LakeState.from_json(doc, lake)


def check_lake(lake: str, storage: Storage = OS) -> None:
    """Refuse (:class:`~sinks.errors.LakeFormatTooNew`) a lake written by a newer binlake —
    its checkpoint, or the one a half-done commit's manifest carries — before recovery or
    compaction touches it; nothing for a lake without a checkpoint yet."""
    read_document(lake, storage)
    try:
        record = json.loads(storage.read(os.path.join(lake, MANIFEST)))
    except (FileNotFoundError, ValueError):  # none, or never completed (recovery drops it)
        return
    if isinstance(record, dict) and isinstance(record.get("checkpoint"), dict):
        check_format(record["checkpoint"], lake)
