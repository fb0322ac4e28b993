"""Build synthetic transaction item streams by hand (tests, benchmarks, demos).

In the manner of ``trio.testing``: a small public helper so that tests of sinks need neither a
server nor the binlog decoder. :class:`StreamBuilder` hands out the items a real stream would
carry — TableMapEvent, RowsEvent with column-wise values, Begin/Commit/Rollback with GTIDs and
advancing binlog positions::

    b = StreamBuilder()
    users = b.table("shop", "users", [col(0, LONGLONG, "id", pk=True), col(1, VARCHAR, "name")])
    items = [b.begin(), b.insert(users, [(1, "ann")]), b.commit()]
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Sequence
from typing import Any

from protocol.binlog.model import (
    BinlogPosition,
    Column,
    ColumnFlag,
    EventHeader,
    RowsEvent,
    RowsKind,
    TableMapEvent,
)
from protocol.binlog.transactions import (
    Statement,
    TransactionBegin,
    TransactionCommit,
    TransactionPrepared,
    TransactionRollback,
)
from protocol.gtid import MariadbGtid, MysqlGtid, Tsid

_ROWS_TYPE = {RowsKind.INSERT: 30, RowsKind.UPDATE: 31, RowsKind.DELETE: 32}


def col(index: int, type_code: int, name: str | None, *, pk: bool = False,
        nullable: bool = True, unsigned: bool = False, binary: bool = False,
        charset: int | None = None, **kw: Any) -> Column:
    """A Column with the common flags spelled as keywords."""
    flags = ColumnFlag.VISIBLE
    if pk:
        flags |= ColumnFlag.PRIMARY_KEY
        nullable = False
    if nullable:
        flags |= ColumnFlag.NULLABLE
    if unsigned:
        flags |= ColumnFlag.UNSIGNED
    if binary:
        flags |= ColumnFlag.BINARY
        charset = 63 if charset is None else charset
    return Column(index=index, type_code=type_code, meta=kw.pop("meta", 0), name=name,
                  flags=flags, charset=charset, **kw)


class StreamBuilder:
    """Hands out stream items with consistent GTIDs, positions and timestamps."""

    def __init__(self, *, flavor: str = "mariadb", domain: int = 0, server_id: int = 1,
                 file: str = "binlog.000001", start_time_us: int = 1_767_225_600_000_000,
                 first_gtid_seq: int = 1, source_uuid: str | None = None) -> None:
        self.flavor = flavor
        self.domain = domain
        self.server_id = server_id
        self.file = file
        self.pos = 4
        self.time_us = start_time_us
        self.gtid_seq = first_gtid_seq
        self.tsid = Tsid(_uuid.UUID(source_uuid or "3e11fa47-71ca-11e1-9e33-c80aa9429562"))
        self._table_id = 100
        self._gtid: Any = None
        self._begin: BinlogPosition | None = None

    def _header(self, type_code: int, size: int = 100) -> EventHeader:
        header = EventHeader(timestamp=self.time_us // 1_000_000, type_code=type_code,
                             server_id=self.server_id, event_size=size,
                             log_pos=self.pos + size, flags=0, file=self.file,
                             position=self.pos, next_position=self.pos + size)
        self.pos += size
        return header

    def table(self, schema: str, table: str, columns: Sequence[Column], *,
              full_metadata: bool = True) -> TableMapEvent:
        self._table_id += 1
        pk = tuple(c.index for c in columns if c.flags & ColumnFlag.PRIMARY_KEY)
        if not full_metadata:
            columns = [Column(index=c.index, type_code=c.type_code, meta=c.meta, name=None,
                              flags=c.flags & ~ColumnFlag.PRIMARY_KEY, charset=c.charset,
                              precision=c.precision, scale=c.scale, length=c.length)
                       for c in columns]
            pk = ()
        return TableMapEvent(header=self._header(19), table_id=self._table_id, flags=1,
                             schema=schema, table=table, columns=tuple(columns),
                             primary_key=pk, has_full_metadata=full_metadata)

    def begin(self, *, gtid: bool = True) -> TransactionBegin:
        if gtid and self.flavor == "mariadb":
            self._gtid = MariadbGtid(self.domain, self.server_id, self.gtid_seq)
        elif gtid:
            self._gtid = MysqlGtid(self.tsid, self.gtid_seq)
        else:
            self._gtid = None
        self.gtid_seq += 1
        header = self._header(162)
        self._begin = BinlogPosition(self.file, header.position)
        return TransactionBegin(gtid=self._gtid, position=self._begin,
                                timestamp=self.time_us // 1_000_000, server_id=self.server_id)

    def _rows(self, kind: RowsKind, table: TableMapEvent, rows: Sequence[Sequence[Any]],
              before_rows: Sequence[Sequence[Any]] | None,
              columns: Sequence[int] | None, before_columns: Sequence[int] | None) -> RowsEvent:
        all_columns = tuple(range(len(table.columns)))
        after_cols = tuple(columns) if columns is not None else all_columns
        before_cols = tuple(before_columns) if before_columns is not None else all_columns

        def by_column(image: Sequence[Sequence[Any]], width: int) -> tuple[list[Any], ...]:
            return tuple([row[i] for row in image] for i in range(width))

        after = before = None
        b_cols: tuple[int, ...] = ()
        a_cols: tuple[int, ...] = ()
        if kind is RowsKind.INSERT:
            after, a_cols = by_column(rows, len(after_cols)), after_cols
        elif kind is RowsKind.DELETE:
            before, b_cols = by_column(rows, len(before_cols)), before_cols
        else:
            assert before_rows is not None
            before, b_cols = by_column(before_rows, len(before_cols)), before_cols
            after, a_cols = by_column(rows, len(after_cols)), after_cols
        return RowsEvent(header=self._header(_ROWS_TYPE[kind]), kind=kind, table=table,
                         flags=0, row_count=len(rows), before_columns=b_cols,
                         after_columns=a_cols, before=before, after=after)

    def insert(self, table: TableMapEvent, rows: Sequence[Sequence[Any]], *,
               columns: Sequence[int] | None = None) -> RowsEvent:
        return self._rows(RowsKind.INSERT, table, rows, None, columns, None)

    def delete(self, table: TableMapEvent, rows: Sequence[Sequence[Any]], *,
               columns: Sequence[int] | None = None) -> RowsEvent:
        return self._rows(RowsKind.DELETE, table, rows, None, None, columns)

    def update(self, table: TableMapEvent, pairs: Sequence[tuple[Sequence[Any], Sequence[Any]]],
               *, columns: Sequence[int] | None = None,
               before_columns: Sequence[int] | None = None) -> RowsEvent:
        return self._rows(RowsKind.UPDATE, table, [p[1] for p in pairs], [p[0] for p in pairs],
                          columns, before_columns)

    def ddl(self, schema: str, query: str) -> Statement:
        header = self._header(2)
        return Statement(schema=schema, query=query, is_ddl=True,
                         position=BinlogPosition(self.file, header.position),
                         timestamp=header.timestamp)

    def commit(self, *, advance_us: int = 1_000_000,
               xa: str | None = None) -> TransactionCommit:
        assert self._begin is not None
        header = self._header(16, 31)
        commit = TransactionCommit(gtid=self._gtid, begin=self._begin,
                                   end=BinlogPosition(self.file, header.next_position),
                                   commit_time_us=self.time_us, server_id=self.server_id,
                                   xid=self.pos, xa=xa)
        self.time_us += advance_us
        return commit

    def rollback(self, *, xa: str | None = None) -> TransactionRollback:
        assert self._begin is not None
        header = self._header(2)
        return TransactionRollback(gtid=self._gtid, begin=self._begin,
                                   end=BinlogPosition(self.file, header.next_position), xa=xa)

    def prepare(self, xid: str) -> TransactionPrepared:
        """``XA PREPARE`` ending the open (XA) transaction."""
        assert self._begin is not None
        header = self._header(38, 40)
        return TransactionPrepared(gtid=self._gtid, begin=self._begin,
                                   end=BinlogPosition(self.file, header.next_position), xid=xid)

    def xa_outcome(self, xid: str, *, commit: bool) -> list[Any]:
        """The event group of ``XA COMMIT xid`` (or ``XA ROLLBACK xid``): begin, statement, end."""
        begin = self.begin()
        header = self._header(2)
        word = "COMMIT" if commit else "ROLLBACK"
        statement = Statement(schema="", query=f"XA {word} {xid}", is_ddl=False,
                              position=BinlogPosition(self.file, header.position),
                              timestamp=header.timestamp)
        end = self.commit(xa=xid) if commit else self.rollback(xa=xid)
        return [begin, statement, end]
