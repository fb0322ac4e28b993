"""``binlake decode`` edge cases on real servers: years before 1000 in every textual
format, and the one-time stderr notice when a binlog carries no row metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server


@pytest.fixture(params=["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def binlake_decode(server: ServerHandle, *args: str,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``binlake decode`` over the server's closed binlog files."""
    server.sql("FLUSH BINARY LOGS")
    files = server.binlog_files()[:-1]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    proc = subprocess.run([sys.executable, "-m", "replica.cli", "decode", *args, *files],
                          capture_output=True, text=True, timeout=300,
                          env={**environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc


def open_protocol_rows(stdout: str, db: str) -> list[dict[str, Any]]:
    """The row changed events (t=1) of ``db``: their ``value`` objects, in order."""
    out = []
    for line in stdout.splitlines():
        obj = json.loads(line)
        if obj["key"]["t"] == 1 and obj["key"].get("scm") == db:
            out.append(obj["value"])
    return out


def test_years_before_1000(server: ServerHandle) -> None:
    db = f"yr_{uuid.uuid4().hex[:10]}"
    server.sql(
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, dt DATETIME, "
        "dt6 DATETIME(6), d DATE);"
        f"INSERT INTO {db}.t VALUES (1, '0001-01-01 00:00:00', '0001-01-01 00:00:00.000001', "
        "'0001-01-01'), (99, '0099-12-31 23:59:59', '0099-12-31 23:59:59.5', '0099-12-31'), "
        "(999, '0999-06-15 12:00:00', '0999-06-15 12:00:00.25', '0999-06-15')")
    try:
        selected = server.sql(f"SELECT id, dt, dt6, d FROM {db}.t ORDER BY id")
        assert selected[0] == ("1", "0001-01-01 00:00:00", "0001-01-01 00:00:00.000001",
                               "0001-01-01")

        proc = binlake_decode(server, "--format", "open-protocol", "--database", db)
        rows = open_protocol_rows(proc.stdout, db)
        got = [(r["u"]["id"]["v"], r["u"]["dt"]["v"], r["u"]["dt6"]["v"], r["u"]["d"]["v"])
               for r in rows]
        assert got == [
            (1, "0001-01-01 00:00:00", "0001-01-01 00:00:00.000001", "0001-01-01"),
            (99, "0099-12-31 23:59:59", "0099-12-31 23:59:59.5", "0099-12-31"),
            (999, "0999-06-15 12:00:00", "0999-06-15 12:00:00.25", "0999-06-15"),
        ]

        proc = binlake_decode(server, "--database", db)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("###")]
        assert lines == [
            f"### INSERT INTO {db}.t SET id=1, dt='0001-01-01 00:00:00', "
            "dt6='0001-01-01 00:00:00.000001', d='0001-01-01'",
            f"### INSERT INTO {db}.t SET id=99, dt='0099-12-31 23:59:59', "
            "dt6='0099-12-31 23:59:59.500000', d='0099-12-31'",
            f"### INSERT INTO {db}.t SET id=999, dt='0999-06-15 12:00:00', "
            "dt6='0999-06-15 12:00:00.250000', d='0999-06-15'",
        ]
    finally:
        server.sql(f"DROP DATABASE {db}")


def test_no_row_metadata_is_said_once(server_factory: Any, tmp_path: Path) -> None:
    """MariaDB's default binlog_row_metadata=NO_LOG: names, signedness and charsets are not in
    the binlog, so the offline output shows positions, signed ints and bytes — and says so,
    once, on stderr."""
    server: ServerHandle = server_factory.start(
        "mariadb-10.11", ["--binlog-row-metadata=NO_LOG"], name="decode-no-row-metadata")
    db = f"nm_{uuid.uuid4().hex[:10]}"
    server.sql(f"SET NAMES utf8mb4; CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY "
               "KEY, u TINYINT UNSIGNED, s VARCHAR(10)) DEFAULT CHARSET=utf8mb4; "
               f"INSERT INTO {db}.t VALUES (1, 255, 'hé'); INSERT INTO {db}.t VALUES (2, 7, 'x')")
    proc = binlake_decode(server, "--database", db)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("###")]
    assert lines == [f"### INSERT INTO {db}.t SET @1=1, @2=-1, @3=X'68c3a9'",
                     f"### INSERT INTO {db}.t SET @1=2, @2=7, @3=X'78'"]
    notes = [ln for ln in proc.stderr.splitlines() if "binlog_row_metadata=FULL" in ln]
    assert len(notes) == 1, proc.stderr
    assert notes[0].startswith("binlake decode: note: mysql-bin.")
    assert (f"(first seen for {db}.t at " in notes[0]
            and "columns are named by position (@1, @2… in text, col_1, col_2… in open-protocol); "
            "every integer is read as signed (a TINYINT UNSIGNED 255 prints -1); character "
            "columns stay raw bytes (X'…')." in notes[0])

    assert notes[0].endswith("--schema-from-server reads them from the server's "
                             "information_schema (as `binlake run` does); "
                             "binlog_row_metadata=FULL puts them in the binlog.")

    proc = binlake_decode(server, "--format", "open-protocol", "--database", db)
    values = [r["u"] for r in open_protocol_rows(proc.stdout, db)]
    assert [sorted(v) for v in values] == [["col_1", "col_2", "col_3"]] * 2
    assert values[0]["col_2"]["v"] == -1
    assert sum("binlog_row_metadata=FULL" in ln for ln in proc.stderr.splitlines()) == 1

    # --schema-from-server: the names, signedness and charset come from information_schema
    config = tmp_path / "binlake.toml"
    config.write_text(f'[server]\nsocket = "{server.socket}"\nuser = "repl"\n')
    user = server.users["repl"]
    proc = binlake_decode(server, "--schema-from-server", "--config", str(config),
                          "--database", db, env={"BINLAKE_SERVER_PASSWORD": user.password})
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("###")]
    assert lines == [f"### INSERT INTO {db}.t SET id=1, u=255, s='hé'",
                     f"### INSERT INTO {db}.t SET id=2, u=7, s='x'"]
    assert "binlake decode: note" not in proc.stderr
    assert f"column names for {db}.t come from information_schema as of now" in proc.stderr
    assert user.password not in proc.stderr + proc.stdout
