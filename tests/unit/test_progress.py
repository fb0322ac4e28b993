"""The lag's one definition (replica.observe.lag) and the progress lines
(replica.observe.progress): caught up only with evidence, evidence that ages, bytes across files,
and the lines a catching-up daemon logs."""

from __future__ import annotations

from protocol.binlog.model import BinlogPosition
from replica.observe.lag import BinlogFile, Lag, LagTracker, ServerEnd, distance
from replica.observe.progress import Landed, Progress, format_bytes, format_duration
from sinks.contract import SnapshotProgress as SnapshotState

FILES = (BinlogFile("b.000001", 1000), BinlogFile("b.000002", 5000), BinlogFile("b.000003", 300))


def P(file: str, pos: int) -> BinlogPosition:  # noqa: N802
    return BinlogPosition(file, pos)


def test_distance_spans_files() -> None:
    assert distance(FILES, P("b.000001", 4), P("b.000003", 300)) == 996 + 5000 + 300
    assert distance(FILES, P("b.000002", 1000), P("b.000002", 1500)) == 500
    assert distance(FILES, P("b.000003", 300), P("b.000003", 300)) == 0
    assert distance(FILES, P("b.000003", 900), P("b.000003", 300)) == 0  # past it: not negative
    assert distance(FILES, P("b.000009", 4), P("b.000010", 4)) is None


class Clocks:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_000.0


class Stream:
    def __init__(self) -> None:
        self.position: BinlogPosition | None = P("b.000002", 100)
        self.pending = False

    def __call__(self) -> tuple[BinlogPosition | None, bool]:
        return self.position, self.pending


def tracker() -> tuple[LagTracker, Clocks, Stream]:
    clocks, stream = Clocks(), Stream()
    lag = LagTracker(stream, fresh_for=5.0, clock=lambda: clocks.mono, wall=lambda: clocks.wall)
    return lag, clocks, stream


def end(file: str, pos: int, now_s: float, gtid: str = "0-1-9") -> ServerEnd:
    return ServerEnd("mariadb", round(now_s * 1e6), gtid, P(file, pos), FILES)


def test_idle_caught_up_daemon_stays_at_zero_while_heartbeats_come() -> None:
    lag, clocks, stream = tracker()
    assert lag.measure() is None  # nothing known yet
    lag.set_connected(True)
    lag.landed(P("b.000002", 100), 990_000_000, "0-1-5")
    lag.heartbeat(P("b.000002", 100))
    for _ in range(10):  # an idle server: a heartbeat every 2 s, never a growing figure
        assert lag.measure() == Lag(True, 0.0, 0)
        clocks.mono += 2
        clocks.wall += 2
        lag.heartbeat(P("b.000002", 100))
    clocks.mono += 6  # heartbeats stopped (a stalled network): the evidence ages out
    clocks.wall += 6
    measured = lag.measure()
    assert measured is not None and not measured.caught_up
    assert measured.seconds == 6.0  # since the last moment it was known to be caught up


def test_behind_by_the_servers_end_then_caught_up_when_landed() -> None:
    lag, clocks, stream = tracker()
    lag.set_connected(True, clock_offset=0.5)
    lag.landed(P("b.000001", 500), 990_000_000, "0-1-5")
    stream.position, stream.pending = P("b.000002", 40), True
    lag.server_end(end("b.000002", 1000, 1_000.5))
    # the stream has read up to b.000002:40: 960 bytes still to read
    assert lag.measure() == Lag(False, 1000.5 - 990.0, 500 + 1000, 960)
    # everything received is landed, and the stream reached the end read
    stream.position, stream.pending = P("b.000002", 1000), False
    lag.landed(P("b.000002", 1000), 999_000_000, "0-1-9")
    assert lag.measure() == Lag(True, 0.0, 0)


def test_received_beyond_the_end_read_is_the_end() -> None:
    lag, clocks, stream = tracker()
    lag.set_connected(True)
    lag.landed(P("b.000002", 100), 999_000_000, "0-1-5")
    lag.server_end(end("b.000002", 100, 1_000.0, gtid="0-1-5"))
    clocks.wall += 1.5
    stream.position, stream.pending = P("b.000002", 700), True  # new events, not landed yet
    # complete up to the moment the end was read (caught up then), 600 bytes received since
    assert lag.measure() == Lag(False, 1.5, 600, 0)


def test_gtid_state_equal_is_caught_up_after_a_server_restart() -> None:
    lag, clocks, stream = tracker()
    lag.set_connected(True)
    lag.landed(P("b.000002", 900), 900_000_000, "0-1-5")
    # the restarted server writes a new file; the stream is at its end, nothing pending
    stream.position = P("b.000003", 385)
    lag.server_end(end("b.000003", 385, 1_000.0, gtid="0-1-5"))
    assert lag.measure() == Lag(True, 0.0, 0)


def test_disconnected_is_never_caught_up() -> None:
    lag, clocks, stream = tracker()
    lag.set_connected(True)
    lag.landed(P("b.000002", 100), 995_000_000, "0-1-5")
    lag.heartbeat(P("b.000002", 100))
    assert lag.measure() == Lag(True, 0.0, 0)
    lag.set_connected(False)
    clocks.wall += 3
    measured = lag.measure()
    assert measured is not None and not measured.caught_up and measured.seconds == 3.0


def test_stream_behind_only_while_a_fresh_end_read_lies_ahead() -> None:
    """The flush policy's signal: a backlog (end read past what was received) is behind; caught
    up, unknown, stale or disconnected is not."""
    lag, clocks, stream = tracker()
    assert not lag.stream_behind()  # not connected
    lag.set_connected(True)
    assert not lag.stream_behind()  # no end read yet: unknown is not behind
    lag.server_end(end("b.000003", 300, clocks.wall))
    assert lag.stream_behind()  # received b.000002:100
    stream.position = P("b.000003", 300)
    assert not lag.stream_behind()  # reached it
    stream.position = P("b.000003", 100)
    clocks.mono += 1
    lag.heartbeat(P("b.000003", 100))  # the server says there is nothing more
    assert not lag.stream_behind()
    clocks.mono += 1
    lag.server_end(end("b.000003", 400, clocks.wall))  # newer than the heartbeat: more came
    assert lag.stream_behind()
    clocks.mono += 5.5  # the end read is no longer fresh
    assert not lag.stream_behind()
    lag.server_end(ServerEnd("mariadb", 0, "0-1-9", None, ()))  # no privilege: no position
    assert not lag.stream_behind()
    lag.server_end(end("b.000003", 400, clocks.wall))
    lag.set_connected(False)
    assert not lag.stream_behind()


def test_a_new_lake_catching_up_by_size_reports_progress_by_the_stream() -> None:
    """Nothing landed yet (no age for the lake): behind by what the stream has still to read,
    and the time left follows the reading, not the landing (which waits for size)."""
    progress = Progress(0.0, live_lag=6.0)
    assert progress.sample(1, Landed(0, 0), Lag(False, None, 9000, 0)) is None  # live: silent
    first = progress.sample(2, Landed(0, 0), Lag(False, None, 10_000, 8_000))
    assert first is not None and first.startswith("catching up: 0 transactions and 0 rows")
    second = progress.sample(4, Landed(0, 0), Lag(False, None, 10_000, 4_000))
    assert second is not None and second.endswith("~2.0 s left")
    done = progress.sample(6, Landed(500, 500), Lag(True, 0.0, 0))
    assert done == "caught up with the server: 500 transactions and 500 rows landed in 6.0 s " \
                   "since the start"


def test_format_units() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(2.5 * 1024 * 1024) == "2.5 MiB"
    assert format_duration(3.25) == "3.2 s"
    assert format_duration(75) == "1 min 15 s"
    assert format_duration(7300) == "2 h 01 min"


def test_progress_lines_while_behind_then_caught_up_once() -> None:
    progress = Progress(started=0.0, live_lag=6.0)
    assert progress.sample(10, Landed(10, 20), Lag(False, 2.0, 20_000)) is None  # live: silent
    first = progress.sample(20, Landed(100, 400), Lag(False, 60.0, 10_000))
    assert first == ("catching up: 100 transactions and 400 rows landed (9 transactions/s, "
                     "38 rows/s); 1 min 00 s and 9.8 KiB behind the server, ~10 s left")
    again = progress.sample(30, Landed(300, 1000), Lag(False, 3.0, 10_000))
    assert again is not None and again.endswith("not gaining on the server")
    done = progress.sample(40, Landed(400, 1200), Lag(True, 0.0, 0))
    assert done == ("caught up with the server: 400 transactions and 1200 rows landed in 40 s "
                    "since the start")
    assert progress.sample(50, Landed(400, 1200), Lag(True, 0.0, 0)) is None


def _typed(state: dict) -> SnapshotState:
    """The checkpoint's snapshot progress of ``state``'s entries (filed by name)."""
    return SnapshotState.from_json({"tables": {
        name: {"database": name.split(".")[0], "table": name.split(".")[1], **entry}
        for name, entry in state["tables"].items()}})


def test_a_line_per_table_being_snapshotted_with_its_rate() -> None:
    from replica.observe.progress import SnapshotProgress

    progress = SnapshotProgress()
    state = {"tables": {
        "shop.b": {"status": "running", "rows": 20, "chunks": 2, "last_key": ["20"]},
        "shop.a": {"status": "done", "rows": 7, "chunks": 1, "last_key": ["7"]},
        "shop.c": {"status": "pending", "rows": 0, "chunks": 0, "last_key": None}}}
    assert progress.sample(100.0, _typed(state)) == [
        "snapshot of shop.b: 20 rows in 2 chunks, last key 20 landed"]
    state["tables"]["shop.b"].update(rows=50, chunks=5, last_key=["50"])
    state["tables"]["shop.c"].update(status="running", rows=1, chunks=1, last_key=["'x'", "3"])
    assert progress.sample(110.0, _typed(state)) == [
        "snapshot of shop.b: 50 rows in 5 chunks, last key 50 landed (3 rows/s)",
        "snapshot of shop.c: 1 rows in 1 chunk, last key 'x', 3 landed"]
    state["tables"]["shop.b"]["status"] = "done"
    state["tables"]["shop.c"]["status"] = "done"
    assert progress.sample(120.0, _typed(state)) == []


def test_a_keyless_table_being_read_shows_its_staged_rows() -> None:
    """A table without a key lands only when its one read ends: meanwhile its line counts the
    rows read and staged, and the rate follows them."""
    from replica.observe.progress import SnapshotProgress

    progress = SnapshotProgress()
    state = {"tables": {"shop.log": {"status": "pending", "rows": 0, "chunks": 0,
                                     "last_key": None}}}
    assert progress.sample(90.0, _typed(state), {}) == []
    assert progress.sample(100.0, _typed(state), {"shop.log": 3000}) == [
        "snapshot of shop.log: 0 rows in 0 chunks landed, 3000 more read and staged (a table "
        "without a key lands when its one read ends)"]
    assert progress.sample(110.0, _typed(state), {"shop.log": 8000}) == [
        "snapshot of shop.log: 0 rows in 0 chunks landed, 8000 more read and staged (a table "
        "without a key lands when its one read ends) (500 rows/s)"]


def test_while_nothing_lands_the_line_shows_what_is_decoded_buffered_and_when_it_lands() -> None:
    """A backlog lands by size, and by time only every catch-up interval: meanwhile the line
    moves with the decoding, and says what waits and when it lands."""
    from replica.observe.progress import Work

    progress = Progress(0.0, live_lag=6.0)
    first = progress.sample(10, Landed(0, 0), Lag(False, None, 12_000_000, 11_000_000),
                            Work(2_000, 10_000, 1_048_576, 2_000, 524_288, 50.0, 64 << 20))
    assert first == ("catching up: 0 transactions and 0 rows landed; 2000 transactions and "
                     "10000 rows decoded, 1.0 MiB read; 2000 transactions (512.0 KiB) buffered, "
                     "landing in 50 s or once a table holds 64.0 MiB; 11.4 MiB behind the server")
    second = progress.sample(20, Landed(0, 0), Lag(False, None, 12_000_000, 6_000_000),
                             Work(6_000, 30_000, 3_145_728, 6_000, 1_572_864, 40.0, 64 << 20))
    assert second == ("catching up: 0 transactions and 0 rows landed; 6000 transactions and "
                      "30000 rows decoded (400 transactions/s, 2000 rows/s), 3.0 MiB read; "
                      "6000 transactions (1.5 MiB) buffered, landing in 40 s or once a table "
                      "holds 64.0 MiB; 11.4 MiB behind the server, ~12 s left")
    nothing_buffered = progress.sample(30, Landed(6_000, 30_000),
                                       Lag(False, 9.0, 12_000_000, 1_000_000),
                                       Work(6_500, 32_500, 3_400_000, 0, 0, None, 64 << 20))
    assert nothing_buffered is not None and "buffered" not in nothing_buffered
    assert nothing_buffered.startswith("catching up: 6000 transactions and 30000 rows landed; "
                                       "6500 transactions and 32500 rows decoded (50 ")
