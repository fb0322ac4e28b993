"""Snapshots: land tables' existing rows as ``_op = "R"`` while the daemon keeps streaming.

Chunk by chunk, with no lock on the server (the watermark method of DBLog / Flink CDC).

Why this shape: the daemon is the lake's only writer, so a snapshot runs *inside* it, beside
the stream, and every chunk lands as a transaction of its own ``_seq`` between two streamed
transactions. For each table:

1. the pipeline starts a *key log* for the table (:meth:`SnapshotCoordinator.watch`): the key
   of every row any streamed rows event touches from now on;
2. a chunk is read on a connection of its own by keyset pagination:
   ``SELECT … WHERE key > last ORDER BY key LIMIT chunk_rows`` (never OFFSET), tied to a binlog
   position, its *high watermark* — every change the SELECT saw is before it, and every change
   after it is in the key log:

   * MariaDB: in a transaction ``WITH CONSISTENT SNAPSHOT``, whose ``binlog_snapshot_file``/
     ``_position`` status is exactly the binlog point of its read view; the read waits (a few
     milliseconds) until that point is at or past the stream's first transaction boundary
     since the key log started, so the key log holds every change after it;
   * MySQL with GTIDs: between a low and a high watermark — ``@@GLOBAL.gtid_executed`` read
     before the SELECT must hold the stream's GTID set where the key log started (MySQL adds
     a GTID there only after the storage engine committed the transaction, so all of them
     are visible to the SELECT; the read waits for a commit that lags its binlog write), and
     the server's binlog end read after it (``SnapshotReader._read_bracketed``). A new lake's
     stream starts from ``gtid_executed`` too, so a transaction already written to the binlog
     but not committed in the engine is streamed, not skipped;
   * MySQL without GTIDs: after a grace since the key log started (:data:`GRACE`), then the
     binlog end read after the SELECT — not exact: a transaction whose engine commit lags its
     binlog write by more than the grace may be read without its change being noted (warned);

   neither takes a lock. The next chunk is read while this one is decoded and landed;
3. the chunk waits until the stream has landed everything up to the high watermark and is
   between two transactions, at stream position P ≥ high. Rows whose key the key log holds are
   dropped from the chunk (their latest change was streamed and landed already, at a lower
   ``_seq``: a row image at least as new as the SELECT's); every other row was not changed
   between the SELECT and P, so its value is the row's value at P. The chunk lands as one
   transaction, ``_binlog_file``/``_binlog_pos`` = P, and the table's progress (last key, row
   and chunk counts) commits with it in the checkpoint: a kill -9 resumes after the last landed
   chunk;
4. the next chunk is read; after the last one the table is ``done``.

So the table's R rows plus the changes streamed since its key log started give, at every
landed ``_seq``, the server's table as of that point; the first change of a row after its R
row carries the R row's values as its before image.

Tables without a usable key (no primary key, no NOT NULL unique key) are read by one SELECT,
in one chunk, which must see no change to the table between the read and its landing; it is
retried :data:`KEYLESS_ATTEMPTS` times, then the table's snapshot fails with an error (its
rows would be neither exact nor keyed). Memory holds one piece of it at a time: the rows are
converted and staged as they come off the socket, ``chunk_rows`` a piece, and land in one
commit of all the pieces (``SnapshotReader._keyless``, ``sinks/parquet/pieces.py``). A DDL statement on a table being read discards the
chunk not yet landed; the table is described again and reading resumes after the last landed
key (chunks landed before keep their schema version, as streamed rows do).

Tables the filters exclude (``binlake snapshot --table`` only) get a one-time copy: the stream
does not land their changes, so a touched row is landed from the key log's latest image
instead of being dropped.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, islice
from typing import Any, Protocol, cast

import trio

from protocol.binlog.ddl import classify as classify_ddl
from protocol.binlog.model import BinlogPosition, EventHeader, RowsEvent, RowsKind
from protocol.binlog.transactions import (
    Statement,
    TransactionCommit,
    TransactionPrepared,
    TransactionRollback,
)
from protocol.errors import ServerError
from protocol.gtid import GtidSet
from protocol.results import ResultSet, is_binary_column, kept_row
from protocol.snapshot import (
    SESSION_SETUP,
    DescribeError,
    SnapshotTable,
    TableNotFound,
    quote_name,
)
from replica.core.connection import Connection, ConnectOptions
from replica.core.sink_worker import SinkWorker
from replica.core.snapshot_describe import describe_table
from sinks.contract import Sink, SnapshotChunk, SnapshotProgress, StagedSnapshot, TableProgress
from sinks.factory import SNAPSHOT_REQUESTS_DIR

log = logging.getLogger("binlake.snapshot")

#: Databases a snapshot never reads, whatever the filters say.
SYSTEM_DATABASES = frozenset({"mysql", "sys", "information_schema", "performance_schema"})

#: Seconds between starting a table's key log and its first read where the read's binlog point
#: is not exact (MySQL without GTIDs; MariaDB only when its point does not get past the key
#: log's start in that time): a transaction whose binlog event arrived just before the key log started must be
#: visible to the read (the server writes the binlog before the storage engine commits).
GRACE = 1.0

#: Seconds a MySQL read waits for the stream's transactions to show in the server's
#: ``gtid_executed`` (committed in the engine) before the table's snapshot fails: not a
#: correctness bound (the read never goes ahead without them), only how long a stuck wait
#: (a server that is not the streamed one) is given.
COMMIT_WAIT = 300.0

#: Seconds between MariaDB consistent-snapshot attempts whose binlog point is still before the
#: start of the table's key log (the stream has not yet reached a transaction boundary).
_EXACT_POLL = 0.005

#: Whole-table reads of a keyless table retried when the table changed meanwhile.
KEYLESS_ATTEMPTS = 5

#: Directory in the lake where ``binlake snapshot`` leaves requests for a running daemon.
REQUESTS_DIR = SNAPSHOT_REQUESTS_DIR

#: Seconds between looks at the requests directory.
REQUEST_POLL = 1.0

#: Seconds between looks at the requests of a lake on object storage (each look is a LIST
#: request, which a store bills).
STORE_REQUEST_POLL = 5.0

# information_schema DATA_TYPEs whose text can be written back as a literal that compares as
# the column does (numbers bare, temporals quoted, strings by hex with their collation).
_NUMERIC_KEYS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint",
                           "decimal", "numeric", "year", "bool", "boolean"})
_QUOTED_KEYS = frozenset({"date", "datetime", "timestamp", "time"})
_STRING_KEYS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
_BINARY_KEYS = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_INDEX_KEYS = frozenset({"enum", "set", "bit"})  # compared and ordered by their number

_COLUMNS_QUERY = (
    "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_SET_NAME, COLLATION_NAME "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = {table}")
_TABLES_QUERY = (
    "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
    "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")


class SnapshotError(Exception):
    """A table's snapshot cannot be completed (it is marked failed; others go on)."""


def table_key(database: str, table: str) -> str:
    """The name a table's progress is filed under in the checkpoint."""
    return f"{database}.{table}"


def _sql_text(text: str) -> str:
    """A string literal that survives any sql_mode and connection character set."""
    return f"CONVERT(X'{text.encode('utf-8', 'surrogateescape').hex()}' USING utf8mb4)"


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return "" if value is None else value


# --- what to snapshot --------------------------------------------------------------------------


async def list_tables(conn: Connection) -> list[tuple[str, str]]:
    """The server's base tables outside the system databases."""
    rows = await conn.query(_TABLES_QUERY)
    tables = [(_text(r[0]), _text(r[1])) for r in rows]
    return [t for t in tables if t[0].lower() not in SYSTEM_DATABASES]


def plan_state(state: SnapshotProgress, tables: Iterable[tuple[str, str]], *, reason: str,
               one_time: Callable[[str, str], bool] = lambda d, t: False,
               request: str | None = None, condition: str | None = None) -> SnapshotProgress:
    """``state`` with the tables added as pending (a finished one restarted). ``request``
    joins each table's waiting requests; ``condition``: a WHERE condition limiting the rows
    read (a table already pending or running keeps its own plan: the request waits for it)."""
    entries = {entry.name: entry for entry in state.tables or ()}
    for database, table in tables:
        entry = entries.get(table_key(database, table))
        requests = entry.requests if entry is not None else ()
        if request is not None:
            requests = (*requests, request)
        if entry is not None and entry.status in ("pending", "running"):
            entries[entry.name] = replace(entry, requests=requests)
            continue
        planned = TableProgress(database, table, "pending", reason, one_time(database, table),
                                None, 0, 0, requests, condition=condition)
        entries[planned.name] = planned
    return replace(state, tables=tuple(entries.values()))


def store_entry(state: SnapshotProgress, entry: TableProgress) -> SnapshotProgress:
    """``state`` with a table's entry put in, keeping the requests the state knows of (a
    request may join a table while it is being read)."""
    entries = {e.name: e for e in state.tables or ()}
    current = entries.get(entry.name)
    entries[entry.name] = entry if current is None else replace(entry,
                                                                requests=current.requests)
    return replace(state, tables=tuple(entries.values()))


def pending_tables(state: SnapshotProgress) -> list[TableProgress]:
    return [e for e in state.tables or () if e.status in ("pending", "running")]


def requests_done(state: SnapshotProgress, request: str, tables: Sequence[tuple[str, str]]
                  ) -> list[TableProgress] | None:
    """The entries of a request's tables once all are finished (done or failed), else None."""
    entries = {entry.name: entry for entry in state.tables or ()}
    found = []
    for database, table in tables:
        entry = entries.get(table_key(database, table))
        if entry is None or request not in entry.requests or entry.status not in (
                "done", "failed"):
            return None
        found.append(entry)
    return found


def write_request(lake: str, tables: Sequence[tuple[str, str]]) -> str:
    """Leave a request for the daemon that holds the lake; returns its id."""
    directory = os.path.join(lake, REQUESTS_DIR)
    os.makedirs(directory, exist_ok=True)
    request = uuid.uuid4().hex
    path = os.path.join(directory, f"{request}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"id": request, "tables": [list(t) for t in tables]}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return request


_unreadable_warned: set[str] = set()  # request paths already warned about (polled each second)


def read_requests(lake: str) -> list[tuple[str, list[tuple[str, str]]]]:
    directory = os.path.join(lake, REQUESTS_DIR)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                doc = json.load(f)
            found.append((str(doc["id"]), [(str(d), str(t)) for d, t in doc["tables"]]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            path = os.path.join(directory, name)
            if path not in _unreadable_warned:  # once, not at every poll
                _unreadable_warned.add(path)
                log.warning("ignoring the unreadable snapshot request %s: %s", path, exc)
    return found


def remove_request(lake: str, request: str) -> None:
    try:
        os.remove(os.path.join(lake, REQUESTS_DIR, f"{request}.json"))
    except FileNotFoundError:
        pass


class RequestBox(Protocol):
    """Where ``binlake snapshot`` leaves requests for the daemon holding the lake: a directory
    on disk (:class:`DirectoryRequests`), objects on a store (``sinks.factory.object_requests``)."""

    def read(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """Every readable request: (id, tables)."""
        ...

    def remove(self, request: str) -> None:
        """Delete a request (nothing if it is gone)."""
        ...


@dataclass(frozen=True, slots=True)
class DirectoryRequests:
    """The requests of a lake on disk: ``<lake>/_snapshot_requests/<id>.json``."""

    lake: str

    def read(self) -> list[tuple[str, list[tuple[str, str]]]]:
        return read_requests(self.lake)

    def remove(self, request: str) -> None:
        remove_request(self.lake, request)


# --- the key log ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _KeyLog:
    """The keys (and, for one-time copies, the latest images) of rows the stream touched."""

    key_columns: tuple[int, ...]
    keep_images: bool
    since: float = field(default_factory=time.monotonic)  # when it started
    #: The stream's position at its first transaction boundary since it started: the log holds
    #: every change of every transaction after it (None until the stream gets there).
    start: BinlogPosition | None = None
    #: MySQL with GTIDs: the stream's GTID set at ``start`` (the lake's and every transaction
    #: handed to the sink before it) — what a read must see (see ``SnapshotReader._read``).
    start_gtids: GtidSet | None = None
    touched: dict[tuple[Any, ...], list[Any] | None] = field(default_factory=dict)
    changes: int = 0  # rows events seen (what a keyless table's read is checked against)

    def note(self, event: RowsEvent) -> None:
        self.changes += 1
        if not self.key_columns:
            return
        if event.before is not None:
            self._note_image(event.before_columns, event.before, event.row_count, None)
        if event.after is not None:
            self._note_image(event.after_columns, event.after, event.row_count,
                             event.after if self.keep_images else None,
                             len(event.table.columns))
        elif self.keep_images and event.before is not None:
            pass  # a DELETE: the key maps to None (noted above)

    def _note_image(self, present: tuple[int, ...], values: tuple[list[Any], ...], n: int,
                    images: tuple[list[Any], ...] | None, width: int = 0) -> None:
        try:
            slots = [present.index(c) for c in self.key_columns]
        except ValueError:  # a key column absent from this image (MINIMAL after image)
            return
        full = images is not None and present == tuple(range(width))
        for row in range(n):
            key = tuple(values[s][row] for s in slots)
            self.touched[key] = [col[row] for col in values] if full else None


# --- chunks and their landing ----------------------------------------------------------------------


@dataclass(slots=True)
class Chunk:
    """Rows read for one table, waiting for the stream to pass ``high``."""

    table: SnapshotTable
    generation: int
    columns: Sequence[list[Any]]  # a tuple of lists, or a KeptImage that reads like one
    count: int
    high: BinlogPosition
    read_time_us: int
    progress: TableProgress  # the table's entry after this chunk
    keyless_changes: int = 0  # the key log's change count before the read (keyless tables)
    one_time: bool = False
    staged: StagedSnapshot | None = None  # the rows, staged in pieces (keyless tables; see pieces.py)
    landing_seconds: float = 0.0  # how long the stream waited while the staged pieces landed
    #: The after image's Arrow chunks (``SnapshotTable.decode_kept``), None: Python values.
    arrow: tuple[Any, ...] | None = None
    landed: trio.Event = field(default_factory=trio.Event)
    outcome: str = ""  # "landed", or why it was discarded
    landed_rows: int = 0


class SnapshotCoordinator:
    """What the stream and the snapshot reader share. The pipeline calls :meth:`observe`,
    :meth:`observe_statement` and :meth:`at_boundary` (synchronously, between its own steps),
    then awaits :meth:`land_due` when :attr:`landing_due`; the reader awaits :meth:`land`. Trio
    runs one task at a time, so no lock is needed.

    With a ``worker`` (the daemon's), chunks land and pieces are staged on it, off the event
    loop, and the sink is touched on the loop only while the worker is idle; without one (unit
    tests), :meth:`at_boundary` lands a waiting chunk at once, in the caller's thread."""

    def __init__(self, sink: Sink, worker: SinkWorker | None = None) -> None:
        self.sink = sink
        self.worker = worker
        self._due: BinlogPosition | None = None  # a boundary the waiting chunk lands at
        self._logs: dict[tuple[str, str], _KeyLog] = {}
        self._generations: dict[tuple[str, str], int] = {}
        self._changed_why: dict[tuple[str, str], str] = {}  # the last generation's cause
        self._chunk: Chunk | None = None
        self._txn_events: list[RowsEvent] = []  # of watched tables, in the open transaction
        self._txn_watched: frozenset[tuple[str, str]] = frozenset()  # when it began
        #: XA id → its prepared rows of watched tables, and the tables watched when it began
        #: (memory only: see :meth:`end` for a prepared part this process did not see whole)
        self._xa_events: dict[str, tuple[list[RowsEvent], frozenset[tuple[str, str]]]] = {}
        #: Rows of a keyless table read and staged, not landed yet (for the progress line).
        self.staged_rows: dict[str, int] = {}
        self.position: BinlogPosition | None = None  # stream position at the last boundary
        #: False while the stream is inside a transaction (set by the pipeline).
        self.between_transactions = False
        #: False only while :meth:`begin`, :meth:`observe` and the :meth:`end` of a plain
        #: commit would change nothing (no key log, no rows or watched tables held for the open
        #: transaction): the pipeline then skips those three calls, made on every transaction.
        #: A key log started mid-transaction sets it, so the transaction's later rows and end
        #: are seen as if its begin had been (begin of an unwatched stream holds nothing).
        self.tracking = False
        #: The snapshot progress (frozen: each change makes a new one, recorded in the sink).
        self.state: SnapshotProgress = sink.snapshot_state

    # --- the stream's side -------------------------------------------------------------------

    @property
    def watching(self) -> bool:
        return bool(self._logs)

    @property
    def idle(self) -> bool:
        """No key log and no chunk waiting: :meth:`at_boundary` only notes the position, so
        the stream may call it once after several transactions rather than after each."""
        return not self._logs and self._chunk is None

    def observe(self, event: RowsEvent) -> None:
        """A streamed rows event (filtered tables too; skipped transactions not). It counts
        once its transaction commits (see :meth:`end`)."""
        table = event.table
        if (table.schema, table.table) in self._logs:
            self._txn_events.append(event)

    def begin(self) -> None:
        self._txn_events = []
        self._txn_watched = frozenset(self._logs)
        self.tracking = bool(self._logs)

    def end(self, item: TransactionCommit | TransactionPrepared | TransactionRollback) -> None:
        """The end of a streamed transaction: its rows changed the tables if it committed. An
        XA PREPARE's rows wait for their XA COMMIT (which lands them: until then reads do not
        see them either) or are dropped by XA ROLLBACK.

        A prepared part is held in memory, so the XA COMMIT of one prepared before this
        process started (a restart in between), or before a table's key log started, finds
        no keys to note for that table, while a chunk read before the XA COMMIT became visible
        may still wait to land after it. The sink knows which tables every prepared part in
        the lake changed (it keeps them durable, see sinks/parquet/xa.py): such a table's
        waiting chunk is discarded and read again, as after DDL."""
        events, self._txn_events = self._txn_events, []
        watched, self._txn_watched = self._txn_watched, frozenset()  # read by this end only
        self.tracking = bool(self._logs)
        if isinstance(item, TransactionPrepared):
            self._xa_events[item.xid] = (events, watched)
            return
        if item.xa is not None:
            events_then, watched_then = self._xa_events.pop(item.xa, ([], frozenset()))
            if isinstance(item, TransactionCommit):
                events = events_then + events
                unseen = (self.sink.prepared_tables(item.xa) or frozenset()) - watched_then
                for name in sorted(unseen & self._logs.keys()):
                    self._changed_unseen(name, f"XA COMMIT {item.xa} of rows prepared before "
                                         "the table's snapshot started")
        if isinstance(item, TransactionRollback):
            return
        for event in events:
            table = event.table
            key_log = self._logs.get((table.schema, table.table))
            if key_log is not None:
                key_log.note(event)

    def observe_statement(self, statement: Statement) -> None:
        """DDL changes a table's description: a chunk read before it must not land."""
        if not statement.is_ddl or not (self._logs or self._chunk):
            return
        info = classify_ddl(statement.query, statement.schema)
        for name in info.tables if info is not None else ():
            self._changed_unseen(name, "the table's definition changed (DDL)")

    def _changed_unseen(self, name: tuple[str, str], why: str) -> None:
        """The table changed in a way its key log cannot tell by key: a chunk read before
        must not land (it is read again)."""
        self._generations[name] = self._generations.get(name, 0) + 1
        self._changed_why[name] = why
        chunk = self._chunk
        if chunk is not None and (chunk.table.database, chunk.table.name) == name:
            self._finish(chunk, why)

    def at_boundary(self, position: BinlogPosition) -> None:
        """The stream is between transactions at ``position``: land a chunk that waits for it."""
        self.position = position
        self.between_transactions = True
        for key_log in self._logs.values():
            if key_log.start is None:
                key_log.start = position
                if key_log.start_gtids is None:
                    key_log.start_gtids = self.stream_gtids()
        chunk = self._chunk
        if chunk is not None and position >= chunk.high:
            if self.worker is None:
                self._land_here(chunk, position)
            else:
                self._due = position

    @property
    def landing_due(self) -> bool:
        """:meth:`at_boundary` found the waiting chunk ready: the stream awaits
        :meth:`land_due` before it hands the sink anything more."""
        return self._due is not None

    async def land_due(self) -> None:
        """Land the chunk :meth:`at_boundary` found ready, at that boundary."""
        position, self._due = self._due, None
        chunk = self._chunk
        if position is not None and chunk is not None:
            await self._land(chunk, position)

    # --- the reader's side ---------------------------------------------------------------------

    def stream_stopped(self) -> None:
        """The stream ended (reconnecting): nothing lands until the next boundary."""
        self.between_transactions = False
        self.position = None
        self._due = None

    def generation(self, database: str, table: str) -> int:
        return self._generations.get((database, table), 0)

    def watch(self, database: str, table: str, key_columns: tuple[int, ...],
              keep_images: bool) -> float:
        """Start the table's key log (unless it runs with these key columns); returns the
        monotonic time it started."""
        key = (database, table)
        current = self._logs.get(key)
        if current is None or current.key_columns != key_columns:
            current = self._logs[key] = _KeyLog(key_columns, keep_images)
            self.tracking = True
            if self.between_transactions:
                # the GTID start needs no position: an idle dump by GTID learns its position
                # only from the next heartbeat, but which transactions it passed is known now
                current.start_gtids = self.stream_gtids()
                if self.position is not None:
                    current.start = self.position
        return current.since

    def stream_gtids(self) -> GtidSet | None:
        """MySQL: a copy of the GTID set of everything the stream has handed to the sink (and
        the lake's checkpoint); None without MySQL GTIDs."""
        gtids = self.sink.handled_gtids
        return gtids.copy() if gtids is not None else None

    def key_log_start(self, database: str, table: str) -> BinlogPosition | None:
        """See ``_KeyLog.start``."""
        key_log = self._logs.get((database, table))
        return key_log.start if key_log is not None else None

    def key_log_start_gtids(self, database: str, table: str) -> GtidSet | None:
        """See ``_KeyLog.start_gtids`` (None also until the key log has its start)."""
        key_log = self._logs.get((database, table))
        return key_log.start_gtids if key_log is not None else None

    def changes(self, database: str, table: str) -> int:
        key_log = self._logs.get((database, table))
        return key_log.changes if key_log is not None else 0

    def unwatch(self, database: str, table: str) -> None:
        self._logs.pop((database, table), None)

    def set_state(self, state: SnapshotProgress) -> None:
        """Record plan changes; they reach the checkpoint with the next flush (recorded in the
        sink once the worker is idle: see ``SinkWorker.call_soon``)."""
        self.state = state
        if self.worker is None:
            self.sink.land_chunk(SnapshotChunk(state))
        else:
            self.worker.call_soon(self.sink.land_chunk, SnapshotChunk(state))

    async def stage(self, staged: StagedSnapshot | None, event: RowsEvent) -> StagedSnapshot:
        """A piece of a chunk to staging (on the worker when there is one)."""
        if self.worker is None:
            return self.sink.stage_piece(staged, event)
        return await self.worker.run(self.sink.stage_piece, staged, event)

    async def discard(self, staged: StagedSnapshot) -> None:
        """Drop a staged chunk's pieces (files: on the worker when there is one)."""
        if self.worker is None:
            staged.discard()
        else:
            await self.worker.run(staged.discard)

    async def land(self, chunk: Chunk) -> bool:
        """Hand a chunk to the stream and wait until it landed (True) or was discarded."""
        self._chunk = chunk
        try:
            position = self.position
            if self.between_transactions and position is not None and position >= chunk.high:
                # the stream waits for its next packet, idle (and hands nothing over while
                # the worker lands this)
                if self.worker is None:
                    self._land_here(chunk, position)
                else:
                    await self._land(chunk, position)
            await chunk.landed.wait()
        finally:
            if self._chunk is chunk:
                self._chunk = None
        return chunk.outcome == "landed"

    def _finish(self, chunk: Chunk, outcome: str) -> None:
        chunk.outcome = outcome
        if self._chunk is chunk:
            self._chunk = None
        chunk.landed.set()

    def _land_here(self, chunk: Chunk, position: BinlogPosition) -> None:
        """:meth:`_land` in the caller's thread (no worker)."""
        landing = self._prepare(chunk, position)
        if landing is not None:
            call, count = landing
            started = time.monotonic()
            call()
            self._landed(chunk, count, time.monotonic() - started)

    async def _land(self, chunk: Chunk, position: BinlogPosition) -> None:
        """Land ``chunk`` at the boundary ``position`` on the worker, or discard it."""
        assert self.worker is not None
        landing = self._prepare(chunk, position)
        if landing is not None:
            call, count = landing
            started = time.monotonic()
            await self.worker.run(call)
            self._landed(chunk, count, time.monotonic() - started)

    def _landed(self, chunk: Chunk, count: int, seconds: float) -> None:
        if chunk.staged is not None:
            chunk.landing_seconds = seconds
        chunk.landed_rows = count
        self._finish(chunk, "landed")

    def _prepare(self, chunk: Chunk, position: BinlogPosition
                 ) -> tuple[Callable[[], int], int] | None:
        """Decide a chunk's landing at ``position``: the sink call that lands it and its rows,
        or None (discarded: the table changed, see :meth:`_finish`)."""
        table = chunk.table
        name = (table.database, table.name)
        if self._generations.get(name, 0) != chunk.generation:
            self._finish(chunk, self._changed_why.get(name, "the table changed"))
            return None
        key_log = self._logs.get(name)
        columns, count, arrow = chunk.columns, chunk.count, chunk.arrow
        if key_log is not None and not table.key_columns:
            if key_log.changes != chunk.keyless_changes:
                self._finish(chunk, "the table changed while it was read")
                return None
        staged = chunk.staged
        if staged is not None:
            count = staged.rows
        elif key_log is not None and key_log.touched and count:
            reconciled = _reconcile(table, columns, count, key_log, chunk.one_time)
            if reconciled[0] is not columns:  # rows dropped or replaced: land the lists
                columns, count, arrow = *reconciled, None
        chunk.progress = replace(chunk.progress, rows=chunk.progress.rows + count)
        state = self.state = store_entry(self.state, chunk.progress)
        sink, read_time_us = self.sink, chunk.read_time_us
        if staged is not None:
            return functools.partial(sink.land_chunk, SnapshotChunk(
                state, position, read_time_us, staged=staged)), count
        event = _read_event(table, read_time_us, cast(tuple[list[Any], ...], columns), count,
                            arrow)
        return functools.partial(sink.land_chunk, SnapshotChunk(
            state, position, read_time_us, event)), count


def _read_event(table: SnapshotTable, read_time_us: int, columns: tuple[list[Any], ...],
                count: int, arrow: tuple[Any, ...] | None = None) -> RowsEvent:
    """The READ rows event a snapshot chunk (or a keyless table's staged piece) lands as."""
    return RowsEvent(
        header=EventHeader(timestamp=read_time_us // 1_000_000, type_code=0,
                           server_id=0, event_size=0, log_pos=0, flags=0),
        kind=RowsKind.READ, table=table.table_map, flags=0, row_count=count,
        before_columns=(), after_columns=tuple(range(len(columns))), before=None,
        after=columns, arrow=None if arrow is None else (None, arrow))


def _reconcile(table: SnapshotTable, columns: Sequence[list[Any]], count: int,
               key_log: _KeyLog, one_time: bool) -> tuple[Sequence[list[Any]], int]:
    """Drop (or, for a one-time copy, replace by their latest image) the rows the stream
    touched since the key log started.

    Runs for every chunk read while the stream changes the table, so it must not cost a Python
    step per row: the chunk's keys are built and tested against the log by C loops (``zip``,
    ``isdisjoint``) and only the rows the log holds are handled one by one (a per-row loop here
    took more CPU than the rest of a snapshot of a table a writer updates)."""
    touched = key_log.touched
    keys = list(islice(zip(*(columns[i] for i in table.key_columns), strict=True), count))
    if touched.keys().isdisjoint(keys):
        return columns, count
    dropped: set[int] = set()
    replaced: dict[int, list[Any]] = {}
    for row in [row for row, key in enumerate(keys) if key in touched]:
        image = touched[keys[row]]
        if one_time and image is not None:
            replaced[row] = image
        else:
            dropped.add(row)
    if replaced:
        columns = tuple(list(col) for col in columns)
        for row, image in replaced.items():
            for k, col in enumerate(columns):
                col[row] = image[k]
    keep = [True] * count
    for row in dropped:
        keep[row] = False
    return tuple(list(compress(col, keep)) for col in columns), count - len(dropped)


# --- the reader ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Read:
    """One chunk as read, before it is decoded: what the reader hands the lander."""

    values: tuple[list[Any], ...]  # columnar, the key's literal columns after the table's
    converted: bool  # ResultSet.converted
    kept: bytearray | None  # a kept read's rows (ResultSet.kept; values is then empty)
    binary: tuple[bool, ...]  # each result column's binary flag (for kept rows)
    count: int
    high: BinlogPosition
    read_time_us: int
    keyless_changes: int
    last_key: tuple[str, ...] | None  # the chunk's last key as literals (None: no rows)
    done: bool
    exact: bool  # read at its consistent snapshot's binlog point (see SnapshotReader._read)


@dataclass(frozen=True, slots=True)
class _Key:
    """How to page by a table's key: SQL to fetch each key column's literal, and to compare."""

    names: tuple[str, ...]  # quoted column names, key order
    fetch: tuple[str, ...]  # extra SELECT expressions giving each key value as literal text
    compare: tuple[str, ...]  # the expressions compared and ordered by
    literal: tuple[Callable[[str], str], ...]  # fetched text → SQL literal

    def where(self, last: Sequence[str]) -> str:
        """``key > last`` in lexicographic order, as ORs of ranges an index can serve."""
        terms = []
        for i in range(len(self.compare)):
            equal = [f"{self.compare[j]} = {last[j]}" for j in range(i)]
            terms.append("(" + " AND ".join([*equal, f"{self.compare[i]} > {last[i]}"]) + ")")
        return " OR ".join(terms)


def _hex_literal(charset: str | None, collation: str | None) -> Callable[[str], str]:
    if charset is None or charset == "binary":
        return lambda text: f"X'{text}'"
    return lambda text: f"_{charset} X'{text}' COLLATE {collation}"


async def _key_plan(conn: Connection, table: SnapshotTable) -> _Key | None:
    """How to page by ``table.key_columns``; None when a key column's type has no literal that
    compares exactly as the column (FLOAT, JSON, spatial…): the table is then read whole."""
    if not table.key_columns:
        return None
    rows = await conn.query(_COLUMNS_QUERY.format(schema=_sql_text(table.database),
                                                  table=_sql_text(table.name)))
    info = {_text(r[0]): (_text(r[1]).lower(), r[2], r[3]) for r in rows}
    names, fetch, compare, literal = [], [], [], []
    for index in table.key_columns:
        column = table.table_map.columns[index]
        name = column.name or ""
        if name not in info:
            return None
        data_type, charset, collation = info[name]
        quoted = quote_name(name)
        names.append(quoted)
        if data_type in _NUMERIC_KEYS:
            fetch.append(quoted)
            compare.append(quoted)
            literal.append(lambda text: text)
        elif data_type in _QUOTED_KEYS:
            fetch.append(f"CAST({quoted} AS CHAR)")
            compare.append(quoted)
            literal.append(lambda text: "'" + text.replace("'", "''") + "'")
        elif data_type in _STRING_KEYS or data_type in _BINARY_KEYS:
            fetch.append(f"HEX({quoted})")
            compare.append(quoted)
            literal.append(_hex_literal(
                None if data_type in _BINARY_KEYS else _text(charset) or None,
                _text(collation) or None))
        elif data_type in _INDEX_KEYS:
            fetch.append(f"{quoted} + 0")
            compare.append(f"({quoted} + 0)")
            literal.append(lambda text: text)
        else:
            return None
    return _Key(tuple(names), tuple(fetch), tuple(compare), tuple(literal))


@dataclass(slots=True)
class _Entry:
    """The entry of the table being read, as its read goes on (each step a new record)."""

    now: TableProgress


@dataclass(slots=True)
class SnapshotReader:
    """Reads the pending tables of the snapshot state, one after the other, and lands them
    through the coordinator. Runs beside the stream; cancelled with it on a reconnect (it then
    resumes from the state, which holds every landed chunk)."""

    coordinator: SnapshotCoordinator
    connect: ConnectOptions
    chunk_rows: int = 10_000
    chunk_pause: float = 0.0  # seconds between chunks
    grace: float = GRACE
    #: Called with a table's finished entry (done or failed).
    on_table_done: Callable[[TableProgress], None] | None = None
    _clock_offset_us: int = 0
    _exact: bool = False  # MariaDB: reads at their consistent snapshot's binlog point
    _gtids: bool = False  # MySQL with gtid_mode = ON: reads bracketed by GTID watermarks
    #: MySQL with GTIDs: ``@@GLOBAL.gtid_executed`` as this connection last read it (see
    #: :meth:`_read_bracketed`), None before the first read.
    _executed: GtidSet | None = None
    #: The statement that gives the server's binlog end (:func:`binlog_status_statement`).
    _end_sql: str = ""

    async def run(self) -> None:
        """Snapshot every pending table of the state; returns when none is left."""
        if not pending_tables(self.coordinator.state):
            return
        async with await Connection.open(self.connect) as conn:
            self._executed = None  # what another connection (perhaps server) saw counts not
            await conn.execute("SET SESSION TRANSACTION READ ONLY")
            for statement in SESSION_SETUP:  # what reading the tables' select lists needs
                await conn.execute(statement)
            if conn.is_mariadb:  # WITH CONSISTENT SNAPSHOT is a read view in REPEATABLE READ
                await conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                self._exact = True
            else:
                mode = await conn.query("SELECT @@GLOBAL.gtid_mode")
                self._gtids = bool(mode) and _text(mode[0][0]).upper() == "ON"
                if not self._gtids:
                    log.warning(
                        "snapshot: the server runs without GTIDs (gtid_mode = %s), so a chunk "
                        "cannot be bracketed by GTID watermarks: each table's first read waits "
                        "%.1f s after its key log starts instead, and a transaction whose "
                        "engine commit lags its binlog write by more than that may be read "
                        "without its change being noted (a row of the lake then misses it "
                        "until the row changes again); set gtid_mode = ON "
                        "(enforce_gtid_consistency = ON) for exact snapshots",
                        _text(mode[0][0]) if mode else "unknown", self.grace)
                self._end_sql = await binlog_status_statement(conn)
            rows = await conn.query("SELECT UNIX_TIMESTAMP(NOW(6))")
            self._clock_offset_us = round(float(_text(rows[0][0])) * 1e6) - time.time_ns() // 1000
            while True:
                pending = pending_tables(self.coordinator.state)
                if not pending:
                    return
                if len(pending) > 1:  # its key log starts now: its grace passes meanwhile
                    await self._watch_early(conn, pending[1])
                await self._snapshot_table(conn, _Entry(replace(pending[0], status="running")))

    async def _watch_early(self, conn: Connection, entry: TableProgress) -> None:
        """Start the key log of the table read next, so that reading it need not wait."""
        try:
            table = await describe_table(conn, entry.database, entry.table)
            key = await _key_plan(conn, table)
        except (DescribeError, ServerError):
            return  # it is described again (and its errors reported) when its turn comes
        self.coordinator.watch(entry.database, entry.table,
                               table.key_columns if key is not None else (), entry.one_time)

    async def _snapshot_table(self, conn: Connection, entry: _Entry) -> None:
        database, name = entry.now.database, entry.now.table
        coordinator = self.coordinator
        attempts = 0
        described_at = -1
        try:
            while True:
                generation = coordinator.generation(database, name)
                try:
                    table = await describe_table(conn, database, name)
                except TableNotFound:
                    self._finish(entry, "done", f"{database}.{name} does not exist (or this "
                                 "user may not see it): nothing to snapshot")
                    return
                except DescribeError as exc:
                    self._finish(entry, "failed", f"{database}.{name} cannot be read: {exc}")
                    return
                condition = entry.now.condition
                if condition is not None:
                    refused = await _refused(conn, table, condition)
                    if refused is not None:
                        self._finish(entry, "failed", (
                            f"the condition {condition!r} cannot limit {database}.{name}: the "
                            f"server refused it ({refused}); nothing was read"))
                        return
                key = await _key_plan(conn, table)
                if key is None and table.key_columns:
                    table = replace(table, key_columns=())
                key_names = key.names if key is not None else ()
                if entry.now.key != key_names:  # a new (or changed) key: from the start
                    entry.now = replace(entry.now, key=key_names, last_key=None, high_key=None,
                                        has_high_key=True)
                since = coordinator.watch(database, name, table.key_columns,
                                          entry.now.one_time)
                if described_at < 0:
                    log.info("snapshot of %s.%s: %s", database, name,
                             f"by key ({', '.join(key.names)}), {self.chunk_rows} rows a chunk"
                             if key is not None else "no usable key: read whole by one SELECT, "
                             f"staged in pieces of {self.chunk_rows} rows, landed in one commit")
                described_at = generation
                finished = await self._chunks(conn, table, key, entry, generation, since)
                if finished:
                    return
                attempts += 1
                if key is None and attempts >= KEYLESS_ATTEMPTS:
                    self._finish(entry, "failed", (
                        f"{database}.{name} has no primary key nor NOT NULL unique key, and "
                        f"changed during each of {attempts} whole-table reads: not snapshotted "
                        "(add a key, or run `binlake snapshot` while it is quiet)"))
                    return
                await trio.sleep(min(self.grace * attempts, 10.0))
        finally:
            coordinator.unwatch(database, name)

    async def _chunks(self, conn: Connection, table: SnapshotTable, key: _Key | None,
                      entry: _Entry, generation: int, since: float) -> bool:
        """Read and land chunks until the table is done (True) or a chunk was discarded.

        The next chunk is read while the previous one is decoded and landed (a task of its
        own, one chunk ahead): the server's producing of rows and binlake's converting of them
        overlap on the two cores instead of taking turns."""
        if key is None:
            return await self._keyless(conn, table, entry, generation)
        if entry.now.high_key is None:
            # The table's last key now: rows inserted later come from the stream, so a table
            # that grows faster than it is read is done once it is read up to here.
            top = await conn.query(
                f"SELECT {', '.join(key.fetch)} FROM {_source(table)} ORDER BY "
                f"{', '.join(c + ' DESC' for c in key.compare)} LIMIT 1")
            entry.now = replace(entry.now, has_high_key=True, high_key=tuple(
                lit(_text(v)) for lit, v in zip(key.literal, top[0], strict=True)
            ) if top else ())
        send, receive = trio.open_memory_channel[_Read | None](0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_chunks, conn, table, key, entry.now, generation,
                               since, send)
            async with receive:
                async for read in receive:
                    if read is None or not await self._land_read(table, entry, generation,
                                                                 read):
                        return False  # the reader stops at its next chunk
                    if read.done:
                        return True
        return False

    async def _land_read(self, table: SnapshotTable, entry: _Entry, generation: int,
                         read: _Read) -> bool:
        """Decode a chunk, land it and record the table's progress; False if discarded."""
        coordinator = self.coordinator
        arrow = None
        columns: Sequence[list[Any]]
        try:
            if read.kept is not None:
                image, arrow = table.decode_kept(read.kept, read.count, read.binary)
                image.decode_where(arrow)  # a value only Python converts: its error here
                columns = image
            else:
                columns = table.decode_columns(read.values, read.converted)
        except ValueError as exc:
            if coordinator.generation(table.database, table.name) != generation:
                log.info("snapshot of %s.%s: re-reading after a definition change (%s)",
                         table.database, table.name, exc)
                return False
            raise
        now = entry.now
        progress = replace(
            now, chunks=now.chunks + 1, exact_chunks=(now.exact_chunks or 0) + read.exact,
            last_key=read.last_key if read.last_key is not None else now.last_key,
            status="done" if read.done else now.status)
        chunk = Chunk(table, generation, columns, read.count, read.high, read.read_time_us,
                      progress, keyless_changes=read.keyless_changes, one_time=now.one_time,
                      arrow=arrow)
        if not await coordinator.land(chunk):
            log.info("snapshot of %s.%s: chunk discarded (%s); reading it again",
                     table.database, table.name, chunk.outcome)
            return False
        entry.now = chunk.progress  # its rows counted at the landing
        if read.done:
            self._finish(entry, "done", None)
        return True

    async def _read_chunks(self, conn: Connection, table: SnapshotTable, key: _Key,
                           entry: TableProgress, generation: int, since: float,
                           send: trio.MemorySendChannel[_Read | None]) -> None:
        """Read the table's chunks in key order into ``send`` (None: a definition change, to
        be described again) until the last one, or until the lander stops taking them.

        A chunk is handed to the lander only once the next chunk's SELECT is sent: the server
        runs it (and streams its rows into the socket buffers) while binlake decodes and lands
        the chunk before — both cores busy, instead of taking turns."""
        coordinator = self.coordinator
        width = len(table.table_map.columns)
        last, top_key = entry.last_key, entry.high_key
        pending: _Read | None = None
        stopped = False

        async def hand_over() -> None:
            nonlocal pending, stopped
            if pending is not None and not stopped:
                try:
                    await send.send(pending)
                except trio.BrokenResourceError:
                    stopped = True  # the lander discarded a chunk: it reads again from there
            pending = None

        async with send:
            while True:
                terms = [f"({key.where(last)})"] if last else []
                if top_key:
                    terms.append(f"NOT ({key.where(top_key)})")
                if entry.condition is not None:
                    terms.append(f"({entry.condition})")
                where = f" WHERE {' AND '.join(terms)}" if terms else ""
                sql = (f"SELECT {table.select_list}, {', '.join(key.fetch)} FROM "
                       f"{_source(table)}{where} ORDER BY {', '.join(key.compare)} "
                       f"LIMIT {self.chunk_rows}")
                before = coordinator.changes(table.database, table.name)
                read_time_us = time.time_ns() // 1000 + self._clock_offset_us
                try:
                    kept: bytearray | None = None
                    binary: tuple[bool, ...] = ()
                    last_row: tuple[str | bytes | None, ...] | None = None
                    if top_key == ():  # the table was empty
                        values: tuple[list[Any], ...] = tuple([] for _ in range(width))
                        converted, high, exact = True, await binlog_end(conn), False
                        count = 0
                    else:
                        result, high, exact = await self._read(conn, table, sql, since, None,
                                                               hand_over)
                        assert result is not None  # read by conn.read_columns
                        values, converted = result.values or (), result.converted
                        count = len(values[0]) if values else 0
                        if result.kept is not None:
                            kept, count = result.kept, result.kept_rows
                            binary = tuple(map(is_binary_column, result.columns))
                            if count and key is not None:
                                last_row = kept_row(kept, result.kept_last, binary)[width:]
                except ServerError as exc:
                    if coordinator.generation(table.database, table.name) != generation or (
                            exc.code in (1054, 1146)):
                        log.info("snapshot of %s.%s: re-reading after a definition change (%s)",
                                 table.database, table.name, exc)
                        await send.send(None)
                        return
                    raise
                done = count < self.chunk_rows
                last_key = None
                if count:
                    if last_row is None:
                        last_row = tuple(column[-1] for column in values[width:])
                    last_key = last = tuple(lit(_text(v)) for lit, v in zip(
                        key.literal, last_row, strict=True))
                if stopped:
                    return
                pending = _Read(values, converted, kept, binary, count, high, read_time_us,
                                before, last_key, done, exact)
                if done or self.chunk_pause:
                    await hand_over()
                if done or stopped:
                    return
                if self.chunk_pause:
                    await trio.sleep(self.chunk_pause)

    async def _keyless(self, conn: Connection, table: SnapshotTable, entry: _Entry,
                       generation: int) -> bool:
        """Read a table without a usable key by one SELECT (one consistent read view) and
        land it as one chunk (True), or discard it (False: it changed meanwhile, or its
        definition did) — in memory one piece of at most ``chunk_rows`` rows at a time: each is
        converted and staged as it comes off the socket (``sinks/parquet/pieces.py``), and the
        chunk lands as one commit of all its pieces, or none."""
        coordinator = self.coordinator
        database, name = table.database, table.name
        progress_key = table_key(database, name)
        staged: StagedSnapshot | None = None
        landed = False
        undecodable: ValueError | None = None  # the first piece that did not decode

        async def take(values: tuple[list[Any], ...], converted: bool) -> None:
            nonlocal staged, undecodable
            if undecodable is not None:
                return  # the rest of the result is read (and dropped): the connection stays usable
            try:
                columns = table.decode_columns(values, converted)
            except ValueError as exc:
                undecodable = exc
                return
            staged = await coordinator.stage(staged, _read_event(
                table, read_time_us, columns, len(columns[0]) if columns else 0))
            coordinator.staged_rows[progress_key] = staged.rows
            if self.chunk_pause:
                await trio.sleep(self.chunk_pause)

        async def receive() -> ResultSet | None:
            await conn.read_columns_in_pieces(table.wire_kinds, self.chunk_rows, take)
            if undecodable is not None:
                raise undecodable
            return None

        before = coordinator.changes(database, name)
        counted = coordinator.position  # the read must see every change counted in ``before``
        counted_gtids = coordinator.stream_gtids()  # the same, by GTID (MySQL)
        read_time_us = time.time_ns() // 1000 + self._clock_offset_us
        sql = f"SELECT {table.select_list} FROM {_source(table)}"
        if entry.now.condition is not None:
            sql += f" WHERE ({entry.now.condition})"
        try:
            try:
                _, high, exact = await self._read(conn, table, sql, time.monotonic(), counted,
                                                  _nothing, receive, counted_gtids)
            except (ServerError, ValueError) as exc:
                if coordinator.generation(database, name) != generation or (
                        isinstance(exc, ServerError) and exc.code in (1054, 1146)):
                    log.info("snapshot of %s.%s: re-reading after a definition change (%s)",
                             database, name, exc)
                    return False
                raise
            pieces = len(staged.pieces) if staged is not None else 0
            now = entry.now
            progress = replace(now, chunks=now.chunks + max(1, pieces),
                               exact_chunks=(now.exact_chunks or 0) + max(1, pieces) * exact,
                               status="done")
            # an empty table stages nothing: an empty chunk carries the progress alone
            empty: tuple[list[Any], ...] = (
                tuple([] for _ in table.table_map.columns) if staged is None else ())
            chunk = Chunk(table, generation, empty, 0, high, read_time_us, progress,
                          keyless_changes=before, one_time=now.one_time,
                          staged=staged)
            landed = await coordinator.land(chunk)
            if not landed:
                log.info("snapshot of %s.%s: chunk discarded (%s); reading it again",
                         database, name, chunk.outcome)
                return False
            entry.now = chunk.progress  # its rows counted at the landing
            if staged is not None:
                log.info("snapshot of %s.%s: read by one SELECT, its %d rows landed in one "
                         "commit of %d pieces (at most %d rows a piece, snapshot.chunk_rows; "
                         "the stream waited %.1f s while they were written as Parquet)",
                         database, name, chunk.landed_rows, pieces, staged.peak_rows,
                         chunk.landing_seconds)
            self._finish(entry, "done", None)
            return True
        finally:
            coordinator.staged_rows.pop(progress_key, None)
            if staged is not None and not landed:
                with trio.CancelScope(shield=True):  # (a reconnect cancels the reader)
                    await coordinator.discard(staged)

    async def _read(self, conn: Connection, table: SnapshotTable, sql: str, since: float,
                    counted: BinlogPosition | None, sent: Callable[[], Awaitable[None]],
                    receive: Callable[[], Awaitable[ResultSet | None]] | None = None,
                    counted_gtids: GtidSet | None = None
                    ) -> tuple[ResultSet | None, BinlogPosition, bool]:
        """Run a chunk's SELECT; its result and a binlog position it is consistent with: every
        change the SELECT saw is before it, and the table's key log holds every change after it
        (for a keyless table, its change count ``before`` was taken at ``counted``).

        MariaDB: in a transaction WITH CONSISTENT SNAPSHOT, whose ``binlog_snapshot_file``/
        ``_position`` is exactly the binlog point of its read view — the read waits (a few
        milliseconds) until that point is at or past where the key log started, and is then
        exact, with no lock. MySQL, or a MariaDB point that does not get there within the
        grace: after GRACE since the key log started (see the module docstring), the server's
        binlog end after the SELECT (``binlog_end``). The flag says which (True: exact).
        MySQL with GTIDs: exact too, by GTID watermarks (:meth:`_read_bracketed`).
        ``sent`` is awaited once the SELECT is sent, before its rows are read."""
        kinds, keep = table.wire_kinds, table.reads_kept
        if self._gtids:
            return await self._read_bracketed(conn, table, sql, since, sent, receive,
                                              counted_gtids)
        if self._exact:
            while True:
                await conn.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                point = await snapshot_position(conn)
                start = self.coordinator.key_log_start(table.database, table.name)
                if point is not None and start is not None and point >= start and (
                        counted is None or point >= counted):
                    await conn.send_query(sql)
                    await sent()
                    result = await (receive() if receive else conn.read_columns(kinds, keep=keep))
                    await conn.execute("COMMIT")
                    return result, point, True
                await conn.execute("COMMIT")
                if time.monotonic() >= since + self.grace:
                    break
                await trio.sleep(_EXACT_POLL)
        await trio.sleep(max(0.0, since + self.grace - time.monotonic()))
        await conn.send_query(sql)
        await sent()
        result = await (receive() if receive else conn.read_columns(kinds, keep=keep))
        return result, await binlog_end(conn), False

    async def _read_bracketed(self, conn: Connection, table: SnapshotTable, sql: str,
                              since: float, sent: Callable[[], Awaitable[None]],
                              receive: Callable[[], Awaitable[ResultSet | None]] | None,
                              counted_gtids: GtidSet | None
                              ) -> tuple[ResultSet | None, BinlogPosition, bool]:
        """MySQL with GTIDs: the read between a low and a high watermark, exact whatever the
        lag between a transaction's binlog write and its engine commit.

        * Low: ``@@GLOBAL.gtid_executed`` read before the SELECT. MySQL adds a transaction's
          GTID to it in the commit stage after the storage engine committed it (binlog group
          commit: flush to the binlog, sync, engine commit, then the GTIDs), so every
          transaction in it is visible to the SELECT, whose read view is made afterwards. The
          read goes ahead only once that set holds the stream's GTID set where the table's key
          log started (and, keyless, where its change count was taken): every transaction the
          stream passed before the key log is then visible to the read, and every later one
          is in the key log. A transaction written to the binlog but not yet committed in the
          engine is not in the set: the read waits for its commit, however long it lags.
          A set read earlier on this connection serves as well when it already holds what
          the read needs (the next chunks of a table): a transaction it holds was committed
          in the engine before that read, so before every later read view too. The server is
          asked again only for what that set lacks.
        * High: the binlog end read after the SELECT. A transaction the SELECT saw was
          committed in the engine before, so written to the binlog before: it is before that
          end, which the chunk waits for the stream to pass. The statement is sent with the
          SELECT, pipelined (:meth:`Connection.send_query_after`): the server runs it once it
          has sent the SELECT's rows, so it costs no round trip of its own.

        So each row the chunk holds is the row as of the stream's position where it lands,
        unless the key log holds its key (the stream's newer change wins), as on MariaDB."""
        kinds, keep = table.wire_kinds, table.reads_kept
        waited_from = time.monotonic()
        while True:
            needed = self.coordinator.key_log_start_gtids(table.database, table.name)
            if needed is None and self.coordinator.key_log_start(
                    table.database, table.name) is not None:
                needed = GtidSet()  # the key log started before the stream saw any GTID
            if needed is not None and counted_gtids is not None:
                needed = needed | counted_gtids
            executed = self._executed
            if needed is not None and executed is not None and needed <= executed:
                break
            rows = await conn.query("SELECT @@GLOBAL.gtid_executed")
            executed = self._executed = GtidSet.parse(_text(rows[0][0]) if rows else "")
            if needed is not None and needed <= executed:
                break
            if time.monotonic() - waited_from > COMMIT_WAIT:
                missing = needed - executed if needed is not None else None
                raise SnapshotError(
                    f"{table.database}.{table.name}: the stream's transactions "
                    f"{missing.to_text(',') if missing is not None else '(none yet)'} are "
                    f"not in the server's @@GLOBAL.gtid_executed after {COMMIT_WAIT:.0f} s "
                    "(the stream has not reached a transaction boundary, or the server "
                    "is not the one whose binlog is streamed)")
            await trio.sleep(_EXACT_POLL)
        await conn.send_query(sql)
        await conn.send_query_after(self._end_sql)
        try:
            await sent()
            result = await (receive() if receive else conn.read_columns(kinds, keep=keep))
        except (ServerError, ValueError):
            await conn.read_result_after()  # the connection stays usable for what follows
            raise
        return result, binlog_end_of((await conn.read_result_after()).rows), True

    def _finish(self, entry: _Entry, status: str, message: str | None) -> None:
        done = entry.now = replace(entry.now, status=status,
                                   message=message if message is not None else entry.now.message)
        coordinator = self.coordinator
        coordinator.set_state(store_entry(coordinator.state, done))
        if status == "failed":
            log.error("snapshot of %s failed: %s", done.name, message)
        elif message:
            log.warning("%s", message)
        else:
            exact = (f", {done.exact_chunks or 0} of them read at their consistent "
                     "snapshot's exact binlog point" if self._exact else
                     f", {done.exact_chunks or 0} of them between GTID watermarks"
                     if self._gtids else "")
            log.info("snapshot of %s done: %d rows in %d chunks%s", done.name, done.rows,
                     done.chunks, exact)
            if done.one_time:
                log.warning("%s is excluded by the filters: this was a one-time copy, its "
                            "later changes will not land", done.name)
        if self.on_table_done is not None:
            self.on_table_done(done)


async def _nothing() -> None:
    pass


async def _refused(conn: Connection, table: SnapshotTable, condition: str) -> str | None:
    """Why the server refuses ``condition`` as a WHERE of ``table`` (its error), or None.

    Asked once before a conditioned table is read: an unknown column or a syntax error then
    ends that table's snapshot as failed, where a chunk's own error (1054, unknown column)
    would read as a definition change and be retried."""
    try:
        await conn.query(f"SELECT 1 FROM {_source(table)} WHERE ({condition}) LIMIT 0")
    except ServerError as exc:
        return f"error {exc.code}: {exc.message}"
    return None


def _source(table: SnapshotTable) -> str:
    return f"{quote_name(table.database)}.{quote_name(table.name)}"


async def snapshot_position(conn: Connection) -> BinlogPosition | None:
    """MariaDB: the binlog point of the read view of the transaction started WITH CONSISTENT
    SNAPSHOT on ``conn`` (``binlog_snapshot_file``/``_position``); None when not reported."""
    rows = await conn.query("SHOW STATUS LIKE 'binlog\\_snapshot\\_%'")
    status = {_text(r[0]).lower(): _text(r[1]) for r in rows}
    file = status.get("binlog_snapshot_file", "")
    position = status.get("binlog_snapshot_position", "")
    if not file or not position.isdigit():
        return None
    return BinlogPosition(file, int(position))


async def binlog_end(conn: Connection) -> BinlogPosition:
    """The server's binlog end now (``SHOW MASTER STATUS`` / ``SHOW BINARY LOG STATUS``)."""
    if conn.is_mariadb:
        rows = await conn.query("SHOW MASTER STATUS")
    else:
        try:
            rows = await conn.query("SHOW BINARY LOG STATUS")
        except ServerError:  # MySQL before 8.2
            rows = await conn.query("SHOW MASTER STATUS")
    return binlog_end_of(rows)


async def binlog_status_statement(conn: Connection) -> str:
    """The statement that gives the server's binlog end: ``SHOW BINARY LOG STATUS`` on MySQL
    8.2 and later, ``SHOW MASTER STATUS`` on MariaDB and older MySQL (tried once here, so the
    reads can send it pipelined, where an error would be too late to try the other)."""
    if conn.is_mariadb:
        return "SHOW MASTER STATUS"
    try:
        await conn.query("SHOW BINARY LOG STATUS")
    except ServerError:  # MySQL before 8.2
        return "SHOW MASTER STATUS"
    return "SHOW BINARY LOG STATUS"


def binlog_end_of(rows: Sequence[Sequence[str | bytes | None]]) -> BinlogPosition:
    """The binlog end in the rows of :func:`binlog_status_statement`'s statement."""
    if not rows:
        raise SnapshotError("the server reports no binlog position (is log_bin on?)")
    return BinlogPosition(_text(rows[0][0]), int(_text(rows[0][1])))
