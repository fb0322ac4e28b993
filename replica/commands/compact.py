"""``binlake compact``: rewrite the lake's small files into large ones, beside a running daemon.

The work is :func:`sinks.parquet.compact.compact_lake` (atomic per partition, crash-safe, under
``<lake>/_compact.lock``, never the daemon's writer lock); this module only turns the
configuration and ``--min-age`` into its options and prints what it did, one line per table.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from replica.config import Config
from sinks.errors import LakeError
from sinks.parquet.compact import CompactOptions, compact_lake

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


def run(config: Config, args: argparse.Namespace | None = None) -> int:
    """Entry point of ``binlake compact``: 0 when done (also when nothing was old enough);
    4 when the lake's filesystem refuses (disk full, read-only…): what was swapped stays
    swapped, the rest is retried by the next run."""
    options = options_from(config, getattr(args, "min_age", None))
    started = time.monotonic()
    try:
        stats = compact_lake(config.lake.path, options)
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
