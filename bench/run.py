"""The benchmark run: one sandbox MariaDB 10.11, the workloads, every peer on the same binlog.

Order (each step only appends to the binlog, so what a step measures is exactly its workload):

1. start the server (ROW, FULL metadata, CRC32, annotate events on), a ``bench`` replication user;
2. for each workload (a)–(d): ``FLUSH BINARY LOGS``, load it, then ``repeats`` rounds of every
   peer reading from the workload's first binlog file to the end of binlog (the Python peer,
   ``mariadb-binlog`` on the files, binlake's wire fetch and decode as components, the real
   daemon ``binlake run`` into a fresh lake, ``binlake decode`` in both formats on the files —
   and the same ``binlake decode`` of the ``--baseline-rev`` commit);
3. ``binlake run`` over an empty range: its start-up and stop, part of every figure above;
   memory: ``binlake run`` (and decode only) of the whole backlog (a)–(d) from the first file,
   then of a single 2M-row transaction;
4. snapshot: ``binlake snapshot`` of a 2M-row table of workload (a)'s shape beside
   ``mariadb-dump``, with a concurrent writer's commit latency (``bench/snapshot.py``);
5. semi-sync commit latency with a real MariaDB replica, binlake ACKing on receive, binlake
   ACKing after landing, and no replica (asynchronous, the floor);
6. the tables, the targets (PASS/MISS, never an assertion: bench/targets.py), and JSON
   under ``bench/results/`` (``python -m bench.report --readme`` turns it into docs/benchmarks.md's
   table).
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.sandbox import MARIADB, MYSQL, SandboxServer, start_server

from . import baseline, commands, profile, report, s3_lake, semisync, snapshot, targets
from .measure import MeasureError, Measurement, run_measured
from .pmr_venv import ensure_pmr_venv, pmr_version
from .workloads import DATABASE, Workload, big_transaction, standard_workloads

__all__ = ["BenchOptions", "run"]

BENCH_USER = "bench"
#: The peers of the throughput table, in display order (titles: report.TITLES).
PEERS = ("pmr", "mariadb-binlog", "binlake-fetch", "binlake-decode", "binlake-run",
         "binlake-run-s3", "binlake-decode-text", "binlake-decode-open-protocol", "baseline-decode-text",
         "baseline-decode-open-protocol")
_DECODE_FORMATS = {"decode-text": "text", "decode-open-protocol": "open-protocol"}
#: What ``--decode-only`` measures, alternated round by round.
DECODE_PEERS = ("binlake-decode-text", "baseline-decode-text", "binlake-decode-open-protocol",
                "baseline-decode-open-protocol")
#: What ``--one-row`` measures on workload (b): the peer, binlake's decode only and its daemon,
#: and the daemon of ``--baseline-rev`` (before/after a change, in the same run).
ONE_ROW_PEERS = ("pmr", "binlake-decode", "binlake-run", "baseline-run")
#: What ``--s3-only`` measures on workload (a): the daemon into a directory and into S3.
S3_PEERS = ("binlake-run", "binlake-run-s3")
#: The workload the S3 peer lands (the others' figures would tell the same story, slower).
S3_WORKLOAD = "a_bulk_insert"
SERVER_ARGS = (
    "--binlog-annotate-row-events=ON",
    "--binlog-row-image=FULL",
    # Loading speed only; every peer reads the same finished binlog.
    "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
    "--innodb-buffer-pool-size=512M", "--max-allowed-packet=256M",
)


#: The same for the MySQL 9.7 snapshot step (it has no annotate events; GTIDs are on).
MYSQL_SERVER_ARGS = (
    "--binlog-row-image=FULL",
    "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
    "--innodb-buffer-pool-size=512M", "--max-allowed-packet=256M",
)


def start_mysql() -> SandboxServer:
    """A sandbox MySQL 9.7 from the test bed's chroot (``python -m tests.servers.provision``
    builds it); SandboxError when it is not built."""
    from devtools.sandbox import SandboxError  # noqa: PLC0415
    from tests.servers.chroot import SID_MYSQL, ready_chroot  # noqa: PLC0415

    root = ready_chroot(SID_MYSQL)
    if root is None:
        raise SandboxError("the MySQL 9.7 chroot is not built (python -m tests.servers.provision)")
    return start_server(root, kind=MYSQL, extra_args=MYSQL_SERVER_ARGS)


@dataclass(frozen=True)
class BenchOptions:
    scale: float = 1.0
    repeats: int = 3
    seed: int = 20241121
    smoke: bool = False
    install_pmr: bool = True
    memory: bool = True
    semisync: bool = True
    semisync_commits: int = 2000
    snapshot: bool = True
    #: How long the writer runs alone, for the latency figure without a snapshot.
    snapshot_writer_seconds: float = 10.0
    profile: bool = False
    #: The commit whose ``binlake decode`` is measured beside the checkout's (None: skip).
    baseline_rev: str | None = None
    #: Rows of the single-transaction memory workload (None: 2M × scale).
    big_rows: int | None = None
    #: Only ``binlake decode`` (both formats, checkout and baseline) on workload (a).
    decode_only: bool = False
    #: Only workload (b) (one-row transactions), with ``ONE_ROW_PEERS``.
    one_row: bool = False
    #: ``binlake run`` into S3 (the test bed's Ceph gateway) beside the local lake on (a).
    s3: bool = True
    #: Only workload (a), with ``S3_PEERS``.
    s3_only: bool = False
    #: A peer whose run took longer than this gets no further rounds (its median is over the
    #: rounds it had); keeps a full run bounded when something is pathologically slow.
    repeat_budget_seconds: float = 60.0
    results_dir: Path = Path(__file__).resolve().parent / "results"


_server_ids = itertools.count(7000 + os.getpid() % 1000 * 5)


class Bench:
    """State shared by the steps: the server, the user's password, the peers' command lines."""

    def __init__(self, options: BenchOptions, server: SandboxServer, work_dir: Path) -> None:
        self.options = options
        self.server = server
        self.work_dir = work_dir
        self.password = secrets.token_hex(12)
        self.pmr_python = ensure_pmr_venv(install=options.install_pmr)
        self.env = dict(os.environ, BENCH_PASSWORD=self.password)
        self.tree = commands.Tree(Path(__file__).resolve().parent.parent)
        self.tree.compile()
        self.baseline: commands.Tree | None = None
        self.target = commands.DaemonTarget(server.port, BENCH_USER, self.password, DATABASE)
        self.s3: s3_lake.S3Gateway | None = None

    def s3_gateway(self) -> s3_lake.S3Gateway:
        """The S3 peer's gateway, started on first use (closed by :meth:`close`)."""
        if self.s3 is None:
            self.log("starting the S3 gateway (Ceph RGW)")
            self.s3 = s3_lake.S3Gateway.start()
            self.log(f"S3 gateway at {self.s3.endpoint}")
        return self.s3

    def close(self) -> None:
        if self.s3 is not None:
            self.s3.close()

    def log(self, message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    # --- server -----------------------------------------------------------------------------

    def prepare(self) -> None:
        # utf8mb4 as production tables are (the sandbox's --no-defaults server says latin1).
        monitor = "REPLICATION CLIENT" if self.server.kind == MYSQL else "BINLOG MONITOR"
        self.server.sql(
            f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;"
            f"CREATE USER '{BENCH_USER}'@'%' IDENTIFIED BY '{self.password}';"
            f"GRANT REPLICATION SLAVE, {monitor}, SELECT ON *.* TO '{BENCH_USER}'@'%';"
        )

    def current_file(self) -> str:
        rows = self.server.sql("SHOW MASTER STATUS")
        return rows[0][0] or ""

    def binlog_paths(self, first: str) -> list[str]:
        names = [r[0] for r in self.server.sql("SHOW BINARY LOGS") if r[0] is not None]
        return [os.fspath(self.server.datadir / n) for n in names if n >= first]

    def binlog_bytes(self, first: str) -> int:
        return sum(os.path.getsize(p) for p in self.binlog_paths(first))

    def load(self, workload: Workload) -> float:
        started = time.perf_counter()
        if workload.setup:
            self.server.sql(workload.setup)
        # Batches keep the client's stdin moderate; each statement is its own transaction.
        for start in range(0, len(workload.statements), 5000):
            chunk = workload.statements[start:start + 5000]
            self.server.sql("\n".join(chunk), timeout=3600)
        return time.perf_counter() - started

    # --- peers ------------------------------------------------------------------------------

    def _binlake_argv(self, mode: str, first: str) -> list[str]:
        return [sys.executable, "-m", "bench.binlake_reader", mode, "--port",
                str(self.server.port), "--user", BENCH_USER, "--server-id",
                str(next(_server_ids)), "--file", first]

    def measure_peer(self, peer: str, first: str, rows: int) -> Measurement | None:
        """One run of ``peer`` over the binlog from ``first`` to the end (``rows`` logged)."""
        if peer == "pmr":
            if self.pmr_python is None:
                return None
            argv = [os.fspath(self.pmr_python), os.fspath(Path(__file__).parent / "pmr_reader.py"),
                    "--port", str(self.server.port), "--user", BENCH_USER,
                    "--server-id", str(next(_server_ids)), "--file", first]
            return run_measured(argv, env=self.env)
        if peer == "mariadb-binlog":
            argv = ["mariadb-binlog", "--no-defaults", "--verbose",
                    "--base64-output=decode-rows", *self.binlog_paths(first)]
            return run_measured(argv, stdout_to_devnull=True)
        origin, _, mode = peer.partition("-")
        if mode in _DECODE_FORMATS:
            tree = self.tree if origin == "binlake" else self.baseline
            if tree is None:
                return None
            return commands.measure_decode(tree, self.env, _DECODE_FORMATS[mode],
                                           self.binlog_paths(first))
        if mode == "run-s3":
            work = Path(tempfile.mkdtemp(prefix="s3-", dir=self.work_dir))
            try:
                return s3_lake.measure_run_s3(self.tree, self.env, self.target, first,
                                              self.s3_gateway(), work, next(_server_ids), rows)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        if mode == "run":
            tree = self.tree if origin == "binlake" else self.baseline
            if tree is None:
                return None
            lake = Path(tempfile.mkdtemp(prefix="lake-", dir=self.work_dir)) / "lake"
            try:
                return commands.measure_run(tree, self.env, self.target, first, lake,
                                            next(_server_ids), rows)
            finally:
                shutil.rmtree(lake.parent, ignore_errors=True)
        return run_measured(self._binlake_argv(mode, first), env=self.env)

    def throughput(self, workload: Workload, first: str) -> dict[str, Any]:
        peers_measured: tuple[str, ...] = (DECODE_PEERS if self.options.decode_only
                          else ONE_ROW_PEERS if self.options.one_row
                          else S3_PEERS if self.options.s3_only else PEERS)
        if not (self.options.s3 and workload.name == S3_WORKLOAD):
            peers_measured = tuple(p for p in peers_measured if p != "binlake-run-s3")
        runs: dict[str, list[Measurement]] = {
            peer: [] for peer in dict.fromkeys(PEERS + peers_measured)}
        errors: dict[str, str] = {}
        for round_no in range(self.options.repeats):
            for peer in peers_measured:
                if peer in errors:
                    continue
                try:
                    measurement = self.measure_peer(peer, first, workload.rows)
                except MeasureError as exc:
                    errors[peer] = str(exc)
                    self.log(f"{workload.name}: {peer} failed: {exc}")
                    continue
                if measurement is None:
                    continue
                runs[peer].append(measurement)
                if _seconds(measurement) > self.options.repeat_budget_seconds:
                    errors.setdefault(peer, "")  # no more rounds; keeps what it has
                self.log(f"{workload.name} round {round_no + 1}: {peer} "
                         f"{_seconds(measurement):.2f} s, {measurement.peak_rss_kib // 1024} MiB")
        peers: dict[str, Any] = {}
        for peer, measured in runs.items():
            if peer not in peers_measured:
                peers[peer] = {"skipped": self._not_measured(peer, workload)}
                continue
            if measured:
                peers[peer] = summarize(measured, workload.rows)
                if len(measured) < self.options.repeats:
                    peers[peer]["note"] = (f"{len(measured)} of {self.options.repeats} rounds: "
                                           "a run exceeded the repeat budget")
            elif peer in errors:
                peers[peer] = {"error": errors[peer]}
            elif peer == "pmr":
                peers[peer] = {"skipped": "python-mysql-replication venv unavailable"}
            else:
                peers[peer] = {"skipped": "no --baseline-rev"}
        return {"rows": workload.rows, "description": workload.description,
                "binlog_bytes": self.binlog_bytes(first), "peers": peers}

    def _not_measured(self, peer: str, workload: Workload) -> str:
        if self.options.decode_only or self.options.one_row or \
                (self.options.s3_only and peer not in S3_PEERS):
            return ("--decode-only" if self.options.decode_only else
                    "--one-row" if self.options.one_row else "--s3-only")
        return "--no-s3" if not self.options.s3 else "workload (a) only"

    def startup(self) -> dict[str, Any]:
        """``binlake run`` over an empty binlog range (a fresh file, stop_at_end): what start-up,
        connecting and stopping add to every end-to-end figure, ``repeats`` times."""
        self.server.sql("FLUSH BINARY LOGS")
        first = self.current_file()
        runs: list[Measurement] = []
        try:
            for _ in range(self.options.repeats):
                measured = self.measure_peer("binlake-run", first, 0)
                assert measured is not None
                runs.append(measured)
        except MeasureError as exc:
            return {"error": str(exc)}
        seconds = statistics.median(m.wall_seconds for m in runs)
        self.log(f"binlake run over nothing: {seconds:.2f} s")
        return {"median_seconds": round(seconds, 3),
                "median_cpu_seconds": round(statistics.median(m.cpu_seconds for m in runs), 3),
                "peak_rss_mib": round(max(m.peak_rss_kib for m in runs) / 1024, 1)}

    # --- memory -----------------------------------------------------------------------------

    def memory(self, name: str, first: str, rows: int, modes: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": rows, "binlog_bytes": self.binlog_bytes(first)}
        for mode in modes:
            peer = f"binlake-{mode}"
            try:
                measurement = self.measure_peer(peer, first, rows)
            except MeasureError as exc:
                out[peer] = {"error": str(exc)}
                continue
            assert measurement is not None
            out[peer] = summarize([measurement], rows)
            self.log(f"memory {name}: {peer} {_seconds(measurement):.1f} s, "
                     f"peak RSS {measurement.peak_rss_kib // 1024} MiB")
        return out

    # --- profile ---------------------------------------------------------------------------

    def profile_decode(self, first: str, out_dir: Path, stamp: str) -> str:
        """cProfile (and py-spy) of binlake decode over ``first``…end; returns the summary's path."""
        return profile.profile_decode(self._binlake_argv("decode", first), self.env, out_dir,
                                      stamp)


def _seconds(m: Measurement) -> float:
    """The stream time the program reports (imports excluded), else the process wall time."""
    return float(m.report.get("seconds", m.wall_seconds))


def _cpu_seconds(m: Measurement) -> float:
    """CPU of the stream part as the program reports it, else of the whole process. Less
    sensitive than wall time to other work sharing the machine."""
    return float(m.report.get("cpu_seconds", m.cpu_seconds))


def summarize(runs: list[Measurement], expected_rows: int) -> dict[str, Any]:
    seconds = statistics.median(_seconds(m) for m in runs)
    cpu = statistics.median(_cpu_seconds(m) for m in runs)
    summary: dict[str, Any] = {
        "runs": [{"seconds": round(_seconds(m), 4), "wall_seconds": round(m.wall_seconds, 4),
                  "process_cpu_seconds": round(m.cpu_seconds, 4),
                  "peak_rss_mib": round(m.peak_rss_kib / 1024, 1), **m.report} for m in runs],
        "median_seconds": round(seconds, 4),
        "median_wall_seconds": round(statistics.median(m.wall_seconds for m in runs), 4),
        "median_cpu_seconds": round(cpu, 4),
        "rows_per_s": round(expected_rows / seconds) if seconds > 0 else None,
        "rows_per_cpu_s": round(expected_rows / cpu) if cpu > 0 else None,
        "peak_rss_mib": round(max(m.peak_rss_kib for m in runs) / 1024, 1),
    }
    reported = {m.report["rows"] for m in runs if "rows" in m.report}
    if reported and reported != {expected_rows}:
        summary["rows_mismatch"] = sorted(reported)
    return summary


def _source_state() -> dict[str, Any]:
    """The commit measured, and whether the tree had uncommitted changes in the code paths."""
    root = Path(__file__).resolve().parent.parent
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return result.stdout.strip()
    return {"commit": git("rev-parse", "HEAD"),
            "uncommitted": git("status", "--porcelain", "--", "protocol", "replica",
                               "sinks").splitlines()}


def run(options: BenchOptions) -> dict[str, Any]:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    options.results_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="binlake-bench-"))
    results: dict[str, Any] = {
        "started": stamp,
        "options": {"scale": options.scale, "repeats": options.repeats, "seed": options.seed,
                    "smoke": options.smoke, "decode_only": options.decode_only,
                    "one_row": options.one_row},
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "units": {"seconds": "Python component peers: connect to end of stream; every other "
                             "peer: process wall time, start-up included"},
        "source": _source_state(),
    }
    server = start_server("/", kind=MARIADB, extra_args=SERVER_ARGS)
    try:
        bench = Bench(options, server, work_dir)
        bench.prepare()
        results["server"] = {"version": server.version(), "args": list(SERVER_ARGS)}
        results["peers"] = {"pmr": pmr_version(), "python": sys.executable}
        if options.baseline_rev:
            bench.baseline, results["baseline"] = baseline.prepare(options.baseline_rev,
                                                                   work_dir)
            bench.log(f"baseline {results['baseline']}")
        bench.log(f"server {results['server']['version']} on port {server.port}; "
                  f"python-mysql-replication {results['peers']['pmr'] or 'unavailable'}")

        workloads: dict[str, Any] = {}
        firsts: dict[str, str] = {}
        for workload in standard_workloads(options.scale, options.seed):
            if options.decode_only and workload.name != "a_bulk_insert":
                continue
            if options.one_row and workload.name != "b_single_row":
                continue
            if options.s3_only and workload.name != S3_WORKLOAD:
                continue
            server.sql("FLUSH BINARY LOGS")
            first = firsts[workload.name] = bench.current_file()
            load_seconds = bench.load(workload)
            bench.log(f"{workload.name}: loaded {workload.rows} rows in {load_seconds:.1f} s")
            workloads[workload.name] = bench.throughput(workload, first)
            workloads[workload.name]["load_seconds"] = round(load_seconds, 2)
            if options.profile and workload.name == "a_bulk_insert":
                results["profile"] = bench.profile_decode(first, options.results_dir, stamp)
                bench.log(f"profile written to {results['profile']}")
        results["workloads"] = workloads
        if not (options.decode_only or options.s3_only):
            results["startup"] = bench.startup()

        if options.memory:
            memory: dict[str, Any] = {}
            backlog_rows = sum(w["rows"] for w in workloads.values())
            memory["backlog"] = bench.memory("backlog", firsts["a_bulk_insert"], backlog_rows,
                                             ("decode", "run"))
            big = big_transaction(options.scale, options.big_rows)
            server.sql("FLUSH BINARY LOGS")
            first = bench.current_file()
            load_seconds = bench.load(big)
            bench.log(f"big transaction: {big.rows} rows loaded in {load_seconds:.1f} s")
            memory["big_transaction"] = bench.memory("big transaction", first, big.rows,
                                                     ("decode", "run"))
            results["memory"] = memory

        if options.snapshot:
            results["snapshot"] = snapshot.measure(
                bench, max(1000, int(2_000_000 * options.scale)),
                options.snapshot_writer_seconds, next(_server_ids))

        if options.semisync:
            results["semisync"] = semisync.measure(bench, options.semisync_commits,
                                                   rounds=options.repeats)
    finally:
        if "bench" in locals():
            bench.close()
        server.cleanup()
        shutil.rmtree(work_dir, ignore_errors=True)
    if options.snapshot and not options.decode_only and not options.one_row \
            and not options.s3_only:
        results["snapshot_mysql"] = _snapshot_on_mysql(options, stamp)

    results["machine"]["loadavg_at_end"] = os.getloadavg()
    results["targets"] = targets.evaluate(results)
    path = options.results_dir / f"{stamp}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    results["json_path"] = os.fspath(path)
    print(report.render(results))
    print(f"\nresults: {path}")
    return results


def _snapshot_on_mysql(options: BenchOptions, stamp: str) -> dict[str, Any]:
    """The snapshot step again on a sandbox MySQL 9.7 beside its ``mysqldump``."""
    from devtools.sandbox import SandboxError  # noqa: PLC0415

    work_dir = Path(tempfile.mkdtemp(prefix="binlake-bench-mysql-"))
    try:
        server = start_mysql()
    except SandboxError as exc:
        shutil.rmtree(work_dir, ignore_errors=True)
        return {"error": str(exc)}
    try:
        bench = Bench(BenchOptions(**{**options.__dict__, "install_pmr": False}), server,
                      work_dir)
        bench.prepare()
        out = snapshot.measure(bench, max(1000, int(2_000_000 * options.scale)),
                               options.snapshot_writer_seconds, next(_server_ids))
        out["server"] = {"version": server.version(), "args": list(MYSQL_SERVER_ARGS)}
        return out
    finally:
        if "bench" in locals():
            bench.close()
        server.cleanup()
        shutil.rmtree(work_dir, ignore_errors=True)
