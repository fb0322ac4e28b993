"""Following the database through a failover, on a real primary and a real GTID replica.

Per flavor (MariaDB 10.11, 11.8, MySQL 9.7), started by the test bed (tests/servers/topology.py):

* planned switchovers while a workload runs: ``binlake run`` keeps running through the first
  with both servers in ``server.host`` (the old primary left up, read-only: the daemon leaves
  it), across a second GTID domain (MariaDB) and an XA transaction prepared before the switch;
  it is killed -9 in the middle of the second switchover (the old primary shut down) and
  restarted with ``server.host`` changed to the new primary alone. The lake replays to SELECT
  on the last primary cell for cell, every change once, every GTID under one ``_seq``;
* a crash failover with the replica behind: the daemon stops with exit 3 and ``GtidDiverged``
  naming exactly the GTIDs the new primary lacks, the lake byte for byte unchanged; with
  ``start.on_divergence = "continue"`` it goes on and the checkpoint records the divergence;
* a MariaDB lake begun before binlake seeded GTID states (its checkpoint names the domains
  of landed transactions only) is completed from ``BINLOG_GTID_POS`` on its own server;
* a snapshot (``start.from = "snapshot"``) running across a switchover ends with every key read
  once and the lake equal to SELECT on the new primary.

``BINLAKE_FAILOVER_TRANSACTIONS`` sizes each workload phase (default 30).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.servers.handle import ServerHandle
from tests.servers.plugin import ServerFactory
from tests.servers.topology import Topology, start_topology

from .daemon_process import (
    DaemonProcess,
    binlog_end,
    catch_up,
    catch_up_config,
    daemon_settings,
    http_get,
    read_checkpoint,
    unique_db,
)
from .snapshot_check import compare_snapshot_lake, snapshot_entries, wait_snapshots_done
from .workload import Workload, check_exactly_once, compare_lake, read_lake, wait_for_lake

pytestmark = pytest.mark.server

TRANSACTIONS = int(os.environ.get("BINLAKE_FAILOVER_TRANSACTIONS", "30"))
FLAVORS = ["mariadb-10.11", "mariadb-11.8", "mysql-9.7"]


@pytest.fixture(params=FLAVORS)
def topology(request: pytest.FixtureRequest, server_factory: ServerFactory) -> Any:
    topology = start_topology(server_factory, request.param)
    try:
        yield topology
    finally:
        topology.close()


def _address(server: ServerHandle) -> str:
    return f"127.0.0.1:{server.port}"


def failover_settings(topology: Topology, lake: Path, database: str,
                      hosts: list[ServerHandle], **start: Any) -> dict[str, dict[str, Any]]:
    """A daemon on ``lake`` landing ``database`` from ``hosts`` (a candidate list when
    several), as the shared account, starting at the server's current end."""
    settings = daemon_settings(topology.primary, lake, database, overrides={
        "server": {"host": [_address(h) for h in hosts] if len(hosts) > 1
                   else _address(hosts[0]), "user": topology.account.name},
        "start": {"from": "latest", **start}})
    for key in ("file", "pos"):
        settings["start"].pop(key, None)
    settings["server"].pop("port", None)
    return settings


def one_seq_per_gtid(lake: Path, database: str) -> None:
    """Every GTID's rows carry one ``_seq``, and every ``_seq`` one GTID."""
    by_gtid: dict[str, set[int]] = {}
    by_seq: dict[int, set[str]] = {}
    for rows in read_lake(lake, database).rows.values():
        for r in rows:
            if r["_op"] == "R":
                continue  # a snapshot chunk's rows: a _seq of their own, no GTID
            by_gtid.setdefault(r["_gtid"], set()).add(r["_seq"])
            by_seq.setdefault(r["_seq"], set()).add(r["_gtid"])
    assert None not in by_gtid, "a change landed without its GTID"
    assert all(len(s) == 1 for s in by_gtid.values()), "a GTID under several _seq"
    assert all(len(g) == 1 for g in by_seq.values()), "a _seq under several GTIDs"


def lake_bytes(lake: Path) -> dict[str, str]:
    """Every file of the lake (staging and locks aside) and a digest of its bytes."""
    out = {}
    for path in sorted(lake.rglob("*")):
        if path.is_file() and path.name not in ("_lock", ".lock"):
            out[os.fspath(path.relative_to(lake))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def wait_checkpoint_state(lake: Path, state: str, daemon: DaemonProcess,
                          timeout: float = 30.0) -> None:
    """Until the lake's checkpoint holds exactly the GTID state ``state``."""
    deadline = time.monotonic() + timeout
    want = set(state.replace("\n", "").split(","))
    while True:
        checkpoint = read_checkpoint(lake) or {}
        have = set((checkpoint.get("gtid_state") or "").replace("\n", "").split(","))
        if have == want:
            return
        daemon.check_alive()
        assert time.monotonic() < deadline, f"checkpoint GTID state {have} != {want}"
        time.sleep(0.2)


def test_planned_switchovers_land_everything_once(topology: Topology, tmp_path: Path) -> None:
    first, second = topology.primary, topology.replica
    database = unique_db("fo")
    workload = Workload(first, database, seed=27)
    workload.create_tables()
    xa_db = f"{database}_xa"  # an XA transaction prepared before the switch, committed after
    first.sql(f"CREATE DATABASE {xa_db}; CREATE TABLE {xa_db}.t (id INT PRIMARY KEY, v INT)")
    topology.wait_replica()
    lake = tmp_path / "lake"
    settings = failover_settings(topology, lake, database, [first, second])
    settings["filter"]["include"] = [database, xa_db]
    daemon = DaemonProcess(tmp_path, settings, password=topology.account.password)
    daemon.start()
    daemon.wait_for(r"streaming from")
    base = daemon.metrics_url()
    first.sql(f"XA START 'fo1'; INSERT INTO {xa_db}.t VALUES (1, 10); XA END 'fo1'; "
              "XA PREPARE 'fo1'")

    # 1. a switchover while the workload runs; the daemon follows with its host list
    workload.run(TRANSACTIONS, batch=2, pause=0.02)
    if topology.mariadb:  # a second GTID domain: the lake's state and the resume carry both
        workload.PREAMBLE = f"{Workload.PREAMBLE}; SET SESSION gtid_domain_id = 1"
        workload.run(4, batch=1)
        workload.PREAMBLE = Workload.PREAMBLE
        assert "1-" in topology.gtid_state(first)
    topology.switch_over(shut_down=False)  # the old primary stays up, demoted: read-only
    assert topology.primary is second
    workload.server = second
    second.sql("XA COMMIT 'fo1'")
    workload.run(TRANSACTIONS, batch=2, pause=0.02)
    wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)
    wait_checkpoint_state(lake, topology.gtid_state(second), daemon)
    assert [(r["_op"], r["id"], r["v"]) for r in read_lake(lake, xa_db).rows["t"]] == [
        ("I", 1, 10)]
    daemon.wait_for(r"following a new primary: \S+ server_\w+ \S+.* at " + re.escape(
        _address(second)))
    daemon.wait_for(r"the followed server " + re.escape(_address(first)) + " is read-only now")
    status, body = http_get(f"{base}/readyz")
    assert body.rstrip().endswith(f"following {_address(second)}"), (status, body)
    assert f'address="{_address(second)}"' in http_get(f"{base}/metrics")[1]
    compare_lake(second, lake, workload)
    one_seq_per_gtid(lake, database)

    # 2. the old primary rejoins as a replica; a second switchover back to it, with the
    # daemon killed -9 in the middle and restarted with server.host naming the new primary
    topology.link(second, first)
    topology.wait_replica()
    workload.run(TRANSACTIONS, batch=2, pause=0.02)
    second.sql("SET GLOBAL read_only=1")
    topology.wait_replica()
    daemon.kill()
    topology.primary.stop()
    topology.promote()
    assert topology.primary is first
    workload.server = first
    restarted = DaemonProcess(tmp_path, failover_settings(topology, lake, database, [first]),
                              password=topology.account.password, name="restarted")
    restarted.start()
    workload.run(TRANSACTIONS, batch=2, pause=0.02)
    wait_for_lake(lake, workload, timeout=60, alive=restarted.check_alive)
    restarted.wait_for(r"following a new primary: .* at " + re.escape(_address(first)))
    wait_checkpoint_state(lake, topology.gtid_state(first), restarted)
    code, _ = restarted.terminate(10)
    assert code == 0, restarted.run_stderr()[-3000:]
    compare_lake(first, lake, workload)
    one_seq_per_gtid(lake, database)
    for process in (daemon, restarted):
        assert "Traceback" not in process.stderr()
        assert "lacks transactions" not in process.stderr()


def test_crash_failover_behind_is_gtid_diverged_then_continue(topology: Topology,
                                                              tmp_path: Path) -> None:
    old, new = topology.primary, topology.replica
    database = unique_db("fo")
    workload = Workload(old, database, seed=28)
    workload.create_tables()
    lake = tmp_path / "lake"
    settings = failover_settings(topology, lake, database, [old, new])
    daemon = DaemonProcess(tmp_path, settings, password=topology.account.password)
    daemon.start()
    daemon.wait_for(r"streaming from")
    workload.run(TRANSACTIONS // 2 or 1, batch=5)
    topology.wait_replica()
    common = topology.gtid_state(old)
    topology.pause_replica()  # the replica falls behind
    workload.run(5, batch=1)  # landed, never replicated
    wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)
    wait_checkpoint_state(lake, topology.gtid_state(old), daemon)
    landed_state = topology.gtid_state(old)
    before = lake_bytes(lake)

    started = time.monotonic()
    topology.crash_primary()
    code = daemon.wait(30)
    took = time.monotonic() - started
    stderr = daemon.run_stderr()
    assert code == 3, stderr[-3000:]
    assert "GtidDiverged" in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert took < 20, took
    if topology.mariadb:
        mine = landed_state.split(",")[0]
        domain, server_id, seq = (int(x) for x in mine.split("-"))
        behind = int(common.split("-")[2])
        assert (f"domain {domain}: sequence numbers {behind + 1}..{seq} (the lake's last is "
                f"{mine}; the server's {common})") in stderr, stderr[-3000:]
    else:
        uuid, interval = landed_state.split(":")
        _, upto = interval.split("-")
        done = int(common.split(":")[1].split("-")[1])
        assert f"lacks transactions the lake holds — {uuid}:{done + 1}-{upto}" in stderr, \
            stderr[-3000:]
    assert "fix: " in stderr
    assert lake_bytes(lake) == before, "the lake changed"

    # The documented choice: go on from where both histories agree, recorded in the lake.
    settings["start"]["on_divergence"] = "continue"
    going_on = DaemonProcess(tmp_path, settings, password=topology.account.password,
                             name="continue")
    going_on.start()
    going_on.wait_for(r"start.on_divergence = continue: going on from")
    # The workload's model still has the lost rows: its statements on them change nothing
    # on the new primary, its inserts take new keys.
    workload.server = new
    before_rows = sum(len(r) for r in read_lake(lake, database).rows.values())
    workload.run(5, batch=1)
    deadline = time.monotonic() + 30
    while sum(len(r) for r in read_lake(lake, database).rows.values()) <= before_rows:
        going_on.check_alive()
        assert time.monotonic() < deadline, "nothing landed after the divergence"
        time.sleep(0.2)
    wait_checkpoint_state(lake, topology.gtid_state(new), going_on)
    checkpoint = read_checkpoint(lake) or {}
    (record,) = checkpoint["divergences"]
    assert record["lake_gtid_state"].replace("\n", "") == landed_state
    assert record["resumed_from"].replace("\n", "") == common
    code, _ = going_on.terminate(10)
    assert code == 0
    check_exactly_once(read_lake(lake, database))
    one_seq_per_gtid(lake, database)


def test_a_snapshot_running_across_a_switchover(topology: Topology, tmp_path: Path) -> None:
    first, second = topology.primary, topology.replica
    database = unique_db("fo")
    workload = Workload(first, database, seed=30)
    workload.create_tables()
    workload.run(2 * TRANSACTIONS, batch=20)  # rows the snapshot reads
    topology.wait_replica()
    lake = tmp_path / "lake"
    settings = failover_settings(topology, lake, database, [first, second])
    settings["start"]["from"] = "snapshot"
    settings["snapshot"] = {"chunk_rows": 10, "chunk_pause": 0.3}
    daemon = DaemonProcess(tmp_path, settings, password=topology.account.password)
    daemon.start()
    names = {f"{database}.{t}" for t in workload.tables}
    deadline = time.monotonic() + 60
    while sum(e.get("chunks", 0) for e in snapshot_entries(lake).values()) < 2:
        daemon.check_alive()
        assert time.monotonic() < deadline, "no snapshot chunk landed"
        time.sleep(0.05)
    workload.run(5, batch=1)
    running = snapshot_entries(lake)
    assert not (names <= set(running) and all(running[n]["status"] == "done" for n in names))
    topology.switch_over()
    workload.server = second
    workload.run(5, batch=1)
    entries = wait_snapshots_done(lake, names, 120, daemon.check_alive)
    wait_checkpoint_state(lake, topology.gtid_state(second), daemon)
    code, _ = daemon.terminate(10)
    assert code == 0, daemon.run_stderr()[-3000:]
    changes = compare_snapshot_lake(second, lake, workload)
    reads = sum(1 for rows in changes.rows.values() for r in rows if r["_op"] == "R")
    assert reads == sum(entries[n]["rows"] for n in names)
    one_seq_per_gtid(lake, database)
    assert "following a new primary" in daemon.stderr() and "Traceback" not in daemon.stderr()


def test_a_mariadb_lake_begun_unseeded_completes_its_gtid_state(mariadb_10_11: ServerHandle,
                                                                 tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("fo")
    other = unique_db("fo")  # a transaction of another domain, before the lake
    server.sql(f"SET SESSION gtid_domain_id = 7; CREATE DATABASE {other}; DROP DATABASE {other}")
    workload = Workload(server, database, seed=31)
    workload.create_tables()
    lake = tmp_path / "lake"
    config = catch_up_config(server, lake, binlog_end(server), include=(database,))
    workload.run(4, batch=1)
    trio.run(catch_up, config)
    path = lake / "_checkpoint.json"
    doc = json.loads(path.read_text())
    assert doc["gtid_state_complete"] and "7-" in doc["gtid_state"]
    # what a lake landed before seeding holds: the landed transactions' domains only
    doc.update(server=None, gtid_state_complete=False, gtid_state=doc["gtid"])
    path.write_text(json.dumps(doc))
    workload.run(3, batch=1)
    again = dataclasses.replace(config, replica=dataclasses.replace(
        config.replica, server_id=config.replica.server_id + 500))
    trio.run(catch_up, again)
    doc = json.loads(path.read_text())
    (at,) = server.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0]
    assert doc["gtid_state_complete"] and doc["server"]["server_id"] == server.server_id
    assert set(doc["gtid_state"].split(",")) == set((at or "").split(","))
    compare_lake(server, lake, workload)
