"""What a lake on object storage says about itself, read through its commit log: ``binlake status``.

The facts are the ones ``sinks/parquet/status.py`` gives for a lake on disk (the checkpoint,
each table's schema versions, files, rows and bytes), from the objects the log leaves live —
never a listing, which would count an unfinished commit's files, an orphan, or the files a
compaction replaced during its grace period. Rows come from each file's footer (a ranged read
per file); nothing is written and no lease is taken.
"""

from __future__ import annotations

import json
import posixpath

import pyarrow.parquet as pq

from ..errors import StoreError
from ..parquet import layout as L
from ..parquet.state import check_format
from ..parquet.status import LakeFacts, TableFacts
from .commit import Retry
from .logstate import read_state
from .store import ObjectStore
from .view import is_data_name

__all__ = ["object_lake_facts"]


def object_lake_facts(store: ObjectStore, url: str, retry: Retry | None = None) -> LakeFacts:
    """Everything the lake at ``url`` says about itself (module docstring). A lake without a
    record yet does not exist (``exists`` false)."""
    retry = retry or Retry()
    state = read_state(store, retry=retry)
    facts = LakeFacts(path=url, exists=state.number > 0)
    if not state.number:
        return facts
    facts.checkpoint = state.checkpoint
    if facts.checkpoint is not None:
        check_format(facts.checkpoint, url)  # a newer lake format: refused
    live = state.names
    tables: dict[tuple[str, str], list[str]] = {}
    for name in sorted(live):
        parts = name.split("/")
        if len(parts) >= 3 and not L.is_hidden(parts[0]) and not L.is_hidden(parts[1]):
            tables.setdefault((parts[0], parts[1]), []).append(name)
    for (database_dir, table_dir), names in tables.items():
        facts.tables.append(_table(store, live, database_dir, table_dir, names, facts))
    return facts


def _table(store: ObjectStore, live: dict[str, str], database_dir: str, table_dir: str,
           names: list[str], facts: LakeFacts) -> TableFacts:
    schema_names = [n for n in names if posixpath.dirname(n).endswith("/" + L.SCHEMA_DIR)]
    versions = sorted(v for v in (L.schema_version_of(posixpath.basename(n))
                                  for n in schema_names) if v is not None)
    database, table = L.name_of_dir(database_dir), L.name_of_dir(table_dir)
    if versions:
        latest = f"{database_dir}/{table_dir}/{L.SCHEMA_DIR}/{L.schema_file_name(versions[-1])}"
        doc = json.loads(store.get(live[latest]).data)
        database, table = doc.get("database", database), doc.get("table", table)
    result = TableFacts(database=database, table=table, schema_versions=versions)
    for name in names:
        if not is_data_name(name):
            continue
        key = live[name]
        try:
            with store.open_input(key) as source:
                result.rows += pq.read_metadata(source).num_rows
                result.bytes += source.size()
        except (StoreError, OSError, ValueError) as exc:
            facts.unreadable.append(f"{store.url(key)}: {exc}")
            continue
        result.files += 1
    return result
