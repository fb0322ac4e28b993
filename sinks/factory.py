"""Builds the daemon's sink from its options, and the lake upkeep the daemon runs beside it.

The daemon core imports this module and :mod:`sinks.contract`, nothing else of ``sinks``: the
concrete sink (today :class:`~sinks.parquet.ParquetSink`) is chosen here, so another format or
store changes this module, not the daemon. Pyarrow is imported when a sink is built, not when
this module is: ``binlake run`` chooses Arrow's allocator (:func:`prefer_jemalloc`) first.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .parquet.allocator import prefer_jemalloc
from .parquet.layout import COMPACT_LOCK, SNAPSHOT_REQUESTS_DIR

if TYPE_CHECKING:
    from .contract import Sink
    from .objectstore.requests import StoreRequests
    from .objectstore.s3 import S3Settings
    from .objectstore.store import ObjectStore
    from .parquet.compact import CompactOptions, CompactStats
    from .transform import Transform

#: A developer switch for tests, read here and nowhere else: seconds each flush of a sink built
#: here waits, in the thread running it, before it writes anything (a slow disk or store,
#: simulated). Unset or 0 in production.
FLUSH_DELAY_VARIABLE = "BINLAKE_TEST_FLUSH_DELAY"

#: URL schemes of a lake on object storage.
OBJECT_SCHEMES = ("s3://",)

__all__ = ["COMPACT_LOCK", "FLUSH_DELAY_VARIABLE", "OBJECT_SCHEMES", "SNAPSHOT_REQUESTS_DIR",
           "build_sink", "compact_lake", "is_object_url", "object_requests", "prefer_jemalloc",
           "recover_compaction_if_idle"]


def is_object_url(lake: str) -> bool:
    """Whether ``lake`` names a lake on object storage (``s3://BUCKET/PREFIX``) rather than a
    directory."""
    return lake.startswith(OBJECT_SCHEMES)


def build_sink(lake_dir: str, *, file_size_bytes: int, flush_rows: int,
               flush_interval_s: float, catch_up_interval_s: float, compression: str,
               flush_in_handle: bool = True, transform: Transform | None = None,
               object_store: ObjectStore | None = None, s3: S3Settings | None = None,
               spool: str | None = None, log_snapshot_records: int = 100,
               lease_duration_s: float = 30.0, give_up: threading.Event | None = None) -> Sink:
    """A closed sink on ``lake_dir`` (``open()`` takes and recovers the lake), from the
    configuration's lake keys.

    ``flush_in_handle=False``: ``handle`` does no lake I/O — a commit past ``file_size_bytes``
    or ``flush_rows`` sets ``flush_wanted``, an item that needs the disk sets ``io_wanted`` —
    so that a caller with an event loop runs the flush and ``run_io`` elsewhere (the daemon: on
    its sink worker). ``transform``: the column
    rules every rows event passes through before it lands (``sinks.transform``).

    The one place the commit strategy is chosen: a directory is committed by renames
    (``sinks/parquet/commit.py``); an ``s3://`` URL through the object store's commit log
    (``sinks/objectstore/``), the sink writing in a local ``spool`` (default
    ``objectstore.mirror.spool_for``) and each commit published to the store (``object_store``, else one
    built from ``s3``, the ``[lake.s3]`` settings), a log snapshot written every
    ``log_snapshot_records`` records (``objectstore/logstate.py``), the writer holding the
    lake by a lease of ``lease_duration_s`` (``sinks/objectstore/lease.py``). The store's
    transient failures are retried for as long as it takes until ``give_up`` is set (the
    daemon sets it once a stop has spent its budget): then a failing store call raises
    :class:`~sinks.errors.StoreAbandoned`, nothing more is committed, and the lease is left to
    run out.
    """
    from .parquet.writer import ParquetSink, SinkOptions

    options = SinkOptions(
        file_size_bytes=file_size_bytes, flush_rows=flush_rows,
        flush_interval_s=flush_interval_s, catch_up_interval_s=catch_up_interval_s,
        compression=compression, flush_in_handle=flush_in_handle, transform=transform)
    if is_object_url(lake_dir):
        from .objectstore.log import Retry
        from .objectstore.mirror import ObjectLake, spool_for
        from .objectstore.probe import probe_conditional_writes

        if object_store is None:
            from .objectstore.s3 import S3Settings, open_store

            object_store = open_store(lake_dir, s3 if s3 is not None else S3Settings())
        directory = spool or spool_for(lake_dir)
        sink = ParquetSink(directory, options, mirror=ObjectLake(
            object_store, lake_dir, directory, probe=probe_conditional_writes,
            log_snapshot_records=log_snapshot_records, lease_duration_s=lease_duration_s,
            retry=Retry(give_up=give_up)))
    else:
        sink = ParquetSink(lake_dir, options)
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


def object_requests(lake_url: str, s3: S3Settings | None = None,
                    object_store: ObjectStore | None = None,
                    give_up: threading.Event | None = None) -> StoreRequests:
    """``binlake snapshot``'s requests on the lake at ``lake_url`` on object storage
    (``sinks.objectstore.requests``: objects under ``_snapshot_requests/``, what a directory
    holds on disk); ``object_store``, else one built from ``s3``. ``give_up``: as
    :func:`build_sink`'s."""
    from .objectstore.log import Retry
    from .objectstore.requests import StoreRequests

    if object_store is None:
        from .objectstore.s3 import S3Settings, open_store

        object_store = open_store(lake_url, s3 if s3 is not None else S3Settings())
    return StoreRequests(object_store, lake_url, Retry(give_up=give_up))


def recover_compaction_if_idle(lake_dir: str) -> bool | None:
    """Finish what a killed compaction left unless a compaction runs (it holds
    :data:`COMPACT_LOCK`): None, nothing was left; True, cleaned up; False, left to it."""
    if is_object_url(lake_dir):  # nothing of a compaction's is on a store: the log is the lake
        return None
    from .parquet.compact import recover_if_idle

    return recover_if_idle(lake_dir)


def compact_lake(lake_dir: str, options: CompactOptions | None = None, *,
                 s3: S3Settings | None = None, object_store: ObjectStore | None = None,
                 stop: Callable[[], bool] | None = None) -> CompactStats:
    """One compaction of the lake, as ``binlake compact`` runs it (safe beside the daemon's
    landing); the daemon's background compaction. A directory is compacted by swapping
    partitions (``sinks.parquet.compact``); an ``s3://`` lake by one commit record taken beside
    the writer without its lease (``sinks.objectstore.compact``: ``object_store``, else one
    built from ``s3``), which the writer steps over as it does a ``binlake compact``'s, whether
    it runs in this process or another. ``stop``: asked between the files a compaction on
    object storage writes; once true, the run removes them and commits nothing."""
    if is_object_url(lake_dir):
        from .objectstore.compact import compact_store

        if object_store is None:
            from .objectstore.s3 import S3Settings, open_store

            object_store = open_store(lake_dir, s3 if s3 is not None else S3Settings())
        return compact_store(object_store, lake_dir, options, stop=stop)
    from .parquet.compact import compact_lake as compact

    return compact(lake_dir, options)
