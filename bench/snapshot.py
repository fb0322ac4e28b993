"""Snapshot speed: ``binlake snapshot`` of a table of workload (a)'s shape beside
``mariadb-dump --single-transaction --quick`` (on MySQL: its ``mysqldump``, same options), its
peak RSS, and what it costs a writer.

Part of ``python -m bench`` (MariaDB 10.11, then MySQL 9.7 when the test bed's chroot is
built); on its own (its own sandbox server, the full-scale 2M rows by default, ``--smoke`` for
20k rows, ``--mysql`` for MySQL 9.7)::

    python -m bench.snapshot [--rows N] [--repeats N] [--writer-rate R] [--writer-seconds S]
                             [--smoke] [--mysql]

Steps, on the benchmark's server:

1. ``bench.snap_src``: ``2M × scale`` rows of the mixed table (the columns of workload (a)),
   loaded by ``INSERT … SELECT`` from the sequence engine in 100k-row transactions;
2. ``repeats`` rounds, each ``mariadb-dump --single-transaction --quick bench snap_src >
   /dev/null`` (the reference) and then ``binlake snapshot --config FILE --table
   bench.snap_src`` into a fresh lake as a subprocess (the product's own command, so its rate,
   RSS and chunking are what a user gets), with the server otherwise idle: interleaved, so a
   load that comes and goes on a shared machine weighs on both alike; the medians are the
   rates compared, and each round's ratio is kept (``vs_mariadb_dump_rounds``);
3. a writer alone for a few seconds: autocommit UPDATEs of random rows of the table at
   :data:`WRITER_RATE` commits/s (an OLTP load that leaves the server room), each commit's
   latency as the client sees it;
4. ``binlake snapshot`` once more with the same writer beside it — its commit latency during a
   snapshot — and then every row of the table must be in the lake: as an ``R`` row, or, if the
   writer changed it during the snapshot, as that change.

``rows/s`` = table rows / process wall time (``binlake snapshot`` includes its interpreter start,
connecting, the stream beside the snapshot and the final commit; the dump includes its own
start). The writer's worst commit latency with and without the snapshot says whether the
snapshot's reads hurt writers (it takes no locks: see docs/snapshots.md). With the writer,
``binlake snapshot`` also lands the writer's transactions as it goes (a chunk lands once the
stream has passed its binlog point), so that run's time is the snapshot's and the stream's.
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

from devtools.sandbox import MYSQL, in_root_argv
from replica.core.connection import Connection, ConnectOptions

from .measure import MeasureError, run_measured
from .workloads import DATABASE, MIXED_COLUMNS

if TYPE_CHECKING:
    from .run import Bench

__all__ = ["TABLE", "lake_rows", "load_table", "measure", "write_config"]

TABLE = "snap_src"
#: Commits per second of the concurrent writer.
WRITER_RATE = 200.0
_BATCH = 100_000


def load_table(bench: Bench, rows: int) -> float:
    started = time.perf_counter()
    bench.server.sql(f"CREATE TABLE {DATABASE}.{TABLE} ({MIXED_COLUMNS}) ENGINE=InnoDB")
    for low in range(1, rows + 1, _BATCH):
        high = min(rows, low + _BATCH - 1)
        if bench.server.kind == MYSQL:  # no sequence engine: a recursive CTE counts instead
            prefix = f"SET SESSION cte_max_recursion_depth = {_BATCH + 1}; "
            source = (f"(WITH RECURSIVE n (seq) AS (SELECT {low} UNION ALL SELECT seq + 1 "
                      f"FROM n WHERE seq < {high}) SELECT seq FROM n) AS n")
        else:
            prefix, source = "", f"{DATABASE}.seq_{low}_to_{high}"
        bench.server.sql(
            f"{prefix}INSERT INTO {DATABASE}.{TABLE} SELECT seq, seq * 7919, "
            "CONCAT('name-', seq), (seq MOD 1000000) / 100, TIMESTAMP'2024-01-01 00:00:00' + "
            "INTERVAL seq * 1234 MICROSECOND, seq / 7, REPEAT('lorem ipsum ', 1 + seq MOD 20), "
            f"ELT(1 + seq MOD 4, 'new', 'active', 'suspended', 'closed') FROM {source}",
            timeout=3600)
    return time.perf_counter() - started


def _dump_argv(bench: Bench) -> tuple[str, list[str]]:
    """The flavor's own dump tool (its name in the results, and its command line): MySQL's
    ``mysqldump`` from the server's root for MySQL, the host's ``mariadb-dump`` for MariaDB."""
    server = bench.server
    if server.kind == MYSQL:
        return "mysqldump", in_root_argv(server.root, [
            "mysqldump", "--no-defaults", f"--socket={server.inside(server.socket)}",
            "--user=root", "--single-transaction", "--quick", "--set-gtid-purged=OFF",
            DATABASE, TABLE])
    return "mariadb-dump", ["mariadb-dump", "--no-defaults", f"--socket={server.socket}",
                            "--user=root", "--single-transaction", "--quick", DATABASE, TABLE]


class _Writer:
    """Autocommit UPDATEs of random rows in a thread at ``rate`` commits/s (an OLTP load, not
    one that saturates the server), until stopped; latencies in seconds."""

    def __init__(self, bench: Bench, rows: int, rate: float) -> None:
        self._options = ConnectOptions(unix_socket=os.fspath(bench.server.socket), user="root",
                                       tls_mode="disabled")
        self._rows = rows
        self._interval = 1.0 / rate if rate > 0 else 0.0
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
            due = time.perf_counter()
            while not self._stop.is_set():
                key = rng.randint(1, self._rows)
                started = time.perf_counter()
                await conn.execute(f"UPDATE {DATABASE}.{TABLE} SET big = big + 1 "
                                   f"WHERE id = {key}")
                self.latencies.append(time.perf_counter() - started)
                due += self._interval
                await trio.sleep(max(0.0, due - time.perf_counter()))

    def __enter__(self) -> _Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def summary(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": f"{type(self.error).__name__}: {self.error}"}
        return _latency_summary(self.latencies)


def _latency_summary(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    if not ordered:
        return {"commits": 0}
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"commits": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(p99 * 1000, 3), "max_ms": round(ordered[-1] * 1000, 3)}


def write_config(bench: Bench, lake: Path, path: Path, server_id: int) -> None:
    # MySQL over its unix socket, as its dump connects (TCP without TLS would make
    # caching_sha2_password fetch the server's RSA key on every connection).
    where = (f'socket = "{bench.server.socket}"\n' if bench.server.kind == MYSQL else
             f'host = "127.0.0.1"\nport = {bench.server.port}\n')
    path.write_text(
        "[server]\n"
        f'{where}user = "bench"\n'
        'tls_mode = "disabled"\n'
        f"[replica]\nserver_id = {server_id}\n"
        '[start]\nfrom = "latest"\n'
        f'[filter]\ninclude = ["{DATABASE}.{TABLE}"]\n'
        f'[lake]\npath = "{lake}"\n'
        '[metrics]\naddress = ""\n')


def lake_rows(lake: Path) -> tuple[int, int]:
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


def measure(bench: Bench, rows: int, writer_seconds: float, server_id: int,
            repeats: int = 1, writer_rate: float = WRITER_RATE) -> dict[str, Any]:
    """Load the table; ``repeats`` rounds of a mariadb-dump run then a ``binlake snapshot``
    run (interleaved, so a load that comes and goes on the machine weighs on both alike; the
    medians of each are the rates compared, and each round's ratio is kept too); the writer
    alone for ``writer_seconds``; one more ``binlake snapshot`` with the writer beside it (its
    latency, and the lake's rows checked with changes landing during the snapshot)."""
    out: dict[str, Any] = {"rows": rows, "load_seconds": round(load_table(bench, rows), 2)}
    bench.log(f"snapshot: {rows} rows loaded in {out['load_seconds']:.1f} s")

    tool, dump = _dump_argv(bench)
    out["dump_tool"] = tool
    env = dict(bench.env, BINLAKE_SERVER_PASSWORD=bench.password)

    def snapshot(attempt: int, writer: _Writer | None) -> dict[str, Any]:
        work = Path(tempfile.mkdtemp(prefix="snapshot-", dir=bench.work_dir))
        lake, config = work / "lake", work / "binlake.toml"
        write_config(bench, lake, config, server_id + attempt)
        argv = [sys.executable, "-m", "replica.cli", "snapshot", "--config", os.fspath(config),
                "--table", f"{DATABASE}.{TABLE}"]
        try:
            if writer is None:
                m = run_measured(argv, env=env, stdout_to_devnull=True)
            else:
                with writer:
                    m = run_measured(argv, env=env, stdout_to_devnull=True)
            reads, landed = lake_rows(lake)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return {"seconds": m.wall_seconds, "peak_rss_mib": m.peak_rss_kib / 1024,
                "cpu_seconds": m.cpu_seconds, "r_rows": reads, "rows_in_lake": landed}

    dumps: list[Any] = []
    runs: list[dict[str, Any]] = []
    dump_error = snapshot_error = None
    for attempt in range(repeats):
        if dump_error is None:
            try:
                dumps.append(run_measured(dump, stdout_to_devnull=True))
            except MeasureError as exc:
                dump_error = str(exc)
        if snapshot_error is None:
            try:
                runs.append(snapshot(attempt, None))
            except MeasureError as exc:
                snapshot_error = str(exc)
    if dump_error is None:
        seconds = statistics.median(m.wall_seconds for m in dumps)
        out["mariadb-dump"] = {"seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
                               "peak_rss_mib": round(max(m.peak_rss_kib for m in dumps) / 1024,
                                                     1),
                               "runs_seconds": [round(m.wall_seconds, 3) for m in dumps]}
    else:
        out["mariadb-dump"] = {"error": dump_error}

    with _Writer(bench, rows, writer_rate) as alone:
        time.sleep(writer_seconds)
    out["writer_alone"] = alone.summary()

    try:
        if snapshot_error is not None:
            raise MeasureError(snapshot_error)
        seconds = statistics.median(r["seconds"] for r in runs)
        out["binlake-snapshot"] = {
            "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
            "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs), 1),
            "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in runs), 3),
            "r_rows": runs[-1]["r_rows"], "rows_in_lake": runs[-1]["rows_in_lake"],
            "runs_seconds": [round(r["seconds"], 3) for r in runs]}
        beside = _Writer(bench, rows, writer_rate)
        run = snapshot(repeats, beside)
        out["binlake-snapshot-with-writer"] = {
            "seconds": round(run["seconds"], 3), "rows_per_s": round(rows / run["seconds"]),
            "peak_rss_mib": round(run["peak_rss_mib"], 1), "r_rows": run["r_rows"],
            "rows_in_lake": run["rows_in_lake"]}
        for name, found in (("binlake-snapshot", {r["rows_in_lake"] for r in runs}),
                            ("binlake-snapshot-with-writer", {run["rows_in_lake"]})):
            if found != {rows}:
                out[name]["rows_mismatch"] = sorted(found - {rows})[0]
        out["writer_during_snapshot"] = beside.summary()
    except MeasureError as exc:
        out["binlake-snapshot"] = {"error": str(exc)}
    dump_rate = out["mariadb-dump"].get("rows_per_s")
    snap_rate = out["binlake-snapshot"].get("rows_per_s")
    if dump_rate and snap_rate:
        out["vs_mariadb_dump"] = round(snap_rate / dump_rate, 2)
        out["vs_mariadb_dump_rounds"] = [round(d.wall_seconds / r["seconds"], 2)
                                         for d, r in zip(dumps, runs, strict=True)]
    bench.log(f"snapshot: binlake {snap_rate} rows/s, {tool} {dump_rate} rows/s, "
              f"peak RSS {out['binlake-snapshot'].get('peak_rss_mib')} MiB")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.snapshot``: this step alone on its own sandbox MariaDB 10.11."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415

    from devtools.sandbox import MARIADB, start_server  # noqa: PLC0415

    from . import report  # noqa: PLC0415
    from .run import SERVER_ARGS, Bench, BenchOptions, start_mysql  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="python -m bench.snapshot",
        description="binlake snapshot vs mariadb-dump --single-transaction --quick on a table "
                    "of workload (a)'s shape, with a concurrent writer's commit latency.")
    parser.add_argument("--rows", type=int, default=2_000_000, help="table rows (default 2M)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each reader (median)")
    parser.add_argument("--writer-seconds", type=float, default=10.0,
                        help="how long the writer runs alone (its latency without a snapshot)")
    parser.add_argument("--writer-rate", type=float, default=WRITER_RATE,
                        help=f"the writer's commits per second (default {WRITER_RATE:g})")
    parser.add_argument("--smoke", action="store_true",
                        help="20k rows, 1 run each, the writer alone for 1 s")
    parser.add_argument("--mysql", action="store_true",
                        help="on a sandbox MySQL 9.7 (the test bed's chroot) beside its "
                             "mysqldump, instead of MariaDB 10.11 beside mariadb-dump")
    args = parser.parse_args(argv)
    rows = 20_000 if args.smoke else args.rows
    repeats = 1 if args.smoke else max(1, args.repeats)
    options = BenchOptions(smoke=args.smoke, install_pmr=False)
    work_dir = Path(tempfile.mkdtemp(prefix="binlake-bench-snapshot-"))
    server = start_mysql() if args.mysql else start_server("/", kind=MARIADB,
                                                            extra_args=SERVER_ARGS)
    try:
        bench = Bench(options, server, work_dir)
        bench.prepare()
        results: dict[str, Any] = {
            "options": {"repeats": repeats, "smoke": args.smoke},
            "server": {"version": server.version(), "args": list(server.extra_args)},
            "snapshot_mysql" if args.mysql else "snapshot": measure(
                bench, rows, 1.0 if args.smoke else args.writer_seconds,
                7000 + os.getpid() % 1000 * 5, repeats, args.writer_rate)}
    finally:
        server.cleanup()
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(results["snapshot_mysql" if args.mysql else "snapshot"], indent=2))
    print(report.render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
