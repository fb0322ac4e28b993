"""Binlog events grouped into transactions, as a stream of typed items.

A transaction reaches the layer above as::

    TransactionBegin, (RowsEvent | Statement)*, TransactionCommit | TransactionRollback

so that a sink can spill a transaction of millions of rows without ever holding it whole.
Standalone DDL arrives as ``TransactionBegin``, one ``Statement(is_ddl=True)``, ``TransactionCommit``.
Statement-based DML (binlog_format=STATEMENT/MIXED) arrives as ``Statement(is_ddl=False)`` — it is
surfaced, never silently dropped.

``TransactionCommit.end`` is the resume point: the position right after the commit event, in
the file the transaction was written to. A sink that has durably landed everything up to a
commit may tell the session to acknowledge (semi-sync) and to resume from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .model import BinlogPosition, RowsEvent

if TYPE_CHECKING:  # pragma: no cover
    from ..gtid import MariadbGtid, MysqlGtid

    Gtid = MariadbGtid | MysqlGtid


@dataclass(frozen=True, slots=True)
class TransactionBegin:
    """The start of a transaction: its GTID (if the server has GTIDs) and where it starts."""

    gtid: Gtid | None
    position: BinlogPosition  # of the GTID (or BEGIN query) event
    timestamp: int  # header timestamp, seconds since the epoch (UTC)
    server_id: int  # the originating server (loop prevention filters on it)
    is_ddl: bool = False  # MariaDB GTID flag DDL / a standalone statement
    is_xa: bool = False


@dataclass(frozen=True, slots=True)
class Statement:
    """A SQL statement inside a transaction: DDL, or statement-based DML."""

    schema: str
    query: str
    is_ddl: bool
    position: BinlogPosition
    timestamp: int


@dataclass(frozen=True, slots=True)
class TransactionCommit:
    """The transaction committed (XID, COMMIT query, or the end of a standalone DDL)."""

    gtid: Gtid | None
    begin: BinlogPosition
    end: BinlogPosition  # resume point: right after the commit event
    commit_time_us: int  # UTC microseconds; second precision where the server gives no more
    server_id: int
    xid: int | None = None
    ack_requested: bool = False  # semi-sync: the master waits for our ACK of ``end``


@dataclass(frozen=True, slots=True)
class TransactionRollback:
    """The transaction ended with ROLLBACK (e.g. non-transactional engine mix); nothing lands."""

    gtid: Gtid | None
    begin: BinlogPosition
    end: BinlogPosition


TransactionItem = TransactionBegin | RowsEvent | Statement | TransactionCommit | TransactionRollback
