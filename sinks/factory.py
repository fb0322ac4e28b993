"""Builds the daemon's sink from its options, and the lake upkeep the daemon runs beside it.

The daemon core imports this module and :mod:`sinks.contract`, nothing else of ``sinks``: the
concrete sink (today :class:`~sinks.parquet.ParquetSink`) is chosen here, so another format or
store changes this module, not the daemon. Pyarrow is imported when a sink is built, not when
this module is: ``binlake run`` chooses Arrow's allocator (:func:`prefer_jemalloc`) first.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .parquet.allocator import prefer_jemalloc
from .parquet.layout import COMPACT_LOCK, SNAPSHOT_REQUESTS_DIR

if TYPE_CHECKING:
    from .contract import Sink
    from .parquet.compact import CompactOptions, CompactStats
    from .transform import Transform

#: A developer switch for tests, read here and nowhere else: seconds each flush of a sink built
#: here waits, in the thread running it, before it writes anything (a slow disk or store,
#: simulated). Unset or 0 in production.
FLUSH_DELAY_VARIABLE = "BINLAKE_TEST_FLUSH_DELAY"

__all__ = ["COMPACT_LOCK", "FLUSH_DELAY_VARIABLE", "SNAPSHOT_REQUESTS_DIR", "build_sink", "compact_lake",
           "prefer_jemalloc", "recover_compaction_if_idle"]


def build_sink(lake_dir: str, *, file_size_bytes: int, flush_rows: int,
               flush_interval_s: float, catch_up_interval_s: float, compression: str,
               flush_in_handle: bool = True, transform: Transform | None = None) -> Sink:
    """A closed sink on ``lake_dir`` (``open()`` takes and recovers the lake), from the
    configuration's lake keys.

    ``flush_in_handle=False``: ``handle`` does no lake I/O — a commit past ``file_size_bytes``
    or ``flush_rows`` sets ``flush_wanted``, an item that needs the disk sets ``io_wanted`` —
    so that a caller with an event loop runs the flush and ``run_io`` elsewhere (the daemon: on
    its sink worker). ``transform``: the column
    rules every rows event passes through before it lands (``sinks.transform``).
    """
    from .parquet.writer import ParquetSink, SinkOptions

    sink = ParquetSink(lake_dir, SinkOptions(
        file_size_bytes=file_size_bytes, flush_rows=flush_rows,
        flush_interval_s=flush_interval_s, catch_up_interval_s=catch_up_interval_s,
        compression=compression, flush_in_handle=flush_in_handle, transform=transform))
    delay = float(os.environ.get(FLUSH_DELAY_VARIABLE) or 0)
    if delay > 0:
        _slow_flushes(sink, delay)
    return sink


def _slow_flushes(sink: Any, delay: float) -> None:
    """Make each flush of ``sink`` that lands something wait ``delay`` seconds first (see
    :data:`FLUSH_DELAY_VARIABLE`)."""
    committer = sink._committer
    flush = committer.flush

    def slow_flush(*args: Any) -> Any:
        time.sleep(delay)
        return flush(*args)

    committer.flush = slow_flush


def recover_compaction_if_idle(lake_dir: str) -> bool | None:
    """Finish what a killed compaction left unless a compaction runs (it holds
    :data:`COMPACT_LOCK`): None, nothing was left; True, cleaned up; False, left to it."""
    from .parquet.compact import recover_if_idle

    return recover_if_idle(lake_dir)


def compact_lake(lake_dir: str, options: CompactOptions | None = None) -> CompactStats:
    """``binlake compact``'s compaction (safe beside the daemon's landing)."""
    from .parquet.compact import compact_lake as compact

    return compact(lake_dir, options)
