"""``binlake run`` into a bucket of the test bed's Ceph gateway, and the lake there as binlake's
readers see it: what the daemon-level S3 tests share.

A lake on object storage is what its commit log says (``sinks/objectstore/commit.py``), so the
tests read it through the log: :func:`committed_copy` copies the objects the log keeps, under
their layout names, into a local directory that the disk tests' helpers (``workload.py``) read;
:class:`LogFollower` finds the other side, the data objects no record names (an
interrupted commit's, until the next start sweeps them).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from sinks.objectstore.commit import LOG_DIR, CommitLog, live_objects
from sinks.objectstore.log import Record, record_key
from sinks.objectstore.s3 import S3Settings, open_store
from sinks.objectstore.store import ObjectStore
from sinks.objectstore.view import layout_name
from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, daemon_settings
from .workload import Workload, read_lake

__all__ = ["LogFollower", "committed_copy", "committed_data_keys", "data_keys", "gateway_store",
           "s3_daemon", "wait_for_s3_lake"]

_RECORD = re.compile(r"^_log/(\d{20})\.json$")


def gateway_store(gateway: CephGateway, lake: str) -> ObjectStore:
    """The store of ``lake`` (``s3://BUCKET/PREFIX``) on ``gateway``, with the test user's keys."""
    return open_store(lake, S3Settings(endpoint=gateway.endpoint, region=gateway.region,
                                       access_key_id=gateway.access_key,
                                       secret_access_key=gateway.secret_key))


def s3_daemon(server: ServerHandle, gateway: CephGateway, workdir: Path, lake: str,
              databases: list[str], *, name: str = "daemon",
              overrides: dict[str, dict[str, Any]] | None = None) -> DaemonProcess:
    """A ``binlake run`` (not started) from ``server`` into ``lake`` on ``gateway``, landing
    ``databases``; its keys come from the standard AWS variables, its spool under ``workdir``."""
    settings = daemon_settings(server, workdir / "unused", databases[0], overrides={
        "filter": {"include": list(databases)},
        "lake": {"path": lake},
        "lake.s3": {"endpoint": gateway.endpoint}})
    for section, values in (overrides or {}).items():
        settings.setdefault(section, {}).update(values)
    return DaemonProcess(workdir, settings, password=server.users["repl"].password,
                         env={**gateway.s3_env(), "TMPDIR": str(workdir)}, name=name)


def _hidden(key: str) -> bool:
    return any(part[:1] in "_." for part in key.split("/"))


def data_keys(store: ObjectStore, prefixes: tuple[str, ...] = ("",)) -> set[str]:
    """Every object of the lake (under ``prefixes``) whose key has no component starting with
    ``_`` or ``.``."""
    return {info.key for prefix in prefixes for info in store.list(prefix)
            if not _hidden(info.key)}


def committed_data_keys(store: ObjectStore) -> set[str]:
    """The data objects the log keeps (added by a record, not removed since)."""
    return {key for key in live_objects(CommitLog(store).records()) if not _hidden(key)}


class LogFollower:
    """Reads the lake's commit log as it grows, each record once (records are immutable), so
    that a test can poll the store against the log many times a second."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._log = CommitLog(store)
        self._records: dict[int, Record] = {}

    def records(self) -> list[Record]:
        """Every record of the log as of now, oldest first (those not read yet are listed from
        the newest one read on, and read)."""
        newest = max(self._records, default=None)
        after = "" if newest is None else record_key(newest)
        for info in self.store.list(LOG_DIR, start_after=after):
            match = _RECORD.match(info.key)
            if match and int(match.group(1)) not in self._records:
                record = self._log.read(int(match.group(1)))
                assert record is not None, info.key  # records are never deleted
                self._records[record.number] = record
        return [self._records[number] for number in sorted(self._records)]

    def added(self) -> set[str]:
        """Every key any record of the log (as of now) has added."""
        return {key for record in self.records() for key in record.adds}

    def uncommitted_data_keys(self, prefixes: tuple[str, ...] = ("",)) -> set[str]:
        """Data objects (under ``prefixes``) no record has added, listed before the log is
        read: a commit between its data and its record (or what an interrupted one left, until
        the next start)."""
        listed = data_keys(self.store, prefixes)
        return listed - self.added()


def committed_copy(store: ObjectStore, into: Path, database: str | None = None) -> Path:
    """The objects the log keeps (of ``database`` only, if given), copied under their layout
    names into a fresh directory: the lake as binlake's readers see it, readable by the disk
    tests' helpers."""
    for child in sorted(into.glob("*")) if into.exists() else ():
        raise AssertionError(f"{into} is not fresh: {child}")
    for key in live_objects(CommitLog(store).records()):
        if database is not None and not layout_name(key).startswith(f"{database}/"):
            continue
        path = into / layout_name(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(key).data)
    return into


def wait_for_s3_lake(store: ObjectStore, workload: Workload, daemon: DaemonProcess,
                     scratch: Path, timeout: float = 120.0) -> Path:
    """Poll until the committed lake holds exactly the workload's change rows (the daemon must
    stay alive); the last copy read, for the cell-for-cell comparison."""
    expected = {t: c for t, c in workload.expected.items() if c}
    deadline = time.monotonic() + timeout
    while True:
        copy = committed_copy(store, scratch / f"read-{time.monotonic_ns()}", workload.database)
        counts = {t: c for t, c in read_lake(copy, workload.database).counts().items() if c}
        if counts == expected:
            return copy
        daemon.check_alive()
        assert time.monotonic() < deadline, f"{counts} != {expected}"
        time.sleep(1.0)
