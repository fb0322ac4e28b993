"""The schema source on real servers without binlog_row_metadata=FULL: the daemon lands
column names, unsigned integers, utf8 strings and ENUM/SET labels from information_schema, and
an ALTER in the stream never gives yesterday's events today's column list."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import binlog_end, catch_up, catch_up_config
from .workload import read_lake

pytestmark = pytest.mark.server

TABLE = ("CREATE TABLE t (id INT UNSIGNED NOT NULL PRIMARY KEY, big BIGINT UNSIGNED, "
         "name VARCHAR(20) CHARACTER SET utf8mb4, e ENUM('a','b','it''s','x\\\\y'), "
         "s SET('p','q','r'), raw VARBINARY(4), l1 VARCHAR(8) CHARACTER SET latin1)")


SERVERS = {
    "10.11-minimal": ("mariadb-10.11", "MINIMAL", ()),
    "10.11-no-log": ("mariadb-10.11", "NO_LOG", ()),
    # UCA-14 collations: information_schema has no collation id, the charset decides
    "11.8-no-log": ("mariadb-11.8", "NO_LOG", ()),
    # TABLE_MAP and rows in one compressed TRANSACTION_PAYLOAD: described before it is decoded
    "9.7-minimal-compressed": ("mysql-9.7", "MINIMAL", ("--binlog-transaction-compression=ON",)),
}


@pytest.fixture(params=list(SERVERS))
def server(request: pytest.FixtureRequest, server_factory: object) -> ServerHandle:
    flavor, metadata, extra = SERVERS[request.param]
    handle: ServerHandle = server_factory.start(  # type: ignore[attr-defined]
        flavor, extra_args=[f"--binlog-row-metadata={metadata}", *extra],
        name=f"row-metadata-{request.param}")
    assert handle.sql("SELECT @@GLOBAL.binlog_row_metadata") == [(metadata,)]
    return handle


async def _land(server: ServerHandle, lake: Path, db: str, start: tuple[str, int]) -> None:
    """One catch-up run of the daemon (it resumes from the lake's checkpoint if there is one)."""
    await catch_up(catch_up_config(server, lake, start, include=(db,)))


def _schema_versions(lake: Path, db: str) -> list[dict[str, object]]:
    directory = lake / db / "t" / "_schema"
    return [json.loads((directory / f"v{n}.json").read_text())
            for n in range(1, len(list(directory.glob("v*.json"))) + 1)]


async def test_names_types_and_labels_come_from_information_schema_and_follow_an_alter(
        server: ServerHandle, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    start = binlog_end(server)
    db = f"sch_{uuid.uuid4().hex[:10]}"
    lake = tmp_path / "lake"
    server.sql(f"SET NAMES utf8mb4; CREATE DATABASE {db}; USE {db}; {TABLE}; "
               "INSERT INTO t VALUES (4000000000, 18446744073709551615, 'héllo 😀', 'it''s', "
               "'p,r', 0x00ff, 'café'), (2, 0, 'x', 'x\\\\y', '', 0x01, NULL);"
               "UPDATE t SET e = 'b' WHERE id = 2;")
    await _land(server, lake, db, start)

    rows = read_lake(lake, db).rows["t"]
    assert [r["_op"] for r in rows] == ["I", "I", "U"]
    first, second, update = rows
    assert first["id"] == 4000000000 and first["big"] == 18446744073709551615
    assert first["name"] == "héllo 😀" and first["e"] == "it's" and first["s"] == "p,r"
    assert first["raw"] == b"\x00\xff" and first["l1"] == "café"
    assert second["e"] == "x\\y" and second["s"] == "" and second["l1"] is None
    assert update["e"] == "b"
    # the same cells the server returns (its stock client prints text)
    selected = server.sql(f"SET NAMES utf8mb4; SELECT name, e, s, l1 FROM {db}.t WHERE id = 4000000000")
    assert selected == [(first["name"], first["e"], first["s"], first["l1"])]
    (version,) = _schema_versions(lake, db)
    assert version["has_full_metadata"] is True
    assert version["described_by"] == "information_schema"
    assert "binlog_row_metadata is not FULL: column names for " \
        f"{db}.t come from information_schema as of now" in caplog.text

    # An ALTER: the next run streams it, forgets the description and reads the new one.
    start_alter = binlog_end(server)
    server.sql(f"SET NAMES utf8mb4; USE {db}; ALTER TABLE t ADD COLUMN extra INT NOT NULL DEFAULT 0;"
               "INSERT INTO t VALUES (3, 3, 'three', 'a', 'q', NULL, 'x', 7)")
    await _land(server, lake, db, start_alter)
    rows = read_lake(lake, db).rows["t"]
    assert len(rows) == 4 and rows[-1]["extra"] == 7 and rows[-1]["name"] == "three"
    versions = _schema_versions(lake, db)
    assert len(versions) == 2
    assert "does not match" not in caplog.text


async def test_events_before_an_alter_do_not_get_todays_columns(
        server: ServerHandle, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Catching up across an ALTER: information_schema describes the table as it is *now*, so
    the rows written before the ALTER land unnamed (col_N) with a warning, those after it by
    name."""
    caplog.set_level(logging.WARNING, "binlake.schema")
    start = binlog_end(server)
    db = f"sch_{uuid.uuid4().hex[:10]}"
    lake = tmp_path / "lake"
    server.sql(f"CREATE DATABASE {db}; USE {db}; "
               "CREATE TABLE t (id INT UNSIGNED NOT NULL PRIMARY KEY, name VARCHAR(10));"
               "INSERT INTO t VALUES (1, 'before');"
               "ALTER TABLE t ADD COLUMN extra INT;"
               "INSERT INTO t VALUES (2, 'after', 5);")
    await _land(server, lake, db, start)

    before, after = read_lake(lake, db).rows["t"]
    assert before["col_1"] == 1 and "id" not in before and "name" not in before
    assert after["id"] == 2 and after["name"] == "after" and after["extra"] == 5
    versions = _schema_versions(lake, db)
    assert [v["has_full_metadata"] for v in versions] == [False, True]
    assert [v["described_by"] for v in versions] == ["none", "information_schema"]
    assert (f"{db}.t at " in caplog.text and "the binlog has 2 columns, the schema 3"
            in caplog.text and "stay unnamed" in caplog.text)
