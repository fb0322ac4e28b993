"""Semi-sync commit latency: what a client's autocommit INSERT costs with each kind of replica.

Configurations, measured in the same run against the same master, one ACKing replica at a time:

``mariadb-replica``          a second mariadbd (sandbox), ``MASTER_USE_GTID=slave_pos``,
                             ``rpl_semi_sync_slave_enabled=ON`` — the reference
``binlake-ack-on-receive``   ``replica.core.session`` ACKing each flagged event on arrival
``binlake-ack-on-receive-raw``  the same without decoding: the session's own share
``binlake-ack-after-land``   the transaction is landed in Parquet, flushed (fsync + rename +
                             checkpoint), then ACKed — binlake's durable mode
``async``                    semi-sync off, no replica: the floor

The master waits AFTER_COMMIT (MariaDB's default) with a 10 s timeout. Every configuration
checks ``Rpl_semi_sync_master_yes_tx``/``no_tx``: a run whose commits fell back to asynchronous
is reported as such, never as a fast semi-sync figure.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from devtools.sandbox import MARIADB, SandboxServer, start_server
from replica.core.connection import Connection, ConnectOptions

from .workloads import DATABASE

if TYPE_CHECKING:
    from .run import Bench

__all__ = ["CONFIGS", "measure"]

CONFIGS = ("mariadb-replica", "binlake-ack-on-receive", "binlake-ack-on-receive-raw",
           "binlake-ack-after-land", "async")
_TABLE = f"{DATABASE}.semisync"
_TABLE_DDL = (f"CREATE TABLE IF NOT EXISTS {_TABLE} (id INT AUTO_INCREMENT PRIMARY KEY, "
              "v INT NOT NULL, note VARCHAR(64)) ENGINE=InnoDB;")


def _status(server: SandboxServer, name: str) -> int:
    rows = server.sql(f"SHOW GLOBAL STATUS LIKE '{name}'")
    return int(rows[0][1] or 0) if rows else 0


def _wait_for(predicate: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"semi-sync: timed out waiting for {what}")
        time.sleep(0.05)


async def _commit_latencies(server: SandboxServer, commits: int) -> list[float]:
    """Seconds per autocommit INSERT, as the client sees them (the master replies after the ACK)."""
    options = ConnectOptions(unix_socket=os.fspath(server.socket), user="root",
                             tls_mode="disabled")
    latencies = []
    async with await Connection.open(options) as conn:
        for i in range(commits):
            started = time.perf_counter()
            await conn.execute(f"INSERT INTO {_TABLE} (v, note) VALUES ({i}, 'commit {i}')")
            latencies.append(time.perf_counter() - started)
    return latencies


class _MariadbReplica:
    """The reference: a stock MariaDB replica with semi-sync on, started from the master's
    current GTID position (it must not replay the benchmark's gigabytes)."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.server = start_server("/", kind=MARIADB, extra_args=[
            "--rpl-semi-sync-slave-enabled=ON", "--skip-slave-start"])
        self.server.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE} CHARACTER SET utf8mb4; "
                        f"{_TABLE_DDL}")

    def attach(self) -> None:
        master = self.bench.server
        (gtid,), = master.sql("SELECT @@gtid_binlog_pos")
        self.server.sql(
            "STOP SLAVE;"
            f"SET GLOBAL gtid_slave_pos = '{gtid}';"
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={master.port}, "
            f"MASTER_USER='bench', MASTER_PASSWORD='{self.bench.password}', "
            "MASTER_USE_GTID=slave_pos;"
            "START SLAVE;"
        )

    def detach(self) -> dict[str, Any]:
        status = self.server.sql("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_slave_status'")
        self.server.sql("STOP SLAVE")
        return {"replica_semi_sync_status": status[0][1] if status else None}

    def close(self) -> None:
        self.server.cleanup()


class _BinlakeReplica:
    def __init__(self, bench: Bench, mode: str) -> None:
        self.bench = bench
        self.mode = mode
        self.process: subprocess.Popen[bytes] | None = None
        self.lake = Path(tempfile.mkdtemp(prefix="semisync-lake-", dir=bench.work_dir))

    def attach(self) -> None:
        from .run import BENCH_USER, _server_ids  # noqa: PLC0415 - avoid an import cycle

        argv = [sys.executable, "-m", "bench.binlake_reader", self.mode,
                "--port", str(self.bench.server.port), "--user", BENCH_USER,
                "--server-id", str(next(_server_ids)), "--lake", os.fspath(self.lake)]
        self.process = subprocess.Popen(argv, env=self.bench.env, stdout=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if b'"ready"' not in line:
            self.process.wait(10)
            raise RuntimeError(f"binlake {self.mode} replica did not start (exit "
                               f"{self.process.returncode})")

    def detach(self) -> dict[str, Any]:
        process = self.process
        assert process is not None and process.stdout is not None
        process.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        tail = process.stdout.read().decode(errors="replace").strip().splitlines()
        self.process = None
        return {"binlake_peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
                "binlake_exit": process.returncode, "binlake_report": tail[-1] if tail else None}

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            os.wait4(self.process.pid, 0)
            self.process.returncode = -9


def _summary(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"commits": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(p99 * 1000, 3), "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
            "max_ms": round(ordered[-1] * 1000, 3)}


def measure(bench: Bench, commits: int, rounds: int) -> dict[str, Any]:
    master = bench.server
    master.sql(_TABLE_DDL + "SET GLOBAL rpl_semi_sync_master_timeout = 10000;")
    replicas: dict[str, Any] = {
        "binlake-ack-on-receive": _BinlakeReplica(bench, "ack-on-receive"),
        "binlake-ack-on-receive-raw": _BinlakeReplica(bench, "ack-on-receive-raw"),
        "binlake-ack-after-land": _BinlakeReplica(bench, "ack-after-land"),
    }
    latencies: dict[str, list[float]] = {name: [] for name in CONFIGS}
    details: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    try:
        replicas["mariadb-replica"] = _MariadbReplica(bench)
        for round_no in range(rounds):
            for name in CONFIGS:
                semi = name != "async"
                master.sql(f"SET GLOBAL rpl_semi_sync_master_enabled = {'ON' if semi else 'OFF'}")
                replica = replicas.get(name)
                if replica is not None:
                    replica.attach()
                    _wait_for(lambda: _status(master, "Rpl_semi_sync_master_clients") == 1,
                              f"{name} to register as a semi-sync replica")
                yes0 = _status(master, "Rpl_semi_sync_master_yes_tx")
                no0 = _status(master, "Rpl_semi_sync_master_no_tx")
                latencies[name] += trio.run(_commit_latencies, master, commits)
                info: dict[str, Any] = {
                    "yes_tx": _status(master, "Rpl_semi_sync_master_yes_tx") - yes0,
                    "no_tx": _status(master, "Rpl_semi_sync_master_no_tx") - no0,
                }
                # Stop waiting for ACKs before the replica goes, so the next commit is not
                # held for the 10 s timeout; a write makes the dump thread notice the loss.
                master.sql("SET GLOBAL rpl_semi_sync_master_enabled = OFF")
                if replica is not None:
                    info.update(replica.detach())
                    master.sql(f"INSERT INTO {_TABLE} (v, note) VALUES (-1, 'detach')")
                    _wait_for(lambda: _status(master, "Rpl_semi_sync_master_clients") == 0,
                              f"{name} to go away")
                details[name].append(info)
                bench.log(f"semi-sync round {round_no + 1}: {name} "
                          f"median {statistics.median(latencies[name]) * 1000:.3f} ms "
                          f"(yes_tx {info['yes_tx']}, no_tx {info['no_tx']})")
    finally:
        for replica in replicas.values():
            replica.close()
    results: dict[str, Any] = {"commits_per_round": commits, "rounds": rounds,
                               "wait_point": "AFTER_COMMIT"}
    for name in CONFIGS:
        entry = _summary(latencies[name]) if latencies[name] else {}
        entry["rounds"] = details[name]
        if name != "async" and any(d["no_tx"] for d in details[name]):
            entry["warning"] = "some commits were not semi-sync (no_tx > 0)"
        results[name] = entry
    return results
