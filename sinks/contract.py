"""The sink contract: what the replica hands a sink, and what it gets back.

The daemon (``replica.core``) lands through this protocol and :mod:`sinks.factory` only, never
through a sink's own classes, so a second format or store is added behind it without touching
the daemon. What crosses it:

* **in** — the transaction items of ``protocol.binlog.transactions`` (begin, rows, commit,
  statements, XA PREPARE/ROLLBACK, rollbacks), snapshot chunks (READ rows events landed between
  two transactions, or staged in pieces first), the snapshot progress that commits with them
  (frozen records: :class:`SnapshotProgress` of :class:`TableProgress` and
  :class:`FilterRecord`, re-exported here), and the caller's clock (a sink reads none of its
  own);
* **out** — typed, frozen outcomes (and counters, :class:`SinkStats`, read by attribute): a commit is :attr:`CommitOutcome.ACCEPTED` (it lands with
  the next flush) or :attr:`CommitOutcome.ALREADY_LANDED` (a replayed stream: the lake has it);
  each flush that landed something reports one :class:`Flushed`; the resume position is a
  :class:`Checkpoint`, which the replica treats as an opaque offset into its source except for
  the fields it resumes from (``position``, ``gtid_state``) and reports (``seq``, ``gtid``,
  ``commit_time_us``).

Threads: a sink is not thread-safe and never awaits. Its caller makes one call at a time; the
daemon runs the calls that write to the lake (flushes, snapshot landings, close, the lake work
items leave) on its sink worker thread and the cheap in-memory ones (handing over items) on
its event loop, never two at once. A sink built with ``flush_in_handle=False`` does no lake
I/O while it takes an item: a commit past a size or row threshold only sets
:attr:`Sink.flush_wanted` (the caller flushes), and an item that needs the disk (a
transaction spilled past the memory budget, an XA PREPARE's staged rows) sets
:attr:`Sink.io_wanted` (the caller runs :meth:`Sink.run_io` before the next item).

Errors: every failure of the lake is a :class:`~sinks.errors.SinkError` (re-exported here):
:class:`LakeError` (the lake refused a write; the sink is broken and lands nothing more),
:class:`LakeLocked` (another writer holds the lake), :class:`StoreRefused` (an object store
refused an operation no retry can cure: exit 4).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from protocol.binlog.model import RowsEvent
from protocol.binlog.transactions import TransactionItem
from protocol.failover import ServerIdentity
from protocol.gtid import GtidSet

from .chunks import SnapshotChunk
from .errors import LakeError, LakeLocked, SinkError, StoreRefused
from .parquet.commit import Checkpoint
from .parquet.snapshot_progress import FilterRecord, SnapshotProgress, TableProgress
from .stats import SinkStats

if TYPE_CHECKING:
    from .parquet.pieces import StagedChunk as StagedSnapshot
else:
    StagedSnapshot = Any  # opaque to the caller: made by stage_piece, handed back

__all__ = ["Checkpoint", "CommitOutcome", "FilterRecord", "Flushed", "LakeError", "LakeLocked",
           "Pending", "Sink", "SinkError", "SinkStats", "SnapshotChunk", "SnapshotProgress",
           "StagedSnapshot", "StoreRefused", "TableProgress"]


class CommitOutcome(enum.Enum):
    """What a sink did with a transaction's commit."""

    #: The transaction is complete in the sink; the next flush makes it durable.
    ACCEPTED = "accepted"
    #: The lake already holds this transaction (a stream replayed after a reconnect or a
    #: restart): nothing of it lands again.
    ALREADY_LANDED = "already landed"


@dataclass(frozen=True, slots=True)
class Flushed:
    """One flush that made transactions durable and visible."""

    #: The lake's new resume position.
    checkpoint: Checkpoint
    #: How long the flush took by the clock the caller lent (None: no clock).
    seconds: float | None
    #: Snapshot chunks this flush landed: each took a ``_seq`` of its own, so the source
    #: transactions it landed are the checkpoint's ``seq`` advance minus these.
    snapshot_chunks: int


@dataclass(frozen=True, slots=True)
class Pending:
    """What a sink holds that is not durable yet, and when it lands: for an operator's
    progress line while a backlog is caught up (its time flushes wait long), never for
    metrics, which count durable work only."""

    #: Committed transactions the next flush lands.
    transactions: int
    #: Bytes of rows the sink buffers (in memory, or spilled) for them.
    bytes: int
    #: Seconds until a flush by time is due (0: at the next chance), None if nothing waits.
    #: A table's buffer reaching :attr:`flush_bytes` lands it sooner.
    lands_in: float | None
    #: The buffered size of one table at which a flush is due whatever the time.
    flush_bytes: int


class Sink(Protocol):
    """A destination for one replication stream (see the module docstring).

    Lifecycle: :meth:`open` (take the lake, recover it, return where to resume), the items,
    :meth:`flush` whenever the caller wants durability (or :attr:`flush_wanted` / :meth:`flush_due`
    says it is time), :meth:`close` (flush what is complete, drop an open transaction, release
    the lake).
    """

    #: Called after each flush that landed something (in the thread that ran the flush).
    on_flush: Callable[[Flushed], None] | None
    #: The caller's monotonic clock, for :attr:`Flushed.seconds`.
    clock: Callable[[], float] | None

    def open(self) -> Checkpoint | None:
        """Take the lake, recover it and return the checkpoint to resume after (None: new)."""
        ...

    def close(self) -> None:
        """Land everything committed, drop an open transaction, release the lake."""
        ...

    @property
    def durable_position(self) -> Checkpoint | None:
        """The last landed transaction: resume after it, ACK (semi-sync) up to it."""
        ...

    @property
    def unlanded(self) -> bool:
        """Whether anything handed over is not durable yet."""
        ...

    @property
    def stats(self) -> SinkStats:
        """What the sink has done since it was made (a copy of its counters, read by attribute)."""
        ...

    # --- the transaction stream ----------------------------------------------------------------

    def handle(self, item: TransactionItem) -> CommitOutcome | None:
        """One item of the transaction stream: a commit (or, ``commit.xa`` set, a prepared XA
        part's commit) returns its outcome, every other item None."""
        ...

    @property
    def io_wanted(self) -> bool:
        """The last item left lake work (``flush_in_handle=False``): :meth:`run_io` it before
        handing over the next (which would otherwise do it first, in the caller's thread)."""
        ...

    def run_io(self) -> None:
        """Do the lake work handed-over items left (spills, XA files, their transactions)."""
        ...

    # --- durability ------------------------------------------------------------------------------

    @property
    def flush_wanted(self) -> bool:
        """A size or row threshold was passed: flush before handing over more."""
        ...

    def flush_due(self, now: float, *, behind: bool = False) -> bool:
        """Whether committed data has waited long enough to flush (``now``: monotonic);
        ``behind``: the source has a backlog, so the longer catch-up interval applies."""
        ...

    def pending(self, now: float, *, behind: bool = False) -> Pending:
        """What is handed over and not durable yet, and when :meth:`flush_due` will say so
        (same ``now`` and ``behind`` as there). Cheap: no I/O, callable at any time."""
        ...

    def maybe_flush(self, now: float, *, behind: bool = False) -> bool:
        """:meth:`flush` if :meth:`flush_due`; whether it flushed."""
        ...

    def flush(self) -> Checkpoint | None:
        """Make every committed transaction durable and visible; the new checkpoint."""
        ...

    # --- snapshots -------------------------------------------------------------------------------

    @property
    def snapshot_state(self) -> SnapshotProgress:
        """The snapshot progress as of the last chunk handed over (a frozen record)."""
        ...

    def land_chunk(self, chunk: SnapshotChunk) -> int:
        """Land a snapshot chunk (its rows in memory or staged, or its progress alone) with
        the progress it carries; the chunk's ``_seq`` (see :mod:`sinks.chunks`)."""
        ...

    def stage_piece(self, staged: StagedSnapshot | None, event: RowsEvent) -> StagedSnapshot:
        """Stage a piece of a chunk too big to hold, invisible until it lands (``staged``
        None: a new chunk); a chunk not landed is dropped by its ``discard()``."""
        ...

    def prepared_tables(self, xid: str) -> frozenset[tuple[str, str]] | None:
        """The tables an in-doubt XA transaction's prepared part changed (None: none held)."""
        ...

    @property
    def handled_gtids(self) -> GtidSet | None:
        """MySQL: the GTID set of the lake's checkpoint and of every transaction handed over
        since, landed or not (None: no MySQL GTIDs). The sink's own, updated in place: a
        caller keeps a :meth:`~protocol.gtid.GtidSet.copy`."""
        ...

    # --- the source server and the GTID state (failover) -----------------------------------------

    @property
    def server(self) -> ServerIdentity | None:
        """The server the stream comes from, as recorded in the checkpoint (None: unknown)."""
        ...

    def note_server(self, server: ServerIdentity) -> None:
        """The stream comes from ``server`` now; another server than the recorded one voids
        the checkpoint's binlog position (an offset in the old server's binlog)."""
        ...

    @property
    def gtid_state_complete(self) -> bool:
        """Whether the GTID state covers everything before the lake's start, so that a dump
        may start from it on any server of the topology."""
        ...

    @property
    def seedable(self) -> bool:
        """A new lake with nothing landed or seeded: :meth:`seed_gtid_state` may be called."""
        ...

    @property
    def gtid_seed(self) -> str | None:
        """The state the lake was seeded with (before anything committed)."""
        ...

    def seed_gtid_state(self, state: str, flavor: str) -> None:
        """A new lake's GTID state: the server's at its start point (``flavor``: mariadb or
        mysql); transactions it covers are already landed by definition."""
        ...

    def complete_gtid_state(self, state: str) -> None:
        """A MariaDB lake begun before states were seeded: ``state``, the server's at the
        checkpoint's position, completes it (domains no landed transaction named)."""
        ...

    def diverge(self, state: str, record: dict[str, Any]) -> None:
        """Go on from ``state`` although the lake holds transactions the server lacks (an
        explicit choice), recording ``record`` (JSON data) in the checkpoint; committed at
        once (built with ``flush_in_handle=False``: by the flush :attr:`flush_wanted` asks the
        caller for, before anything else)."""
        ...
