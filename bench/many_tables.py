"""Many tables: the same rows from a backlog over 20 and over 2,000 tables, through ``binlake run``.

A time-based flush writes (and fsyncs) a file per touched table, so a backlog spread over many
tables would land as many small files, slowly; while its stream is behind the server's end the
daemon flushes by size instead (docs/operations.md, "When data lands"). This measures it.

Steps, on a sandbox MariaDB 10.11 (the ``devtools.sandbox`` server, as ``python -m bench``):

1. for each table count N (``--tables``, default ``20,2000``), on a sandbox server of its own:
   database ``many_N`` with N tables of workload (a)'s eight mixed columns, created *before*
   the measured binlog range;
2. ``FLUSH BINARY LOGS``, then ``--rows`` rows (default 100k) as autocommit INSERTs of
   ``--rows-per-txn`` rows each (default 5: one transaction each), transaction ``i`` into table
   ``i mod N`` — a backlog;
3. ``--repeats`` runs of the real daemon, ``binlake run`` (``replica.stop_at_end``, filter
   ``many_N.*``, a fresh lake; bench/commands.py) from that range's first file: process wall
   time (start-up included), its peak RSS (``VmHWM``), the Parquet files and bytes it left — and
   the lake must hold exactly the rows logged. Each table count's backlog is on a server of its
   own, all loaded and settled first; then the runs alternate between them (20, 2,000, 20, …),
   so both sides of the ratio are measured under the same conditions of the machine.

The lakes are on a fresh ext4 with a journal, made on a loop device for the run
(bench/lake_fs.py: on this machine's journal-less root ext4, creating the 2,000-table lake's
~12,000 inodes cost several times more right after anything deleted many files, which swung the
ratio 1.43x-2.86x with no change in binlake); without root, or with ``--lake-fs tmpdir``, in
TMPDIR, and the output says which.

The 2,000-vs-20 ratio of the medians is the figure (the target: ≤ 2x, ≤ ~2 files per table,
peak RSS < 300 MB). ``--rows-per-txn 1 --tables 1`` is workload (b)'s one-row
transactions; ``--profile`` runs the daemon under cProfile and prints its top functions (the
per-transaction cost; the ``.pstats`` file is kept beside the JSON). JSON goes to
``bench/results/many_tables-<stamp>.json``.

Full scale (one command): ``python -m bench.many_tables``; smoke: ``--rows 10000 --repeats 1``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pstats
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.sandbox import MARIADB, SandboxServer, start_server

from . import commands, lake_fs, report
from .measure import Measurement
from .workloads import MIXED_COLUMNS, mixed_rows

__all__ = ["load", "main", "settle"]

USER = "bench"
SERVER_ARGS = (
    "--binlog-row-image=FULL",
    "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",  # loading speed only
    "--innodb-buffer-pool-size=256M", "--max-allowed-packet=64M",
)


@dataclass(frozen=True)
class _ProfiledTree(commands.Tree):
    """The checkout, with ``binlake`` run under cProfile writing to ``out``."""

    out: Path = Path("profile.pstats")

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cProfile", "-o", os.fspath(self.out),
                "-m", "replica.cli", *args]


def _log(message: str) -> None:
    print(f"[many_tables {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load(server: SandboxServer, database: str, tables: int, rows: int, per_txn: int,
          seed: int) -> tuple[str, float]:
    """Create the tables, then log the backlog; returns its first binlog file and load time."""
    server.sql(f"CREATE DATABASE {database} CHARACTER SET utf8mb4")
    for low in range(0, tables, 200):
        server.sql("".join(f"CREATE TABLE {database}.t{i:05d} ({MIXED_COLUMNS}) ENGINE=InnoDB;"
                           for i in range(low, min(tables, low + 200))), timeout=1200)
    server.sql("FLUSH BINARY LOGS")
    first = server.sql("SHOW MASTER STATUS")[0][0] or ""
    started = time.perf_counter()
    statements: list[str] = []
    values = mixed_rows(seed, rows)
    for txn in range((rows + per_txn - 1) // per_txn):
        chunk = [next(values) for _ in range(min(per_txn, rows - txn * per_txn))]
        statements.append(f"INSERT INTO {database}.t{txn % tables:05d} VALUES {','.join(chunk)};")
        if len(statements) == 5000:
            server.sql("\n".join(statements), timeout=3600)
            statements.clear()
    if statements:
        server.sql("\n".join(statements), timeout=3600)
    return first, time.perf_counter() - started


def settle(server: SandboxServer, limit_s: float = 120.0) -> float:
    """Wait until InnoDB has written the load's dirty pages (at most ``limit_s``); returns the
    seconds waited. Otherwise the server's background flushing after loading 2,000 tables
    competes with the first measured runs for this machine's two cores."""
    started = time.perf_counter()
    server.sql("SET GLOBAL innodb_max_dirty_pages_pct = 0")
    try:
        while time.perf_counter() - started < limit_s:
            rows = server.sql("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
            if int(rows[0][1] or 0) == 0:
                break
            time.sleep(0.5)
    finally:
        server.sql("SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT")
    return time.perf_counter() - started


def _summary(runs: list[Measurement], rows: int, tables: int) -> dict[str, Any]:
    seconds = statistics.median(m.wall_seconds for m in runs)
    files = runs[-1].report["files"]
    return {
        "tables": tables, "rows": rows, "runs": len(runs),
        "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
        "all_seconds": [round(m.wall_seconds, 3) for m in runs],
        "cpu_seconds": round(statistics.median(m.cpu_seconds for m in runs), 3),
        "peak_rss_mib": round(max(m.peak_rss_kib for m in runs) / 1024, 1),
        "files": files, "files_per_table": round(files / tables, 2),
        "lake_bytes": runs[-1].report["lake_bytes"],
    }


def _profile_text(path: Path, transactions: int, top: int = 30) -> str:
    out = io.StringIO()
    stats = pstats.Stats(os.fspath(path), stream=out)
    total = stats.total_tt  # type: ignore[attr-defined]
    out.write(f"total {total:.2f} s of profiled CPU, {transactions} transactions: "
              f"{total / transactions * 1e6:.1f} us per transaction (profiled)\n")
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


@dataclass
class _Case:
    """One table count's backlog on its own server, and its runs so far."""

    tables: int
    server: SandboxServer
    target: commands.DaemonTarget
    first: str
    load_seconds: float
    runs: list[Measurement]


def _pstats(args: argparse.Namespace, results: dict[str, Any], case: _Case) -> Path:
    """Where ``--profile`` keeps a table count's last run's profile, beside the JSON."""
    results_dir: Path = args.results_dir
    return results_dir / f"many_tables-{results['started']}-{case.tables}.pstats"


def _start_case(tables: int, args: argparse.Namespace, password: str) -> _Case:
    server = start_server("/", kind=MARIADB, extra_args=SERVER_ARGS)
    try:
        server.sql(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{password}';"
                   f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{USER}'@'%';")
        database = f"many_{tables}"
        first, load_seconds = load(server, database, tables, args.rows, args.rows_per_txn,
                                    args.seed)
    except BaseException:
        server.cleanup()
        raise
    _log(f"{tables} tables: {args.rows} rows loaded in {load_seconds:.1f} s")
    return _Case(tables, server, commands.DaemonTarget(server.port, USER, password, database),
                 first, load_seconds, [])


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "started": time.strftime("%Y%m%dT%H%M%S"), "rows": args.rows,
        "rows_per_txn": args.rows_per_txn, "repeats": args.repeats,
        "loadavg_at_start": os.getloadavg(), "cases": [],
    }
    work_dir = Path(tempfile.mkdtemp(prefix="binlake-many-"))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(12)
    tree = commands.Tree(Path(__file__).resolve().parent.parent)
    tree.compile()  # start-up without compiling from source, as bench.run measures it
    env = dict(os.environ)
    cases: list[_Case] = []
    lakes_fs = contextlib.ExitStack()
    try:
        lakes = work_dir
        if args.lake_fs == "ext4":
            try:
                lakes = lakes_fs.enter_context(lake_fs.fresh_ext4(work_dir))
            except lake_fs.LakeFsUnavailable as e:
                _log(f"no fresh ext4 for the lakes ({e}): they go to TMPDIR, whose recent "
                     "deletions can slow the 2,000-table runs (bench/lake_fs.py)")
        results["lake_fs"] = ("a fresh ext4 with a journal, on a loop device"
                              if lakes != work_dir else f"TMPDIR ({lake_fs.describe(lakes)})")
        _log(f"lakes on {results['lake_fs']}")
        # Each table count's backlog is on a server of its own (a run reads its binlog to the
        # end: another count's backlog there would be read, filtered out, and timed too), and
        # the runs alternate between them, repeat by repeat, so that the ratio compares runs
        # made under the same conditions of a shared machine, not minutes apart.
        for tables in args.tables:
            cases.append(_start_case(tables, args, password))
        results["server"] = cases[0].server.version()
        for case in cases:
            _log(f"{case.tables} tables: server settled in {settle(case.server):.1f} s")
        for repeat in range(args.repeats):
            for index, case in enumerate(cases):
                # Every run's lake stays until the end: in TMPDIR (no fresh ext4), deleting the
                # last one's ~12,000 inodes just before a run slowed that run's own creations
                # (bench/lake_fs.py), so the bench measured its own clean-up.
                lake = lakes / f"lake-{case.tables}-{repeat}" / "lake"
                profiled = args.profile and repeat == args.repeats - 1
                case.runs.append(commands.measure_run(
                    _ProfiledTree(tree.root, "profiled", _pstats(args, results, case))
                    if profiled else tree, env,
                    case.target, case.first, lake, (9100 + index) * 10 + repeat, args.rows))
                last = case.runs[-1]
                _log(f"{case.tables} tables, run {repeat + 1}: {last.wall_seconds:.2f} s, "
                     f"{last.peak_rss_kib // 1024} MiB, {last.report['files']} files")
        for case in cases:
            summary = _summary(case.runs, args.rows, case.tables)
            summary["load_seconds"] = round(case.load_seconds, 2)
            if args.profile:
                transactions = (args.rows + args.rows_per_txn - 1) // args.rows_per_txn
                summary["profile"] = _profile_text(_pstats(args, results, case), transactions)
                print(summary["profile"], file=sys.stderr)
            results["cases"].append(summary)
    finally:
        for case in cases:
            case.server.cleanup()
        lakes_fs.close()
        shutil.rmtree(work_dir, ignore_errors=True)
    summaries = results["cases"]
    if len(summaries) >= 2:
        results["ratio_seconds"] = round(summaries[-1]["seconds"] / summaries[0]["seconds"], 2)
        results["ratio_cpu_seconds"] = round(
            summaries[-1]["cpu_seconds"] / summaries[0]["cpu_seconds"], 2)
    return results


def render(results: dict[str, Any]) -> str:
    lines = [f"{results['rows']:,} rows, {results['rows_per_txn']} per transaction, "
             f"binlake run from the backlog (median of {results['repeats']}):",
             "",  # Markdown: a table starts after a blank line
             "| tables | seconds | CPU s | rows/s | peak RSS MiB | files | files/table | Parquet MB |",
             "|---|---|---|---|---|---|---|---|"]
    for c in results["cases"]:
        lines.append(f"| {c['tables']:,} | {c['seconds']:.2f} | {c['cpu_seconds']:.2f} | "
                     f"{c['rows_per_s']:,} | "
                     f"{c['peak_rss_mib']:.0f} | {c['files']:,} | {c['files_per_table']} | "
                     f"{c['lake_bytes'] / 1e6:.1f} |")
    if "lake_fs" in results or "ratio_seconds" in results:
        lines.append("")  # and ends at one
    if "lake_fs" in results:
        lines.append(f"Lakes on {results['lake_fs']}.")
    if "ratio_seconds" in results:
        lines.append(f"Time ratio {results['cases'][-1]['tables']:,} / "
                     f"{results['cases'][0]['tables']:,} tables: {results['ratio_seconds']}x "
                     f"(target <= 2x); CPU seconds {results['ratio_cpu_seconds']}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = report.parser("python -m bench.many_tables", __doc__, "case")
    parser.add_argument("--tables", default="20,2000",
                        help="comma-separated table counts (default 20,2000)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows per case (100000)")
    parser.add_argument("--rows-per-txn", type=int, default=5, help="rows per transaction (5)")
    parser.add_argument("--profile", action="store_true",
                        help="run the last repeat under cProfile and print the top functions")
    parser.add_argument("--lake-fs", choices=("ext4", "tmpdir"), default="ext4",
                        help="where the lakes go: a fresh journaled ext4 on a loop device (root; "
                             "the default, TMPDIR when it cannot be made) or TMPDIR")
    args = parser.parse_args(argv)
    args.tables = [int(t) for t in args.tables.split(",")]
    results = run(args)
    report.save(args.results_dir, "many_tables", results, render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
