"""A small Parquet file written natively: a flush over thousands of tables writes thousands.

Writing a 50-row file of eight columns (30 Parquet column chunks with ``_before`` and
``_missing``) cost pyarrow ~0.5 ms of CPU — a writer set up per file and ~12 us per column
chunk — in the flush's writer threads (``files.py``), where 2,000 of them competed with the
daemon's thread for the machine's two cores (issue 17). ``_native_parquet.c`` writes the same
file in ~35 us: one row group, one PLAIN data page per column chunk, uncompressed (the codec
a small file gets by default, ``SinkOptions.small_file_compression``), levels bit-packed.

pyarrow stays the reference and does the part that carries the meaning: the footer's schema,
key-value metadata (``ARROW:schema`` with every field's metadata, the schema's own), created_by
and column orders are copied verbatim from a file pyarrow writes with no rows for the same
schema (:func:`template`, ~150 us), so every type and logical annotation is pyarrow's; the
native code adds the row group. It covers what the sink lands — integers, FLOAT/DOUBLE,
DECIMAL <= 38 digits, DATE, microsecond timestamps, strings and binaries, a struct of those
(``_before``), a list of those (``_missing``) — and returns None for anything else, which
pyarrow then writes. ``tests/unit/test_native_parquet.py`` reads both writers' files back
over the type matrix, random tables and the sink's every operation and requires identical
tables, schemas and metadata; ``bench/native_asan.sh`` runs it under the sanitizers.
``BINLAKE_NATIVE=0`` (as for the row decoder) makes pyarrow write every file.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["ENABLED", "template", "write"]

_module: Any = None
try:
    _module = importlib.import_module(f"{__package__}._native_parquet")
except ImportError:  # not built (no compiler at install): protocol.binlog.native says so once
    pass

ENABLED = _module is not None and os.environ.get("BINLAKE_NATIVE", "1") != "0"


def template(schema: pa.Schema, statistics: Sequence[str]) -> bytes:
    """pyarrow's Parquet file of ``schema`` with no rows, written with a small file's options:
    the footer the native writer completes."""
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, schema, compression="none", use_dictionary=False,
                     write_statistics=list(statistics)).close()
    return bytes(sink.getvalue())


def write(table: pa.Table, statistics: tuple[str, ...]) -> bytes | None:
    """``table`` as the bytes of a one-row-group uncompressed Parquet file with footer
    statistics on the top-level int64 columns named in ``statistics``; None when the native
    writer is off or does not cover one of its columns (pyarrow then writes it)."""
    if not ENABLED or table.num_rows == 0:
        return None
    batches = table.to_batches()
    if len(batches) != 1:
        batches = table.combine_chunks().to_batches()
    schema_capsule, array_capsule = batches[0].__arrow_c_array__()
    data: bytes | None = _module.write(schema_capsule, array_capsule,
                                       template(table.schema, statistics), statistics)
    return data
