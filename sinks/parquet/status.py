"""What a lake says about itself, read only: the commands' public entry point to a lake.

``binlake status``, ``binlake check``, ``binlake snapshot`` and ``binlake demo`` use it.

Commands read a lake through this module, not through the sink's layout: the checkpoint
document, each table's schema versions, files and rows (from Parquet footers only), whether a
commit was interrupted, and who holds the writer's lock. Nothing here changes the lake or takes
its lock for longer than a test of it. Every read goes through the lake's
:class:`~sinks.storage.Storage` (``storage``, the local file system unless told).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import LakeLocked
from ..storage import Storage
from . import layout as L
from . import state as lake_state
from .commit import OS
from .lock import LakeLock

__all__ = ["DEMO_MARKER", "LakeFacts", "TableFacts", "checkpoint_path", "lake_facts",
           "lake_in_use", "lock_holder", "read_checkpoint", "table_dirs"]

#: The file ``binlake demo`` leaves in a lake it made (and will only ever delete such a lake).
DEMO_MARKER = L.DEMO_MARKER


def read_checkpoint(lake: str, storage: Storage = OS) -> dict[str, Any] | None:
    """The lake's checkpoint document as it is on disk (never recovered here); None when there
    is none yet. Raises :class:`~sinks.errors.LakeFormatTooNew` for a lake of a newer binlake,
    ``OSError`` or ``ValueError`` when it cannot be read."""
    return lake_state.read_document(lake, storage)


def checkpoint_path(lake: str) -> str:
    """Where the checkpoint document is (for messages)."""
    return os.path.join(lake, L.CHECKPOINT)


def lake_in_use(lake: str, storage: Storage = OS) -> bool:
    """Whether another writer (a running daemon) holds the lake's lock."""
    lock = LakeLock(lake, storage)
    try:
        lock.acquire()
    except LakeLocked:
        return True
    lock.release()
    return False


def lock_holder(lake: str, storage: Storage = OS) -> int | None:
    """The pid the lake's lock file names (its holder, or its last holder)."""
    try:
        return int(storage.read(os.path.join(lake, L.LOCK)).decode("ascii").strip())
    except (OSError, ValueError):
        return None


@dataclass(slots=True)
class TableFacts:
    database: str
    table: str
    schema_versions: list[int]
    files: int = 0
    rows: int = 0
    bytes: int = 0


@dataclass(slots=True)
class LakeFacts:
    path: str
    exists: bool
    checkpoint: dict[str, Any] | None = None
    commit_in_progress: bool = False
    tables: list[TableFacts] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # files whose footer did not read

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def files(self) -> int:
        return sum(t.files for t in self.tables)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tables)



def lake_facts(path: str, storage: Storage = OS) -> LakeFacts:
    """Everything the lake says about itself; reads footers and small JSON files only."""
    import pyarrow.parquet as pq

    facts = LakeFacts(path=os.path.abspath(path), exists=storage.isdir(path))
    if not facts.exists:
        return facts
    facts.checkpoint = read_checkpoint(path, storage)  # a newer lake format: refused
    facts.commit_in_progress = storage.exists(os.path.join(path, L.MANIFEST))
    for database_dir, table_dir, table_path in table_dirs(path, storage):
        facts.tables.append(_table_facts(table_path, database_dir, table_dir, facts, pq,
                                         storage))
    return facts


def table_dirs(lake: str, storage: Storage = OS) -> Iterator[tuple[str, str, str]]:
    """Each table directory of the lake, in name order: (database dir, table dir, its path).
    Bookkeeping (names starting with ``_`` or ``.``) and stray files are passed over."""
    for database_dir in sorted(storage.listdir(lake)):
        database_path = os.path.join(lake, database_dir)
        if L.is_hidden(database_dir) or not storage.isdir(database_path):
            continue
        for table_dir in sorted(storage.listdir(database_path)):
            table_path = os.path.join(database_path, table_dir)
            if not L.is_hidden(table_dir) and storage.isdir(table_path):
                yield database_dir, table_dir, table_path


def _table_facts(table_path: str, database_dir: str, table_dir: str, lake: LakeFacts,
                 pq: Any, storage: Storage) -> TableFacts:
    versions: list[int] = []
    names = (L.name_of_dir(database_dir), L.name_of_dir(table_dir))
    schema_dir = os.path.join(table_path, L.SCHEMA_DIR)
    if storage.isdir(schema_dir):
        versions = sorted(v for v in map(L.schema_version_of, storage.listdir(schema_dir))
                          if v is not None)
        if versions:
            doc = json.loads(storage.read(os.path.join(schema_dir,
                                                       L.schema_file_name(versions[-1]))))
            names = (doc.get("database", names[0]), doc.get("table", names[1]))
    for _ in range(SWITCH_RETRIES):
        table = TableFacts(database=names[0], table=names[1], schema_versions=versions)
        unreadable: list[str] = []
        try:
            _count_files(table_path, table, unreadable, pq, storage)
        except FileNotFoundError:  # compaction switched a partition between listing and reading
            continue
        break
    else:
        unreadable.append(f"{table_path}: switched by compaction {SWITCH_RETRIES} times while "
                          "being read; run binlake status again")
    lake.unreadable += unreadable
    return table


#: Walks of one table in a row that may meet a partition compaction has just switched.
SWITCH_RETRIES = 5


def _count_files(table_path: str, table: TableFacts, unreadable: list[str], pq: Any,
                 storage: Storage) -> None:
    """Add up the table's data files from their footers; a file listed, then gone, raises
    FileNotFoundError so the caller walks again (a partition listing is all old files or all
    new ones; mixing two walks could count rows twice)."""
    for root, dirs, files in storage.walk(table_path):
        dirs[:] = sorted(d for d in dirs if not L.is_hidden(d))
        for name in sorted(files):
            if not L.is_data_file(name):
                continue
            file_path = os.path.join(root, name)
            try:
                with storage.open_input(file_path) as source:
                    table.rows += pq.read_metadata(source).num_rows
                size = storage.size(file_path)
            except FileNotFoundError:
                raise
            except (OSError, ValueError) as exc:
                unreadable.append(f"{file_path}: {exc}")
                continue
            table.files += 1
            table.bytes += size
