"""Job: write a landed table's current state as Parquet.

    python -m sinks.spark.current_state --lake LAKE --db DB --table T --out DIR
    spark-submit sinks/spark/current_state.py --lake LAKE --db DB --table T --out DIR

``--lake`` may be ``s3://BUCKET/PREFIX``: the job reads the committed files the lake's log
names, at ``--spark-root`` (default ``s3a://BUCKET/PREFIX``), the store configured by
``BINLAKE_LAKE_S3_*`` and the ``AWS_*`` credentials (``sinks/spark/objectlake``).

Imports are absolute so that ``spark-submit`` can run this file directly (with binlake
installed, or shipped with ``--py-files``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sinks.spark.current_state",
        description="Rebuild a table's current state from its binlake change log.")
    parser.add_argument("--lake", required=True,
                        help="the lake directory, or its s3://BUCKET/PREFIX URL")
    parser.add_argument("--db", required=True, help="source database")
    parser.add_argument("--table", required=True, help="source table")
    parser.add_argument("--out", required=True, help="output directory for the Parquet state")
    parser.add_argument("--keys", help="comma-separated key columns (default: the primary key)")
    parser.add_argument("--mode", default="overwrite",
                        choices=["overwrite", "errorifexists", "ignore"])
    parser.add_argument("--spark-root",
                        help="for an s3:// lake: the URL Spark reads its objects at "
                             "(default: the s3a:// form of --lake)")
    parser.add_argument("--master", help="Spark master when not run by spark-submit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    from sinks.spark.state import read_current_state

    builder = SparkSession.builder.appName(f"binlake current_state {args.db}.{args.table}")
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()
    # Spark writes INT96 timestamps by default; the state gets the lake's microsecond types.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        keys = args.keys.split(",") if args.keys else None
        state = read_current_state(spark, args.lake, args.db, args.table, keys,
                                   spark_root=args.spark_root)
        state.write.mode(args.mode).parquet(args.out)
        rows = spark.read.parquet(args.out).count()  # from the footers: what is there now
    finally:
        spark.stop()
    # One line on success, so a job log says what happened (Spark's own logs do not).
    print(f"{args.db}.{args.table}: {rows} rows of current state in {args.out} (Parquet, "
          f"mode {args.mode}, from the lake {args.lake})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
