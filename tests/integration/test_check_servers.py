"""binlake check against real servers: a ready server passes; STATEMENT format, a user without
REPLICATION SLAVE and a clashing server_id are each reported with their fix (exit 1)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from replica.commands import check
from replica.commands.check import Status
from replica.config import Config, LakeConfig, ReplicaConfig, Secret, ServerConfig, StartConfig
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server

_ids = itertools.count(40000 + os.getpid() % 10000 * 3)


def _config(server: ServerHandle, tmp_path: Path, *, role: str = "repl", user: str | None = None,
            password: str | None = None, server_id: int | None = None,
            start: StartConfig | None = None, tcp: bool = False) -> Config:
    account = server.users[role]
    name = user or account.name
    secret = account.password if password is None else password
    return Config(
        replica=ReplicaConfig(server_id=server_id or next(_ids)),
        server=ServerConfig(socket=None if tcp else server.socket, port=server.port,
                            user=name, password=Secret(secret) if secret else None,
                            tls_ca=server.tls_ca),
        start=start or StartConfig(),
        lake=LakeConfig(path=str(tmp_path / "lake")),
    )


def _by_name(results: list[check.CheckResult]) -> dict[str, check.CheckResult]:
    return {r.name: r for r in results}


@pytest.fixture(params=["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def test_a_ready_server_passes(server: ServerHandle, tmp_path: Path) -> None:
    results, report = await check.run_checks(_config(server, tmp_path))
    failed = [r for r in results if r.status is Status.FAIL]
    assert not failed, failed
    named = _by_name(results)
    assert named["binlog_format"].detail == "ROW"
    assert named["binlog_row_metadata"].status is Status.OK
    assert named["privileges"].status is Status.OK
    assert named["tls"].status is Status.OK  # unix socket
    assert named["start position"].status is Status.OK
    assert report is not None and report.mariadb == server.is_mariadb
    if not server.is_mariadb:
        assert named["server_id"].status is Status.OK  # SHOW REPLICAS works with REPL SLAVE


async def test_statement_format_fails_with_the_fix(server_factory: object, tmp_path: Path) -> None:
    server: ServerHandle = server_factory.start(  # type: ignore[attr-defined]
        "mariadb-10.11", extra_args=["--binlog-format=STATEMENT"], name="check-statement")
    results, _ = await check.run_checks(_config(server, tmp_path))
    fmt = _by_name(results)["binlog_format"]
    assert fmt.status is Status.FAIL
    assert "STATEMENT" in fmt.detail
    assert fmt.fix is not None and "binlog_format = 'ROW'" in fmt.fix


async def test_user_without_replication_slave(server: ServerHandle, tmp_path: Path) -> None:
    name = f"norepl_{uuid.uuid4().hex[:8]}"
    password = "pw-" + uuid.uuid4().hex[:12]
    client = "BINLOG MONITOR" if server.is_mariadb else "REPLICATION CLIENT"
    server.sql(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'; "
               f"GRANT SELECT, {client} ON *.* TO '{name}'@'%'")
    try:
        results, _ = await check.run_checks(_config(server, tmp_path, user=name,
                                                    password=password))
    finally:
        server.sql(f"DROP USER '{name}'@'%'")
    privileges = _by_name(results)["privileges"]
    assert privileges.status is Status.FAIL
    assert "REPLICATION SLAVE" in privileges.detail
    assert privileges.fix is not None and privileges.fix.startswith(
        "GRANT REPLICATION SLAVE ON *.* TO")
    assert password not in repr(results)


async def test_server_id_of_the_server(server: ServerHandle, tmp_path: Path) -> None:
    results, _ = await check.run_checks(_config(server, tmp_path, server_id=server.server_id))
    sid = _by_name(results)["server_id"]
    assert sid.status is Status.FAIL
    assert "own @@server_id" in sid.detail
    assert sid.fix is not None and "replica.server_id" in sid.fix


async def test_start_file_purged_or_unknown(server: ServerHandle, tmp_path: Path) -> None:
    start = StartConfig(from_="file", file="mysql-bin.999999", pos=4)
    results, _ = await check.run_checks(_config(server, tmp_path, start=start))
    assert _by_name(results)["start position"].status is Status.FAIL
    first = Path(server.binlog_files()[0]).name
    start = StartConfig(from_="file", file=first, pos=4)
    results, _ = await check.run_checks(_config(server, tmp_path, start=start))
    assert _by_name(results)["start position"].status is Status.OK


async def test_lake_checkpoint_is_checked(server: ServerHandle, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    doc = {"seq": 7, "binlog_file": "mysql-bin.000000", "binlog_pos": 4, "gtid": None,
           "gtid_state": None, "gtid_flavor": None, "commit_time_us": None, "server_id": None}
    (lake / "_checkpoint.json").write_text(json.dumps(doc))
    results, _ = await check.run_checks(_config(server, tmp_path))
    start = _by_name(results)["start position"]
    assert start.status is Status.FAIL
    assert "checkpoint" in start.detail and "purged" in start.detail


async def test_mariadb_gtid_start(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    state = server.sql("SELECT @@gtid_binlog_state")[0][0] or ""
    if not state:
        server.sql("CREATE DATABASE IF NOT EXISTS check_gtid")
        state = server.sql("SELECT @@gtid_binlog_state")[0][0] or ""
    domain, sid, seq = state.split(",")[0].split("-")
    ok = StartConfig(from_="gtid", gtid=f"{domain}-{sid}-{seq}")
    results, _ = await check.run_checks(_config(server, tmp_path, start=ok))
    assert _by_name(results)["start position"].status is Status.OK
    ahead = StartConfig(from_="gtid", gtid=f"{domain}-{sid}-{int(seq) + 1000}")
    results, _ = await check.run_checks(_config(server, tmp_path, start=ahead))
    assert "ahead of the server" in _by_name(results)["start position"].detail
    unknown = StartConfig(from_="gtid", gtid="4242-1-1")
    results, _ = await check.run_checks(_config(server, tmp_path, start=unknown))
    assert "not in the server's binlog" in _by_name(results)["start position"].detail


def test_cli_exit_codes_and_fix_lines(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env.update(BINLAKE_SERVER_SOCKET=server.socket, BINLAKE_SERVER_USER=server.users["repl"].name,
               BINLAKE_SERVER_PASSWORD=server.users["repl"].password,
               BINLAKE_LAKE_PATH=str(tmp_path / "lake"),
               BINLAKE_CONFIG=str(tmp_path / "absent.toml"))
    (tmp_path / "absent.toml").write_text("")
    argv = [sys.executable, "-m", "replica.cli", "check"]
    ok = subprocess.run([*argv, "--server-id", str(next(_ids))], env=env, capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ready: all required checks passed" in ok.stdout
    bad = subprocess.run([*argv, "--server-id", str(server.server_id)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert "FAIL  server_id" in bad.stdout
    assert "fix: set replica.server_id" in bad.stdout
    assert server.users["repl"].password not in bad.stdout + bad.stderr
    down = subprocess.run([*argv, "--server-id", "77", "--socket", str(tmp_path / "no.sock")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 1
    assert "FAIL  connect" in down.stdout and "fix:" in down.stdout
