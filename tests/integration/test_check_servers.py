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
    env = _cli_env(server, tmp_path)
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


# --- what `binlake check` says with the README's grants: only what is true ----------------------


def _cli_env(server: ServerHandle, tmp_path: Path) -> dict[str, str]:
    """The `repl` account over the unix socket, by environment, with an empty config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env.update(BINLAKE_SERVER_SOCKET=server.socket, BINLAKE_SERVER_USER=server.users["repl"].name,
               BINLAKE_SERVER_PASSWORD=server.users["repl"].password,
               BINLAKE_LAKE_PATH=str(tmp_path / "lake"),
               BINLAKE_CONFIG=str(tmp_path / "empty.toml"))
    (tmp_path / "empty.toml").write_text("")
    return env


def _check_cli(server: ServerHandle, tmp_path: Path, server_id: int,
               ) -> subprocess.CompletedProcess[str]:
    env = _cli_env(server, tmp_path)
    return subprocess.run([sys.executable, "-m", "replica.cli", "check", "--server-id",
                           str(server_id)], env=env, capture_output=True, text=True, timeout=60)


def _line(stdout: str, name: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line[8:].startswith(name + " ")]
    return " ".join(line.split())


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8"])
def test_readme_grants_pass_without_warnings(flavor: str, request: pytest.FixtureRequest,
                                             tmp_path: Path) -> None:
    """The test bed's `repl` has exactly the README's grants (REPLICATION SLAVE, BINLOG MONITOR,
    SELECT). MariaDB lists replicas only with REPLICATION MASTER ADMIN: one info line, naming
    the privilege once, and no warning."""
    server: ServerHandle = request.getfixturevalue(flavor)
    mine = next(_ids)
    result = _check_cli(server, tmp_path, mine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _line(result.stdout, "server_id") == (
        f"info server_id {mine} differs from the server's ({server.server_id}); other replicas' "
        f"ids are not listed (that needs REPLICATION MASTER ADMIN): if one uses {mine}, the "
        "server disconnects whichever of the two connected first with DuplicateServerId "
        "(binlake then stops and says so)")
    assert result.stdout.count("REPLICATION MASTER ADMIN") == 1
    assert result.stdout.splitlines()[-1] == "ready: all required checks passed (0 warning(s))"
    assert result.stderr == ""


def test_minimal_row_metadata_says_what_the_daemon_does(server_factory: object,
                                                        tmp_path: Path) -> None:
    """With binlog_row_metadata=MINIMAL the warning says names come from information_schema —
    and the daemon, on the same server, lands the columns under their names."""
    import trio

    from .daemon_process import binlog_end, catch_up, catch_up_config, unique_db
    from .workload import read_lake

    server: ServerHandle = server_factory.start(  # type: ignore[attr-defined]
        "mariadb-10.11", extra_args=["--binlog-row-metadata=MINIMAL"], name="check-minimal")
    result = _check_cli(server, tmp_path, next(_ids))
    assert result.returncode == 0, result.stdout + result.stderr
    assert _line(result.stdout, "binlog_row_metadata") == (
        "warn binlog_row_metadata MINIMAL: the binlog names no columns and carries no ENUM/SET "
        "labels or keys; `binlake run` reads them from information_schema as the tables are "
        "now, so only rows written before a later ALTER of their table land with unnamed "
        "columns (col_1, col_2, …, with a warning)")
    assert result.stdout.splitlines()[-1] == "ready: all required checks passed (1 warning(s))"

    database = unique_db("minimal")
    start = binlog_end(server)
    server.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t (id INT PRIMARY KEY, "
               f"label VARCHAR(10)); INSERT INTO {database}.t VALUES (1, 'one')")
    trio.run(catch_up, catch_up_config(server, tmp_path / "lake", start, include=(database,)))
    (row,) = read_lake(tmp_path / "lake", database).rows["t"]
    assert (row["_op"], row["id"], row["label"]) == ("I", 1, "one")


def test_a_reader_that_stops_early_does_not_change_the_verdict(mariadb_10_11: ServerHandle,
                                                               tmp_path: Path) -> None:
    """`binlake check | head -3`: no BrokenPipeError, and the exit status is still the check's
    (0: ready; 1 with a clashing server_id) — with a reader that read 3 lines and one that
    closed the pipe before anything was written."""
    server = mariadb_10_11
    env = _cli_env(server, tmp_path)
    check_cmd = f"{sys.executable} -m replica.cli check --server-id"
    for server_id, verdict in ((next(_ids), 0), (server.server_id, 1)):
        piped = subprocess.run(
            ["bash", "-c", f"{check_cmd} {server_id} | head -3; echo \"status ${{PIPESTATUS[0]}}\""],
            env=env, capture_output=True, text=True, timeout=60)
        lines = piped.stdout.splitlines()
        assert lines[0].startswith("binlake check: repl@") and len(lines) == 4
        assert lines[-1] == f"status {verdict}"
        assert piped.stderr == ""

        closed = subprocess.Popen([*check_cmd.split(), str(server_id)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert closed.stdout is not None and closed.stderr is not None
        closed.stdout.close()  # gone before the first byte
        assert closed.wait(timeout=60) == verdict
        assert closed.stderr.read() == ""
