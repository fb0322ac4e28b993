"""Crash-safe Parquet change logs, one per table, schema-versioned.

See ``sinks/README.md`` for the layout, the columns and the type mapping.
"""

from __future__ import annotations

from .commit import Checkpoint
from .writer import ParquetSink, SinkOptions

__all__ = ["Checkpoint", "ParquetSink", "SinkOptions"]
