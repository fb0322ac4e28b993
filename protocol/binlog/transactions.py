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

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..frozen import fast_init, positional_maker
from ..gtid import MariadbGtid, MysqlGtid, Tsid
from .ddl import classify
from .events import (
    ExecuteLoadQueryEvent,
    MariadbGtidEvent,
    MysqlGtidEvent,
    QueryEvent,
    XaPrepareEvent,
    XidEvent,
)
from .model import BinlogPosition, EventHeader, RowsEvent

if TYPE_CHECKING:  # pragma: no cover
    Gtid = MariadbGtid | MysqlGtid


@fast_init
@dataclass(frozen=True, slots=True)
class TransactionBegin:
    """The start of a transaction: its GTID (if the server has GTIDs) and where it starts."""

    gtid: Gtid | None
    position: BinlogPosition  # of the GTID (or BEGIN query) event
    timestamp: int  # header timestamp, seconds since the epoch (UTC)
    server_id: int  # the originating server (loop prevention filters on it)
    is_ddl: bool = False  # MariaDB GTID flag DDL / a standalone statement
    is_xa: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class Statement:
    """A SQL statement inside a transaction: DDL, or statement-based DML."""

    schema: str
    query: str
    is_ddl: bool
    position: BinlogPosition
    timestamp: int


@fast_init
@dataclass(frozen=True, slots=True)
class TransactionCommit:
    """The transaction committed (XID, COMMIT query, or the end of a standalone DDL)."""

    gtid: Gtid | None
    begin: BinlogPosition
    end: BinlogPosition  # resume point: right after the commit event
    commit_time_us: int  # UTC microseconds; second precision where the server gives no more
    server_id: int
    xid: int | None = None
    #: ``XA COMMIT <xid>`` of an earlier :class:`TransactionPrepared`: the XA id (as that
    #: item's ``xid``) whose prepared rows commit now. ``None`` for every other commit.
    xa: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class TransactionRollback:
    """The transaction ended with ROLLBACK (e.g. non-transactional engine mix); nothing lands.

    ``xa`` is set for an ``XA ROLLBACK <xid>`` event group: the prepared part ``xid`` (see
    :class:`TransactionPrepared`) is discarded. Unlike a plain ROLLBACK, that group is itself
    logged and has a GTID: a sink moves its resume point past it.
    """

    gtid: Gtid | None
    begin: BinlogPosition
    end: BinlogPosition
    xa: str | None = None




@fast_init
@dataclass(frozen=True, slots=True)
class TransactionPrepared:
    """The prepared part of an XA transaction ended (``XA PREPARE``); its outcome comes later.

    The rows between the ``TransactionBegin(is_xa=True)`` and this item are *in doubt*: they
    become committed when a later event group ``XA COMMIT <xid>`` arrives (surfaced as
    ``TransactionBegin(is_xa=True)``, ``Statement("XA COMMIT …")``, ``TransactionCommit`` whose
    ``xa`` is this ``xid``) or are discarded by ``XA ROLLBACK <xid>`` (same, ending in
    ``TransactionRollback`` with ``xa`` set). ``end`` is
    a valid resume point: the server replays the prepared part to a new replica only if it
    is still pending. ``xid`` is the XA id as the server prints it.
    """

    gtid: Gtid | None
    begin: BinlogPosition
    end: BinlogPosition
    xid: str


# Built once per transaction, with every field: in C when the extension is there.
_make_begin = positional_maker(TransactionBegin)
_make_commit = positional_maker(TransactionCommit)
_make_position = positional_maker(BinlogPosition)
# A MariaDB GTID from a decoded GTID event, once per transaction: its domain and sequence were
# read as u32/u64 and its server id from the header's u32, so they are in range already.
_make_mariadb_gtid = positional_maker(MariadbGtid, checked_by_caller=True)

TransactionItem = (TransactionBegin | RowsEvent | Statement | TransactionCommit
                   | TransactionRollback | TransactionPrepared)


# --- the assembler ---------------------------------------------------------------------------------
#
# How event groups look (ROW format; STATEMENT/MIXED adds INTVAR/RAND/USER_VAR before QUERYs):
#
#   MariaDB  GTID(trans)  [ANNOTATE] TABLE_MAP ROWS… [QUERY stmt]…  XID | QUERY COMMIT | ROLLBACK
#            GTID(standalone, ddl)  QUERY                              (DDL: one statement)
#            GTID(prepared XA)  QUERY "XA START"  … QUERY "XA END"  XA_PREPARE
#            GTID(completed XA)  QUERY "XA COMMIT …" | "XA ROLLBACK …"
#   MySQL    GTID|ANONYMOUS_GTID|GTID_TAGGED  QUERY BEGIN  [ROWS_QUERY] TABLE_MAP ROWS…  XID
#            GTID  QUERY ddl                                           (no BEGIN: standalone)
#            GTID  QUERY "XA START" … QUERY "XA END"  XA_PREPARE;  GTID  QUERY "XA COMMIT …"
#            (TRANSACTION_PAYLOAD: the stream has already unwrapped its inner events)
#   no GTIDs QUERY BEGIN … XID | COMMIT;  a lone QUERY is a whole transaction
#
# Commit time: MySQL GTID events carry immediate_commit_timestamp in microseconds. MariaDB
# gives the commit event's header timestamp (seconds) plus, for a QUERY commit, its Q_HRNOW
# microseconds; an XID commit has no sub-second part, so it is second precision.

_TRANSACTION_CONTROL = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*(BEGIN|COMMIT|ROLLBACK|XA\s+(?:START|BEGIN|END|COMMIT|ROLLBACK))\b",
    re.IGNORECASE | re.DOTALL)


def _control_word(query: str) -> str:
    """``BEGIN``/``COMMIT``/``ROLLBACK``/``XA START``… when the query is exactly that, else ``""``.

    ``ROLLBACK TO SAVEPOINT`` is a statement, not the end of the transaction.
    """
    match = _TRANSACTION_CONTROL.match(query)
    if match is None:
        return ""
    word = " ".join(match.group(1).upper().split())
    rest = query[match.end():].strip().rstrip(";").strip()
    if word in ("BEGIN", "COMMIT", "ROLLBACK"):
        if rest.upper().startswith("WORK"):
            rest = rest[4:].strip()
        return word if not rest else ""
    return word


_XA_OUTCOME = re.compile(r"\s*(?:/\*.*?\*/\s*)*XA\s+(?:COMMIT|ROLLBACK)\s+(.*?)[\s;]*$",
                         re.IGNORECASE | re.DOTALL)
_HEX_LITERAL = re.compile(r"[xX]'([0-9A-Fa-f]*)'")


def _xa_id(query: str) -> str | None:
    """The XA id of ``XA COMMIT|ROLLBACK <xid>`` as :class:`XaXid` prints it.

    Servers log the id as ``X'<gtrid hex>',X'<bqual hex>',<formatID>`` — the form
    ``str(XaXid)`` gives — so the outcome matches its ``XA_PREPARE``; hex digits are lowered.
    """
    match = _XA_OUTCOME.match(query)
    if match is None:
        return None
    text = match.group(1).strip()
    return _HEX_LITERAL.sub(lambda m: f"X'{m.group(1).lower()}'", text)


_FL_DDL = MariadbGtidEvent.FL_DDL
_FL_XA = MariadbGtidEvent.FL_PREPARED_XA | MariadbGtidEvent.FL_COMPLETED_XA
_FL_STANDALONE_OR_COMPLETED_XA = MariadbGtidEvent.FL_STANDALONE | MariadbGtidEvent.FL_COMPLETED_XA


class _Open:
    """The transaction being assembled."""

    __slots__ = ("gtid", "begin", "server_id", "standalone", "mysql_commit_us", "is_xa")

    def __init__(self, gtid: Gtid | None, begin: BinlogPosition, server_id: int,
                 standalone: bool | None, mysql_commit_us: int | None, is_xa: bool) -> None:
        self.gtid = gtid
        self.begin = begin
        self.server_id = server_id
        self.standalone = standalone  # None: MySQL, decided by the first QUERY (BEGIN or not)
        self.mysql_commit_us = mysql_commit_us
        self.is_xa = is_xa


class TransactionAssembler:
    """Turn decoded events (from :class:`~protocol.binlog.stream.EventStream`) into items.

    ``feed(event)`` returns the items the event completes, in order (often none). A
    transaction left open when a new one begins (a binlog cut short by a crash) is closed with
    :class:`TransactionRollback` — its rows must not land. Events that carry no change or
    boundary (TABLE_MAP, ANNOTATE_ROWS, INTVAR, ROTATE, heartbeats, …) give no items; the
    stream still returns them to whoever wants them.
    """

    def __init__(self) -> None:
        self._open: _Open | None = None

    @property
    def in_transaction(self) -> bool:
        return self._open is not None

    def feed(self, event: object) -> list[TransactionItem]:
        # One dict lookup by the event's exact class; most events (TABLE_MAP, ANNOTATE_ROWS,
        # ROTATE, …) give no item. A class not met before is looked up by isinstance, once.
        cls = type(event)
        handler = _HANDLERS.get(cls)
        if handler is None:
            handler = _HANDLERS[cls] = _handler_for(cls)
        return handler(self, event)

    def feed_many(self, events: Iterable[Any]) -> list[TransactionItem]:
        """The items of ``events`` in order: what ``feed`` returns for each, concatenated.

        One call for a batch of events (all those received in one read): a one-row
        transaction is five events of which three give an item, and a call and a list per
        event showed in profiles.
        """
        out: list[TransactionItem] = []
        append = out.append
        handlers = _HANDLERS
        nothing = TransactionAssembler._nothing
        for event in events:
            cls = type(event)
            if cls is RowsEvent and self._open is not None:  # most items: no list of one
                append(event)
                continue
            # A MariaDB GTID with nothing open and an XID closing what a GTID opened: what
            # _begin_gtid/_begin and _xid/_commit do, without their three calls and list.
            if cls is MariadbGtidEvent and self._open is None:
                header = event.header
                flags = event.flags
                gtid = _make_mariadb_gtid(event.domain_id, event.server_id, event.seq_no)
                begin = _make_position(header.file, header.position)
                is_xa = bool(flags & _FL_XA)
                self._open = _Open(gtid, begin, header.server_id,
                                   bool(flags & _FL_STANDALONE_OR_COMPLETED_XA), None, is_xa)
                append(_make_begin(gtid, begin, header.timestamp, header.server_id,
                                   bool(flags & _FL_DDL), is_xa))
                continue
            open_ = self._open
            if cls is XidEvent and open_ is not None and open_.mysql_commit_us is None:
                header = event.header
                self._open = None
                append(_make_commit(open_.gtid, open_.begin,
                                    _make_position(header.file, header.next_position),
                                    header.timestamp * 1_000_000, open_.server_id,
                                    event.xid, None))
                continue
            handler = handlers.get(cls)
            if handler is None:
                handler = handlers[cls] = _handler_for(cls)
            if handler is not nothing:
                out += handler(self, event)
        return out

    def _rows(self, event: RowsEvent) -> list[TransactionItem]:
        if self._open is None:
            return [self._begin(None, event.header, False, standalone=False), event]
        return [event]

    def _query_event(self, event: QueryEvent | ExecuteLoadQueryEvent) -> list[TransactionItem]:
        return self._query(event.header, event.schema, event.query, event.status.hrnow)

    def _xid(self, event: XidEvent) -> list[TransactionItem]:
        return self._commit(event.header, None, xid=event.xid)

    def _xa_prepare(self, event: XaPrepareEvent) -> list[TransactionItem]:
        if event.one_phase:
            return self._commit(event.header, None)
        return self._prepared(event.header, str(event.xid))

    def _nothing(self, event: object) -> list[TransactionItem]:
        return []

    # --- boundaries ----------------------------------------------------------------------------

    def _begin_gtid(self, event: MariadbGtidEvent | MysqlGtidEvent) -> list[TransactionItem]:
        items = self._abandon(event.header) if self._open is not None else []
        gtid: Gtid | None
        if isinstance(event, MariadbGtidEvent):  # one per transaction: flags tested in place
            flags = event.flags
            gtid = _make_mariadb_gtid(event.domain_id, event.server_id, event.seq_no)
            items.append(self._begin(gtid, event.header, bool(flags & _FL_DDL),
                                     standalone=bool(flags & _FL_STANDALONE_OR_COMPLETED_XA),
                                     is_xa=bool(flags & _FL_XA)))
        else:
            gtid = None if event.anonymous else MysqlGtid(Tsid(event.uuid, event.tag), event.gno)
            items.append(self._begin(gtid, event.header, False, standalone=None,
                                     commit_us=event.immediate_commit_timestamp))
        return items

    def _begin(self, gtid: Gtid | None, header: EventHeader, is_ddl: bool, *,
               standalone: bool | None, is_xa: bool = False,
               commit_us: int | None = None) -> TransactionBegin:
        begin = _make_position(header.file, header.position)
        self._open = _Open(gtid, begin, header.server_id, standalone, commit_us, is_xa)
        return _make_begin(gtid, begin, header.timestamp, header.server_id, is_ddl, is_xa)

    def _abandon(self, header: EventHeader) -> list[TransactionItem]:
        if self._open is None:
            return []
        open_, self._open = self._open, None
        return [TransactionRollback(open_.gtid, open_.begin,
                                    BinlogPosition(header.file, header.position))]

    def _query(self, header: EventHeader, schema: str, query: str,
               hrnow: int | None) -> list[TransactionItem]:
        word = _control_word(query)
        items: list[TransactionItem] = []
        if self._open is None:
            if word == "BEGIN":
                items.append(self._begin(None, header, False, standalone=False))
                return items
            items.append(self._begin(None, header, classify(query) is not None,
                                     standalone=True))
        open_ = self._open
        assert open_ is not None
        if word == "BEGIN" or word in ("XA START", "XA BEGIN", "XA END"):
            if open_.standalone is None:
                open_.standalone = False
            return items
        if word == "COMMIT":
            return items + self._commit(header, hrnow)
        if word == "ROLLBACK":
            return items + self._rollback(header)
        items.append(Statement(schema, query, classify(query, schema) is not None,
                               BinlogPosition(header.file, header.position), header.timestamp))
        if open_.standalone is None:
            open_.standalone = True
        if open_.standalone:
            if word == "XA ROLLBACK":
                return items + self._rollback(header, xa=_xa_id(query))
            return items + self._commit(header, hrnow,
                                        xa=_xa_id(query) if word == "XA COMMIT" else None)
        return items

    def _commit(self, header: EventHeader, hrnow: int | None, *,
                xid: int | None = None, xa: str | None = None) -> list[TransactionItem]:
        items: list[TransactionItem] = []
        if self._open is None:  # a commit with nothing open: still a boundary to resume after
            items.append(self._begin(None, header, False, standalone=False))
        open_, self._open = self._open, None
        assert open_ is not None
        if open_.mysql_commit_us is not None:
            commit_us = open_.mysql_commit_us
        else:
            commit_us = header.timestamp * 1_000_000 + (hrnow or 0)
        items.append(_make_commit(open_.gtid, open_.begin,
                                  _make_position(header.file, header.next_position),
                                  commit_us, open_.server_id, xid, xa))
        return items

    def _rollback(self, header: EventHeader, *, xa: str | None = None) -> list[TransactionItem]:
        open_, self._open = self._open, None
        assert open_ is not None
        return [TransactionRollback(open_.gtid, open_.begin,
                                    BinlogPosition(header.file, header.next_position), xa)]

    def _prepared(self, header: EventHeader, xid: str) -> list[TransactionItem]:
        items: list[TransactionItem] = []
        if self._open is None:
            items.append(self._begin(None, header, False, standalone=False, is_xa=True))
        open_, self._open = self._open, None
        assert open_ is not None
        items.append(TransactionPrepared(open_.gtid, open_.begin,
                                         BinlogPosition(header.file, header.next_position), xid))
        return items


# What feed() does with each kind of event, in the order an isinstance chain would test them.
_Handler = Callable[[TransactionAssembler, Any], list[TransactionItem]]
_BY_CLASS: tuple[tuple[type, _Handler], ...] = (
    (RowsEvent, TransactionAssembler._rows),
    (MariadbGtidEvent, TransactionAssembler._begin_gtid),
    (MysqlGtidEvent, TransactionAssembler._begin_gtid),
    (QueryEvent, TransactionAssembler._query_event),
    (ExecuteLoadQueryEvent, TransactionAssembler._query_event),
    (XidEvent, TransactionAssembler._xid),
    (XaPrepareEvent, TransactionAssembler._xa_prepare),
)
_HANDLERS: dict[type, _Handler] = dict(_BY_CLASS)


def _handler_for(cls: type) -> _Handler:
    for base, handler in _BY_CLASS:
        if issubclass(cls, base):
            return handler
    return TransactionAssembler._nothing
