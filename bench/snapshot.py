"""Snapshot speed: ``binlake snapshot`` of a table of workload (a)'s shape beside
``mariadb-dump --single-transaction --quick``, its peak RSS, and what it costs a writer.

Steps, on the benchmark's server:

1. ``bench.snap_src``: ``2M × scale`` rows of the mixed table (the columns of workload (a)),
   loaded by ``INSERT … SELECT`` from the sequence engine in 100k-row transactions;
2. ``mariadb-dump --single-transaction --quick bench snap_src > /dev/null`` — the reference rate;
3. a writer alone for a few seconds: autocommit UPDATEs of random rows of the table, each
   commit's latency as the client sees it;
4. ``binlake snapshot --config FILE --table bench.snap_src`` into a fresh lake as a subprocess
   (the product's own command, so its rate, RSS and chunking are what a user gets) while the
   same writer runs — then every row of the table must be in the lake: as an ``R`` row, or,
   if the writer changed it during the snapshot, as that change.

``rows/s`` = table rows / process wall time (``binlake snapshot`` includes its interpreter start,
connecting, streaming the writer's changes beside the snapshot and the final commit; the dump
includes its own start). The writer's worst commit latency with and without the snapshot says
whether the snapshot's reads hurt writers (it takes no locks: see the README's Snapshots).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import trio

from replica.core.connection import Connection, ConnectOptions

from .measure import MeasureError, run_measured
from .workloads import DATABASE, MIXED_COLUMNS

if TYPE_CHECKING:
    from .run import Bench

__all__ = ["measure", "TABLE"]

TABLE = "snap_src"
_BATCH = 100_000


def _load(bench: Bench, rows: int) -> float:
    started = time.perf_counter()
    bench.server.sql(f"CREATE TABLE {DATABASE}.{TABLE} ({MIXED_COLUMNS}) ENGINE=InnoDB")
    for low in range(1, rows + 1, _BATCH):
        high = min(rows, low + _BATCH - 1)
        bench.server.sql(
            f"INSERT INTO {DATABASE}.{TABLE} SELECT seq, seq * 7919, CONCAT('name-', seq), "
            "(seq MOD 1000000) / 100, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq * 1234 "
            "MICROSECOND, seq / 7, REPEAT('lorem ipsum ', 1 + seq MOD 20), ELT(1 + seq MOD 4, "
            f"'new', 'active', 'suspended', 'closed') FROM {DATABASE}.seq_{low}_to_{high}",
            timeout=3600)
    return time.perf_counter() - started


class _Writer:
    """Autocommit UPDATEs of random rows in a thread, until stopped; latencies in seconds."""

    def __init__(self, bench: Bench, rows: int) -> None:
        self._options = ConnectOptions(unix_socket=os.fspath(bench.server.socket), user="root",
                                       tls_mode="disabled")
        self._rows = rows
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-writer", daemon=True)

    def _run(self) -> None:
        try:
            trio.run(self._write)
        except BaseException as exc:  # reported with the results, never swallowed
            self.error = exc

    async def _write(self) -> None:
        rng = random.Random(7)
        async with await Connection.open(self._options) as conn:
            while not self._stop.is_set():
                key = rng.randint(1, self._rows)
                started = time.perf_counter()
                await conn.execute(f"UPDATE {DATABASE}.{TABLE} SET big = big + 1 "
                                   f"WHERE id = {key}")
                self.latencies.append(time.perf_counter() - started)

    def __enter__(self) -> _Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def summary(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": f"{type(self.error).__name__}: {self.error}"}
        ordered = sorted(self.latencies)
        if not ordered:
            return {"commits": 0}
        p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
        return {"commits": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 3),
                "p99_ms": round(p99 * 1000, 3), "max_ms": round(ordered[-1] * 1000, 3)}


def _config(bench: Bench, lake: Path, path: Path, server_id: int) -> None:
    path.write_text(
        "[server]\n"
        f'host = "127.0.0.1"\nport = {bench.server.port}\nuser = "bench"\n'
        'tls_mode = "disabled"\n'
        f"[replica]\nserver_id = {server_id}\n"
        '[start]\nfrom = "latest"\n'
        f'[filter]\ninclude = ["{DATABASE}.{TABLE}"]\n'
        f'[lake]\npath = "{lake}"\n'
        '[metrics]\naddress = ""\n')


def _lake_rows(lake: Path) -> tuple[int, int]:
    """``(R rows, distinct ids)`` of the table in the lake (visible Parquet files only, as Spark
    reads them). A row the writer changed during the snapshot lands by its change (``U``, full
    image) instead of an ``R``, so the ids, not the R rows, must number the table's rows."""
    root = lake / DATABASE / TABLE
    reads = 0
    ids: set[int] = set()
    for path in root.rglob("*.parquet"):
        if any(part[0] in "_." for part in path.relative_to(root).parts):
            continue
        table = pq.read_table(path, columns=["_op", "id"])
        ops = table.column("_op").to_pylist()
        reads += ops.count("R")
        ids.update(table.column("id").to_pylist())
    return reads, len(ids)


def measure(bench: Bench, rows: int, writer_seconds: float, server_id: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": rows, "load_seconds": round(_load(bench, rows), 2)}
    bench.log(f"snapshot: {rows} rows loaded in {out['load_seconds']:.1f} s")

    dump = ["mariadb-dump", "--no-defaults", f"--socket={bench.server.socket}", "--user=root",
            "--single-transaction", "--quick", DATABASE, TABLE]
    try:
        m = run_measured(dump, stdout_to_devnull=True)
        out["mariadb-dump"] = {"seconds": round(m.wall_seconds, 3),
                               "rows_per_s": round(rows / m.wall_seconds),
                               "peak_rss_mib": round(m.peak_rss_kib / 1024, 1)}
    except MeasureError as exc:
        out["mariadb-dump"] = {"error": str(exc)}

    with _Writer(bench, rows) as alone:
        time.sleep(writer_seconds)
    out["writer_alone"] = alone.summary()

    work = Path(tempfile.mkdtemp(prefix="snapshot-", dir=bench.work_dir))
    lake, config = work / "lake", work / "binlake.toml"
    _config(bench, lake, config, server_id)
    argv = [sys.executable, "-m", "replica.cli", "snapshot", "--config", os.fspath(config),
            "--table", f"{DATABASE}.{TABLE}"]
    env = dict(bench.env, BINLAKE_SERVER_PASSWORD=bench.password)
    try:
        with _Writer(bench, rows) as beside:
            m = run_measured(argv, env=env, stdout_to_devnull=True)
        reads, landed = _lake_rows(lake)
        out["binlake-snapshot"] = {
            "seconds": round(m.wall_seconds, 3), "rows_per_s": round(rows / m.wall_seconds),
            "peak_rss_mib": round(m.peak_rss_kib / 1024, 1),
            "cpu_seconds": round(m.cpu_seconds, 3), "r_rows": reads, "rows_in_lake": landed}
        if landed != rows:
            out["binlake-snapshot"]["rows_mismatch"] = landed
        out["writer_during_snapshot"] = beside.summary()
    except MeasureError as exc:
        out["binlake-snapshot"] = {"error": str(exc)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    dump_rate = out["mariadb-dump"].get("rows_per_s")
    snap_rate = out["binlake-snapshot"].get("rows_per_s")
    if dump_rate and snap_rate:
        out["vs_mariadb_dump"] = round(snap_rate / dump_rate, 2)
    bench.log(f"snapshot: binlake {snap_rate} rows/s, mariadb-dump {dump_rate} rows/s, "
              f"peak RSS {out['binlake-snapshot'].get('peak_rss_mib')} MiB")
    return out
