"""Job: materialise tables' current state (and, optionally, drop history a state covers).

    python -m sinks.spark.materialize --lake LAKE [--db DB --table T] [--retain-days N]
    spark-submit sinks/spark/materialize.py --lake LAKE …

Run it periodically (e.g. hourly, after ``binlake compact``): ``read_current_state`` then
starts from the newest state and replays only the changes after it. ``--retain-days N``
deletes change-log partitions dated more than N days ago once the new state covers them —
that history is gone for ``read_changes``; off unless asked for.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sinks.storage import Storage


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sinks.spark.materialize",
        description="Write binlake tables' current state into <table>/_state/seq=<S>/.")
    parser.add_argument("--lake", required=True, help="the lake directory")
    parser.add_argument("--db", help="source database (default: every table of the lake)")
    parser.add_argument("--table", help="source table (with --db)")
    parser.add_argument("--retain-days", type=int, default=None, metavar="N",
                        help="delete change-log partitions older than N days once covered "
                             "(loses that history; default: keep everything)")
    parser.add_argument("--master", default="local[2]",
                        help="Spark master when not run by spark-submit")
    return parser.parse_args(argv)


def tables(lake: str, storage: Storage | None = None) -> list[tuple[str, str]]:
    """Every (database, table) with a schema, by reading the directory names back."""
    from sinks.parquet import layout as L
    from sinks.parquet.commit import OS

    storage = storage or OS
    found = []
    for db in sorted(storage.listdir(lake)):
        if L.is_hidden(db) or not storage.isdir(os.path.join(lake, db)):
            continue
        for table in sorted(storage.listdir(os.path.join(lake, db))):
            if storage.isdir(os.path.join(lake, db, table, L.SCHEMA_DIR)):
                found.append((L.name_of_dir(db), L.name_of_dir(table)))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    from sinks.parquet.compact import drop_history
    from sinks.spark.session import spark_session
    from sinks.spark.state import materialize_state

    ours = SparkSession.getActiveSession() is None  # leave a caller's session running
    spark = spark_session("binlake materialize", master=args.master)
    try:
        chosen = [(args.db, args.table)] if args.db and args.table else tables(args.lake)
        for db, table in chosen:
            seq = materialize_state(spark, args.lake, db, table)
            print(f"{db}.{table}: state as of _seq {seq}" if seq is not None
                  else f"{db}.{table}: state already current")
            if args.retain_days is not None and seq is not None:
                before = (_dt.datetime.now(_dt.UTC).date()
                          - _dt.timedelta(days=args.retain_days)).isoformat()
                dropped = drop_history(args.lake, db, table, seq, before)
                print(f"{db}.{table}: dropped {dropped} change-log partitions before {before}")
    finally:
        if ours:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
