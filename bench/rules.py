"""What a column rule costs ``binlake run``: workload (a) landed with no rule and with one
``hash`` rule on one column, the two alternated round by round on the same binlog.

A ruled column's values pass through Python (``sinks.transform``: its native Arrow chunk holds
the clear value and is dropped; the table's other columns keep theirs), so the figure to know
is how much slower such a table lands. Its own sandbox MariaDB 10.11, as ``python -m bench``::

    python -m bench.rules [--scale S] [--repeats N]

The rule: ``bench.mixed.name`` (VARCHAR(64)) hashed, the key in ``BINLAKE_TRANSFORM_HASH_KEY``.
``rows/s`` = the workload's rows / process wall time, and per CPU-second (start-up included in
both, as in the throughput table); the median of the rounds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from devtools.sandbox import MARIADB, start_server

from . import commands
from .run import SERVER_ARGS, Bench, BenchOptions
from .workloads import DATABASE, standard_workloads

__all__ = ["main"]

RULE = (f'[[transform.column]]\nmatch = "{DATABASE}.mixed.name"\naction = "hash"\n')
VARIANTS = {"no rule": "", "hash rule on one column": RULE}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rules", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="workload (a) × this")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each variant")
    args = parser.parse_args(argv)
    workload = standard_workloads(args.scale, 20241121)[0]
    work_dir = Path(tempfile.mkdtemp(prefix="binlake-bench-rules-"))
    server = start_server("/", kind=MARIADB, extra_args=SERVER_ARGS)
    runs: dict[str, list[Any]] = {name: [] for name in VARIANTS}
    server_ids = itertools.count(7900)
    try:
        bench = Bench(BenchOptions(install_pmr=False), server, work_dir)
        bench.prepare()
        server.sql("FLUSH BINARY LOGS")
        first = bench.current_file()
        bench.log(f"{workload.name}: loaded {workload.rows} rows in "
                  f"{bench.load(workload):.1f} s")
        env = dict(bench.env, BINLAKE_TRANSFORM_HASH_KEY="bench key")
        for round_ in range(max(1, args.repeats)):
            for name, extra in VARIANTS.items():
                lake = Path(tempfile.mkdtemp(prefix="lake-", dir=work_dir)) / "lake"
                try:
                    runs[name].append(commands.measure_run(
                        bench.tree, env, bench.target, first, lake, next(server_ids),
                        workload.rows, extra))
                finally:
                    shutil.rmtree(lake.parent, ignore_errors=True)
                bench.log(f"round {round_ + 1}, {name}: {runs[name][-1].wall_seconds:.2f} s")
    finally:
        server.cleanup()
        shutil.rmtree(work_dir, ignore_errors=True)
    results = {name: {"rows": workload.rows,
                      "wall_seconds": [round(m.wall_seconds, 3) for m in measured],
                      "cpu_seconds": [round(m.cpu_seconds, 3) for m in measured],
                      "rows_per_s": round(workload.rows / statistics.median(
                          m.wall_seconds for m in measured)),
                      "rows_per_cpu_s": round(workload.rows / statistics.median(
                          m.cpu_seconds for m in measured))}
               for name, measured in runs.items()}
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
