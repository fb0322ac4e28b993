"""``ParquetSink``: the transaction item stream → crash-safe, schema-versioned Parquet change logs.

How data moves (all sizes are Arrow buffer bytes, i.e. uncompressed):

* Rows of the *open* transaction are converted per ``RowsEvent`` into record batches and held
  per table. They cannot be written to their final files yet: the commit time (``_commit_ts``
  and the ``commit_date`` partition) is only known at COMMIT, and a ROLLBACK must leave no trace.
  When the sink's memory budget is exceeded they are *spilled* to an Arrow IPC file in staging,
  so a transaction of millions of rows costs disk, not memory.
* At COMMIT the transaction's batches (spilled ones first, read back one at a time) get their
  commit columns and join the per-file *pending* buffers, keyed by table, schema version and
  commit date. A pending buffer that reaches ``row_group_bytes`` is written as one row group into
  its staged Parquet file; a staged file that reaches ``file_size_bytes`` is closed and the
  sink flushes after this commit.
* A *flush* closes every staged file and commits them together with the checkpoint (see
  ``commit.py``): only whole transactions ever become visible, and the checkpoint says exactly
  which. Flushes happen by size, by row count (``flush_rows``), by time (``maybe_flush``: after
  ``flush_interval_s``, or ``catch_up_interval_s`` while the caller says the source is behind),
  on request (``flush``) and at ``close``. A flush writes a file per table it touched, so a
  backlog over thousands of tables is landed in few, big flushes.

The sink never reads a clock: ``maybe_flush(now)`` takes the caller's monotonic time.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.parquet as pq

from protocol.binlog.events import EventType
from protocol.binlog.model import BinlogPosition, Column, RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.transactions import (
    Statement,
    TransactionBegin,
    TransactionCommit,
    TransactionItem,
    TransactionPrepared,
    TransactionRollback,
)
from protocol.binlog.values import JsonDiff
from protocol.failover import ServerIdentity
from protocol.frozen import positional_maker
from protocol.gtid import GtidPosition, GtidSet, MariadbGtid, MysqlGtid

from ..contract import CommitOutcome, Flushed, Pending
from ..errors import LakeError, SinkStateError
from ..transform import Transform, TypeOptions
from . import commit as C
from . import ddl as D
from . import files as F
from . import layout as L
from . import native_batch as _native_batch
from . import pieces as P
from . import small_file
from . import state as S
from . import trees as T
from . import xa as X
from .encoder import RowGroupEncoder
from .lock import LakeLock
from .rows import Exported, PendingRows, TransactionTags, key_changed_rows, rows_batch, rows_export
from .schema import COMMIT_TS_FIELD, TableVersion, VersionOrigin, signature
from .type_record import check_types
from .types import new_counter

log = logging.getLogger("binlake.sinks.parquet")

_UPDATE = RowsKind.UPDATE
_PARTIAL_UPDATE_ROWS = EventType.PARTIAL_UPDATE_ROWS

MiB = 1024 * 1024

#: DDL remembered for tables whose next schema version has not appeared yet (see _log_ddl).
MAX_PENDING_DDL = 1000

#: Rows events are converted to Arrow in groups of about this many rows (see rows.py)…
GROUP_ROWS = 4096
#: … or of this many events: a group's conversion reads every event's Arrow chunks again and
#: then frees the events, so small groups of small events are converted while their chunks are
#: likely still in the CPU's caches, and keep fewer objects alive for the cyclic GC to scan (with
#: the default GC thresholds, 4,096 one-row transactions per group converted about half as fast
#: per row as 256; with the daemon's, see replica/cli.py, the difference is within the noise).
#: 256 keeps the per-batch work (~20 Arrow calls) small per row.
GROUP_EVENTS = 256

#: Files the sink may hold open between flushes to relieve memory by row groups. Relieving
#: memory that way opens a Parquet writer per table; over thousands of tables — a backlog, which
#: flushes by size, not time — those writers and their small row groups took the daemon to
#: 600 MB for 400k rows over 2,000 tables. With more files than this buffered, a full memory
#: budget flushes at the next commit instead: memory stays bounded, and a backlog costs a file
#: per table per ``memory_limit_bytes`` of rows.
MAX_OPEN_FILES = 256


#: Arrow bytes per row of the metadata columns (``_op`` … ``_commit_ts``, ``_missing``,
#: ``_json_diff``, ``_before`` when absent): 8 per integer, 4 per string offset, ~1 per op
#: letter and validity bit, rounded up; the GTID's and binlog file's text come on top.
METADATA_ROW_BYTES = 112

#: Arrow bytes per value, metadata columns included (14 of them), assumed for an event decoded
#: into Python values (no Arrow chunks: a type the native decoder leaves to Python, or
#: BINLAKE_NATIVE_ARROW=0).
VALUE_BYTES = 12


def _estimate(version: TableVersion, event: RowsEvent, tags: TransactionTags) -> int:
    """Arrow bytes that the rows of ``event`` will take once converted, for the memory budget.

    Events decoded into Arrow chunks (the native decoder's, ``RowsEvent.arrow``) count their
    chunks' buffers — validity, data and offsets, the very bytes gathered into the batch, so
    text and binary columns count at their real size — plus the metadata columns. Events
    without chunks count :data:`VALUE_BYTES` per value, metadata included.
    """
    rows = event.row_count
    images = event.arrow
    if images is None:
        return rows * (len(version.names) + 14) * VALUE_BYTES
    size = rows * (METADATA_ROW_BYTES + len(tags.gtid or "") + len(tags.file or ""))
    if _native_batch.arrow_bytes is not None:  # the same sum in C: the loop below showed in profiles
        return size + _native_batch.arrow_bytes(images)
    for chunks in images:
        if chunks is not None:
            for chunk in chunks:
                if chunk is not None:  # (tag, nulls, validity, data, offsets)
                    size += len(chunk[3])
                    if chunk[2] is not None:
                        size += len(chunk[2])
                    if chunk[4] is not None:
                        size += len(chunk[4])
    return size


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Tuning knobs; the defaults suit Spark (big files, row groups of tens of MB)."""

    file_size_bytes: int = 128 * MiB  # close a data file (and flush) once it is this big on disk
    row_group_bytes: int = 16 * MiB  # Arrow bytes buffered per file before writing a row group
    memory_limit_bytes: int = 64 * MiB  # all buffered rows; above it, spill / write row groups
    flush_rows: int = 1_000_000  # committed rows since the last flush that force a flush
    flush_interval_s: float = 5.0  # maybe_flush() flushes data older than this
    catch_up_interval_s: float = 60.0  # ... or than this, while the source is behind
    compression: str = "zstd"
    compression_level: int = 1  # level 3 costs ~25% more CPU per row for ~2% smaller files
    #: Codec of a file written whole from less than ``files.SMALL_FILE_BYTES`` of rows (a
    #: flush over many tables): zstd's set-up per column chunk costs more than it saves there.
    #: "none" lets the native writer write it (``small_file.py``: ~5x less CPU than pyarrow,
    #: files ~1.5x the size of snappy's); "snappy" has pyarrow write it compressed.
    small_file_compression: str | None = "none"
    spill_compression: str | None = "lz4"
    #: Encode row groups on a background thread (encoder.py), overlapping the caller's work;
    #: False writes them in the caller's thread (the same files).
    background_encoding: bool = True
    #: A commit (or snapshot chunk) past ``file_size_bytes`` or ``flush_rows`` flushes inside
    #: the call that handed it over; False only sets ``flush_wanted`` and the caller flushes
    #: (the daemon, on its sink worker thread rather than its event loop).
    flush_in_handle: bool = True
    #: Column rules (``sinks.transform``), applied to every rows event before it is landed:
    #: streamed rows, before images, XA parts and snapshot chunks alike. None: no rules.
    transform: Transform | None = None


@dataclass(slots=True)
class _TxnTable:
    """The open transaction's rows of one table version: batches in memory and/or spilled."""

    version: TableVersion
    batches: list[pa.RecordBatch] = field(default_factory=list)  # staging schema
    nbytes: int = 0  # of batches and pending (estimated)
    pending: list[PendingRows] = field(default_factory=list)  # newer than batches
    pending_rows: int = 0
    pending_bytes: int = 0  # estimated (_estimate)
    spill_path: str | None = None
    spill_file: Any = None
    spill_writer: Any = None


@dataclass(slots=True)
class _Transaction:
    tags: TransactionTags
    begin: TransactionBegin
    skip: bool = False
    next_row: int = 0
    tables: dict[int, _TxnTable] = field(default_factory=dict)  # by id(version)
    statements: list[Statement] = field(default_factory=list)


@dataclass(slots=True)
class _Part:
    """Committed rows bound for one data file (table, schema version, commit date)."""

    version: TableVersion
    commit_date: str
    first_seq: int = 0
    batches: list[pa.RecordBatch] = field(default_factory=list)
    nbytes: int = 0  # of batches and pending (estimated)
    pending: list[PendingRows] = field(default_factory=list)  # newer than batches
    pending_rows: int = 0
    pending_bytes: int = 0  # estimated (_estimate)
    writer: pq.ParquetWriter | None = None
    file_bytes: int = 0  # of the open file, as of its last row group accounted for
    staged: str = ""  # relative to the lake
    final: str = ""
    prepared: str = ""  # its first file, made ahead on the trees' thread (see _prepare_part)
    made_by: int = 0  # the trees' batch that makes it (StagedTrees.wait_for)


_ACCEPTED = CommitOutcome.ACCEPTED
_ALREADY_LANDED = CommitOutcome.ALREADY_LANDED

#: TransactionTags, built in C when protocol._native_slots is (one per transaction; every
#: field positional, in declaration order).
_make_tags = positional_maker(TransactionTags)


def _gtid_tags(gtid: Any) -> tuple[str | None, int | None, int | None, str | None,
                                   str | None, int | None]:
    if gtid is None:
        return None, None, None, None, None, None
    if isinstance(gtid, MariadbGtid):
        return str(gtid), gtid.domain, gtid.server_id, None, None, gtid.seq
    if isinstance(gtid, MysqlGtid):
        return str(gtid), None, None, str(gtid.tsid.uuid), gtid.tsid.tag or None, gtid.gno
    return str(gtid), None, None, None, None, None


#: Parquet tries dictionary encoding on every column until a column chunk's dictionary outgrows
#: this; the writer's default (1 MiB) spends a third of its CPU on a wide table hashing
#: high-cardinality values only to fall back to plain encoding, making files bigger. 16 KiB keeps
#: dictionaries for the columns that benefit (metadata, ENUM/SET labels, codes, flags).
DICTIONARY_PAGE_LIMIT = 16 * 1024


_US_PER_DAY = 86_400 * 1_000_000
_EPOCH_DATE = _dt.date(1970, 1, 1)


@functools.lru_cache(maxsize=64)
def _day_text(day: int) -> str:
    return (_EPOCH_DATE + _dt.timedelta(days=day)).isoformat()


def _commit_date(commit_time_us: int) -> str:
    """The UTC date of a commit, ``YYYY-MM-DD`` (asked once per transaction: cached per day)."""
    return _day_text(commit_time_us // _US_PER_DAY)


class ParquetSink:
    """Lands a transaction item stream under ``lake_dir``; see the module docstring.

    Usage: ``checkpoint = sink.open()`` (resume from it), then ``sink.handle(item)`` for every
    item, ``sink.maybe_flush(now)`` now and then, ``sink.close()`` at the end.
    ``sink.durable_position`` is the last transaction whose rows are durable and visible.
    """

    def __init__(self, lake_dir: str, options: SinkOptions | None = None) -> None:
        self.lake = os.path.abspath(lake_dir)
        self.options = options or SinkOptions()
        transform = self.options.transform
        self._transform = transform if transform is not None and transform.active else None
        self._types = transform.types if transform is not None else TypeOptions()
        self.stats: dict[str, int] = {
            "transactions": 0, "rows": 0, "skipped_transactions": 0, "rollbacks": 0,
            "statement_dml": 0, "ddl": 0, "files": 0, "flushes": 0, "spilled_batches": 0,
            "xa_prepared": 0, "xa_committed": 0, "xa_rolled_back": 0, "json_diff_rows": 0,
        }
        self._counter = new_counter()
        self._opened = False
        self._checkpoint: C.Checkpoint | None = None
        self._seq = 0
        #: The GTID state: a MySQL GtidSet (added to in place), or — MariaDB — None with the
        #: last GTID per domain in ``_domains``, a dict stored into at each commit: building a
        #: new GtidPosition per transaction (GtidPosition.advance) showed in profiles.
        self._gtid_state: GtidSet | None = None
        self._domains: dict[int, MariadbGtid] | None = None
        self._flavor: str | None = None
        self._last_gtid: str | None = None
        self._last_end: BinlogPosition | None = None  # of the last commit, landed or not
        self._last_commit_us: int | None = None
        self._last_server_id: int | None = None
        #: The server streamed from, whether the GTID state covers the lake's start, and the
        #: divergences gone past by choice: recorded in the checkpoint (see C.Checkpoint).
        self._server: ServerIdentity | None = None
        self._gtid_complete = False
        self._gtid_seed: str | None = None
        self._divergences: list[dict[str, Any]] = []
        self._versions: dict[tuple[str, str], TableVersion | None] = {}
        #: Per database directory, its table directories when first asked: _load_latest_version
        self._lake_tables: dict[str, frozenset[str]] = {}
        # (database, table) -> (columns, primary key, full metadata, version) of its last
        # TABLE_MAP: tables of one shape share their columns tuple (tablemap.TableMapCache)
        self._table_maps: dict[tuple[str, str], tuple[tuple[Column, ...], tuple[int, ...],
                                                      bool, TableVersion]] = {}
        # id(columns) → (columns, primary key, full metadata, signature): see _signature_of
        self._signatures: dict[int, tuple[Any, tuple[int, ...], bool, tuple[Any, ...]]] = {}
        self._new_versions: list[TableVersion] = []
        self._pending_ddl: dict[tuple[str, str], S.PendingDdl] = {}
        self._ddl_log: dict[str, list[dict[str, Any]]] = {}
        self._txn: _Transaction | None = None
        self._day = -1  # of the last commit (UTC days since the epoch), and its date's text
        self._day_text = ""
        self._parts: dict[tuple[str, str, int, str], _Part] = {}
        self._closed_files: list[tuple[str, str]] = []
        self._name_index: dict[tuple[str, str, int, str, int], int] = {}
        self._buffered = 0  # Arrow bytes held in _Part and _TxnTable buffers, and being written
        self._encoder = RowGroupEncoder()
        #: Parquet bytes per Arrow byte of each table version's last row group (_may_fill).
        self._parquet_ratio: dict[tuple[str, str, int], float] = {}
        self._unflushed_commits = 0
        self._unflushed_rows = 0
        self._unflushed_chunks = 0  # snapshot chunks the next flush lands (Flushed)
        self._dirty_since: float | None = None
        self._flush_wanted = False
        self._staged_count = 0
        self._known_dirs: set[str] = set()
        #: New directories staged whole, created ahead on a thread (see trees.py).
        self._trees = T.StagedTrees(self.lake, self._known_dirs)
        self._version_staged: dict[int, str] = {}  # id(new version) -> its schema file, staged
        self._warned: set[str] = set()
        self._lock = LakeLock(self.lake)
        self._xa: dict[str, X.Prepared] = {}  # in doubt: prepared, no outcome yet (see xa.py)
        self._xa_deletes: list[str] = []  # _xa files whose outcome came: deleted by next commit
        self._xa_versions: dict[tuple[str, str, int], TableVersion] = {}
        #: Set by a LakeError: buffers and disk may disagree, so nothing more is landed.
        self._broken: LakeError | None = None
        self._snapshot_state: dict[str, Any] = {}
        self._io_path = self.lake  # what the sink was writing (named by a LakeError)
        #: Called after each flush that landed something (the new checkpoint, the seconds the
        #: flush took by ``clock``, the snapshot chunks it landed): the daemon's metrics and lag
        #: follow it. The sink reads no clock of its own; the caller lends one.
        self.on_flush: Callable[[Flushed], None] | None = None
        self.clock: Callable[[], float] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> C.Checkpoint | None:
        """Take the lake's writer lock, recover the lake (finish or discard a half-done commit)
        and return where to resume.

        Raises :class:`~sinks.errors.LakeLocked` (another writer holds the lake; nothing was
        touched) or :class:`~sinks.errors.LakeError`.
        """
        self._lock.acquire()
        try:
            S.check_lake(self.lake)  # a lake of a newer binlake: refused before recovery
            doc = C.recover(self.lake)
            check_types(self.lake, self._types, new_lake=doc is None)  # before anything lands
        except OSError as exc:
            self._lock.release()
            raise LakeError.from_os_error(exc, self.lake, "recovering the lake") from exc
        except BaseException:
            self._lock.release()
            raise
        T.warn_once(log.warning)
        small_file.warn_once(log.warning)
        try:  # before the sink writes anything: see commit._OsFileSystem
            C.OS.watch(self.lake)
        except OSError:
            pass  # then every flush fsyncs path by path, as on any other filesystem
        self._opened = True
        if doc is None:
            return None
        state = S.LakeState.from_json(doc, self.lake)
        checkpoint = state.checkpoint
        self._checkpoint = checkpoint
        self._seq = checkpoint.seq
        self._flavor = checkpoint.gtid_flavor
        if checkpoint.gtid_state is not None:
            if self._flavor == "mariadb":
                self._domains = {g.domain: g for g in GtidPosition.parse(checkpoint.gtid_state)}
            elif self._flavor == "mysql":
                self._gtid_state = GtidSet.parse(checkpoint.gtid_state)
        self._last_gtid = checkpoint.gtid
        self._last_end = checkpoint.position
        self._last_commit_us = checkpoint.commit_time_us
        self._last_server_id = checkpoint.server_id
        self._server = checkpoint.server
        self._gtid_complete = checkpoint.gtid_state_complete
        self._divergences = list(checkpoint.divergences)
        self._snapshot_state = dict(state.snapshot)
        for ddl in state.pending_ddl:
            self._pending_ddl[(ddl.database, ddl.table)] = ddl
        for record in state.xa_prepared:
            self._xa[record.xid] = X.Prepared.from_record(record)
        return checkpoint

    @property
    def durable_position(self) -> C.Checkpoint | None:
        """The last landed transaction: resume after it, and ACK (semi-sync) up to it."""
        return self._checkpoint

    @property
    def unlanded(self) -> bool:
        """Whether anything handled is not durable yet (an open transaction, unflushed
        commits)."""
        return self._txn is not None or self._unflushed_commits > 0

    @property
    def invalid_temporal_count(self) -> int:
        """Zero dates (and other unrepresentable temporals) landed as NULL so far."""
        return self._counter.invalid_temporal

    def close(self) -> None:
        """Land every committed transaction, drop an unfinished one (it will be streamed again),
        and release the lake's lock.

        A broken sink (see :meth:`_failed`) lands nothing more: its last checkpoint stands.
        """
        if not self._opened:
            return
        try:
            if self._broken is None:
                if self._txn is not None:
                    self._discard(self._txn)
                    self._txn = None
                self.flush()
        finally:
            if self._broken is not None:
                self._abandon_files()
            self._encoder.shutdown()
            self._trees.close()
            self._opened = False
            C.OS.unwatch(self.lake)
            self._lock.release()

    def _failed(self, exc: OSError, operation: str) -> LakeError:
        """Turn an ``OSError`` of the lake into a :class:`LakeError` and break the sink.

        A write that failed half-way (a row group cut short by ENOSPC, a commit stopped between
        renames) leaves buffers that no longer match the disk; writing them again could land
        rows twice. So nothing more is landed: the durable checkpoint stands, and the next
        :meth:`open` (a restart) rolls forward or discards whatever the failure left.
        """
        error = LakeError.from_os_error(exc, self._io_path, operation)
        self._broken = error
        return error

    def _abandon_files(self) -> None:
        """Close what a broken sink holds open, quietly (its files are discarded at recovery)."""
        self._encoder.shutdown()  # a row group in flight ends first; its outcome no longer matters
        for part in self._parts.values():
            if part.writer is not None:
                try:
                    part.writer.close()
                except Exception:  # the disk that broke the sink may refuse this too
                    pass
                part.writer = None
        if self._txn is not None:
            for table in self._txn.tables.values():
                for closer in (table.spill_writer, table.spill_file):
                    try:
                        if closer is not None:
                            closer.close()
                    except Exception:
                        pass
                table.spill_writer = table.spill_file = None
            self._txn = None

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise SinkStateError(f"the sink stopped after a lake error ({self._broken}); "
                                 "open a new one to recover")

    def _refuse(self) -> NoReturn:
        """Why an item cannot be landed now: a broken sink, or one not open."""
        self._check_usable()
        raise SinkStateError("ParquetSink.handle() before open() or after close()")

    # --- the item stream -----------------------------------------------------------------------

    def handle(self, item: TransactionItem) -> None:
        """Consume one item of the transaction stream (see ``protocol.binlog.transactions``)."""
        if not self._opened or self._broken is not None:
            self._refuse()
        try:  # free in CPython 3.11+ while nothing is raised
            if isinstance(item, RowsEvent):
                self._on_rows(item)
            elif isinstance(item, TransactionBegin):
                self._on_begin(item)
            elif isinstance(item, TransactionCommit):
                self._on_commit(item)
            elif isinstance(item, Statement):
                self._on_statement(item)
            elif isinstance(item, TransactionRollback):
                self._on_rollback(item)
            elif isinstance(item, TransactionPrepared):
                self._on_prepared(item)
            else:
                raise SinkStateError(f"not a transaction item: {type(item).__name__}")
        except OSError as exc:
            raise self._failed(exc, "landing a transaction") from exc

    # The three items of every transaction, for a caller that knows their class (the
    # pipeline): :meth:`handle` without its chain of isinstance tests, measured on one-row
    # transactions (three items each).

    def handle_begin(self, begin: TransactionBegin) -> None:
        """:meth:`handle` of a :class:`TransactionBegin` (or a subclass)."""
        if not self._opened or self._broken is not None:
            self._refuse()
        try:
            self._on_begin(begin)
        except OSError as exc:
            raise self._failed(exc, "landing a transaction") from exc

    def handle_rows(self, event: RowsEvent) -> None:
        """:meth:`handle` of a :class:`RowsEvent` (or a subclass)."""
        if not self._opened or self._broken is not None:
            self._refuse()
        try:
            self._on_rows(event)
        except OSError as exc:
            raise self._failed(exc, "landing a transaction") from exc

    def handle_commit(self, commit: TransactionCommit) -> CommitOutcome:
        """:meth:`handle` of a :class:`TransactionCommit` (or a subclass): ALREADY_LANDED for
        a transaction the checkpoint covers (a replayed stream), else ACCEPTED."""
        if not self._opened or self._broken is not None:
            self._refuse()
        try:
            return self._on_commit(commit)
        except OSError as exc:
            raise self._failed(exc, "landing a transaction") from exc

    def _on_begin(self, begin: TransactionBegin) -> None:
        if self._txn is not None:
            log.warning("transaction at %s never ended; dropping its rows", self._txn.begin.position)
            self._discard(self._txn)
        gtid = begin.gtid
        position = begin.position
        if type(gtid) is MariadbGtid:  # the common case, without _gtid_tags' tuple
            tags = _make_tags(self._seq + 1, str(gtid), gtid.domain, gtid.server_id, None, None,
                              gtid.seq, position.file, position.pos)
        else:
            tags = _make_tags(self._seq + 1, *_gtid_tags(gtid), position.file, position.pos)
        self._txn = _Transaction(tags, begin, self._already_landed(begin))

    def _already_landed(self, begin: TransactionBegin) -> bool:
        """True for a transaction the checkpoint already covers (a replayed stream)."""
        gtid = begin.gtid
        if gtid is not None:
            domains = self._domains
            if domains is not None:  # a MariaDB state
                if not isinstance(gtid, MariadbGtid):
                    return False
                mine = domains.get(gtid.domain)
                return mine is not None and gtid.seq <= mine.seq
            state = self._gtid_state
            return isinstance(gtid, MysqlGtid) and state is not None and gtid in state
        last = self._last_end
        if gtid is None and last is not None:
            return begin.position.file == last.file and begin.position.pos < last.pos
        return False

    def _on_rows(self, event: RowsEvent) -> None:
        txn = self._txn
        if txn is None:
            raise SinkStateError("rows event outside a transaction")
        if txn.skip or event.row_count == 0:
            return
        if self._transform is not None:
            event = self._transform.rows(event)
        version = self._version_for(event.table, txn)
        table = txn.tables.get(id(version))  # a transaction's versions live as long as it does
        if table is None:
            table = txn.tables[id(version)] = _TxnTable(version)
        moved: tuple[int, ...] = ()
        if event.kind is _UPDATE:  # only an UPDATE changes keys, or has partial JSON
            if event.header.type_code == _PARTIAL_UPDATE_ROWS:
                self._note_json_diffs(event)
            moved = key_changed_rows(version, event)
        rows = event.row_count
        table.pending.append(PendingRows(event, txn.tags, txn.next_row, moved))
        txn.next_row += rows + len(moved)  # its landed rows (PendingRows.landed_rows)
        table.pending_rows += rows
        size = _estimate(version, event, txn.tags)
        table.pending_bytes += size
        table.nbytes += size
        self._buffered += size
        if table.pending_rows >= GROUP_ROWS or len(table.pending) >= GROUP_EVENTS:
            self._convert_txn_pending(table)
        if self._buffered > self.options.memory_limit_bytes:
            self._relieve_memory()

    def _note_json_diffs(self, event: RowsEvent) -> None:
        """Count rows whose JSON column landed as ``_json_diff`` (no before value to apply a
        MySQL partial update to), and say once per table why the column is in ``_missing``."""
        rows = {i for values in event.after or () for i, v in enumerate(values)
                if isinstance(v, JsonDiff)}
        if not rows:
            return
        self.stats["json_diff_rows"] += len(rows)
        key = f"json_diff {event.table.schema}.{event.table.table}"
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s.%s: partial JSON updates without a before image "
                        "(binlog_row_image=MINIMAL with binlog_row_value_options=PARTIAL_JSON) "
                        "land as _json_diff operations, the column listed in _missing; "
                        "read_current_state applies them (first at %s:%d)",
                        event.table.schema, event.table.table, event.header.file,
                        event.header.position)

    def _convert_txn_pending(self, table: _TxnTable) -> None:
        batch = rows_batch(table.version, table.pending, with_commit_time=False)
        estimate = table.pending_bytes
        table.pending = []
        table.pending_rows = 0
        table.pending_bytes = 0
        table.batches.append(batch)
        change = batch.nbytes - estimate  # nbytes walks every buffer (~60 us): asked once
        table.nbytes += change
        self._buffered += change

    def _on_statement(self, statement: Statement) -> None:
        txn = self._txn
        if txn is None:
            raise SinkStateError("statement outside a transaction")
        if txn.skip:
            return
        if statement.is_ddl:
            txn.statements.append(statement)
        elif statement.query.lstrip()[:3].upper() == "XA ":
            pass  # XA COMMIT/ROLLBACK <xid>: the outcome arrives as the group's commit/rollback
        else:
            self.stats["statement_dml"] += 1
            if "statement_dml" not in self._warned:
                self._warned.add("statement_dml")
                log.warning("statement-based DML in the binlog cannot be landed as rows "
                            "(set binlog_format=ROW); first at %s", statement.position)

    def _on_rollback(self, rollback: TransactionRollback) -> None:
        txn = self._txn
        if txn is not None:
            self._discard(txn)
            self._txn = None
        self.stats["rollbacks"] += 1
        if rollback.xa is None or txn is None or txn.skip:
            return
        # XA ROLLBACK <xid>: its prepared rows go, and — unlike a plain ROLLBACK, which the
        # binlog never holds — the group itself is a logged transaction to resume after.
        prepared = self._xa.pop(rollback.xa, None)
        if prepared is not None:
            self._forget_prepared(prepared)
            self.stats["xa_rolled_back"] += 1
        gtid = rollback.gtid if rollback.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, rollback.end, txn.begin.timestamp * 1_000_000,
                      txn.begin.server_id)

    def _on_prepared(self, prepared: TransactionPrepared) -> None:
        """XA PREPARE: keep the rows durable but invisible until the outcome (see xa.py)."""
        txn = self._end_transaction("XA PREPARE")
        if txn is None:
            return
        seq = txn.tags.seq
        entry = X.Prepared(prepared.xid, seq, txn.tags.gtid)
        for index, table in enumerate(txn.tables.values()):
            version = table.version
            if table.pending:
                self._convert_txn_pending(table)
            self._staged_count += 1
            staged = f"{L.STAGING}/xa-{self._staged_count:08d}.arrow"
            self._io_path = os.path.join(self.lake, staged)
            X.write_batches(self._io_path, version.staging_schema, self._drain(table),
                            self.options.spill_compression)
            entry.files.append(X.PreparedFile(L.xa_file(seq, index), version.database,
                                              version.table, version.version, staged))
            self._xa_versions[(version.database, version.table, version.version)] = version
        txn.tables.clear()
        if prepared.xid in self._xa:  # the server refuses a second one: a lake from elsewhere
            log.warning("XA %s prepared again at %s; the earlier prepared part is dropped",
                        prepared.xid, txn.begin.position)
            self._forget_prepared(self._xa.pop(prepared.xid))
        self._xa[prepared.xid] = entry
        self.stats["xa_prepared"] += 1
        gtid = prepared.gtid if prepared.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, prepared.end, txn.begin.timestamp * 1_000_000,
                      txn.begin.server_id)

    def _forget_prepared(self, prepared: X.Prepared) -> None:
        """A prepared part's outcome came: a staged file goes now (no commit ever named it);
        one in ``_xa`` goes with the next commit (its checkpoint no longer lists it)."""
        for f in prepared.files:
            if f.staged is not None:
                X.remove(os.path.join(self.lake, f.staged))
            else:
                self._xa_deletes.append(f.final)

    def _land_prepared(self, xid: str, seq: int, commit_us: int, commit_date: str,
                       position: BinlogPosition) -> int:
        """XA COMMIT: the prepared rows land now, as part of transaction ``seq``."""
        prepared = self._xa.pop(xid, None)
        if prepared is None:
            log.warning("XA COMMIT %s at %s: its prepared part is not in the lake (it was "
                        "prepared before the lake's start position); its rows are missing",
                        xid, position)
            return 0
        rows = 0
        for f in prepared.files:
            version = self._xa_version(f)
            part_key = (version.database, version.table, version.version, commit_date)
            seq_index = version.staging_schema.get_field_index("_seq")
            self._io_path = os.path.join(self.lake, f.path)
            for batch in X.read_batches(self._io_path):
                columns = batch.columns
                columns[seq_index] = pa.repeat(pa.scalar(seq, pa.int64()), batch.num_rows)
                columns.insert(version.commit_ts_index,
                               pa.repeat(pa.scalar(commit_us, COMMIT_TS_FIELD.type),
                                         batch.num_rows))
                self._append_committed(part_key, version, commit_date, seq,
                                       pa.RecordBatch.from_arrays(columns, schema=version.schema))
                rows += batch.num_rows
        self._forget_prepared(prepared)
        self.stats["xa_committed"] += 1
        return rows

    def _xa_version(self, f: X.PreparedFile) -> TableVersion:
        key = (f.database, f.table, f.version)
        version = self._xa_versions.get(key)
        if version is None:
            path = os.path.join(self.lake, L.schema_file(*key))
            with open(path, "rb") as source:
                version = TableVersion.from_json(json.load(source), self._counter)
            self._xa_versions[key] = version
        return version

    def _end_transaction(self, what: str) -> _Transaction | None:
        """The transaction ``what`` ends; None when it is one the lake already has."""
        txn = self._txn
        if txn is None:
            raise SinkStateError(f"{what} outside a transaction")
        self._txn = None
        if txn.skip:
            self._discard(txn)
            self.stats["skipped_transactions"] += 1
            return None
        return txn

    def _on_commit(self, commit: TransactionCommit) -> CommitOutcome:
        txn = self._end_transaction("commit")
        if txn is None:
            return _ALREADY_LANDED
        seq = txn.tags.seq
        commit_us = commit.commit_time_us
        day = commit_us // _US_PER_DAY
        if day != self._day:  # the date of the last commit's day, kept: asked per transaction
            self._day, self._day_text = day, _day_text(day)
        commit_date = self._day_text
        rows = 0
        if commit.xa is not None:
            rows += self._land_prepared(commit.xa, seq, commit_us, commit_date, txn.begin.position)
        rows += self._commit_tables(txn, commit_us, commit_date)
        for statement in txn.statements:
            self._log_ddl(statement, txn, commit)
        gtid = commit.gtid if commit.gtid is not None else txn.begin.gtid
        self._advance(txn, gtid, commit.end, commit_us, commit.server_id)
        self._unflushed_rows += rows
        self.stats["transactions"] += 1
        self.stats["rows"] += rows
        job = self._encoder.job
        if job is not None and self._may_fill(job.owner, job.nbytes):
            self._finish_row_group()  # a file it fills closes, and flushes, at this commit
        if self._flush_wanted or self._unflushed_rows >= self.options.flush_rows:
            self._threshold_passed()
        return _ACCEPTED

    def _threshold_passed(self) -> None:
        """A size or row threshold was passed: flush now, or have the caller do it."""
        if self.options.flush_in_handle:
            self.flush()
        else:
            self._flush_wanted = True

    def _commit_tables(self, txn: _Transaction, commit_us: int, commit_date: str) -> int:
        """Move a committed transaction's rows into the per-file buffers; returns the rows."""
        seq = txn.tags.seq
        rows = 0
        for table in txn.tables.values():
            version = table.version
            part_key = (version.database, version.table, version.version, commit_date)
            for batch in self._drain(table) if table.batches or table.spill_writer else ():
                rows += batch.num_rows
                columns = batch.columns
                commit_ts = pa.scalar(commit_us, COMMIT_TS_FIELD.type)
                columns.insert(version.commit_ts_index, pa.repeat(commit_ts, batch.num_rows))
                self._append_committed(
                    part_key, version, commit_date, seq,
                    pa.RecordBatch.from_arrays(columns, schema=version.schema))
            if table.pending:
                part = self._part(part_key, version, commit_date, seq)
                for entry in table.pending:
                    entry.commit_time_us = commit_us
                    rows += entry.landed_rows
                part.pending += table.pending
                part.pending_rows += table.pending_rows
                estimate = table.pending_bytes
                part.pending_bytes += estimate
                part.nbytes += estimate
                table.nbytes -= estimate
                table.pending = []
                table.pending_rows = 0
                table.pending_bytes = 0
                if part.pending_rows >= GROUP_ROWS or len(part.pending) >= GROUP_EVENTS:
                    self._convert_part_pending(part)
                if part.nbytes >= self.options.row_group_bytes:
                    self._write_row_group(part)
        if self._buffered > self.options.memory_limit_bytes:
            self._relieve_memory()
        return rows

    @property
    def handled_gtids(self) -> GtidSet | None:
        """MySQL: the checkpoint's GTID set plus every transaction handled since."""
        return self._gtid_state

    def prepared_tables(self, xid: str) -> frozenset[tuple[str, str]] | None:
        """The ``(database, table)`` pairs an in-doubt XA transaction's prepared part changed,
        as the lake holds it (also after a restart); None when no prepared part of ``xid`` is
        in the lake."""
        prepared = self._xa.get(xid)
        if prepared is None:
            return None
        return frozenset((f.database, f.table) for f in prepared.files)

    # --- the server and the GTID state -----------------------------------------------------------

    @property
    def gtid_state_complete(self) -> bool:
        """Whether the GTID state covers everything before the lake's start (see
        :class:`~sinks.parquet.commit.Checkpoint`): only then may a dump start from it."""
        return self._gtid_complete

    @property
    def gtid_seed(self) -> str | None:
        """The GTID state a new lake was seeded with (see :meth:`seed_gtid_state`)."""
        return self._gtid_seed

    @property
    def seedable(self) -> bool:
        """A new lake, nothing landed or seeded yet: :meth:`seed_gtid_state` may be called."""
        return (self._checkpoint is None and not self._seq and self._txn is None
                and not self._gtid_complete)

    @property
    def server(self) -> ServerIdentity | None:
        """The server the stream comes from (recorded in the checkpoint), if known."""
        return self._server

    def note_server(self, server: ServerIdentity) -> None:
        """The server the stream comes from now; the next flush records it (promptly: a
        checkpoint that still named the old server would make the next start warn again).
        Another server than the recorded one makes the binlog position void: it was an
        offset in the old server's binlog (the position comes back with the next commit)."""
        self._check_usable()
        if server == self._server:
            return
        if self._server is not None and not self._server.same_server(server):
            self._last_end = None
        self._server = server
        if self._checkpoint is not None or self._unflushed_commits:
            self._unflushed_commits += 1

    def seed_gtid_state(self, state: str, flavor: str) -> None:
        """A new lake's GTID state before its first transaction: the server's state at the
        start point, so that the state covers everything before the lake (a dump by GTID then
        sends exactly what follows). Refused once anything is landed."""
        self._check_usable()
        if not self.seedable:
            raise SinkStateError("seed_gtid_state() after transactions were landed")
        self._set_gtid_state(state, flavor)
        self._gtid_seed = state
        self._gtid_complete = True

    def complete_gtid_state(self, state: str) -> None:
        """A MariaDB lake begun before its GTID state was seeded: ``state`` is the server's
        at the checkpoint's binlog position (the caller checked it holds the lake's GTIDs), so
        it adds the domains no landed transaction named; per domain the newer GTID wins (what
        is handed over but not flushed yet may be ahead). Committed with the next flush."""
        self._check_usable()
        if self._gtid_complete or self._flavor not in (None, "mariadb"):
            raise SinkStateError("complete_gtid_state() on a complete or a MySQL state")
        domains = self._domains if self._domains is not None else {}
        for gtid in GtidPosition.parse(state):
            mine = domains.get(gtid.domain)
            if mine is None or mine.seq < gtid.seq:
                domains[gtid.domain] = gtid
        self._domains, self._gtid_state, self._flavor = domains, None, "mariadb"
        self._gtid_complete = True
        self._unflushed_commits += 1

    def diverge(self, state: str, record: dict[str, Any]) -> None:
        """Go on from ``state`` (where the lake's and the server's histories agree) although
        the lake holds transactions the server lacks — an explicit choice, kept in the
        checkpoint's ``divergences`` as ``record`` (JSON data) and committed at once."""
        self._check_usable()
        if self._txn is not None:
            raise SinkStateError("diverge() inside a transaction")
        self._set_gtid_state(state, self._flavor or "")
        self._divergences.append(json.loads(json.dumps(record)))
        self._unflushed_commits += 1
        self.flush()

    def _set_gtid_state(self, state: str, flavor: str) -> None:
        if flavor == "mariadb":
            self._domains = {g.domain: g for g in GtidPosition.parse(state)}
            self._gtid_state = None
        elif flavor == "mysql":
            self._gtid_state = GtidSet.parse(state)
            self._domains = None
        else:
            raise SinkStateError(f"unknown GTID flavor {flavor!r}")
        self._flavor = flavor

    # --- snapshots -------------------------------------------------------------------------------

    @property
    def snapshot_state(self) -> dict[str, Any]:
        """The snapshot progress as of the last landed chunk (a copy; JSON data).

        It is committed in the checkpoint (key ``snapshot``) together with the chunks it
        describes, so after a crash it says exactly which chunks are in the lake.
        """
        state: dict[str, Any] = json.loads(json.dumps(self._snapshot_state))
        return state

    def record_snapshot_state(self, state: dict[str, Any]) -> None:
        """Make ``state`` the snapshot progress (a plan, a finished table); it reaches the
        checkpoint with the next flush."""
        self._check_usable()
        if not self._opened:
            raise SinkStateError("record_snapshot_state() before open() or after close()")
        self._snapshot_state = json.loads(json.dumps(state))
        if self._checkpoint is not None or self._unflushed_commits:
            self._unflushed_commits += 1  # a new lake's first flush brings it along

    def land_snapshot(self, event: RowsEvent, position: BinlogPosition, read_time_us: int,
                      state: dict[str, Any]) -> int:
        """Land a snapshot chunk (a ``READ`` rows event) as one transaction of its own ``_seq``,
        and make ``state`` the snapshot progress that commits with it. Returns the ``_seq``
        (unchanged when the chunk has no rows: only the progress is recorded).

        Must be called between transactions, with ``position`` the stream's position there:
        the chunk is consistent with it. Its rows carry no GTID, ``_binlog_file``/
        ``_binlog_pos`` = ``position`` and ``_commit_ts`` = ``read_time_us`` (when it was read).
        The GTID state and last commit are untouched (a chunk is not a binlog transaction); the
        resume position moves to ``position`` if that is later — it is a transaction boundary,
        and a new lake must not resume from an older point than its chunks are consistent with.
        """
        self._check_usable()
        if not self._opened:
            raise SinkStateError("land_snapshot() before open() or after close()")
        if self._txn is not None:
            raise SinkStateError("land_snapshot() inside a transaction")
        try:
            return self._land_snapshot(event, position, read_time_us, state)
        except OSError as exc:
            raise self._failed(exc, "landing a snapshot chunk") from exc

    def _land_snapshot(self, event: RowsEvent, position: BinlogPosition, read_time_us: int,
                       state: dict[str, Any]) -> int:
        self._snapshot_state = json.loads(json.dumps(state))
        self._unflushed_commits += 1  # at least the progress must reach the checkpoint
        if self._last_end is None or self._last_end < position:
            self._last_end = position
        if event.row_count == 0:
            return self._seq
        tags = TransactionTags(seq=self._seq + 1, gtid=None, gtid_domain=None,
                               gtid_server_id=None, gtid_uuid=None, gtid_tag=None,
                               gtid_seq=None, file=position.file, pos=position.pos)
        begin = TransactionBegin(gtid=None, position=position, timestamp=read_time_us // 1_000_000,
                                 server_id=0)
        txn = self._txn = _Transaction(tags=tags, begin=begin)
        try:
            self._on_rows(event)
        finally:
            self._txn = None
        rows = self._commit_tables(txn, read_time_us, _commit_date(read_time_us))
        self._seq = tags.seq
        self._unflushed_rows += rows
        self.stats["transactions"] += 1
        self.stats["rows"] += rows
        self.stats["snapshot_rows"] = self.stats.get("snapshot_rows", 0) + rows
        self.stats["snapshot_chunks"] = self.stats.get("snapshot_chunks", 0) + 1
        self._unflushed_chunks += 1
        if self._flush_wanted or self._unflushed_rows >= self.options.flush_rows:
            self._threshold_passed()
        return tags.seq

    def stage_snapshot(self, staged: P.StagedChunk | None, event: RowsEvent) -> P.StagedChunk:
        """Convert a piece of a snapshot chunk too big to hold (a ``READ`` rows event) and write
        it to staging, invisible; returns the chunk's staged pieces (``staged``, or new ones
        when None). :meth:`land_staged_snapshot` lands them all in one commit,
        :meth:`discard_staged_snapshot` drops them (see ``pieces.py``). May run while the
        stream is inside a transaction: it touches nothing a transaction or a flush uses."""
        self._check_usable()
        if not self._opened:
            raise SinkStateError("stage_snapshot() before open() or after close()")
        try:
            if self._transform is not None:
                event = self._transform.rows(event)
            if staged is None:
                tags = TransactionTags(seq=self._seq + 1, gtid=None, gtid_domain=None,
                                       gtid_server_id=None, gtid_uuid=None, gtid_tag=None,
                                       gtid_seq=None, file=None, pos=None)
                origin = _Transaction(tags=tags, begin=TransactionBegin(
                    gtid=None, position=BinlogPosition("", 0), timestamp=0, server_id=0))
                staged = P.StagedChunk(self._version_for(event.table, origin))
            version = staged.version
            # _seq and the position are placeholders until the landing (pieces.landed_piece).
            tags = TransactionTags(seq=0, gtid=None, gtid_domain=None, gtid_server_id=None,
                                   gtid_uuid=None, gtid_tag=None, gtid_seq=None, file=None,
                                   pos=None)
            batch = rows_batch(version, [PendingRows(event, tags, staged.rows, ())],
                               with_commit_time=False)
            self._staged_count += 1
            path = self._io_path = os.path.join(
                self.lake, L.STAGING, f"snapshot-{self._staged_count:08d}.arrow")
            P.write_piece(path, version, batch, self.options.spill_compression)
        except OSError as exc:
            raise self._failed(exc, "staging a snapshot chunk") from exc
        staged.pieces.append(path)
        staged.rows += event.row_count
        staged.peak_rows = max(staged.peak_rows, event.row_count)
        return staged

    def discard_staged_snapshot(self, staged: P.StagedChunk) -> None:
        """Drop a staged chunk's pieces (it was discarded; nothing of it is visible)."""
        P.remove_pieces(staged)

    def land_staged_snapshot(self, staged: P.StagedChunk, position: BinlogPosition,
                             read_time_us: int, state: dict[str, Any]) -> int:
        """:meth:`land_snapshot` for a chunk staged in pieces: one transaction of its own
        ``_seq``, one Parquet file per piece (read back one at a time), committed at once
        together with ``state`` — every piece visible, or (a crash before) none."""
        self._check_usable()
        if not self._opened:
            raise SinkStateError("land_staged_snapshot() before open() or after close()")
        if self._txn is not None:
            raise SinkStateError("land_staged_snapshot() inside a transaction")
        self._snapshot_state = json.loads(json.dumps(state))
        self._unflushed_commits += 1
        if self._last_end is None or self._last_end < position:
            self._last_end = position
        if not staged.rows:
            P.remove_pieces(staged)
            return self._seq
        seq = self._seq + 1
        version = staged.version
        commit_date = _commit_date(read_time_us)
        try:
            for path in staged.pieces:
                table = P.landed_piece(path, version, seq, position, read_time_us)
                part = _Part(version, commit_date, first_seq=seq)
                part.writer = self._open_part_file(part)
                part.writer.write_table(table, row_group_size=max(1, table.num_rows))
                del table
                self._close_file(part)
                os.remove(path)
        except OSError as exc:
            raise self._failed(exc, "landing a snapshot chunk") from exc
        staged.pieces.clear()
        self._seq = seq
        self._unflushed_rows += staged.rows
        self.stats["transactions"] += 1
        self.stats["rows"] += staged.rows
        self.stats["snapshot_rows"] = self.stats.get("snapshot_rows", 0) + staged.rows
        self.stats["snapshot_chunks"] = self.stats.get("snapshot_chunks", 0) + 1
        self._unflushed_chunks += 1
        self.flush()  # the pieces' one commit
        return seq

    def _advance(self, txn: _Transaction, gtid: Any, end: BinlogPosition, commit_us: int,
                 server_id: int) -> None:
        """Move the resume point past ``txn`` (landed at the next flush)."""
        self._seq = txn.tags.seq
        self._advance_gtid_state(gtid)
        if gtid is txn.begin.gtid:
            self._last_gtid = txn.tags.gtid  # str(gtid), made at begin
        else:
            self._last_gtid = str(gtid) if gtid is not None else None
        self._last_end = end
        self._last_commit_us = commit_us
        self._last_server_id = server_id
        self._unflushed_commits += 1

    def _advance_gtid_state(self, gtid: Any) -> None:
        if isinstance(gtid, MariadbGtid):
            domains = self._domains
            if domains is None:
                domains = self._domains = {}
                self._gtid_state = None
                self._flavor = "mariadb"
            domains[gtid.domain] = gtid
        elif isinstance(gtid, MysqlGtid):
            if self._gtid_state is None:
                self._gtid_state = GtidSet()
                self._domains = None
                self._flavor = "mysql"
            self._gtid_state.add(gtid)

    # --- schema versions -----------------------------------------------------------------------

    def _version_for(self, table_map: TableMapEvent, txn: _Transaction) -> TableVersion:
        # Every transaction brings a new TABLE_MAP, but the decoder gives those of an unchanged
        # table the very same ``columns``: by that tuple, the version found last time, if it is
        # still the table's current one (the same answer as the signature comparison below).
        columns = table_map.columns
        key = (table_map.schema, table_map.table)
        cached = self._table_maps.get(key)
        if (cached is not None and cached[0] is columns
                and cached[1] == table_map.primary_key
                and cached[2] == table_map.has_full_metadata
                and self._versions.get(key) is cached[3]):
            return cached[3]
        if key not in self._versions:
            self._versions[key] = self._load_latest_version(*key)
        current = self._versions[key]
        if current is None or current.signature != self._signature_of(table_map):
            ddl = self._pending_ddl.pop(key, None)
            origin = VersionOrigin(
                seq=txn.tags.seq, gtid=txn.tags.gtid,
                ddl=ddl.query if ddl else None, ddl_type=ddl.ddl_type if ddl else None,
            )
            number = current.version + 1 if current is not None else 1
            current = TableVersion.from_table_map(table_map, number, origin, self._counter,
                                                  self._signature_of(table_map))
            self._versions[key] = current
            self._new_versions.append(current)
            self._prepare_version(current)
            if not table_map.has_full_metadata and "names" + repr(key) not in self._warned:
                self._warned.add("names" + repr(key))
                log.warning("%s.%s: no column names in the binlog (binlog_row_metadata is not "
                            "FULL); landing columns as col_1..col_%d", key[0], key[1],
                            len(table_map.columns))
        if len(self._table_maps) > 4096:
            self._table_maps.clear()
        self._table_maps[key] = (columns, table_map.primary_key, table_map.has_full_metadata,
                                 current)
        return current

    def _signature_of(self, table_map: TableMapEvent) -> tuple[Any, ...]:
        """``signature(table_map)``, remembered per ``columns`` tuple.

        Every transaction brings a new TABLE_MAP, but the decoder gives those of an unchanged
        table the very same ``columns``; computing the signature (an Arrow type per column)
        cost ~20 us per transaction, a third of the sink's time on one-row transactions.
        """
        columns = table_map.columns
        memo = self._signatures.get(id(columns))
        if (memo is not None and memo[0] is columns and memo[1] == table_map.primary_key
                and memo[2] == table_map.has_full_metadata):
            return memo[3]
        result = signature(table_map)
        if len(self._signatures) > 4096:
            self._signatures.clear()
        self._signatures[id(columns)] = (columns, table_map.primary_key,
                                         table_map.has_full_metadata, result)
        return result

    def _load_latest_version(self, database: str, table: str) -> TableVersion | None:
        database_dir = L.dir_name(database)
        tables = self._lake_tables.get(database_dir)
        if tables is None:
            # The tables the lake had when this sink first met the database, in one listing
            # instead of a failed listing per new table (2,000 of them in a backlog over 2,000
            # tables). A table this sink adds later is in ``_versions`` before it is on disk,
            # so it is never looked up here again; no other process adds tables to a lake
            # whose writer lock this sink holds.
            try:
                tables = frozenset(os.listdir(os.path.join(self.lake, database_dir)))
            except FileNotFoundError:
                tables = frozenset()
            self._lake_tables[database_dir] = tables
        table_dir = L.dir_name(table)
        if table_dir not in tables:
            return None
        directory = os.path.join(self.lake, database_dir, table_dir, L.SCHEMA_DIR)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return None
        numbers = [int(n[1:-5]) for n in names
                   if n.startswith("v") and n.endswith(".json") and n[1:-5].isdigit()]
        if not numbers:
            return None
        with open(os.path.join(directory, f"v{max(numbers)}.json"), "rb") as f:
            return TableVersion.from_json(json.load(f), self._counter)

    # --- DDL -------------------------------------------------------------------------------------

    def _log_ddl(self, statement: Statement, txn: _Transaction, commit: TransactionCommit) -> None:
        info = D.classify(statement.query, statement.schema)
        entry = {
            "seq": txn.tags.seq,
            "gtid": txn.tags.gtid,
            "commit_time_us": commit.commit_time_us,
            "commit_time": _dt.datetime.fromtimestamp(
                commit.commit_time_us / 1_000_000, _dt.UTC).isoformat(),
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
        self._ddl_log.setdefault(info.database, []).append(entry)
        self.stats["ddl"] += 1
        if info.ddl_type == D.DROP_TABLE:
            for key in info.tables:
                self._pending_ddl.pop(key, None)
            return
        for database, table in info.tables:
            self._pending_ddl.pop((database, table), None)  # re-insert: dicts keep age order
            self._pending_ddl[(database, table)] = S.PendingDdl(
                database, table, statement.query, info.ddl_type, txn.tags.seq)
        # Only a version's origin needs these; a table that never lands rows again must not
        # grow the checkpoint forever.
        while len(self._pending_ddl) > MAX_PENDING_DDL:
            del self._pending_ddl[next(iter(self._pending_ddl))]

    # --- buffers ---------------------------------------------------------------------------------

    def _part(self, key: tuple[str, str, int, str], version: TableVersion, commit_date: str,
              seq: int) -> _Part:
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Part(version, commit_date, first_seq=seq)
            self._prepare_part(part)
        elif part.writer is None and not part.batches and not part.pending:
            part.first_seq = seq
        return part

    def _convert_part_pending(self, part: _Part) -> None:
        batch = rows_batch(part.version, part.pending, with_commit_time=True)
        estimate = part.pending_bytes
        part.pending = []
        part.pending_rows = 0
        part.pending_bytes = 0
        part.batches.append(batch)
        change = batch.nbytes - estimate  # nbytes walks every buffer (~60 us): asked once
        part.nbytes += change
        self._buffered += change

    def _append_committed(self, key: tuple[str, str, int, str], version: TableVersion,
                          commit_date: str, seq: int, batch: pa.RecordBatch) -> None:
        part = self._part(key, version, commit_date, seq)
        if part.pending:
            self._convert_part_pending(part)  # keep the file in commit order
        part.batches.append(batch)
        size = batch.nbytes
        part.nbytes += size
        self._buffered += size
        if part.nbytes >= self.options.row_group_bytes:
            self._write_row_group(part)
        if self._buffered > self.options.memory_limit_bytes:
            self._relieve_memory()

    def _relieve_memory(self) -> None:
        """Spill the open transaction, then write the biggest pending buffers as row groups —
        or, over more than ``MAX_OPEN_FILES`` files, flush at the next commit instead."""
        limit = self.options.memory_limit_bytes
        if self._txn is not None:
            for table in self._txn.tables.values():
                if table.pending:
                    self._convert_txn_pending(table)
                if table.batches:
                    self._spill(table)
        if len(self._parts) > MAX_OPEN_FILES:
            self._flush_wanted = True  # _on_commit flushes: whole transactions only
            return
        parts = sorted(self._parts.values(), key=lambda p: p.nbytes, reverse=True)
        for part in parts:
            # the row group being written is on its way out: not a reason to write another
            if (self._buffered - self._encoder.busy_bytes <= limit // 2
                    or not (part.batches or part.pending)):
                break
            self._write_row_group(part)

    def _spill(self, table: _TxnTable) -> None:
        if table.spill_writer is None:
            self._staged_count += 1
            table.spill_path = os.path.join(self.lake, L.STAGING,
                                            f"spill-{self._staged_count:08d}.arrow")
            self._io_path = table.spill_path
            table.spill_file = pa.OSFile(table.spill_path, "wb")
            ipc_options = pa.ipc.IpcWriteOptions(compression=self.options.spill_compression)
            table.spill_writer = pa.ipc.new_stream(table.spill_file,
                                                   table.version.staging_schema,
                                                   options=ipc_options)
        for batch in table.batches:
            table.spill_writer.write_batch(batch)
            self.stats["spilled_batches"] += 1
            table.nbytes -= batch.nbytes
            self._buffered -= batch.nbytes
        table.batches.clear()

    def _drain(self, table: _TxnTable) -> Any:
        """Yield a committed transaction's batches in order: spilled ones, then in-memory."""
        if table.spill_writer is not None:
            table.spill_writer.close()
            table.spill_file.close()
            table.spill_writer = table.spill_file = None
            assert table.spill_path is not None
            with pa.OSFile(table.spill_path, "rb") as source:
                reader = pa.ipc.open_stream(source)
                yield from reader
            os.remove(table.spill_path)
            table.spill_path = None
        batches, table.batches = table.batches, []
        for batch in batches:
            table.nbytes -= batch.nbytes
            self._buffered -= batch.nbytes
        yield from batches

    def _discard(self, txn: _Transaction) -> None:
        for table in txn.tables.values():
            if table.spill_writer is not None:
                table.spill_writer.close()
                table.spill_file.close()
            if table.spill_path is not None and os.path.exists(table.spill_path):
                os.remove(table.spill_path)
            self._buffered -= table.nbytes
        txn.tables.clear()

    def _write_row_group(self, part: _Part) -> None:
        version = part.version
        if part.pending:
            self._convert_part_pending(part)
        if not self._encoder.idle:  # one at a time: a file's row groups stay in order
            self._finish_row_group()  # (it may close this part's file: it filled it)
        if part.writer is None:
            part.writer = self._open_part_file(part)
            part.file_bytes = 0
        path = self._io_path = os.path.join(self.lake, part.staged)
        table = pa.Table.from_batches(part.batches, schema=version.schema)
        part.batches.clear()
        nbytes, part.nbytes = part.nbytes, 0  # in self._buffered until written
        writer = part.writer

        def write() -> int:
            writer.write_table(table, row_group_size=max(1, table.num_rows))
            return os.path.getsize(path)

        if self.options.background_encoding:
            self._encoder.start(write, part, path, nbytes)
        else:
            self._encoder.run(write, part, path, nbytes)
            if self._encoder.job is not None and self._encoder.job.future.exception():
                self._finish_row_group()  # raises it now, as the write itself did

    def _may_fill(self, part: _Part, nbytes: int) -> bool:
        """Whether a row group of ``nbytes`` Arrow bytes might take ``part``'s file to
        ``file_size_bytes``: at most twice what Parquet wrote per Arrow byte for the table's
        last row group (twice the Arrow bytes before its first), plus 64 KiB per column (a
        dictionary page beside plain ones, page headers, statistics).

        A commit waits for a background row group only then, so the flush that a full file
        calls for comes at that commit. The bound is a guess from accounted row groups only,
        so every decision is the same whatever the thread's speed; a file a row group fills
        against the guess closes when the sink next waits for a row group (see
        :meth:`_finish_row_group`). With the writer's own bound (twice the Arrow bytes) a row
        group of half a file's size waited at every commit: no overlap at all."""
        version = part.version
        ratio = self._parquet_ratio.get((version.database, version.table, version.version), 1.0)
        bound = int(2 * ratio * nbytes) + 65_536 * len(version.schema)
        return part.file_bytes + bound >= self.options.file_size_bytes

    def _finish_row_group(self) -> None:
        """Wait for the row group being written in the background (see encoder.py) and
        account for it; its error, if any, is raised here, naming its file.

        Called where the sink must wait anyway (before the next row group, at a flush) and at
        a commit whose row group may fill its file (:meth:`_may_fill`): points that do not
        depend on the thread's speed, so the foreground, which accounts for its row groups at
        the same points, lands the same lake."""
        job = self._encoder.finish()
        if job is None:
            return
        self._io_path = job.path
        try:
            size = job.future.result()
        except BaseException:
            self._buffered -= job.nbytes
            raise
        self._written(job.owner, job.nbytes, size)

    def _written(self, part: _Part, nbytes: int, size: int) -> None:
        """A row group of ``nbytes`` Arrow bytes is in ``part``'s file, now ``size`` bytes."""
        self._buffered -= nbytes
        version = part.version
        self._parquet_ratio[version.database, version.table, version.version] = (
            (size - part.file_bytes) / max(1, nbytes))
        part.file_bytes = size
        if size >= self.options.file_size_bytes and part.writer is not None:
            self._close_file(part)
            self._flush_wanted = True

    def _prepare_part(self, part: _Part) -> None:
        """A part first appears: have its first file made ahead (:meth:`_made_ahead`)."""
        version = part.version
        part.prepared = self._made_ahead(
            L.part_file(version.database, version.table, version.version, part.commit_date,
                        part.first_seq, 0), L.staged_file)
        part.made_by = self._trees.submitted

    def _prepare_version(self, version: TableVersion) -> None:
        """:meth:`_prepare_part` for a new schema version's file (written at the flush)."""
        self._version_staged[id(version)] = self._made_ahead(
            L.schema_file(version.database, version.table, version.version), L.staged_schema)

    def _made_ahead(self, final: str, flat: Callable[[int], str]) -> str:
        """Where the file whose final path is ``final`` is staged: in a staged tree when its
        directory is new, else flat in staging as ``flat(n)``; either way made empty (with the
        tree's directories) on the trees' thread now, while this one decodes on (trees.py)."""
        staged = self._trees.place(final, create=True)
        if staged is None:
            self._staged_count += 1
            staged = flat(self._staged_count)
            self._trees.submit([], [os.path.join(self.lake, staged)])
        return staged

    def _name(self, part: _Part) -> None:
        """Give ``part`` its staged and its final file name: the file made ahead for it if
        the name is the one foreseen, in a staged tree if its directory is new."""
        version = part.version
        name_key = (version.database, version.table, version.version, part.commit_date,
                    part.first_seq)  # the final directory and first seq, unspelled
        index = self._name_index.get(name_key, 0)
        self._name_index[name_key] = index + 1
        part.final = L.part_file(version.database, version.table, version.version,
                                 part.commit_date, part.first_seq, index)
        prepared, part.prepared = part.prepared, ""
        staged = self._trees.place(part.final, now=True)
        if staged is None and prepared and not T.in_tree(prepared):
            staged, prepared = prepared, ""
        elif staged is None:
            self._staged_count += 1
            staged = L.staged_file(self._staged_count)
        elif staged == prepared:
            prepared = ""
        part.staged = staged
        self._io_path = os.path.join(self.lake, staged)
        if prepared:
            self._drop_prepared(prepared)

    def _drop_prepared(self, staged: str) -> None:
        """Remove a file made ahead under a name its part did not take (another file of the
        partition took it first): in a staged tree it would become visible, empty."""
        self._trees.wait()
        C.OS.remove(os.path.join(self.lake, staged))

    def _one_shot(self, part: _Part) -> F.ParquetJob:
        """The job writing a part none of whose rows are written yet: its whole file, one row
        group (at most ``row_group_bytes``, or it would have been written already)."""
        batches: Sequence[pa.RecordBatch | Exported] = part.batches
        if part.pending:  # converted as _convert_part_pending does, minus its nbytes walk:
            if not batches:  # the part whole: a small batch stays exported (rows.Exported)
                batches = [rows_export(part.version, part.pending)]
            else:
                part.batches.append(rows_batch(part.version, part.pending, with_commit_time=True))
            part.pending = []  # the whole part leaves the budget just below
            part.pending_rows = part.pending_bytes = 0
        self._name(part)
        part.batches = []
        self._buffered -= part.nbytes
        part.nbytes = 0
        self._closed_files.append((part.staged, part.final))
        version = part.version
        return F.ParquetJob(os.path.join(self.lake, part.staged), batches, version.schema,
                            self.options.compression, self.options.compression_level,
                            self.options.small_file_compression, DICTIONARY_PAGE_LIMIT,
                            version.fields_schema)

    def _open_part_file(self, part: _Part) -> pq.ParquetWriter:
        """A new staged Parquet file for ``part``, named for its final place."""
        self._name(part)
        self._trees.wait()  # its directory, if new, may still be in the making
        return F.open_writer(os.path.join(self.lake, part.staged), part.version.schema,
                             self.options.compression, self.options.compression_level,
                             DICTIONARY_PAGE_LIMIT)

    def _close_file(self, part: _Part) -> None:
        assert part.writer is not None
        self._io_path = os.path.join(self.lake, part.staged)
        part.writer.close()
        part.writer = None
        self._closed_files.append((part.staged, part.final))  # fsync-ed together at the flush

    # --- flushing ----------------------------------------------------------------------------------

    @property
    def flush_wanted(self) -> bool:
        """A commit passed a size or row threshold (``flush_in_handle=False``): flush next."""
        return self._flush_wanted

    def maybe_flush(self, now: float, *, behind: bool = False) -> bool:
        """:meth:`flush` if :meth:`flush_due`; whether it flushed."""
        if not self.flush_due(now, behind=behind):
            return False
        self.flush()
        return True

    def flush_due(self, now: float, *, behind: bool = False) -> bool:
        """Whether committed data has waited ``flush_interval_s`` (``now``: a monotonic clock).

        ``behind``: the caller knows more changes are already waiting at the source (a backlog
        being caught up). Then freshness buys nothing — the next changes are there already —
        and every flush costs a file per table it touched, so only ``catch_up_interval_s``
        (the longer wait) flushes by time; size (``file_size_bytes``) and ``flush_rows`` still
        flush as always. Once the caller is no longer behind, data older than
        ``flush_interval_s`` flushes at the next call.
        """
        if not self._opened or self._unflushed_commits == 0:
            self._dirty_since = None
            return False
        if self._dirty_since is None:
            self._dirty_since = now
            return False
        interval = self.options.flush_interval_s
        if behind:
            interval = max(interval, self.options.catch_up_interval_s)
        return now - self._dirty_since >= interval

    def pending(self, now: float, *, behind: bool = False) -> Pending:
        """What the next flush lands, and when :meth:`flush_due` will want it by time."""
        lands_in = None
        if self._opened and self._unflushed_commits:
            interval = self.options.flush_interval_s
            if behind:
                interval = max(interval, self.options.catch_up_interval_s)
            since = self._dirty_since if self._dirty_since is not None else now
            lands_in = max(0.0, since + interval - now)
        return Pending(self._unflushed_commits, self._buffered, lands_in,
                       self.options.file_size_bytes)

    def flush(self) -> C.Checkpoint | None:
        """Make every committed transaction durable and visible; returns the new checkpoint.

        Raises :class:`~sinks.errors.LakeError` (and breaks the sink) when the lake refuses a
        write; the checkpoint then stays where it was.
        """
        self._check_usable()
        if self._unflushed_commits == 0 and not self._closed_files:
            return self._checkpoint
        clock = self.clock
        started = clock() if clock is not None else 0.0
        try:
            checkpoint = self._flush()
        except OSError as exc:
            raise self._failed(exc, "committing to the lake") from exc
        chunks, self._unflushed_chunks = self._unflushed_chunks, 0
        if self.on_flush is not None:
            self.on_flush(Flushed(checkpoint, clock() - started if clock is not None else None,
                                  chunks))
        return checkpoint

    def _flush(self) -> C.Checkpoint:
        # Step 1 of the commit protocol (commit.py) for all of the flush's files at once: the
        # Parquet files, the new schema versions and DDL logs are written side by side
        # (files.py) and fsync-ed together (FileSystem.fsync_many), not one after another.
        # New directories come as staged trees, made ahead with the files in them (trees.py).
        self._io_path = os.path.join(self.lake, L.STAGING)
        documents, document_renames = self._documents()
        F.run_all(self._file_jobs(), documents)
        self._finish_row_group()
        for part in self._parts.values():
            if part.writer is not None:
                self._close_file(part)
            if part.prepared:  # never named (defensive): must not land empty
                self._drop_prepared(part.prepared)
                part.prepared = ""
        renames = [(staged, final) for staged, final in self._closed_files
                   if not T.in_tree(staged)]
        for prepared in self._xa.values():
            renames += [(f.staged, f.final) for f in prepared.files if f.staged is not None]
        renames += document_renames
        renames += self._trees.renames()
        durable = [os.path.join(self.lake, staged) for staged, _ in self._closed_files]
        C.OS.fsync_many(durable + [path for path, _ in documents]
                        + self._trees.directories())
        checkpoint = C.Checkpoint(
            seq=self._seq, position=self._last_end, gtid=self._last_gtid,
            gtid_state=self._gtid_state_text(), gtid_flavor=self._flavor,
            commit_time_us=self._last_commit_us, server_id=self._last_server_id,
            server=self._server, gtid_state_complete=self._gtid_complete,
            divergences=tuple(self._divergences),
        )
        doc = S.LakeState(
            checkpoint, tuple(self._pending_ddl.values()), self._snapshot_state,
            tuple(prepared.record() for prepared in self._xa.values())).to_json()
        self._io_path = self.lake
        if renames or self._xa_deletes:
            C.commit(self.lake, renames, doc, self._known_dirs, self._xa_deletes)
        else:
            C.write_checkpoint(self.lake, doc)
        self._trees.committed()
        for prepared in self._xa.values():
            for f in prepared.files:
                f.staged = None  # now in _xa
        self._xa_deletes.clear()
        # Only now, with the commit durable, do the buffers that fed it go.
        self._parts.clear()
        self.stats["files"] += len(self._closed_files)
        self.stats["flushes"] += 1
        self._checkpoint = checkpoint
        self._closed_files.clear()
        self._new_versions.clear()
        self._ddl_log.clear()
        self._name_index.clear()
        self._unflushed_commits = 0
        self._unflushed_rows = 0
        self._dirty_since = None
        self._flush_wanted = False
        return checkpoint

    def _file_jobs(self) -> Iterator[Callable[[], None]]:
        """The flush's Parquet files: a file with row groups written already gets its last one
        (the caller then waits for it and closes the file); every other file is yielded as a
        job writing it whole (lazily, so that this thread converts the next table's rows while
        the writer threads encode the last), once the trees' thread has made its directory
        and file: the first tables' files are written while the last tables' directories are
        still being made. The last job comes once all are made (the flush's documents go in
        them next, ``files.run_all``)."""
        for part in self._parts.values():
            if part.writer is None and (part.batches or part.pending):
                job = self._one_shot(part)
                self._trees.wait_for(part.made_by)
                yield job
            elif part.batches or part.pending:
                self._write_row_group(part)  # in the background (encoder.py), in order
        self._trees.wait()

    def _documents(self) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
        """The flush's new schema versions and DDL logs: (staged path, bytes) to write, and
        (staged, final) names relative to the lake."""
        documents: list[tuple[str, bytes]] = []
        renames: list[tuple[str, str]] = []
        for version in self._new_versions:
            staged = self._version_staged.pop(id(version), "")
            final = L.schema_file(version.database, version.table, version.version)
            if not staged:
                staged = self._trees.place(final, now=True) or ""
            if not staged:
                self._staged_count += 1
                staged = L.staged_schema(self._staged_count)
            documents.append((os.path.join(self.lake, staged), version.to_json_bytes()))
            if not T.in_tree(staged):  # else its tree's rename moves it
                renames.append((staged, final))
        for database, entries in self._ddl_log.items():
            self._staged_count += 1
            staged = f"{L.STAGING}/ddl-{self._staged_count:08d}.jsonl"
            text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
            documents.append((os.path.join(self.lake, staged), text.encode()))
            renames.append((staged, L.ddl_file(database, entries[0]["seq"])))
        return documents, renames

    def _gtid_state_text(self) -> str | None:
        if self._domains is not None:
            return str(GtidPosition.from_binlog_state(self._domains.values()))
        state = self._gtid_state
        return state.to_text(",") if state is not None else None
