"""[types] choices on real servers (MariaDB 10.11, 11.8, MySQL 9.7), through ``binlake run``:
what each lands, its error cases (exit 2 with the reason), and the lake's record of them."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, daemon_settings, unique_db

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


def test_tinyint1_as_boolean_is_refused(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    code, stderr = _run(mariadb_10_11, tmp_path, "bool", "nodb", {"tinyint1_as_boolean": True},
                        tmp_path / "lake")
    assert code == 2 and "types.tinyint1_as_boolean: true is not supported" in stderr
