"""Snapshot chunks in the sink and the coordinator, on synthetic streams (no server).

The sink lands a READ rows event as ``_op = "R"`` with its own ``_seq``, no GTID, the stream
position it is consistent with, and commits the snapshot progress with it; the coordinator
drops the rows the stream touched while the chunk waited, and lands only between transactions.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

import pytest
import trio

from protocol.binlog.model import BinlogPosition, EventHeader, RowsEvent, RowsKind
from protocol.binlog.transactions import TransactionPrepared, TransactionRollback
from protocol.snapshot import SnapshotTable
from replica.core.connection import ConnectOptions
from replica.core.snapshot import (
    Chunk,
    SnapshotCoordinator,
    SnapshotReader,
    _Entry,
    pending_tables,
    plan_state,
    requests_done,
    store_entry,
)
from sinks.chunks import SnapshotChunk
from sinks.contract import SnapshotProgress, TableProgress
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder

from .test_sink_parquet import feed, read_table, users_columns

READ_US = 1_767_300_000_000_000

#: A table's entry as the reader hands it to a chunk (done once the chunk lands).
USERS_DONE = TableProgress("shop", "users", "done", "", False, None, 0, 0, ())


def _read(table_map, rows):  # type: ignore[no-untyped-def]
    columns = tuple([row[i] for row in rows] for i in range(len(table_map.columns)))
    return RowsEvent(header=EventHeader(0, 0, 0, 0, 0, 0), kind=RowsKind.READ, table=table_map,
                     flags=0, row_count=len(rows), before_columns=(),
                     after_columns=tuple(range(len(table_map.columns))), before=None,
                     after=columns)


def test_a_chunk_lands_as_r_rows_with_its_own_seq_and_the_stream_position(tmp_path):
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    assert sink.open() is None
    feed(sink, [b.begin(), b.insert(users, [(9, "zed", 1)]), b.commit()])
    at = BinlogPosition("binlog.000001", b.pos)
    state = {"tables": {"shop.users": {"database": "shop", "table": "users", "status": "done",
                                        "reason": "binlake snapshot", "one_time": False,
                                        "last_key": ["2"], "rows": 2, "chunks": 1,
                                        "requests": []}}}
    assert sink.land_chunk(SnapshotChunk(
        SnapshotProgress.from_json(state), at, READ_US,
        _read(users, [(1, "ann", 10), (2, "bob", None)]))) == 2
    feed(sink, [b.begin(), b.update(users, [((1, "ann", 10), (1, "ann", 11))]), b.commit()])
    checkpoint = sink.flush()
    sink.close()
    assert checkpoint is not None and checkpoint.seq == 3
    assert checkpoint.gtid == "0-1-2"  # the chunk is no binlog transaction: no GTID of its own
    rows = read_table(lake, "shop", "users").to_pylist()
    assert [(r["_op"], r["_seq"], r["_row"], r["id"]) for r in rows] == [
        ("I", 1, 0, 9), ("R", 2, 0, 1), ("R", 2, 1, 2), ("U", 3, 0, 1)]
    r = rows[1]
    assert (r["_gtid"], r["_gtid_seq"], r["_before"]) == (None, None, None)
    assert (r["_binlog_file"], r["_binlog_pos"]) == (at.file, at.pos)
    assert int(r["_commit_ts"].timestamp() * 1_000_000) == READ_US
    assert rows[3]["_before"] == {"id": 1, "name": "ann", "score": 10}
    with open(os.path.join(lake, "_checkpoint.json"), encoding="utf-8") as f:
        assert json.load(f)["snapshot"] == state
    reopened = ParquetSink(lake)
    reopened.open()
    assert reopened.snapshot_state.to_json() == state
    reopened.close()


def test_a_new_lake_resumes_from_the_point_its_chunks_are_consistent_with(tmp_path):
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    assert sink.open() is None
    sink.land_chunk(SnapshotChunk(SnapshotProgress(tables=())))  # a plan alone: no checkpoint
    assert sink.flush() is None
    at = BinlogPosition("binlog.000003", 1234)
    sink.land_chunk(SnapshotChunk(SnapshotProgress.from_json({"tables": {"shop.x": {
        "database": "shop", "table": "x", "status": "done", "reason": "binlake snapshot",
        "one_time": False, "last_key": None, "rows": 0, "chunks": 1, "requests": []}}}),
        at, READ_US, _read(users, [])))  # an empty table
    checkpoint = sink.flush()
    sink.close()
    assert checkpoint is not None and (checkpoint.seq, checkpoint.position) == (0, at)


def _coordinated(tmp_path):  # type: ignore[no-untyped-def]
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(str(tmp_path / "lake"))
    sink.open()
    table = SnapshotTable("shop", "users", users, (0,), "id, name, score")
    return b, users, sink, table, SnapshotCoordinator(sink)


async def _start_landing(nursery: trio.Nursery, coordinator: SnapshotCoordinator, chunk: Chunk,
                         results: list[bool]) -> None:
    """Hand ``chunk`` to the coordinator in the background (as the reader does), then yield."""
    async def land() -> None:
        results.append(await coordinator.land(chunk))

    nursery.start_soon(land)
    await trio.sleep(0.01)


def test_rows_the_stream_touched_are_left_out_and_the_chunk_waits_for_the_boundary(tmp_path):
    b, users, sink, table, coordinator = _coordinated(tmp_path)
    coordinator.watch("shop", "users", (0,), keep_images=False)
    high = BinlogPosition("binlog.000001", 10_000)
    chunk = Chunk(table, 0, ([1, 2, 3], ["a", "b", "c"], [1, 2, 3]), 3, high, READ_US,
                  USERS_DONE)
    results: list[bool] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await _start_landing(nursery, coordinator, chunk, results)
            b.begin()
            coordinator.begin()
            coordinator.observe(b.update(users, [((2, "b", 2), (2, "B", 5))]))
            coordinator.end(b.commit())
            coordinator.at_boundary(BinlogPosition("binlog.000001", 9_000))  # before high
            await trio.sleep(0.01)
            assert not results
            coordinator.at_boundary(BinlogPosition("binlog.000001", 10_500))

    trio.run(main)
    assert results == [True] and chunk.landed_rows == 2
    sink.flush()
    rows = read_table(str(tmp_path / "lake"), "shop", "users").to_pylist()
    assert [(r["_op"], r["id"], r["_binlog_pos"]) for r in rows] == [("R", 1, 10_500),
                                                                    ("R", 3, 10_500)]
    assert coordinator.state.tables is not None
    assert [(e.name, e.rows) for e in coordinator.state.tables] == [("shop.users", 2)]
    sink.close()


def test_ddl_on_the_table_discards_the_waiting_chunk(tmp_path):
    b, users, sink, table, coordinator = _coordinated(tmp_path)
    coordinator.watch("shop", "users", (0,), keep_images=False)
    chunk = Chunk(table, 0, ([1], ["a"], [1]), 1, BinlogPosition("binlog.000001", 50), READ_US,
                  USERS_DONE)
    results: list[bool] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await _start_landing(nursery, coordinator, chunk, results)
            coordinator.observe_statement(b.ddl("shop", "ALTER TABLE users ADD COLUMN x INT"))

    trio.run(main)
    assert results == [False] and "DDL" in chunk.outcome
    assert coordinator.generation("shop", "users") == 1
    sink.close()


def test_a_one_time_copy_takes_the_latest_image_of_a_touched_row(tmp_path):
    b, users, sink, table, coordinator = _coordinated(tmp_path)
    coordinator.watch("shop", "users", (0,), keep_images=True)
    b.begin()
    coordinator.begin()
    coordinator.observe(b.update(users, [((1, "a", 1), (1, "A", 7))]))
    coordinator.observe(b.delete(users, [(2, "b", 2)]))
    coordinator.end(b.commit())
    coordinator.at_boundary(BinlogPosition("binlog.000001", 99_999))
    chunk = Chunk(table, 0, ([1, 2], ["a", "b"], [1, 2]), 2,
                  BinlogPosition("binlog.000001", 10), READ_US,
                  USERS_DONE, one_time=True)

    async def main() -> None:
        assert await coordinator.land(chunk)

    trio.run(main)
    sink.flush()
    rows = read_table(str(tmp_path / "lake"), "shop", "users").to_pylist()
    assert [(r["_op"], r["id"], r["name"], r["score"]) for r in rows] == [("R", 1, "A", 7)]
    sink.close()


def test_the_plan_keeps_requests_and_restarts_finished_tables():
    state = plan_state(SnapshotProgress(), [("shop", "users")], reason="start")
    assert [e.table for e in pending_tables(state)] == ["users"]
    assert state.tables is not None
    state = store_entry(state, replace(state.tables[0], status="done", rows=5))
    assert requests_done(state, "r1", [("shop", "users")]) is None
    state = plan_state(state, [("shop", "users")], reason="request",
               one_time=lambda d, t: True, request="r1")
    assert state.tables is not None and len(state.tables) == 1
    assert state.tables[0].status == "pending" and state.tables[0].one_time is True
    state = store_entry(state, replace(state.tables[0], status="done", requests=()))
    assert state.tables is not None
    assert requests_done(state, "r1", [("shop", "users")]) == [state.tables[0]]
    assert state.tables[0].requests == ("r1",)  # the state's requests were kept


def test_without_tracking_the_per_transaction_calls_are_skipped_yet_no_change_is_missed(tmp_path):
    """The pipeline calls begin/observe/end (of a plain commit) only while ``tracking``: a key
    log started mid-transaction (its begin skipped) still sees the transaction's later rows
    at its commit, and one stopped mid-transaction leaves nothing for the next transactions."""
    b, users, sink, _table, coordinator = _coordinated(tmp_path)
    assert coordinator.tracking is False
    b.begin()  # not tracking: the pipeline skips begin()
    coordinator.watch("shop", "users", (0,), keep_images=False)  # a snapshot starts now
    assert coordinator.tracking is True
    coordinator.observe(b.update(users, [((2, "b", 2), (2, "B", 5))]))
    coordinator.end(b.commit())
    assert set(coordinator._logs[("shop", "users")].touched) == {(2,)}
    b.begin()
    coordinator.begin()
    coordinator.observe(b.insert(users, [(7, "x", 0)]))
    coordinator.unwatch("shop", "users")  # the table's snapshot ends mid-transaction
    assert coordinator.tracking is True  # until the transaction ends
    coordinator.end(b.commit())
    assert coordinator.tracking is False
    b.begin()  # skipped again: nothing of the earlier transactions may come back
    coordinator.watch("shop", "users", (0,), keep_images=False)
    coordinator.observe(b.insert(users, [(9, "y", 0)]))
    coordinator.end(b.commit())
    assert set(coordinator._logs[("shop", "users")].touched) == {(9,)}
    sink.close()


def test_rows_count_when_they_commit_and_xa_rows_at_their_xa_commit(tmp_path):
    b, users, sink, _table, coordinator = _coordinated(tmp_path)
    coordinator.watch("shop", "users", (0,), keep_images=False)

    def txn(row: int, end: object) -> None:
        begin = b.begin()
        coordinator.begin()
        coordinator.observe(b.insert(users, [(row, "x", 0)]))
        coordinator.end(end(begin) if callable(end) else end)  # type: ignore[arg-type]

    def prepared(xid: str):  # type: ignore[no-untyped-def]
        return lambda begin: TransactionPrepared(None, begin.position, begin.position, xid)

    txn(1, lambda begin: b.rollback())  # a plain rollback: never counted
    txn(2, prepared("'a'"))  # XA PREPARE: waits
    txn(3, prepared("'b'"))
    assert coordinator._logs[("shop", "users")].touched == {}
    b.begin()
    coordinator.begin()
    coordinator.end(replace(b.commit(), xa="'a'"))  # XA COMMIT 'a'
    b.begin()
    coordinator.begin()
    coordinator.end(TransactionRollback(None, b._begin, b._begin, xa="'b'"))  # type: ignore[arg-type]
    assert set(coordinator._logs[("shop", "users")].touched) == {(2,)}
    sink.close()


def test_an_xa_commit_of_rows_prepared_before_the_key_log_discards_the_waiting_chunk(tmp_path):
    """The prepared part was streamed (and kept in the lake) before this process watched the
    table — a restart between XA PREPARE and XA COMMIT, or a snapshot started in between: the
    coordinator has no keys for it, the sink knows its tables; a chunk read before the XA
    COMMIT became visible must not land after it."""
    b, users, sink, table, coordinator = _coordinated(tmp_path)
    feed(sink, [b.begin(), b.insert(users, [(1, "a", 1), (2, "b", 2)]), b.commit()])
    feed(sink, [b.begin(), b.update(users, [((2, "b", 2), (2, "b", 3))]), b.prepare("'x'")])
    sink.flush()
    sink.close()
    sink = ParquetSink(str(tmp_path / "lake"))  # the restart: memory is gone, the lake is not
    sink.open()
    coordinator = SnapshotCoordinator(sink)
    assert sink.prepared_tables("'x'") == {("shop", "users")}
    assert sink.prepared_tables("'other'") is None
    coordinator.watch("shop", "users", (0,), keep_images=False)
    chunk = Chunk(table, 0, ([1, 2], ["a", "b"], [1, 2]), 2, BinlogPosition("binlog.000001", 50),
                  READ_US, USERS_DONE)
    results: list[bool] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await _start_landing(nursery, coordinator, chunk, results)
            _begin, _statement, end = b.xa_outcome("'x'", commit=True)
            coordinator.begin()
            coordinator.end(end)

    trio.run(main)
    assert results == [False] and "XA COMMIT 'x'" in chunk.outcome
    assert coordinator.generation("shop", "users") == 1
    sink.close()


def test_an_xa_commit_whose_prepared_part_was_watched_notes_its_keys(tmp_path):
    b, users, sink, _table, coordinator = _coordinated(tmp_path)
    coordinator.watch("shop", "users", (0,), keep_images=False)
    feed(sink, [b.begin(), b.insert(users, [(1, "a", 1)]), b.commit()])
    begin = b.begin()
    coordinator.begin()
    event = b.update(users, [((1, "a", 1), (1, "a", 2))])
    coordinator.observe(event)
    prepare = b.prepare("'y'")
    coordinator.end(prepare)
    feed(sink, [begin, event, prepare])
    _begin, _statement, end = b.xa_outcome("'y'", commit=True)
    coordinator.begin()
    coordinator.end(end)
    assert coordinator.generation("shop", "users") == 0  # nothing to discard: keys noted
    assert set(coordinator._logs[("shop", "users")].touched) == {(1,)}
    sink.close()


def _reconcile_row_by_row(key_columns, columns, count, touched, one_time):  # type: ignore[no-untyped-def]
    """The rule _reconcile implements, one row at a time (its former code): the reference."""
    keep, replaced = [], {}
    for row in range(count):
        key = tuple(columns[i][row] for i in key_columns)
        if key not in touched:
            keep.append(row)
        elif one_time and touched[key] is not None:
            replaced[row] = touched[key]
            keep.append(row)
    if len(keep) == count and not replaced:
        return columns, count
    out = tuple([] for _ in columns)
    for row in keep:
        for k, col in enumerate(columns):
            out[k].append(replaced[row][k] if row in replaced else col[row])
    return out, len(keep)


def test_reconcile_drops_and_replaces_exactly_the_rows_the_log_holds():
    import random
    from types import SimpleNamespace

    from replica.core.snapshot import _KeyLog, _reconcile

    rng = random.Random(14)
    for case in range(400):
        key_columns = rng.choice([(0,), (1, 0), (2,)])
        count = rng.randrange(0, 40)
        extra = rng.randrange(0, 3)  # value lists may hold more than ``count`` rows
        columns = tuple([rng.randrange(0, 25) for _ in range(count + extra)] for _ in range(3))
        log = _KeyLog(key_columns=key_columns, keep_images=True)
        for _ in range(rng.randrange(0, 12)):
            key = tuple(rng.randrange(0, 25) for _ in key_columns)
            log.touched[key] = rng.choice([None, [rng.randrange(100, 200) for _ in range(3)]])
        one_time = rng.random() < 0.5
        before = tuple(list(col) for col in columns)
        table = SimpleNamespace(key_columns=key_columns)
        got = _reconcile(table, columns, count, log, one_time)  # type: ignore[arg-type]
        want = _reconcile_row_by_row(key_columns, before, count, log.touched, one_time)
        assert got == want, case
        assert columns == before, case  # the chunk's own lists are never changed in place


def _staged_names(lake: str) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(lake, "_staging"))
                  if n.startswith("snapshot-"))


def test_a_chunk_staged_in_pieces_lands_as_one_transaction_one_file_per_piece(tmp_path):
    """A keyless table's one chunk: pieces staged while the stream goes on (and flushes),
    invisible until the landing, which gives all of them one _seq and commits them at once."""
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    staged = None
    for first in (1, 4, 7):
        staged = sink.stage_piece(staged, _read(users, [(i, f"u{i}", i) for i in
                                                        range(first, min(first + 3, 9))]))
        feed(sink, [b.begin(), b.insert(users, [(100 + first, "s", 0)]), b.commit()])
        sink.flush()  # the stream's commits: the staged pieces are not in them
        assert {r["_op"] for r in read_table(lake, "shop", "users").to_pylist()} == {"I"}
    assert staged is not None and (staged.rows, staged.peak_rows) == (8, 3)
    assert len(_staged_names(lake)) == 3
    at = BinlogPosition("binlog.000001", b.pos)
    state = {"tables": {"shop.users": {"database": "shop", "table": "users", "status": "done",
                                        "reason": "binlake snapshot", "one_time": False,
                                        "last_key": None, "rows": 8, "chunks": 3,
                                        "requests": []}}}
    assert sink.land_chunk(SnapshotChunk(SnapshotProgress.from_json(state), at, READ_US,
                                         staged=staged)) == 4
    assert _staged_names(lake) == []
    with open(os.path.join(lake, "_checkpoint.json"), encoding="utf-8") as f:
        checkpoint = json.load(f)
    assert (checkpoint["seq"], checkpoint["snapshot"]) == (4, state)  # committed at once
    sink.close()
    rows = read_table(lake, "shop", "users").to_pylist()
    reads = [r for r in rows if r["_op"] == "R"]
    assert [(r["_seq"], r["_row"], r["id"]) for r in reads] == [
        (4, i - 1, i) for i in range(1, 9)]
    assert {(r["_binlog_file"], r["_binlog_pos"], r["_gtid"]) for r in reads} == {
        (at.file, at.pos, None)}
    assert {int(r["_commit_ts"].timestamp() * 1_000_000) for r in reads} == {READ_US}
    files = sorted((tmp_path / "lake" / "shop" / "users").rglob(f"part-{4:016d}-*.parquet"))
    assert [p.name for p in files] == [f"part-{4:016d}-{k:03d}.parquet" for k in range(3)]


def test_staged_pieces_are_discarded_or_removed_at_the_next_start(tmp_path):
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    staged = sink.stage_piece(None, _read(users, [(1, "a", 1)]))
    sink.stage_piece(staged, _read(users, [(2, "b", 2)]))
    staged.discard()
    assert _staged_names(lake) == [] and staged.rows == 0
    sink.stage_piece(None, _read(users, [(3, "c", 3)]))
    feed(sink, [b.begin(), b.insert(users, [(9, "s", 0)]), b.commit()])
    sink.flush()
    assert len(_staged_names(lake)) == 1
    sink._lock.release()  # a kill -9: nothing closed, nothing landed
    reopened = ParquetSink(lake)
    assert reopened.open() is not None
    assert _staged_names(lake) == []
    reopened.close()
    assert [r["_op"] for r in read_table(lake, "shop", "users").to_pylist()] == ["I"]


class _PiecesConnection:
    """The reader's side of a keyless read: ``pieces`` handed over as the socket would."""

    is_mariadb = False

    def __init__(self, pieces: list[tuple[list[Any], ...]]) -> None:
        self.pieces = pieces
        self.taken = 0

    async def send_query(self, sql: str) -> None:
        pass

    async def read_columns_in_pieces(self, kinds, rows, take):  # type: ignore[no-untyped-def]
        for values in self.pieces:
            self.taken += 1
            await take(values, False)

    async def query(self, sql: str) -> list[tuple[str, str]]:
        assert sql == "SHOW BINARY LOG STATUS"
        return [("binlog.000001", "4")]


def test_a_keyless_read_whose_piece_does_not_decode_is_read_to_its_end(tmp_path):
    """A piece that does not match the description (the table changed between its
    description and the SELECT): the rest of the result is still read off the connection, so
    it stays usable, nothing stays staged, and the table is read again (definition changed)
    or the error stands."""
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    users = b.table("shop", "users", users_columns())
    sink = ParquetSink(lake)
    sink.open()
    table = SnapshotTable("shop", "users", users, (), "id, name, score")
    coordinator = SnapshotCoordinator(sink)
    coordinator.watch("shop", "users", (), keep_images=False)
    reader = SnapshotReader(coordinator, ConnectOptions(), chunk_rows=2, grace=0.0)
    good = ([1, 2], ["a", "b"], ["1", "2"])
    entry = replace(USERS_DONE, status="running")

    async def run(conn: _PiecesConnection, generation: int) -> bool:
        return await reader._keyless(conn, table, _Entry(entry), generation)  # type: ignore[arg-type]

    conn = _PiecesConnection([good, ([3],), good])
    coordinator._changed_unseen(("shop", "users"), "the table's definition changed (DDL)")
    assert trio.run(run, conn, 0) is False  # generation 1 now: described again
    assert conn.taken == 3 and _staged_names(lake) == []
    conn = _PiecesConnection([good, ([3],), good])
    with pytest.raises(ValueError, match="value lists"):
        trio.run(run, conn, 1)
    assert conn.taken == 3 and _staged_names(lake) == []
    sink.close()
