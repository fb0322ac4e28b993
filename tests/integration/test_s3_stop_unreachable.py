"""SIGTERM to ``binlake run`` while its object store is unreachable: the daemon exits 1 within
``replica.stop_timeout`` plus one store call, says the flush was abandoned, commits nothing of
it, and a start once the store is back lands every row exactly once. The same while it is still
opening the lake.

The daemon reaches the test bed's Ceph gateway through a TCP proxy that the test stalls: the
connections are accepted and then carry nothing (a blackholed store), so every store call ends
only by the client's own timeouts."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.integration.daemon_process import DaemonProcess, unique_db
from tests.integration.proxy import TcpProxy
from tests.integration.s3_lake import s3_daemon
from tests.integration.test_s3_daemon import _lake_ids, _new_table, _wait
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

pytestmark = [pytest.mark.s3, pytest.mark.server]

STOP_TIMEOUT = 3.0
CONNECT_TIMEOUT = 2.0
REQUEST_TIMEOUT = 2.0
#: One store call, the longest the daemon can be inside when its budget runs out: one attempt
#: (max_attempts = 1) of a connect and a request (the proxy accepts the connection at once, so
#: here it is the request's timeout that ends it). Nothing else is waited for: the lease's
#: renewal thread is not joined once the store was given up.
ONE_CALL = CONNECT_TIMEOUT + REQUEST_TIMEOUT
#: The exit path itself on a loaded machine (closing the server connection, the interpreter's
#: shutdown): measured about a second.
SLACK = 4.0


def _gateway_proxy(gateway: CephGateway) -> TcpProxy:
    address = urlsplit(gateway.endpoint)
    return TcpProxy(address.hostname or "127.0.0.1", address.port or 80)


def _proxied_daemon(server: ServerHandle, gateway: CephGateway, workdir: Path, lake: str,
                    database: str, proxy: TcpProxy) -> DaemonProcess:
    """A ``binlake run`` reaching ``gateway`` through ``proxy``, each store call one attempt
    of short timeouts, with a short stop budget."""
    return s3_daemon(server, gateway, workdir, lake, [database], overrides={
        "lake.s3": {"endpoint": f"http://127.0.0.1:{proxy.port}", "max_attempts": 1,
                    "connect_timeout": CONNECT_TIMEOUT, "request_timeout": REQUEST_TIMEOUT},
        "replica": {"stop_timeout": STOP_TIMEOUT}})


def test_sigterm_with_the_store_unreachable_exits_1_within_the_budget(
        mariadb_10_11: ServerHandle, ceph_gateway: CephGateway, s3_bucket: str,
        tmp_path: Path) -> None:
    server, lake = mariadb_10_11, f"s3://{s3_bucket}/lake"
    database = _new_table(server, "s3stophang")
    with _gateway_proxy(ceph_gateway) as proxy:
        daemon = _proxied_daemon(server, ceph_gateway, tmp_path, lake, database, proxy).start()
        try:
            daemon.wait_for(r"streaming", timeout=60)
            server.sql(f"INSERT INTO {database}.t VALUES " +
                       ", ".join(f"({n}, 'before {n}')" for n in range(1, 51)))
            _wait(lambda: _lake_ids(ceph_gateway, lake, database) == list(range(1, 51)), daemon)
            mark = len(daemon.run_stderr())
            proxy.stall()
            proxy.drop()
            server.sql(f"INSERT INTO {database}.t VALUES " +
                       ", ".join(f"({n}, 'during {n}')" for n in range(51, 101)))
            # a flush of those rows is failing and being retried (an event, not a guess)
            daemon.wait_for(r"object store: uploading .* failed \(.*\); retrying", timeout=60,
                            since=mark)
            code, took = daemon.terminate(60)
            stderr = daemon.run_stderr()
            assert code == 1, stderr[-4000:]
            assert took < STOP_TIMEOUT + ONE_CALL + SLACK, (took, stderr[-4000:])
            assert "SIGTERM: stopping (flushing what is complete)" in stderr
            lines = stderr.strip().splitlines()
            error = next(line for line in lines if line.startswith("binlake: error: "))
            assert re.fullmatch(
                rf"binlake: error: StoreAbandoned: PUT s3://{s3_bucket}/lake/\S+: .+ \(the "
                r"object store was unreachable while stopping: uploading \S+ was given up "
                r"once the stop budget was spent\)", error), error
            assert lines[lines.index(error) + 1] == (
                "  fix: nothing is lost or landed twice: the next start resumes after the "
                "lake's last commit record (it removes what an abandoned flush uploaded and "
                "streams that flush's transactions again); once the store is reachable (check "
                "lake.s3.endpoint and the network to it), start binlake again")
            assert _lake_ids(ceph_gateway, lake, database) == list(range(1, 51))

            proxy.resume()
            daemon.start()  # the store back: a fresh start lands the rest, each row once
            _wait(lambda: _lake_ids(ceph_gateway, lake, database) == list(range(1, 101)),
                  daemon)
            code, _ = daemon.terminate(30)
            assert code == 0, daemon.run_stderr()[-4000:]
        finally:
            daemon.kill()
    assert _lake_ids(ceph_gateway, lake, database) == list(range(1, 101))
    (count, low, high) = server.sql(f"SELECT COUNT(*), MIN(id), MAX(id) FROM {database}.t")[0]
    assert (count, low, high) == ("100", "1", "100")


def test_sigterm_while_opening_an_unreachable_lake_exits_1_within_the_budget(
        mariadb_10_11: ServerHandle, ceph_gateway: CephGateway, s3_bucket: str,
        tmp_path: Path) -> None:
    with _gateway_proxy(ceph_gateway) as proxy:
        proxy.stall()
        daemon = _proxied_daemon(mariadb_10_11, ceph_gateway, tmp_path, f"s3://{s3_bucket}/lake",
                                 unique_db("s3stopopen"), proxy).start()
        try:
            daemon.wait_for(r"object store: .* failed \(.*\); retrying", timeout=60)
            code, took = daemon.terminate(60)
        finally:
            daemon.kill()
    stderr = daemon.run_stderr()
    assert code == 1, stderr[-4000:]
    assert took < STOP_TIMEOUT + ONE_CALL + SLACK, (took, stderr[-4000:])
    assert "SIGTERM: stopping (flushing what is complete)" in stderr
    assert re.search(r"^binlake: error: StoreAbandoned: .*\(the object store was unreachable "
                     r"while stopping: .* was given up once the stop budget was spent\)$",
                     stderr, re.MULTILINE), stderr[-4000:]
