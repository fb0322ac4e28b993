"""``binlake compact``: rewrite the lake's small files into large ones, beside a running daemon.

The work is :func:`sinks.parquet.compact.compact_lake` on disk: atomic per partition, crash-safe, under
``<lake>/_compact.lock``, never the daemon's writer lock; on object storage one commit record
that changes no data, taken beside the writer without its lease. This module only turns the
configuration and ``--min-age`` into its options and prints what it did, one line per table.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from replica.config import Config
from sinks.errors import LakeError
from sinks.objectstore.compact import compact_store
from sinks.objectstore.s3 import open_store
from sinks.parquet.compact import CompactOptions, CompactStats, compact_lake

__all__ = ["add_arguments", "options_from", "run"]

log = logging.getLogger("binlake.compact")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``binlake compact`` options (for :mod:`replica.cli`, next to the config flags)."""
    parser.add_argument("--min-age", type=float, metavar="SECONDS",
                        help="rewrite only partitions whose files are all older than this "
                             "(default: lake.compact_min_age)")


def options_from(config: Config, min_age: float | None = None) -> CompactOptions:
    lake = config.lake
    return CompactOptions(min_age=lake.compact_min_age if min_age is None else min_age,
                          target_size=lake.compact_target_size, grace=lake.compact_grace,
                          compression=lake.compression)


def _compact(config: Config, options: CompactOptions) -> CompactStats:
    lake = config.lake
    if lake.on_object_store:  # one commit record of its own, beside the writer
        return compact_store(open_store(lake.path, lake.s3.settings()), lake.path, options)
    return compact_lake(lake.path, options)


def run(config: Config, args: argparse.Namespace | None = None) -> int:
    """Entry point of ``binlake compact``: 0 when done (also when nothing was old enough);
    4 when the lake's filesystem refuses (disk full, read-only…): what was swapped stays
    swapped, the rest is retried by the next run."""
    options = options_from(config, getattr(args, "min_age", None))
    started = time.monotonic()
    try:
        stats = _compact(config, options)
    except OSError as exc:
        raise LakeError.from_os_error(exc, config.lake.path, "compaction") from exc
    for table, saved in sorted(stats.tables.items()):
        sys.stdout.write(f"{table}: {saved} fewer files\n")
    sys.stdout.write(
        f"compacted {stats.partitions} partitions: {stats.files_in} files -> {stats.files_out}"
        f" ({stats.rows} rows) in {time.monotonic() - started:.1f} s"
        + (f"; {stats.skipped_busy} skipped (the daemon wrote to them meanwhile)"
           if stats.skipped_busy else "") + "\n")
    return 0
