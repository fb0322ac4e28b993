"""``binlake run`` end to end on a real server: stop, restart, server restart, dropped and stalled
connections — and at the end the lake equals the source, every change exactly once.

The daemon runs as a subprocess with a TOML file and the password in the environment, and reaches
the server through :class:`~tests.integration.proxy.TcpProxy` so the test can cut or stall the
network. A seeded :class:`~tests.integration.workload.Workload` makes the changes; after each
disturbance the test waits until the lake holds exactly the change rows the workload made.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import STOP_TIMEOUT, DaemonProcess, daemon_settings, unique_db
from .proxy import TcpProxy
from .workload import Workload, compare_lake, wait_for_lake

pytestmark = pytest.mark.server

def test_daemon_survives_stop_restart_server_restart_drop_and_stall(
        mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    password = server.users["repl"].password
    database = unique_db("e2e_life")
    lake = tmp_path / "lake"
    with TcpProxy("127.0.0.1", server.port) as proxy:
        daemon = DaemonProcess(tmp_path, daemon_settings(server, lake, database, port=proxy.port),
                               password=password)
        workload = Workload(server, database, seed=20261121)
        workload.create_tables()
        daemon.start()
        daemon.wait_for(r"streaming from")

        # 1. live landing, then SIGTERM in the middle of a stream of changes
        workload.run(60)
        wait_for_lake(lake, workload, alive=daemon.check_alive)
        workload.run(20)
        code, took = daemon.terminate(timeout=STOP_TIMEOUT + 5)
        assert code == 0, daemon.run_stderr()
        assert took < STOP_TIMEOUT + 2
        assert "stopping" in daemon.run_stderr()

        # 2. restart: resumes from the checkpoint, lands what it missed and what follows
        daemon.start()
        daemon.wait_for(r"resuming after transaction")
        daemon.wait_for(r"streaming from")
        workload.run(60)
        wait_for_lake(lake, workload, alive=daemon.check_alive)

        # 3. the server restarts under the running daemon
        mark = len(daemon.run_stderr())
        server.stop()
        daemon.wait_for(r"reconnecting in", since=mark)
        server.start()
        workload.run(40)
        wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)

        # 4. the network drops every connection while changes flow
        mark = len(daemon.run_stderr())
        workload.run(20)
        assert proxy.drop() >= 1
        workload.run(20)
        daemon.wait_for(r"reconnecting in", since=mark)
        wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)

        # 5. the network stalls: only the missing heartbeats can tell
        mark = len(daemon.run_stderr())
        proxy.stall()
        workload.run(20)
        daemon.wait_for(r"HeartbeatTimeout", since=mark, timeout=10)
        proxy.resume()
        workload.run(20)
        wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)

        # 6. Ctrl-C in a terminal is SIGINT: the same clean stop
        workload.run(10)
        code, took = daemon.terminate(timeout=STOP_TIMEOUT + 5, sig=signal.SIGINT)
        assert code == 0, daemon.run_stderr()
        assert "SIGINT: stopping" in daemon.run_stderr()

        daemon.start()  # what the SIGINT left unlanded, the next run lands
        daemon.wait_for(r"streaming from")  # SIGTERM before this kills it
        wait_for_lake(lake, workload, alive=daemon.check_alive)
        code, took = daemon.terminate(timeout=STOP_TIMEOUT + 5)
        assert code == 0, daemon.run_stderr()
    compare_lake(server, lake, workload)
    assert workload.rollbacks > 0 and workload.transactions > 200
    daemon.assert_secret_never_shown(password)


@pytest.mark.parametrize("network", ["server_down", "stalled"])
def test_sigterm_while_reconnecting_exits_promptly(mariadb_10_11: ServerHandle, tmp_path: Path,
                                                   network: str) -> None:
    """SIGTERM must not wait out a long backoff delay or a hanging connect: exit 0 within
    stop_timeout whatever the daemon is waiting for."""
    server = mariadb_10_11
    with TcpProxy("127.0.0.1", server.port) as proxy:
        settings = daemon_settings(server, tmp_path / "lake", unique_db("e2e_none"),
                                   port=proxy.port, overrides={
                                       "reconnect": {"initial_delay": 30.0, "max_delay": 60.0},
                                       "server": {"connect_timeout": 60.0, "read_timeout": 60.0}})
        if network == "server_down":
            proxy.upstream = ("127.0.0.1", 1)  # nothing listens there: every attempt fails
        else:
            proxy.stall()  # the connection opens, the handshake never arrives
        daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
        daemon.start()
        if network == "server_down":
            daemon.wait_for(r"reconnecting in")
        else:
            deadline = time.monotonic() + 20
            while proxy.accepted == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert proxy.accepted == 1
            time.sleep(0.5)
        code, took = daemon.terminate(timeout=STOP_TIMEOUT + 10)
    assert code == 0, daemon.run_stderr()
    assert took < STOP_TIMEOUT + 1, f"SIGTERM took {took:.1f} s"
