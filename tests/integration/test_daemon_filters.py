"""Filters on a real server: include/exclude by table glob, and loop prevention — transactions
that originated on a given server_id or GTID domain are skipped, yet the checkpoint moves past
them (a restart does not stream them again)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import binlog_end, catch_up, catch_up_config
from .workload import read_lake

pytestmark = pytest.mark.server


async def test_filters_and_loop_prevention(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    db, other = f"keep_{uuid.uuid4().hex[:6]}", f"drop_{uuid.uuid4().hex[:6]}"
    start = binlog_end(server)
    server.sql(
        f"CREATE DATABASE {db}; CREATE DATABASE {other};"
        f"CREATE TABLE {db}.t (id INT PRIMARY KEY); CREATE TABLE {db}.audit (id INT PRIMARY KEY);"
        f"CREATE TABLE {other}.t (id INT PRIMARY KEY);"
        f"INSERT INTO {db}.t VALUES (1); INSERT INTO {db}.audit VALUES (1);"
        f"INSERT INTO {other}.t VALUES (1);"
        # written as if replicated from server 4242 (another primary): loop prevention skips it
        f"SET SESSION server_id = 4242; INSERT INTO {db}.t VALUES (2); SET SESSION server_id = "
        f"{server.server_id};"
        # and a transaction in GTID domain 9
        f"SET SESSION gtid_domain_id = 9; INSERT INTO {db}.t VALUES (3); "
        "SET SESSION gtid_domain_id = 0;"
        f"INSERT INTO {db}.t VALUES (4)")
    lake = tmp_path / "lake"
    daemon = await catch_up(catch_up_config(
        server, lake, start, include=(f"{db}.*",), exclude=(f"{db}.audit",),
        skip_server_ids=(4242,), skip_gtid_domains=(9,)))

    landed = read_lake(lake, db).rows
    assert [r["id"] for r in landed["t"]] == [1, 4]
    assert "audit" not in landed
    assert not (lake / other).exists()
    assert daemon.pipeline.stats.skipped_transactions == 2
    checkpoint = json.loads((lake / "_checkpoint.json").read_text())
    assert (checkpoint["binlog_file"], checkpoint["binlog_pos"]) == binlog_end(server)
    assert "9-" in checkpoint["gtid_state"]  # the skipped domain's GTID is in the state too
