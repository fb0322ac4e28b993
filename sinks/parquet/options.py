"""``SinkOptions``: the Parquet sink's tuning knobs, shared by the modules that do its work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..transform import Transform

__all__ = ["MiB", "SinkOptions"]

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Tuning knobs; the defaults suit Spark (big files, row groups of tens of MB)."""

    file_size_bytes: int = 128 * MiB  # close a data file (and flush) once it is this big on disk
    row_group_bytes: int = 16 * MiB  # Arrow bytes buffered per file before writing a row group
    memory_limit_bytes: int = 64 * MiB  # all buffered rows; above it, spill / write row groups
    flush_rows: int = 1_000_000  # committed rows since the last flush that force a flush
    flush_interval_s: float = 5.0  # maybe_flush() flushes data older than this
    catch_up_interval_s: float = 60.0  # ... or than this, while the source is behind
    compression: str = "zstd"
    compression_level: int = 1  # higher levels cost much more CPU per row for barely smaller files
    #: Codec of a file written whole from less than ``files.SMALL_FILE_BYTES`` of rows (a
    #: flush over many tables): zstd's set-up per column chunk costs more than it saves there.
    #: "none" lets the native writer write it (``small_file.py``: far less CPU than pyarrow,
    #: somewhat bigger files than snappy's); "snappy" has pyarrow write it compressed.
    small_file_compression: str | None = "none"
    spill_compression: str | None = "lz4"
    #: Encode row groups on a background thread (encoder.py), overlapping the caller's work;
    #: False writes them in the caller's thread (the same files).
    background_encoding: bool = True
    #: A commit (or snapshot chunk) past ``file_size_bytes`` or ``flush_rows`` flushes inside
    #: the call that handed it over, and an item's lake work (spills, XA files) is done there;
    #: False only sets ``flush_wanted`` / ``io_wanted`` and the caller flushes or runs
    #: ``run_io`` (the daemon, on its sink worker thread rather than its event loop).
    flush_in_handle: bool = True
    #: Column rules (``sinks.transform``), applied to every rows event before it is landed:
    #: streamed rows, before images, XA parts and snapshot chunks alike. None: no rules.
    transform: Transform | None = None
