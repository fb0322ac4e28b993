"""``binlake status``: where the lake stands, and how far behind the server it is.

Lake facts come from the lake alone, cheaply, and never change it:

* the last landed transaction, from ``_checkpoint.json``: its number, GTID, the binlog position
  streaming resumes from, its commit time (an interrupted commit record, ``_commit.json``, is
  mentioned: the next run rolls it forward);
* per table: its schema versions (``_schema/v<N>.json``), data files, and rows landed — the
  row counts are read from the Parquet *footers* only, never from the data;
* snapshots, from the checkpoint's ``snapshot`` state (committed with each landed chunk): per
  table ``pending`` / ``running`` / ``done`` / ``failed``, rows and chunks landed, the last key
  landed (a kill -9 resumes after it) and why a snapshot failed.

If the server of the configuration answers, its binlog end (``SHOW MASTER STATUS`` / ``SHOW
BINARY LOG STATUS``), GTID position (``@@gtid_binlog_pos`` / ``@@gtid_executed``) and the lag, by
the one definition the daemon's /readyz and /metrics use (:mod:`replica.observe.lag`):

* ``caught_up``: the lake's resume position is the server's end, or its GTID state is the
  server's (then ``seconds_behind`` and ``bytes_behind`` are 0);
* ``seconds_behind``: otherwise, the server's clock now minus the last landed commit time;
* ``bytes_behind``: binlog bytes between the resume position and the server's end (from
  ``SHOW BINARY LOGS``; absent without the REPLICATION CLIENT/BINLOG MONITOR privilege).

A server that cannot be reached is reported after the lake's facts, which are printed anyway;
the exit status is 0 when the lake exists and the server answered (or ``--no-server``), 1 when
the lake does not exist or the server could not be reached — so a script or a probe can tell. ``--json`` prints the same facts as one JSON document (see :func:`collect`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from replica.config import Config
from replica.observe.lag import ServerEnd, lag_of_checkpoint, query_server_end
from replica.observe.progress import format_snapshot_entry
from sinks.contract import SnapshotProgress
from sinks.objectstore.s3 import open_store
from sinks.objectstore.status import object_lake_facts
from sinks.parquet.status import LakeFacts, TableFacts, lake_facts

__all__ = ["TableFacts", "LakeFacts", "ServerPosition", "Status", "lake_facts",
           "server_position", "collect", "snapshots", "render_text", "add_arguments", "run"]



@dataclass(slots=True)
class ServerPosition:
    """The server's end and the lake's distance to it (None where unknown)."""

    reachable: bool
    error: str | None = None
    version: str | None = None
    flavor: str | None = None  # "mariadb" or "mysql"
    binlog_file: str | None = None
    binlog_pos: int | None = None
    gtid: str | None = None
    now_us: int | None = None
    caught_up: bool | None = None
    seconds_behind: float | None = None
    bytes_behind: int | None = None


@dataclass(slots=True)
class Status:
    lake: LakeFacts
    server: ServerPosition | None


# --- the server ---------------------------------------------------------------------------------


async def server_position(config: Config, checkpoint: dict[str, Any] | None) -> ServerPosition:
    """Ask the server for its end, and compare with the checkpoint; never raises for the
    server's sake (an unreachable server is a fact to report)."""
    from replica.core.connection import Connection, ConnectOptions

    options = ConnectOptions.from_config(
        config.server, connect_timeout=min(config.server.connect_timeout, 5.0),
        read_timeout=min(config.server.read_timeout, 10.0))
    try:
        conn = await Connection.open(options)
    except Exception as exc:
        return ServerPosition(reachable=False, error=_one_line(exc))
    result = ServerPosition(reachable=True, version=conn.server_version,
                            flavor="mariadb" if conn.is_mariadb else "mysql")
    end: ServerEnd | None = None
    try:
        async with conn:
            end = await _ask(conn, result)
    except Exception as exc:
        result.error = _one_line(exc)
    _compare(result, checkpoint, end)
    return result


async def _ask(conn: Any, result: ServerPosition) -> ServerEnd:
    """Fill in the server's clock, GTID and binlog end."""
    end = await query_server_end(conn)
    result.now_us = end.now_us
    result.gtid = end.gtid
    if end.position is None:
        result.error = "no binlog position: the user lacks REPLICATION CLIENT/BINLOG MONITOR"
    else:
        result.binlog_file, result.binlog_pos = end.position.file, end.position.pos
    return end


def _compare(result: ServerPosition, checkpoint: dict[str, Any] | None,
             end: ServerEnd | None) -> None:
    if checkpoint is None or end is None:
        return
    lag = lag_of_checkpoint(checkpoint, end)
    result.caught_up = lag.caught_up
    result.seconds_behind = lag.seconds
    result.bytes_behind = lag.bytes


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- together -----------------------------------------------------------------------------------


async def collect(config: Config, *, ask_server: bool = True) -> Status:
    if config.lake.on_object_store:  # read through the lake's commit log
        lake = object_lake_facts(open_store(config.lake.path, config.lake.s3.settings()),
                                 config.lake.path)
    else:
        lake = lake_facts(config.lake.path)
    server = await server_position(config, lake.checkpoint) if ask_server else None
    return Status(lake=lake, server=server)


def snapshots(checkpoint: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each snapshotted table's progress, by name: ``table``, ``status``, ``rows``, ``chunks``,
    ``last_key`` (SQL literals), ``one_time``, ``message`` (why it failed, or a note),
    ``reason`` (what asked for it: ``signal <id>`` for a snapshot signal), ``condition`` (the
    WHERE condition limiting its rows, or None)."""
    state = SnapshotProgress.from_json((checkpoint or {}).get("snapshot") or {})
    out = []
    for entry in sorted(state.tables or (), key=lambda e: e.name):
        out.append({"table": entry.name, "status": entry.status, "rows": entry.rows,
                    "chunks": entry.chunks,
                    "last_key": None if entry.last_key is None else list(entry.last_key),
                    "one_time": entry.one_time, "message": entry.message,
                    "reason": entry.reason or None, "condition": entry.condition})
    return out


def as_json(status: Status) -> dict[str, Any]:
    """The ``--json`` document: ``{"lake": {...}, "tables": [...], "snapshots": [...],
    "server": {...}|null}``."""
    lake = status.lake
    server = asdict(status.server) if status.server is not None else None
    return {
        "lake": {"path": lake.path, "exists": lake.exists, "checkpoint": lake.checkpoint,
                 "commit_in_progress": lake.commit_in_progress, "tables": len(lake.tables),
                 "files": lake.files, "rows": lake.rows, "bytes": lake.bytes,
                 "unreadable": lake.unreadable},
        "tables": [asdict(t) for t in lake.tables],
        "snapshots": snapshots(lake.checkpoint),
        "server": server,
    }


def _when(micros: int, now: float) -> str:
    moment = _dt.datetime.fromtimestamp(micros / 1_000_000, _dt.UTC)
    ago = max(0.0, now - micros / 1_000_000)
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S.%fZ')} ({_duration(ago)} ago)"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _render_snapshots(tables: list[dict[str, Any]], write: Any) -> None:
    if not tables:
        return
    counts = Counter(t["status"] for t in tables)
    summary = ", ".join(f"{counts[s]} {s}" for s in ("running", "pending", "done", "failed")
                        if counts[s])
    write(f"  snapshots       {len(tables)} table{'' if len(tables) == 1 else 's'}: {summary}\n")
    width = max(len(t["table"]) for t in tables)
    for t in tables:
        entry = format_snapshot_entry(t["rows"], t["chunks"], t["last_key"])
        line = f"    {t['table']:<{width}}  {t['status']:<8} {entry}"
        if t["one_time"]:
            line += " (one-time copy)"
        if t.get("condition") is not None:
            line += f" (where {t['condition']})"
        if (t.get("reason") or "").startswith("signal "):
            line += f" (asked by {t['reason']})"
        if t["message"] and t["status"] == "failed":
            line += f": {t['message']}"
        write(line + "\n")


def render_text(status: Status, out: TextIO, *, now: float | None = None) -> None:
    now = time.time() if now is None else now
    lake = status.lake
    write = out.write
    write(f"lake {lake.path}\n")
    if not lake.exists:
        write("  does not exist: nothing has landed yet (check lake.path)\n")
    else:
        cp = lake.checkpoint
        if cp is None:
            write("  checkpoint      none: no transaction landed yet\n")
        else:
            where = (f"{cp.get('binlog_file')}:{cp.get('binlog_pos')}"
                     if cp.get("binlog_file") else "-")
            write(f"  checkpoint      transaction {cp.get('seq')}, GTID {cp.get('gtid') or '-'}, "
                  f"resumes at {where}\n")
            if cp.get("gtid_state"):
                write(f"  gtid state      {cp['gtid_state']}\n")
            if isinstance(cp.get("commit_time_us"), int):
                write(f"  last commit     {_when(cp['commit_time_us'], now)}\n")
            in_doubt = cp.get("xa_prepared") or []
            if in_doubt:
                xids = ", ".join(str(x.get("xid")) for x in in_doubt[:5])
                more = f" and {len(in_doubt) - 5} more" if len(in_doubt) > 5 else ""
                write(f"  xa in doubt     {len(in_doubt)} prepared, neither committed nor rolled "
                      f"back yet (rows land at XA COMMIT): {xids}{more}\n")
        _render_snapshots(snapshots(cp), write)
        if lake.commit_in_progress:
            write("  note            an interrupted commit (_commit.json): the next run "
                  "rolls it forward\n")
        write(f"  landed          {lake.rows} rows in {lake.files} files ({_size(lake.bytes)}), "
              f"{len(lake.tables)} tables\n")
        width = max((len(f"{t.database}.{t.table}") for t in lake.tables), default=0)
        for t in lake.tables:
            versions = ",".join(f"v{v}" for v in t.schema_versions) or "-"
            write(f"    {t.database + '.' + t.table:<{width}}  {t.rows:>12} rows  "
                  f"{t.files:>5} files  {_size(t.bytes):>10}  schema {versions}\n")
        for problem in lake.unreadable:
            write(f"  unreadable      {problem}\n")
    server = status.server
    if server is None:
        return
    if not server.reachable:
        write(f"server unreachable: {server.error}\n")
        return
    write(f"server {server.flavor} {server.version}\n")
    if server.binlog_file is not None:
        write(f"  binlog end      {server.binlog_file}:{server.binlog_pos}\n")
    if server.gtid:
        write(f"  gtid            {server.gtid}\n")
    if server.error:
        write(f"  note            {server.error}\n")
    if lake.checkpoint is None:
        return
    if server.caught_up:
        write("  lag             caught up (0 s)\n")
    elif server.seconds_behind is not None:
        behind = f", {_size(server.bytes_behind)} of binlog" if server.bytes_behind else ""
        write(f"  lag             {_duration(server.seconds_behind)} behind{behind}\n")


# --- command ------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``binlake status`` options (for :mod:`replica.cli`, next to the config flags)."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document instead of text")
    parser.add_argument("--no-server", action="store_true",
                        help="only the lake's facts; do not contact the server")


async def run(config: Config, args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Entry point of ``binlake status``: 0 if the lake exists and the server (when asked)
    answered, else 1.

    ``args`` are the command's own options (``--json``, ``--no-server``) when the caller parsed
    them with :func:`add_arguments`.
    """
    as_json_output = bool(getattr(args, "json", False))
    ask_server = not getattr(args, "no_server", False)
    status = await collect(config, ask_server=ask_server)
    if as_json_output:
        sys.stdout.write(json.dumps(as_json(status), indent=1, sort_keys=True) + "\n")
    else:
        render_text(status, sys.stdout)
    unreachable = status.server is not None and not status.server.reachable
    return 1 if unreachable or not status.lake.exists else 0
