"""Before/after, side by side in one run: the daemon's figures of the checkout and of another
commit, interleaved on the same servers.

A speed figure drifts by 20-40% on this project's shared machine from one hour to the next, so
"within 10% of commit X" means anything only when both trees run in the same minutes on the same
binlog. This step loads each workload once, then alternates the two trees run by run::

    python -m bench.side_by_side --baseline-rev REV [--scale S] [--repeats N]

Steps (``binlake run`` as in ``python -m bench``: the real daemon as a subprocess, start-up
included, into a fresh lake that must then hold exactly the rows logged; bench/commands.py):

* ``end_to_end``: workload (a), 600k rows × scale in 1000-row INSERTs;
* ``one_row``: workload (b), 200k × scale one-row transactions;
* ``many_tables``: 100k rows × scale in five-row transactions over 2,000 tables
  (``bench.many_tables``' backlog);
* ``snapshot``: ``binlake snapshot`` of a 2M × scale row table of (a)'s shape
  (``bench.snapshot``'s table), the server otherwise idle.

A ``binlake run`` reads its binlog to the end, so each backlog has a server of its own (the
snapshot's table sits on (a)'s server, before (a)'s first file). Every server is loaded and
settled before the first measured run; then each round runs every step for both trees, the
order of the two trees swapped from one round to the next (A B, B A, A B, …) so that neither
always runs second, after the other warmed the caches. The lakes go to a fresh ext4 with a
journal as in ``bench.many_tables`` (bench/lake_fs.py).

Per step and tree: the median wall and CPU seconds and their range; the ratio of the medians
(checkout / baseline: below 1 is faster). JSON goes to ``bench/results/side_by_side-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.sandbox import MARIADB, SandboxServer, start_server

from . import baseline, commands, lake_fs, many_tables, report, snapshot
from .measure import MeasureError, Measurement, run_measured
from .run import SERVER_ARGS, Bench, BenchOptions
from .workloads import DATABASE, standard_workloads

__all__ = ["main", "render", "run"]

STEPS = ("end_to_end", "one_row", "many_tables", "snapshot")
_server_ids = itertools.count(8000 + os.getpid() % 1000 * 10)


def _log(message: str) -> None:
    print(f"[side_by_side {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class _Step:
    """One measured step: what runs it for a tree, and its runs so far per tree label."""

    name: str
    rows: int
    measure: Callable[[commands.Tree, Path], Measurement]
    runs: dict[str, list[Measurement]] = field(default_factory=dict)


def _bench(server: SandboxServer, work_dir: Path, password: str) -> Bench:
    bench = Bench(BenchOptions(install_pmr=False), server, work_dir)
    bench.password = password
    bench.env = dict(bench.env, BENCH_PASSWORD=password)
    bench.target = commands.DaemonTarget(server.port, "bench", password, DATABASE)
    bench.prepare()
    return bench


def _run_step(name: str, rows: int, first: str, target: commands.DaemonTarget) -> _Step:
    def measure(tree: commands.Tree, lake: Path) -> Measurement:
        return commands.measure_run(tree, dict(os.environ), target, first, lake,
                                    next(_server_ids), rows)

    return _Step(name, rows, measure)


def _snapshot_step(bench: Bench, rows: int) -> _Step:
    env = dict(os.environ, BINLAKE_SERVER_PASSWORD=bench.password)

    def measure(tree: commands.Tree, lake: Path) -> Measurement:
        config = lake.parent / "snapshot.toml"
        snapshot.write_config(bench, lake, config, next(_server_ids))
        m = run_measured(tree.argv("snapshot", "--config", os.fspath(config), "--table",
                                   f"{DATABASE}.{snapshot.TABLE}"),
                         env=tree.env(env), stdout_to_devnull=True, cwd=tree.root)
        _, landed = snapshot.lake_rows(lake)
        if landed != rows:
            raise MeasureError(f"binlake snapshot landed {landed} of the table's {rows} rows")
        return m

    return _Step("snapshot", rows, measure)


def _summary(runs: list[Measurement]) -> dict[str, Any]:
    wall = [m.wall_seconds for m in runs]
    cpu = [m.cpu_seconds for m in runs]
    return {"runs": len(runs), "seconds": round(statistics.median(wall), 3),
            "min_seconds": round(min(wall), 3), "max_seconds": round(max(wall), 3),
            "all_seconds": [round(s, 3) for s in wall],
            "cpu_seconds": round(statistics.median(cpu), 3),
            "all_cpu_seconds": [round(s, 3) for s in cpu],
            "peak_rss_mib": round(max(m.peak_rss_kib for m in runs) / 1024, 1)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    scale: float = args.scale
    results: dict[str, Any] = {"started": time.strftime("%Y%m%dT%H%M%S"), "scale": scale,
                               "repeats": args.repeats, "loadavg_at_start": os.getloadavg(),
                               "machine": {"cpus": os.cpu_count()}, "steps": {}}
    work_dir = Path(tempfile.mkdtemp(prefix="binlake-side-"))
    password = secrets.token_hex(12)
    checkout = commands.Tree(Path(__file__).resolve().parent.parent, label="checkout")
    checkout.compile()
    servers: list[SandboxServer] = []
    stack = contextlib.ExitStack()
    try:
        other, results["baseline"] = baseline.prepare(args.baseline_rev, work_dir)
        trees = (checkout, other)
        _log(f"baseline {results['baseline']}")
        lakes = work_dir
        try:
            lakes = stack.enter_context(lake_fs.fresh_ext4(work_dir))
        except lake_fs.LakeFsUnavailable as e:
            _log(f"no fresh ext4 for the lakes ({e}): they go to TMPDIR")
        results["lake_fs"] = ("a fresh ext4 with a journal, on a loop device"
                              if lakes != work_dir else f"TMPDIR ({lake_fs.describe(lakes)})")

        def server() -> Bench:
            servers.append(start_server("/", kind=MARIADB, extra_args=SERVER_ARGS))
            return _bench(servers[-1], work_dir, password)

        workloads = {w.name: w for w in standard_workloads(scale, args.seed)}
        steps: list[_Step] = []
        if "end_to_end" in args.steps or "snapshot" in args.steps:
            a = server()
            results["server"] = a.server.version()
            if "snapshot" in args.steps:
                snap_rows = max(1000, int(2_000_000 * scale))
                snapshot.load_table(a, snap_rows)
                steps.append(_snapshot_step(a, snap_rows))
                _log(f"snapshot: {snap_rows} rows loaded")
            if "end_to_end" in args.steps:
                a.server.sql("FLUSH BINARY LOGS")
                first = a.current_file()
                a.load(workloads["a_bulk_insert"])
                steps.insert(0, _run_step("end_to_end", workloads["a_bulk_insert"].rows,
                                          first, a.target))
                _log(f"end_to_end: {workloads['a_bulk_insert'].rows} rows loaded")
        if "one_row" in args.steps:
            b = server()
            b.server.sql("FLUSH BINARY LOGS")
            first = b.current_file()
            b.load(workloads["b_single_row"])
            steps.append(_run_step("one_row", workloads["b_single_row"].rows, first,
                                   b.target))
            _log(f"one_row: {workloads['b_single_row'].rows} transactions loaded")
        if "many_tables" in args.steps:
            many = server()
            rows = max(1000, int(100_000 * scale))
            database = f"many_{args.tables}"
            first, _ = many_tables.load(many.server, database, args.tables, rows, 5, args.seed)
            target = commands.DaemonTarget(many.server.port, "bench", password, database)
            steps.append(_run_step("many_tables", rows, first, target))
            _log(f"many_tables: {rows} rows over {args.tables} tables loaded")
        for s in servers:
            many_tables.settle(s)
        steps.sort(key=lambda s: STEPS.index(s.name))
        for repeat in range(args.repeats):
            order = trees if repeat % 2 == 0 else trees[::-1]
            for step in steps:
                for tree in order:
                    lake = lakes / f"{step.name}-{tree.label.split()[0]}-{repeat}" / "lake"
                    lake.parent.mkdir(parents=True)
                    m = step.measure(tree, lake)
                    step.runs.setdefault(tree.label, []).append(m)
                    _log(f"{step.name} {tree.label} run {repeat + 1}: {m.wall_seconds:.2f} s "
                         f"({m.cpu_seconds:.2f} s CPU)")
                    shutil.rmtree(lake.parent, ignore_errors=True)
        for step in steps:
            mine, theirs = (_summary(step.runs[t.label]) for t in trees)
            results["steps"][step.name] = {
                "rows": step.rows, "checkout": mine, "baseline": theirs,
                "ratio_seconds": round(mine["seconds"] / theirs["seconds"], 3),
                "ratio_cpu_seconds": round(mine["cpu_seconds"] / theirs["cpu_seconds"], 3)}
    finally:
        for s in servers:
            s.cleanup()
        stack.close()
        shutil.rmtree(work_dir, ignore_errors=True)
    results["loadavg_at_end"] = os.getloadavg()
    return results


def render(results: dict[str, Any]) -> str:
    """The Markdown table of a run: per step, both trees' median (range) and the ratio."""
    base = results["baseline"]["commit"][:7]
    lines = [f"| step | rows | checkout s (range) | {base} s (range) | time ratio | "
             "CPU ratio |", "|---|---|---|---|---|---|"]
    for name, step in results["steps"].items():
        mine, theirs = step["checkout"], step["baseline"]
        lines.append(
            f"| {name} | {step['rows']:,} | {mine['seconds']:.2f} ({mine['min_seconds']:.2f}–"
            f"{mine['max_seconds']:.2f}) | {theirs['seconds']:.2f} ({theirs['min_seconds']:.2f}–"
            f"{theirs['max_seconds']:.2f}) | {step['ratio_seconds']:.3f} | "
            f"{step['ratio_cpu_seconds']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = report.parser("python -m bench.side_by_side", __doc__, "step and tree")
    parser.add_argument("--baseline-rev", required=True, help="the commit to compare with")
    parser.add_argument("--scale", type=float, default=1.0, help="workload sizes (1.0)")
    parser.add_argument("--tables", type=int, default=2000, help="many_tables' tables (2000)")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated subset of {','.join(STEPS)}")
    args = parser.parse_args(argv)
    args.steps = [s for s in args.steps.split(",") if s]
    unknown = set(args.steps) - set(STEPS)
    if unknown:
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    results = run(args)
    report.save(args.results_dir, "side_by_side", results, render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
