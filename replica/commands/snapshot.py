"""``binlake snapshot --table DB.TABLE``: land tables' existing rows into the lake, as ``_op = R``.

The lake has one writer. If no daemon holds the lake, this command is that writer for a while:
it streams from the lake's checkpoint (or, on a lake without one, from the server's binlog end)
exactly as ``binlake run`` does, snapshots the tables beside the stream, commits what it
streamed and stops — nothing streamed is lost, the next ``binlake run`` resumes after it. If a
daemon holds the lake, the command leaves a request in ``<lake>/_snapshot_requests/`` that the
daemon picks up, and waits until the daemon's checkpoint records the tables done. On a lake on
object storage the request is an object under ``_snapshot_requests/`` created with
``If-None-Match: *``, the daemon is known to hold the lake by its lease, and the checkpoint
waited for is the newest commit record's (``sinks.objectstore.requests``). Either way it exits
0 once the rows are committed, 1 if a table's snapshot failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import uuid
from typing import Any

import trio

from replica.config import Config, ConfigError
from replica.core.snapshot import remove_request, requests_done, write_request
from sinks.contract import SnapshotProgress, TableProgress
from sinks.errors import LakeLocked
from sinks.objectstore.requests import StoreRequests
from sinks.objectstore.s3 import open_store
from sinks.parquet.status import lake_in_use, lock_holder, read_checkpoint

log = logging.getLogger("binlake.snapshot")

#: Seconds between looks at the daemon's checkpoint while waiting for it.
WAIT_POLL = 0.5
#: The same on object storage, where a look is a few requests (the log's hint, a HEAD or two,
#: the newest record, the lease).
STORE_WAIT_POLL = 1.0

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", dest="tables", action="append", required=True,
                        metavar="DB.TABLE", help="a table to snapshot (repeatable)")


def parse_tables(names: list[str]) -> list[tuple[str, str]]:
    tables = []
    for name in names:
        database, dot, table = name.partition(".")
        if not dot or not database or not table or "*" in name:
            raise ConfigError(f"--table expects DB.TABLE, got {name!r}",
                              hint="name each table, e.g. --table shop.orders")
        if (database, table) not in tables:
            tables.append((database, table))
    return tables


def _checkpoint_state(lake: str) -> SnapshotProgress:
    try:
        doc = read_checkpoint(lake) or {}
    except (OSError, ValueError):  # being replaced (never half-written)
        return SnapshotProgress()
    return _state_of(doc)


def _state_of(checkpoint: dict[str, Any] | None) -> SnapshotProgress:
    state = (checkpoint or {}).get("snapshot")
    return SnapshotProgress.from_json(state) if isinstance(state, dict) else SnapshotProgress()


def _report(entries: list[TableProgress]) -> int:
    failed = 0
    for entry in entries:
        if entry.status == "failed":
            failed += 1
            log.error("%s: snapshot failed: %s", entry.name, entry.message or "")
        else:
            log.info("%s: %d rows landed in %d chunks%s", entry.name, entry.rows, entry.chunks,
                     " (one-time copy: the filters exclude it)" if entry.one_time else "")
    return 1 if failed else 0


async def _ask_daemon(config: Config, tables: list[tuple[str, str]]) -> int:
    lake = config.lake.path
    request = write_request(lake, tables)
    log.info("a daemon holds the lake %s: asked it to snapshot %s; waiting", lake,
             ", ".join(f"{d}.{t}" for d, t in tables))
    holder = lock_holder(lake)
    try:
        while True:
            entries = requests_done(_checkpoint_state(lake), request, tables)
            if entries is not None:
                return _report(entries)
            if holder is not None and not _alive(holder) and lock_holder(lake) in (holder, None):
                log.error("the daemon (pid %d) stopped before the snapshot was done: tables it "
                          "had taken up resume when it runs again; run `binlake snapshot` "
                          "again to have them all and wait for them", holder)
                return 1
            await trio.sleep(WAIT_POLL)
    finally:
        remove_request(lake, request)


async def _ask_store_daemon(config: Config, tables: list[tuple[str, str]],
                            requests: StoreRequests) -> int | None:
    """:func:`_ask_daemon` for a lake on object storage: the daemon counts as stopped once its
    lease is released, or unchanged for the lease's duration (it renews every third of it).
    None: the lease never moved while watched — its holder was gone before the request (it
    died on another host), so no daemon will take the request up: the caller becomes the
    lake's writer instead."""
    lake = config.lake.path
    request = await trio.to_thread.run_sync(requests.write, tables)
    log.info("a daemon holds the lake %s: asked it to snapshot %s; waiting", lake,
             ", ".join(f"{d}.{t}" for d, t in tables))

    async def done() -> list[TableProgress] | None:
        checkpoint = await trio.to_thread.run_sync(requests.checkpoint)
        return requests_done(_state_of(checkpoint), request, tables)

    watched: tuple[str, float] | None = None  # (the lease's ETag, when first seen)
    renewed = False  # the lease changed while watched: a daemon was alive
    try:
        while True:
            entries = await done()
            if entries is not None:
                return _report(entries)
            seen = await trio.to_thread.run_sync(requests.held)
            now = time.monotonic()
            if seen is not None and (watched is None or watched[0] != seen.etag):
                renewed = renewed or watched is not None
                watched = (seen.etag, now)
            if seen is None or (watched is not None and now - watched[1] > seen.duration_s):
                entries = await done()  # it may have committed them, then stopped
                if entries is not None:
                    return _report(entries)
                if not renewed and seen is not None:
                    log.info("the lake's lease was not renewed for its %g s: its holder is "
                             "gone", seen.duration_s)
                    return None
                log.error("the daemon stopped before the snapshot was done: tables it had taken "
                          "up resume when it runs again; run `binlake snapshot` again to have "
                          "them all and wait for them")
                return 1
            await trio.sleep(STORE_WAIT_POLL)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(requests.remove, request)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


async def run(config: Config, args: argparse.Namespace) -> int:
    """Entry point of ``binlake snapshot`` (called by :mod:`replica.cli`)."""
    from replica.core.daemon import Daemon

    tables = parse_tables(args.tables)
    lake = config.lake.path
    requests: StoreRequests | None = None
    if config.lake.on_object_store:
        requests = StoreRequests(open_store(lake, config.lake.s3.settings()), lake)
        if await trio.to_thread.run_sync(requests.held) is not None:
            code = await _ask_store_daemon(config, tables, requests)
            if code is not None:
                return code  # else: no daemon holds it after all; this command takes the lake
    elif lake_in_use(lake):
        return await _ask_daemon(config, tables)
    daemon = Daemon(config, snapshot_tables=tables, snapshot_request=uuid.uuid4().hex)
    try:
        code = await daemon.run()
    except LakeLocked:  # a daemon started meanwhile
        if requests is not None:
            code = await _ask_store_daemon(config, tables, requests)
            if code is None:
                log.error("the lake's lease is held but not renewed, and could not be taken "
                          "over: run `binlake snapshot` again")
                return 1
            return code
        return await _ask_daemon(config, tables)
    if code != 0:
        return code
    if len(daemon.snapshot_results) != len(tables):
        log.error("stopped before the snapshot was complete; run the command again to resume "
                  "it (landed chunks are kept)")
        return 1
    return _report(daemon.snapshot_results)
