"""On real servers: ``binlake decode`` of the server's own binlog files gives the same rows and
the same Open Protocol objects as a replication session streaming them; ``binlake status`` on a
lake the daemon landed reports its rows and that it is caught up."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.binlog.model import RowsEvent
from protocol.binlog.stream import EventStream
from protocol.binlog.transactions import TransactionAssembler
from replica.commands import decode, status
from replica.core.connection import Connection, ConnectOptions
from replica.core.session import ReplicationSession, SessionOptions, StartFrom
from sinks.openprotocol import OpenProtocolEncoder
from tests.servers.handle import ServerHandle

from .daemon_process import binlog_end, catch_up, catch_up_config, free_server_id

pytestmark = pytest.mark.server


@pytest.fixture(params=["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def _workload(server: ServerHandle) -> str:
    db = f"dec_{uuid.uuid4().hex[:10]}"
    server.sql(
        f"SET NAMES utf8mb4; CREATE DATABASE {db}; USE {db}; "
        "CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(40), b BLOB, d DECIMAL(30,10), "
        "ts DATETIME(6), tm TIME(3), u BIGINT UNSIGNED, e ENUM('x','y'), j JSON) DEFAULT CHARSET=utf8mb4;"
        "INSERT INTO t VALUES (1, 'héllo 😀', x'00ff', -12345.0000000001, "
        "'2024-02-29 23:59:59.999999', '-838:59:59.000', 18446744073709551615, 'y', "
        "'{\"a\": [1, 2]}'), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);"
        "UPDATE t SET s = 'line1\\nline2', u = 0 WHERE id = 1;"
        "DELETE FROM t WHERE id = 2;"
        "ALTER TABLE t ADD COLUMN n INT; INSERT INTO t (id, n) VALUES (3, 7);")
    return db


def _row_key(event: RowsEvent) -> tuple[Any, ...]:
    h = event.header
    return (h.file, h.position, event.kind, event.table.schema, event.table.table,
            event.before_columns, event.after_columns, event.before, event.after)


async def _wire_events(server: ServerHandle, *, annotate: bool = True) -> list[Any]:
    user = server.users["repl"]
    conn = await Connection.open(ConnectOptions(unix_socket=server.socket, user=user.name,
                                                password=user.password, tls_ca=server.tls_ca))
    stream = EventStream()
    events: list[Any] = []
    with trio.fail_after(120):
        session = await ReplicationSession.start(conn, SessionOptions(
            server_id=free_server_id(), start=StartFrom.EARLIEST, non_blocking=True,
            # Without ANNOTATE_ROWS a MariaDB 11.4+ dump omits events whose size the
            # positions of the following log_pos=0 events depend on (see the report).
            send_annotate_rows=annotate))
        try:
            async for item in session:
                events.extend(stream.feed(item.data))
        finally:
            await session.close()
    return events


async def test_decode_files_matches_the_stream(server: ServerHandle) -> None:
    db = _workload(server)
    server.sql("FLUSH BINARY LOGS")
    files = server.binlog_files()[:-1]  # the closed ones; the last is still being written
    names = {Path(f).name for f in files}

    from_files = list(decode.read_events(files))
    wire = [e for e in await _wire_events(server)
            if e.header.file in names and not e.header.flags & 0x20]
    file_rows = [_row_key(e) for e in from_files if isinstance(e, RowsEvent)]
    wire_rows = [_row_key(e) for e in wire if isinstance(e, RowsEvent)]
    assert file_rows == wire_rows
    assert any(k[3] == db for k in file_rows)
    ours = [k for k in file_rows if k[3] == db]
    assert [k[2].value for k in ours] == ["I", "U", "D", "I"]

    # the command line, open-protocol format, against the encoder over the streamed items
    proc = subprocess.run([sys.executable, "-m", "replica.cli", "decode", "-f", "open-protocol",
                           *files], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assembler, encoder = TransactionAssembler(), OpenProtocolEncoder()
    expected = [obj for e in wire for item in assembler.feed(e) for obj in encoder.encode(item)]
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    assert got == json.loads(json.dumps(expected))
    assert any(o["key"].get("scm") == db and o["key"]["t"] == 1 for o in got)

    # and the text format has one ### line per streamed row
    proc = subprocess.run([sys.executable, "-m", "replica.cli", "decode", "--database", db,
                           *files], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("###")]
    assert len(lines) == 5
    assert lines[0].startswith(f"### INSERT INTO {db}.t SET id=1, s='héllo 😀', b=X'00ff', "
                               "d=-12345.0000000001, ts='2024-02-29 23:59:59.999999', "
                               "tm='-838:59:59', u=18446744073709551615, e='y'")
    assert "s='line1\\nline2'" in lines[2]



async def test_status_after_the_daemon_landed(server: ServerHandle, tmp_path: Path) -> None:
    file, pos = binlog_end(server)
    db = f"st_{uuid.uuid4().hex[:10]}"
    server.sql(f"CREATE DATABASE {db}; USE {db}; "
               "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10));"
               "INSERT INTO a VALUES (1, 'x'), (2, 'y'), (3, 'z'); UPDATE a SET v = 'w';"
               "CREATE TABLE b (id INT PRIMARY KEY); INSERT INTO b VALUES (1);")
    config = catch_up_config(server, tmp_path / "lake", (file, pos), include=(db,))
    await catch_up(config)

    result = await status.collect(config)
    tables = {(t.database, t.table): t for t in result.lake.tables}
    assert tables[(db, "a")].rows == 6 and tables[(db, "a")].schema_versions == [1]
    assert tables[(db, "b")].rows == 1
    checkpoint = result.lake.checkpoint
    assert checkpoint is not None
    server_pos = result.server
    assert server_pos is not None and server_pos.reachable and server_pos.error is None
    assert server_pos.flavor == ("mariadb" if server.is_mariadb else "mysql")
    assert server_pos.binlog_file is not None
    assert server_pos.caught_up is True, (checkpoint, server_pos)
    assert server_pos.seconds_behind == 0.0
    # a later write puts the lake behind
    server.sql(f"INSERT INTO {db}.b VALUES (2)")
    later = await status.collect(config)
    assert later.server is not None and later.server.caught_up is False
    assert later.server.bytes_behind is not None and later.server.bytes_behind > 0
    assert later.server.seconds_behind is not None and later.server.seconds_behind >= 0


async def test_wire_positions_match_the_file_on_11_8(mariadb_11_8: ServerHandle) -> None:
    """11.4+ writes log_pos=0 inside transactions: the session asks for ANNOTATE_ROWS there so
    that positions computed from event sizes match the file even when not asked to."""
    server = mariadb_11_8
    _workload(server)
    server.sql("FLUSH BINARY LOGS")
    files = server.binlog_files()[:-1]
    names = {Path(f).name for f in files}
    file_rows = [_row_key(e) for e in decode.read_events(files) if isinstance(e, RowsEvent)]
    wire_rows = [_row_key(e) for e in await _wire_events(server, annotate=False)
                 if isinstance(e, RowsEvent) and e.header.file in names]
    assert [k[:2] for k in file_rows] == [k[:2] for k in wire_rows]
