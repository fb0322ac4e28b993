"""Crash safety of ``binlake run``: SIGKILL at random moments while changes flow, restart, repeat;
the lake ends up equal to the source with every change exactly once.

A kill can land anywhere: while connecting, mid-transaction, while writing staged files, between
the commit manifest and the renames, between the renames and the checkpoint. The sink's commit
protocol (``sinks/parquet/commit.py``) promises that a restart rolls forward or discards, never
loses and never duplicates; this is the proof on a real stream.

``BINLAKE_CRASH_ITERATIONS`` sets the number of kills (default 20, each well under 2 s).
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, daemon_settings, read_checkpoint, unique_db
from .workload import Workload, compare_lake, wait_for_lake

pytestmark = pytest.mark.server

ITERATIONS = int(os.environ.get("BINLAKE_CRASH_ITERATIONS", "20"))


class _Background:
    """Runs the workload in small batches on a thread until stopped, ``pause`` seconds apart."""

    def __init__(self, workload: Workload, pause: float = 0.02) -> None:
        self.workload = workload
        self.pause = pause
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.workload.run(5, batch=5)
                time.sleep(self.pause)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> _Background:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
        mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    database = unique_db("e2e_crash")
    lake = tmp_path / "lake"
    # Small flushes, so kills often land in the middle of commits.
    settings = daemon_settings(server, lake, database,
                               overrides={"lake": {"flush_interval": 0.1, "flush_rows": 50}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    workload = Workload(server, database, seed=4242)
    workload.create_tables()
    rng = random.Random(ITERATIONS)
    checkpoints = []
    with _Background(workload):
        for _ in range(ITERATIONS):
            daemon.start()
            if rng.random() < 0.25:
                # anywhere from interpreter start through recovery and registration
                time.sleep(rng.uniform(0.2, 1.2))
            else:
                daemon.wait_for(r"streaming from")
                time.sleep(rng.uniform(0.0, 0.8))
                daemon.check_alive()
            daemon.kill()
            checkpoint = read_checkpoint(lake)
            checkpoints.append(checkpoint["seq"] if checkpoint else 0)
    # The lake moved forward across the kills (the daemon got work done between them).
    assert checkpoints[-1] > 0 and checkpoints == sorted(checkpoints), checkpoints

    daemon.start()
    daemon.wait_for(r"streaming from")  # SIGTERM before this kills it
    wait_for_lake(lake, workload, timeout=60, alive=daemon.check_alive)
    code, _took = daemon.terminate(timeout=15)
    assert code == 0, daemon.run_stderr()
    assert daemon.runs == ITERATIONS + 1
    compare_lake(server, lake, workload)
