"""``binlake run`` end to end on MariaDB 11.8 and MySQL 9.7 (10.11 has the full lifecycle test):
live landing, a server restart and a dropped connection under the running daemon, SIGTERM and a
restart, a final catch-up-and-exit run (replica.stop_at_end) — then lake == source, exactly
once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import (
    STOP_TIMEOUT,
    DaemonProcess,
    daemon_settings,
    http_get,
    trusted_tls,
    unique_db,
)
from .proxy import TcpProxy
from .workload import Workload, compare_lake, wait_for_lake

pytestmark = pytest.mark.server

CAUGHT_UP = "ready: connected, caught up (0 s behind the server)\n"


@pytest.fixture(params=["mariadb_11_8", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def test_daemon_end_to_end(server: ServerHandle, tmp_path: Path) -> None:
    password = server.users["repl"].password
    database = unique_db("e2e_flavor")
    lake = tmp_path / "lake"
    with TcpProxy("127.0.0.1", server.port) as proxy:
        settings = daemon_settings(server, lake, database, port=proxy.port,
                                   overrides={"server": trusted_tls(server)})
        daemon = DaemonProcess(tmp_path, settings, password=password)
        workload = Workload(server, database, seed=11)
        workload.create_tables()
        daemon.start()
        daemon.wait_for(r"streaming from")
        base = daemon.metrics_url()
        workload.run(40)
        wait_for_lake(lake, workload, alive=daemon.check_alive)
        # the one lag on this flavor: its end read and heartbeats say "caught up", 0 s, 0 bytes
        deadline = time.monotonic() + 20
        while http_get(f"{base}/readyz") != (200, CAUGHT_UP) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert http_get(f"{base}/readyz") == (200, CAUGHT_UP)

        mark = len(daemon.run_stderr())
        server.restart()
        workload.run(30)
        daemon.wait_for(r"reconnecting in", since=mark)
        wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)

        mark = len(daemon.run_stderr())
        assert proxy.drop() >= 1
        workload.run(30)
        daemon.wait_for(r"reconnecting in", since=mark)
        wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)

        workload.run(10)
        code, took = daemon.terminate(timeout=STOP_TIMEOUT + 5)
        assert code == 0, daemon.run_stderr()
        assert took < STOP_TIMEOUT + 2

        daemon.start()
        daemon.wait_for(r"streaming from")  # SIGTERM before this kills it
        workload.run(20)
        wait_for_lake(lake, workload, alive=daemon.check_alive)
        code, _took = daemon.terminate(timeout=STOP_TIMEOUT + 5)
        assert code == 0, daemon.run_stderr()

        # a batch run: catch up and exit 0 (set by environment, over the file)
        workload.run(20)
        daemon.extra_env["BINLAKE_REPLICA_STOP_AT_END"] = "true"
        assert daemon.start().wait(timeout=60) == 0, daemon.run_stderr()
        assert "caught up with the server's binlog end; stopping" in daemon.run_stderr()
    compare_lake(server, lake, workload)
    daemon.assert_secret_never_shown(password)
