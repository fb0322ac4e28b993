"""Filters on a real server: include/exclude by table glob, and loop prevention — transactions
that originated on a given server_id or GTID domain are skipped, yet the checkpoint moves past
them (a restart does not stream them again)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import trio

from replica.config import (
    Config,
    FilterConfig,
    LakeConfig,
    MetricsConfig,
    ReplicaConfig,
    Secret,
    ServerConfig,
    StartConfig,
)
from replica.daemon import Daemon
from tests.servers.handle import ServerHandle

from .workload import read_lake

pytestmark = pytest.mark.server


async def test_filters_and_loop_prevention(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    db, other = f"keep_{uuid.uuid4().hex[:6]}", f"drop_{uuid.uuid4().hex[:6]}"
    rows = server.sql("SHOW MASTER STATUS")
    start = (str(rows[0][0]), int(str(rows[0][1])))
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
    user = server.users["repl"]
    lake = tmp_path / "lake"
    config = Config(
        replica=ReplicaConfig(server_id=7700, stop_at_end=True),
        server=ServerConfig(socket=server.socket, user=user.name,
                            password=Secret(user.password), tls_ca=server.tls_ca),
        start=StartConfig(from_="file", file=start[0], pos=start[1]),
        filter=FilterConfig(include=(f"{db}.*",), exclude=(f"{db}.audit",),
                            skip_server_ids=(4242,), skip_gtid_domains=(9,)),
        lake=LakeConfig(path=str(lake)),
        metrics=MetricsConfig(address=""),
    )
    daemon = Daemon(config)
    with trio.fail_after(120):
        assert await daemon.run() == 0

    landed = read_lake(lake, db).rows
    assert [r["id"] for r in landed["t"]] == [1, 4]
    assert "audit" not in landed
    assert not (lake / other).exists()
    assert daemon.pipeline.stats.skipped_transactions == 2
    checkpoint = json.loads((lake / "_checkpoint.json").read_text())
    end = server.sql("SHOW MASTER STATUS")[0]
    assert (checkpoint["binlog_file"], checkpoint["binlog_pos"]) == (end[0], int(str(end[1])))
    assert "9-" in checkpoint["gtid_state"]  # the skipped domain's GTID is in the state too
