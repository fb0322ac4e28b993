"""A lake whose every flush takes 10 s: the daemon stays responsive, stops cleanly, lands once.

The flushes are slowed by the sink factory's developer switch (``BINLAKE_TEST_FLUSH_DELAY``:
each flush waits that long in the thread running it before it writes), which stands for a slow
disk or a remote store. The daemon runs such work on its sink worker thread, so meanwhile its
event loop must go on answering /healthz and /metrics, keep the replication session (no
heartbeat timeout, no reconnect) and see SIGTERM at once; the stop then waits for the flush in
progress, and the lake holds every change exactly once.
"""

from __future__ import annotations

import http.client
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import (
    DaemonProcess,
    daemon_settings,
    http_get,
    metric,
    read_checkpoint,
    unique_db,
)
from .workload import Workload, compare_lake, wait_for_lake

pytestmark = pytest.mark.server

#: Seconds each flush waits.
DELAY = 10.0
#: The most an HTTP probe may take while a flush runs.
PROBE_LIMIT = 0.1


class _Prober(threading.Thread):
    """GETs /healthz and /metrics in turn until stopped; keeps every answer's latency."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(daemon=True)
        self.host, self.port = host, port
        #: (path, seconds, status, when it was sent)
        self.latencies: list[tuple[str, float, int, float]] = []
        #: binlake_connected of every /metrics answer
        self.connected: list[float | None] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        paths = ("/healthz", "/metrics")
        while not self.stopping.is_set():
            path = paths[len(self.latencies) % 2]
            started = time.perf_counter()
            conn = http.client.HTTPConnection(self.host, self.port, timeout=DELAY * 2)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                body = response.read()
                status = response.status
            finally:
                conn.close()
            self.latencies.append((path, time.perf_counter() - started, status, started))
            if path == "/metrics":
                self.connected.append(metric(body.decode(), "binlake_connected"))
            self.stopping.wait(0.02)


def _land_count(base: str) -> float:
    _, text = http_get(f"{base}/metrics")
    return metric(text, "binlake_land_duration_seconds_count") or 0.0


def test_a_slow_lake_leaves_the_daemon_responsive_and_stops_after_the_flush(
        mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server, lake = mariadb_10_11, tmp_path / "lake"
    workload = Workload(server, unique_db("e2e_slow"), seed=20261129)
    # heartbeat_period 1 s: a stall is 2 s without a packet, far less than one flush; flushes
    # come by time (flush_interval 0.3 s: the ticker)
    settings = daemon_settings(server, lake, workload.database,
                               overrides={"replica": {"stop_timeout": DELAY + 5}})
    workload.create_tables()
    password = server.users["repl"].password
    daemon = DaemonProcess(tmp_path, settings, password=password,
                           env={"BINLAKE_TEST_FLUSH_DELAY": str(DELAY)})
    daemon.start()
    daemon.wait_for(r"streaming from")
    base = daemon.metrics_url()
    host, port = base.removeprefix("http://").rsplit(":", 1)

    # 1. changes keep coming while flushes of 10 s run one after another: probe throughout
    prober = _Prober(host, int(port))
    before = _land_count(base)
    prober.start()
    try:
        deadline = time.monotonic() + 2.5 * DELAY
        while time.monotonic() < deadline:
            workload.run(5)
            time.sleep(0.5)
            daemon.check_alive()
    finally:
        prober.stopping.set()
        prober.join(DELAY * 3)
    after = _land_count(base)
    # two flushes ended inside the window: the second ran whole while the probes went on
    assert after - before >= 2, (before, after)
    # A loop blocked by the flush would hold a probe for up to DELAY seconds. On a loaded
    # machine the scheduler alone delays a process now and then by tens of milliseconds, so
    # one probe in a hundred may pass PROBE_LIMIT, none may come near a second.
    latencies = sorted(seconds for _, seconds, _, _ in prober.latencies)
    slow = [seconds for seconds in latencies if seconds >= PROBE_LIMIT]
    assert len(slow) <= len(latencies) // 100, f"{len(slow)} of {len(latencies)}: {slow}"
    assert latencies[-1] < 1.0, f"a probe took {latencies[-1]:.3f} s during a flush"
    assert {status for _, _, status, _ in prober.latencies} == {200}
    assert set(prober.connected) == {1.0}  # the session stayed up all along
    assert len(prober.latencies) > 2.5 * DELAY / 0.2  # a probe every few tens of ms

    wait_for_lake(lake, workload, timeout=6 * DELAY, alive=daemon.check_alive)
    _, text = http_get(f"{base}/metrics")
    flushes = metric(text, "binlake_land_duration_seconds_count") or 0.0
    assert (metric(text, "binlake_land_duration_seconds_sum") or 0.0) >= DELAY * flushes

    # 2. SIGTERM while a flush runs: logged at once, the exit waits for that flush
    workload.run(10)
    mark = len(daemon.run_stderr())
    flushing = _land_count(base)
    time.sleep(2.0)  # the ticker (every 0.15 s, flush_interval 0.3 s) has started a flush
    assert _land_count(base) == flushing  # ... which has not ended
    assert daemon.process is not None
    signalled = time.monotonic()
    daemon.process.send_signal(signal.SIGTERM)
    daemon.wait_for(r"SIGTERM: stopping", since=mark, timeout=5.0, alive=False)
    logged = time.monotonic() - signalled
    code = daemon.wait(timeout=DELAY + 10)
    took = time.monotonic() - signalled
    assert code == 0, daemon.run_stderr()
    assert logged < 1.0, f"SIGTERM logged after {logged:.2f} s"
    assert DELAY - 4 < took < DELAY + 5, f"exit {took:.1f} s after SIGTERM"
    # the flush in progress landed the last changes: the lake is whole, nothing twice
    wait_for_lake(lake, workload, timeout=1.0)
    compare_lake(server, lake, workload)

    # 3. a flush by rows (flush_rows: the reader's own, not the ticker's) is off the loop too
    rows_settings = {**settings, "lake": {**settings["lake"], "flush_rows": 20}}
    by_rows = DaemonProcess(tmp_path, rows_settings, password=password, name="by_rows",
                            env={"BINLAKE_TEST_FLUSH_DELAY": str(DELAY)})
    by_rows.start()
    by_rows.wait_for(r"streaming from")
    base = by_rows.metrics_url()
    landed_before = read_checkpoint(lake)
    workload.run(10)  # more than 20 rows: the reader flushes as soon as it has 20
    time.sleep(2.0)
    for path in ("/healthz", "/metrics") * 5:
        started = time.perf_counter()
        status, _ = http_get(f"{base}{path}")
        assert status == 200 and time.perf_counter() - started < 1.0
    assert read_checkpoint(lake) == landed_before  # the flush is still in progress
    assert by_rows.process is not None
    signalled = time.monotonic()
    by_rows.process.send_signal(signal.SIGTERM)
    by_rows.wait_for(r"SIGTERM: stopping", timeout=5.0, alive=False)
    assert time.monotonic() - signalled < 1.0
    assert by_rows.wait(timeout=DELAY + 10) == 0, by_rows.run_stderr()
    assert DELAY - 4 < time.monotonic() - signalled < DELAY + 5
    landed = read_checkpoint(lake)
    assert landed is not None and landed_before is not None
    assert landed["seq"] > landed_before["seq"]  # what the flush in progress had, landed

    # 4. without the delay, the rest lands: every change exactly once
    last = DaemonProcess(tmp_path, rows_settings, password=password, name="last")
    last.start()
    wait_for_lake(lake, workload, timeout=30, alive=last.check_alive)
    assert last.terminate(timeout=DELAY)[0] == 0
    compare_lake(server, lake, workload)

    log = daemon.stderr() + by_rows.stderr() + last.stderr()
    assert "HeartbeatTimeout" not in log and "reconnecting" not in log, log[-4000:]
    assert "stalled" not in log
    for process in (daemon, by_rows, last):
        process.assert_secret_never_shown(password)
