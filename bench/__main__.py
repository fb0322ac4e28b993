"""``python -m bench``: the whole benchmark with one command (see bench/README.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .baseline import DEFAULT_REV
from .run import BenchOptions, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="binlake (the daemon `binlake run`, `binlake decode`) vs "
                    "python-mysql-replication vs mariadb-binlog on a sandbox MariaDB 10.11: "
                    "throughput, memory, snapshot and semi-sync latency.")
    parser.add_argument("--scale", type=float,
                        default=float(os.environ.get("BINLAKE_BENCH_SCALE", "1")),
                        help="workload size factor (1.0: 600k rows in (a), 200k in (b) and (c), "
                             "50k in (d), a 2M-row transaction; default $BINLAKE_BENCH_SCALE "
                             "or 1)")
    parser.add_argument("--big-rows", type=int,
                        default=int(os.environ.get("BINLAKE_BENCH_BIG_ROWS", "0")) or None,
                        help="rows of the single-transaction memory workload (default "
                             "$BINLAKE_BENCH_BIG_ROWS, else 2M x scale)")
    parser.add_argument("--baseline-rev", default=None,
                        help="also run `binlake decode` of this commit on the same files (the "
                             f"reference rate; default {DEFAULT_REV}, the fixed reference "
                             "commit; 'none' skips; --smoke skips unless given)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per peer (median)")
    parser.add_argument("--seed", type=int, default=20241121)
    parser.add_argument("--smoke", action="store_true",
                        help="CI mode: tiny sizes, 1 repeat, no install of the Python peer")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory runs")
    parser.add_argument("--no-semisync", action="store_true", help="skip the semi-sync runs")
    parser.add_argument("--no-snapshot", action="store_true",
                        help="skip the snapshot run (binlake snapshot vs mariadb-dump)")
    parser.add_argument("--commits", type=int, default=2000,
                        help="autocommit INSERTs per semi-sync configuration and round")
    parser.add_argument("--decode-only", action="store_true",
                        help="only `binlake decode` in both formats, of the checkout and of "
                             "the baseline commit, on workload (a) (no other peer, workload or "
                             "step; the baseline runs also with --smoke)")
    parser.add_argument("--one-row", action="store_true",
                        help="only workload (b), one-row transactions: the peer, binlake "
                             "decode only and binlake run, and binlake run of --baseline-rev "
                             "if given (no other peer, workload or step)")
    parser.add_argument("--no-s3", action="store_true",
                        help="skip binlake run into S3 (the test bed's Ceph gateway) on (a)")
    parser.add_argument("--s3-only", action="store_true",
                        help="only binlake run into a local lake and into S3 (the test bed's "
                             "Ceph gateway, or $BINLAKE_BENCH_S3_ENDPOINT) on workload (a), "
                             "alternated round by round")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile binlake decode on workload (a)")
    parser.add_argument("--no-install", action="store_true",
                        help="do not create the python-mysql-replication venv (skip the peer "
                             "unless it is cached)")
    parser.add_argument("--setup", action="store_true",
                        help="only create the python-mysql-replication venv, then exit")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    if args.setup:
        from .pmr_venv import ensure_pmr_venv  # noqa: PLC0415

        return 0 if ensure_pmr_venv() is not None else 1
    options = BenchOptions(
        scale=0.002 if args.smoke else args.scale,
        repeats=1 if args.smoke else max(1, args.repeats),
        seed=args.seed,
        smoke=args.smoke,
        install_pmr=not (args.smoke or args.no_install or args.decode_only or args.s3_only),
        memory=not (args.no_memory or args.decode_only or args.one_row or args.s3_only),
        semisync=not (args.no_semisync or args.decode_only or args.one_row or args.s3_only),
        semisync_commits=20 if args.smoke else args.commits,
        snapshot=not (args.no_snapshot or args.decode_only or args.one_row or args.s3_only),
        snapshot_writer_seconds=1.0 if args.smoke else 10.0,
        profile=args.profile,
        baseline_rev=(args.baseline_rev if args.one_row and args.baseline_rev != "none" else
                      _baseline_rev(args.baseline_rev, args.smoke and not args.decode_only)),
        decode_only=args.decode_only,
        one_row=args.one_row,
        s3=not (args.no_s3 or args.decode_only or args.one_row),
        s3_only=args.s3_only,
        big_rows=args.big_rows,
    )
    if args.results_dir is not None:
        options = BenchOptions(**{**options.__dict__, "results_dir": args.results_dir})
    run(options)
    return 0


def _baseline_rev(given: str | None, smoke: bool) -> str | None:
    if given is None:
        return None if smoke else DEFAULT_REV
    return None if given.lower() == "none" else given


if __name__ == "__main__":
    sys.exit(main())
