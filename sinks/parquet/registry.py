"""``SchemaRegistry``: each table's current schema version, found from its TABLE_MAP.

A table's rows land under the schema version their TABLE_MAP describes: the version the lake
has if the columns match its signature, else a new one (numbered on from the lake's latest,
its origin naming the DDL that made it, if the DDL log has it). Versions are read from the lake
on first use (``_schema/v<N>.json``) and created here; the new ones reach the lake with the
next flush (:attr:`new_versions`).

Every transaction brings a new TABLE_MAP, so the answer for an unchanged table must be cheap:
the decoder gives those of an unchanged table the very same ``columns`` tuple, and the registry
remembers by that tuple both the version found last time and the signature computed (an Arrow
type per column, a third of the sink's time on one-row transactions when computed each time).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

from protocol.binlog.model import Column, TableMapEvent

from . import layout as L
from .rows import TransactionTags
from .schema import TableVersion, VersionOrigin, signature
from .state import PendingDdl
from .workspace import Workspace

__all__ = ["SchemaRegistry"]

log = logging.getLogger("binlake.sinks.parquet")

#: Entries each identity cache keeps before it starts afresh (tables of many shapes).
CACHE_ENTRIES = 4096


class SchemaRegistry:
    """See the module docstring.

    ``ddl_for(database, table)`` hands over (and forgets) the DDL that preceded a table's next
    version, if any; ``on_new(version)`` is told of each version created (its schema file is
    prepared ahead)."""

    def __init__(self, workspace: Workspace, counter: Any,
                 ddl_for: Callable[[tuple[str, str]], PendingDdl | None],
                 on_new: Callable[[TableVersion], None]) -> None:
        self._workspace = workspace
        self.counter = counter
        self._ddl_for = ddl_for
        self._on_new = on_new
        self._versions: dict[tuple[str, str], TableVersion | None] = {}
        #: Per database directory, its table directories when first asked: _load_latest
        self._lake_tables: dict[str, frozenset[str]] = {}
        # (database, table) -> (columns, primary key, full metadata, version) of its last
        # TABLE_MAP: tables of one shape share their columns tuple (tablemap.TableMapCache)
        self._table_maps: dict[tuple[str, str], tuple[tuple[Column, ...], tuple[int, ...],
                                                      bool, TableVersion]] = {}
        # id(columns) → (columns, primary key, full metadata, signature): see _signature_of
        self._signatures: dict[int, tuple[Any, tuple[int, ...], bool, tuple[Any, ...]]] = {}
        #: Versions created since the last flush, in creation order.
        self.new_versions: list[TableVersion] = []

    def version_for(self, table_map: TableMapEvent, tags: TransactionTags) -> TableVersion:
        """The version ``table_map``'s rows land under; a new one is created for the
        transaction ``tags`` describes."""
        # By the columns tuple, the version found last time, if it is still the table's
        # current one (the same answer as the signature comparison below).
        columns = table_map.columns
        key = (table_map.schema, table_map.table)
        cached = self._table_maps.get(key)
        if (cached is not None and cached[0] is columns
                and cached[1] == table_map.primary_key
                and cached[2] == table_map.has_full_metadata
                and self._versions.get(key) is cached[3]):
            return cached[3]
        if key not in self._versions:
            self._versions[key] = self._load_latest(*key)
        current = self._versions[key]
        if current is None or current.signature != self._signature_of(table_map):
            current = self._create(table_map, key, current, tags)
        if len(self._table_maps) > CACHE_ENTRIES:
            self._table_maps.clear()
        self._table_maps[key] = (columns, table_map.primary_key, table_map.has_full_metadata,
                                 current)
        return current

    def _create(self, table_map: TableMapEvent, key: tuple[str, str],
                current: TableVersion | None, tags: TransactionTags) -> TableVersion:
        ddl = self._ddl_for(key)
        origin = VersionOrigin(
            seq=tags.seq, gtid=tags.gtid,
            ddl=ddl.query if ddl else None, ddl_type=ddl.ddl_type if ddl else None,
        )
        number = current.version + 1 if current is not None else 1
        version = TableVersion.from_table_map(table_map, number, origin, self.counter,
                                              self._signature_of(table_map))
        self._versions[key] = version
        self.new_versions.append(version)
        self._on_new(version)
        if not table_map.has_full_metadata and self._workspace.first_time("names" + repr(key)):
            log.warning("%s.%s: no column names in the binlog (binlog_row_metadata is not "
                        "FULL); landing columns as col_1..col_%d", key[0], key[1],
                        len(table_map.columns))
        return version

    def _signature_of(self, table_map: TableMapEvent) -> tuple[Any, ...]:
        """``signature(table_map)``, remembered per ``columns`` tuple (module docstring)."""
        columns = table_map.columns
        memo = self._signatures.get(id(columns))
        if (memo is not None and memo[0] is columns and memo[1] == table_map.primary_key
                and memo[2] == table_map.has_full_metadata):
            return memo[3]
        result = signature(table_map)
        if len(self._signatures) > CACHE_ENTRIES:
            self._signatures.clear()
        self._signatures[id(columns)] = (columns, table_map.primary_key,
                                         table_map.has_full_metadata, result)
        return result

    def stored(self, database: str, table: str, number: int) -> TableVersion:
        """Version ``number`` of a table, as the lake holds it."""
        path = self._workspace.path(L.schema_file(database, table, number))
        return TableVersion.from_json(json.loads(self._workspace.storage.read(path)),
                                      self.counter)

    def _load_latest(self, database: str, table: str) -> TableVersion | None:
        database_dir = L.dir_name(database)
        tables = self._lake_tables.get(database_dir)
        if tables is None:
            # The tables the lake had when this sink first met the database, in one listing
            # instead of a failed listing per new table (2,000 of them in a backlog over 2,000
            # tables). A table this sink adds later is in ``_versions`` before it is on disk,
            # so it is never looked up here again; no other process adds tables to a lake
            # whose writer lock this sink holds.
            try:
                tables = frozenset(self._workspace.storage.listdir(
                    self._workspace.path(database_dir)))
            except FileNotFoundError:
                tables = frozenset()
            self._lake_tables[database_dir] = tables
        table_dir = L.dir_name(table)
        if table_dir not in tables:
            return None
        directory = os.path.join(self._workspace.lake, database_dir, table_dir, L.SCHEMA_DIR)
        try:
            names = self._workspace.storage.listdir(directory)
        except FileNotFoundError:
            return None
        numbers = [int(n[1:-5]) for n in names
                   if n.startswith("v") and n.endswith(".json") and n[1:-5].isdigit()]
        if not numbers:
            return None
        latest = self._workspace.storage.read(os.path.join(directory, f"v{max(numbers)}.json"))
        return TableVersion.from_json(json.loads(latest), self.counter)
