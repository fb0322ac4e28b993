"""[types] choices on real servers (MariaDB 10.11, 11.8, MySQL 9.7), through ``binlake run``:
what each lands, its error cases (exit 2 with the reason), and the lake's record of them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import trio

from replica.config import TypesConfig
from replica.core.daemon import Daemon
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, catch_up, catch_up_config, daemon_settings, unique_db
from .test_decode_edges_servers import binlake_decode, open_protocol_rows

pytestmark = pytest.mark.server


def _run(server: ServerHandle, tmp_path: Path, name: str, db: str, types: dict[str, Any],
         lake: Path, start: dict[str, Any] | None = None) -> tuple[int, str]:
    settings = daemon_settings(server, lake, db, overrides={
        "replica": {"stop_at_end": True}, "types": types, **({"start": start} if start else {})})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password, name=name)
    code = daemon.start().wait(120)
    return code, daemon.run_stderr()


def _landed(lake: Path, db: str, table: str) -> tuple[list[dict[str, Any]], Any]:
    files = sorted((lake / db / table).rglob("*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    return sorted(rows, key=lambda r: (r["_seq"], r["_row"])), pq.read_schema(files[0])


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def test_type_options_land_what_they_say(flavor: str, request: pytest.FixtureRequest,
                                         tmp_path: Path) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    db = unique_db("types")
    start = daemon_settings(server, tmp_path, db)["start"]
    server.sql(
        "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION';"
        f"CREATE DATABASE {db};"
        f"CREATE TABLE {db}.t (id INT PRIMARY KEY, u BIGINT UNSIGNED, w DECIMAL(50,4), "
        "d DATE, dt DATETIME(3), ts TIMESTAMP(2) NULL);"
        f"INSERT INTO {db}.t VALUES (1, 9223372036854775807, 1234567890123456789012345678.5,"
        " '0000-00-00', '2024-01-02 03:04:05.5', '2024-06-01 12:00:00.25'),"
        " (2, 0, -1, '2024-02-29', '0000-00-00 00:00:00', NULL)")
    lake = tmp_path / "lake"
    code, stderr = _run(server, tmp_path, "typed", db, {
        "bigint_unsigned": "int64", "zero_date": "string"}, lake, start)
    assert code == 0, stderr
    rows, schema = _landed(lake, db, "t")
    assert [(r["u"], r["w"], r["d"], r["dt"]) for r in rows] == [
        (9223372036854775807, "1234567890123456789012345678.5000", "0000-00-00",
         "2024-01-02 03:04:05.500"),
        (0, "-1.0000", "2024-02-29", "0000-00-00 00:00:00.000")]
    ts = server.sql(f"SELECT CONVERT_TZ(ts, @@session.time_zone, '+00:00') FROM {db}.t "
                    "WHERE id = 1")[0][0]
    assert rows[0]["ts"] == ts and rows[1]["ts"] is None
    assert str(schema.field("u").type) == "int64" and str(schema.field("d").type) == "string"
    assert schema.field("u").metadata[b"transform"] == b"type:int64"
    assert json.loads((lake / "_types.json").read_text()) == {
        "bigint_unsigned": "int64", "tinyint1_as_boolean": False, "wide_decimal": "string",
        "zero_date": "string"}

    # the same lake started with other choices: refused, naming both
    code, stderr = _run(server, tmp_path, "other", db, {}, lake)
    assert code == 2, stderr
    assert 'bigint_unsigned = "int64"' in stderr and 'bigint_unsigned = "decimal"' in stderr

    # out of range for int64: a typed error, never a wrapped value
    server.sql(f"INSERT INTO {db}.t (id, u) VALUES (3, 9223372036854775808)")
    code, stderr = _run(server, tmp_path, "typed2", db, {
        "bigint_unsigned": "int64", "zero_date": "string"}, lake)
    assert code == 2, stderr
    assert "9223372036854775808 does not fit the int64" in stderr
    assert [r["id"] for r in _landed(lake, db, "t")[0]] == [1, 2]

    # defaults on a new lake: decimal(20,0), typed dates with zero dates as NULL
    code, stderr = _run(server, tmp_path, "plain", db, {}, tmp_path / "plain", start)
    assert code == 0, stderr
    rows, schema = _landed(tmp_path / "plain", db, "t")
    assert [(r["u"], r["d"]) for r in rows] == [
        (Decimal(9223372036854775807), None), (Decimal(0), dt.date(2024, 2, 29)),
        (Decimal(9223372036854775808), None)]
    assert str(schema.field("u").type) == "decimal128(20, 0)"

    # wide_decimal = "error": the table is refused when first seen
    code, stderr = _run(server, tmp_path, "wide", db, {"wide_decimal": "error"},
                        tmp_path / "wide", start)
    assert code == 2, stderr
    assert f"{db}.t.w is DECIMAL(50,4), wider than the 38 digits" in stderr


def _column_types(server: ServerHandle, db: str) -> dict[str | None, str | None]:
    return dict((name, kind) for name, kind in server.sql(
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = 't'"))


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
async def test_tinyint1_as_boolean_in_every_path(flavor: str, request: pytest.FixtureRequest,
                                                 tmp_path: Path) -> None:
    """TINYINT(1) and BOOL land as boolean (0 false, 2 and -1 true) in snapshot rows, streamed
    rows, before images and an XA transaction; other TINYINTs as integers, TINYINT(1) UNSIGNED
    too (MySQL keeps no width for it); an ALTER that changes the width starts a schema version
    where the column is an integer."""
    server: ServerHandle = request.getfixturevalue(flavor)
    db = unique_db("bools")
    server.sql(
        f"CREATE DATABASE {db};"
        f"CREATE TABLE {db}.t (id INT PRIMARY KEY, b TINYINT(1), f BOOL, "
        "u TINYINT(1) UNSIGNED, n TINYINT);"
        f"INSERT INTO {db}.t VALUES (1, 0, 1, 0, 5), (2, 2, -1, 255, 0), (3, NULL, NULL, NULL, "
        "NULL)")
    # MySQL 8.0.19+ prints no display width but a signed tinyint(1)'s; MariaDB every one
    assert _column_types(server, db) == {
        "id": "int(11)" if server.is_mariadb else "int", "b": "tinyint(1)", "f": "tinyint(1)",
        "u": "tinyint(1) unsigned" if server.is_mariadb else "tinyint unsigned",
        "n": "tinyint(4)" if server.is_mariadb else "tinyint"}
    lake = tmp_path / "lake"
    end = daemon_settings(server, lake, db)["start"]
    config = dataclasses.replace(
        catch_up_config(server, lake, (end["file"], end["pos"]), include=(f"{db}.*",)),
        types=TypesConfig(tinyint1_as_boolean=True))
    snapshot = Daemon(config, snapshot_tables=[(db, "t")], snapshot_request="bools")
    with trio.fail_after(120):
        assert await snapshot.run() == 0
    assert [e.status for e in snapshot.snapshot_results] == ["done"]
    server.sql(
        f"UPDATE {db}.t SET b = 1, n = 6 WHERE id = 1;"
        f"XA START 'xb'; INSERT INTO {db}.t VALUES (4, 1, 0, 1, -1);"
        f"UPDATE {db}.t SET f = 0 WHERE id = 2; XA END 'xb'; XA PREPARE 'xb'; XA COMMIT 'xb'")
    await catch_up(config)
    server.sql(f"ALTER TABLE {db}.t MODIFY b TINYINT(4); INSERT INTO {db}.t VALUES (5, 3, 7, 0, 0)")
    await catch_up(config)

    rows, _ = _landed(lake, db, "t")
    got = [(r["_op"], r["id"], r["b"], r["f"], r["u"], r["n"]) for r in rows]
    assert got == [
        ("R", 1, False, True, 0, 5), ("R", 2, True, True, 255, 0), ("R", 3, None, None, None, None),
        ("U", 1, True, True, 0, 6),
        ("I", 4, True, False, 1, -1), ("U", 2, True, False, 255, 0),
        ("I", 5, 3, True, 0, 0)]  # after the ALTER: b is a TINYINT(4), an integer
    assert [r["_before"] and r["_before"]["b"] for r in rows if r["_op"] == "U"] == [False, True]
    versions = sorted((lake / db / "t").glob("schema_version=*"))
    assert [v.name for v in versions] == ["schema_version=1", "schema_version=2"]
    first, second = (pq.read_schema(next(v.rglob("*.parquet"))) for v in versions)
    assert [str(first.field(c).type) for c in "bfun"] == ["bool", "bool", "int16", "int8"]
    assert [str(second.field(c).type) for c in "bfun"] == ["int8", "bool", "int16", "int8"]
    assert first.field("b").metadata[b"transform"] == b"type:boolean"
    assert json.loads((lake / "_types.json").read_text())["tinyint1_as_boolean"] is True
    # the server is the oracle: the newest row of each id is what SELECT says, cast as landed
    newest = {r["id"]: (r["b"], r["f"], r["u"], r["n"]) for r in rows}
    assert newest == {
        int(i or 0): (None if b is None else int(b) if int(i or 0) == 5 else b != "0",
                      None if f is None else f != "0", None if u is None else int(u),
                      None if n is None else int(n))
        for i, b, f, u, n in server.sql(f"SELECT id, b, f, u, n FROM {db}.t")}

    # binlake decode with the choice and --schema-from-server: the width as of now (b is a
    # TINYINT(4) by now, so an integer even in the rows before the ALTER), f a boolean (-1: 1)
    decode_config = tmp_path / "decode.toml"
    decode_config.write_text(f'[server]\nsocket = "{server.socket}"\nuser = "repl"\n'
                             "[types]\ntinyint1_as_boolean = true\n")
    proc = binlake_decode(server, "--schema-from-server", "--config", str(decode_config),
                          "--database", db,
                          env={"BINLAKE_SERVER_PASSWORD": server.users["repl"].password})
    inserts = [ln for ln in proc.stdout.splitlines() if ln.startswith("### INSERT")]
    proc = binlake_decode(server, "--schema-from-server", "--config", str(decode_config),
                          "--database", db, "--format", "open-protocol",
                          env={"BINLAKE_SERVER_PASSWORD": server.users["repl"].password})
    # the Open Protocol's TINYINT/BOOLEAN (t 1): a boolean as 1 or 0
    assert [value["u"]["f"] for value in open_protocol_rows(proc.stdout, db)[:3]] == [
        {"t": 1, "f": 64, "v": 1}, {"t": 1, "f": 64, "v": 1},
        {"t": 1, "f": 64, "v": None}]
    assert inserts[:3] == [f"### INSERT INTO {db}.t SET id=1, b=0, f=1, u=0, n=5",
                           f"### INSERT INTO {db}.t SET id=2, b=2, f=1, u=255, n=0",
                           f"### INSERT INTO {db}.t SET id=3, b=NULL, f=NULL, u=NULL, n=NULL"]
