"""Crash-safe Parquet change logs, one per table, schema-versioned.

See ``docs/lake-format.md`` for the layout, the columns and the type mapping (``sinks/README.md`` for how the sink implements them). The sink's classes are
imported on first use, so ``sinks.parquet.layout`` (paths) and :func:`prefer_jemalloc` (the
start-up step choosing Arrow's allocator) do not pull in pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .allocator import prefer_jemalloc

if TYPE_CHECKING:
    from .commit import Checkpoint
    from .writer import ParquetSink, SinkOptions

__all__ = ["Checkpoint", "ParquetSink", "SinkOptions", "prefer_jemalloc"]

_LAZY = {"Checkpoint": ".commit", "ParquetSink": ".writer", "SinkOptions": ".writer"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
