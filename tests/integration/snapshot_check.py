"""Checks shared by the snapshot tests: the lake's current state against SELECT, with R rows.

A snapshot's R rows and the streamed changes together must replay like a table's history:
each key's R row comes at most once per snapshot, and an R row of a key the lake already
holds (the stream changed the row after streaming started and before its chunk was read)
equals the row the lake holds — the R row is consistent with its point in the stream; every U/D of a key the lake holds carries as before image exactly the row the lake holds
(so the first change after an R row carries the R row's values), and the replay's end equals
the server. A U/D of a key the lake does not hold yet is a row the stream changed while its
chunk was read: the chunk left it out, the U's full after image is its row (a later R of that
key would have to equal it).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, binlog_end, daemon_settings, read_checkpoint
from .workload import (
    LakeChanges,
    Workload,
    _where,
    assert_state_equals_select,
    check_exactly_once,
    read_lake,
)

Key = tuple[Any, ...]


def snapshot_settings(server: ServerHandle, lake: str | os.PathLike[str], database: str,
                      overrides: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`daemon_settings` for a lake that starts from ``start.from`` (a snapshot, the
    latest position), not from the file and position daemon_settings fills in."""
    settings = daemon_settings(server, lake, database, overrides=overrides)
    for key in ("file", "pos"):
        settings["start"].pop(key, None)
    return settings


def snapshot_daemon(server: ServerHandle, tmp_path: Path, database: str, start: str,
                    **snapshot: object) -> DaemonProcess:
    """A daemon on ``tmp_path / "lake"`` that starts from ``start``, with the ``[snapshot]``
    settings ``snapshot`` (``chunk_rows`` and the like)."""
    settings = snapshot_settings(server, tmp_path / "lake", database, overrides={
        "start": {"from": start}, "snapshot": snapshot})
    return DaemonProcess(tmp_path, settings, password=server.users["repl"].password)


def readable_through(settings: dict[str, dict[str, Any]], server: ServerHandle,
                     port: int) -> None:
    """Connect through a test proxy on ``port`` without TLS, so the proxy can read the
    requests (MySQL's caching_sha2_password then asks for the server's RSA key)."""
    settings["server"].update({"port": port, "tls_mode": "disabled"})
    if not server.is_mariadb:
        settings["server"]["get_server_public_key"] = True


def replay(name: str, key_names: tuple[str, ...], rows: list[dict[str, Any]]
           ) -> dict[Key, dict[str, Any]]:
    """The change log (in ``(_seq, _row)`` order) reduced to the latest row per key, checked."""
    state: dict[Key, dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[k] for k in key_names)
        op = r["_op"]
        if op == "R":
            assert r["_gtid"] is None and r["_before"] is None, f"{name}: R row {r}"
            if key in state:
                held = state[key]
                differ = [c for c in r if not c.startswith("_") and held.get(c) != r[c]
                          and c not in ("schema_version", "commit_date")
                          and c in held]  # a column added later is absent from older rows
                assert not differ, (f"{name} {key}: R row differs from the row the lake holds "
                                    f"in {differ} at {_where(r)}")
        elif op == "I":
            assert key not in state, f"{name}: I of a key the lake holds {key} at {_where(r)}"
        elif key in state:
            before = r["_before"]
            assert before is not None, f"{name}: {op} without a before image at {_where(r)}"
            previous = state[key]
            differ = [c for c, v in before.items() if c in previous and previous[c] != v]
            assert not differ, f"{name} {key}: before image differs in {differ} at {_where(r)}"
        if op == "D":
            state.pop(key, None)
        else:
            state[key] = r
    return state


def latest_values(rows: list[dict[str, Any]], key: str, value: str) -> dict[Any, Any]:
    """A one-column-key table's change log (in ``(_seq, _row)`` order) reduced to the latest
    ``value`` per exact key (R, I and U upsert, D removes)."""
    state: dict[Any, Any] = {}
    for r in rows:
        if r["_op"] == "D":
            state.pop(r[key], None)
        else:
            state[r[key]] = r[value]
    return state


def compare_snapshot_lake(server: ServerHandle, lake: str | os.PathLike[str],
                          workload: Workload) -> LakeChanges:
    """The lake's replayed state of every workload table == SELECT, cell for cell."""
    changes = read_lake(lake, workload.database)
    check_exactly_once(changes)
    for name, model in workload.tables.items():
        spec = model.spec
        rows = changes.rows.get(name, [])
        reads = Counter(tuple(r[k] for k in spec.key_names) for r in rows if r["_op"] == "R")
        assert not [k for k, n in reads.items() if n > 1], f"{name}: a key read twice"
        lake_state = replay(name, spec.key_names, rows)
        assert_state_equals_select(server, workload.database, name, spec, lake_state)
    return changes


def snapshot_entries(lake: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    checkpoint = read_checkpoint(lake) or {}
    tables: dict[str, dict[str, Any]] = (checkpoint.get("snapshot") or {}).get("tables", {})
    return tables


def wait_snapshots_done(lake: str | os.PathLike[str], names: set[str], timeout: float,
                        alive: Any = None) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        entries = snapshot_entries(lake)
        if names <= set(entries) and all(entries[n]["status"] == "done" for n in names):
            return entries
        if alive is not None:
            alive()
        assert time.monotonic() < deadline, f"snapshots not done in {timeout} s: {entries}"
        time.sleep(0.2)


def wait_caught_up(server: ServerHandle, lake: str | os.PathLike[str], timeout: float,
                   alive: Any = None) -> None:
    """Until the checkpoint is at the server's binlog end (no writes meanwhile)."""
    end = binlog_end(server)
    deadline = time.monotonic() + timeout
    while True:
        checkpoint = read_checkpoint(lake) or {}
        if (checkpoint.get("binlog_file"), checkpoint.get("binlog_pos")) == end:
            return
        if alive is not None:
            alive()
        assert time.monotonic() < deadline, f"not caught up with {end}: {checkpoint}"
        time.sleep(0.2)


class Writer:
    """The workload in small batches on a thread until stopped (changes during the snapshot)."""

    def __init__(self, workload: Workload, pause: float = 0.02) -> None:
        self.workload = workload
        self.pause = pause
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.transactions = 0
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.workload.run(4, batch=4)
                self.transactions += 4
                time.sleep(self.pause)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def reset_binlogs(server: ServerHandle) -> None:
    """Forget the history: the tables' rows exist only in the tables now."""
    server.sql("RESET MASTER" if server.is_mariadb else "RESET BINARY LOGS AND GTIDS")
