"""The sink's half of the native Arrow path: a batch's columns from the row decoder's chunks.

The row decoder (``protocol.binlog.native.decode_arrow``, and a snapshot's ``text_arrow``)
exports each rows event's columns as typed buffers, one *chunk* per column
``(tag, nulls, validity, data, offsets)`` in a layout the decoder names. What the lake makes of
them is the sink's: ``_native_batch.c`` (built with the other extensions, see setup.py) joins a
batch's chunks into its Arrow columns, fills the metadata columns the lake adds to every row
(``_seq``, ``_op``, …: :mod:`.rows` says which) from each event's tags, sizes an event's chunks
for the memory budget, and hands a small batch to Arrow whole through its C data interface.
``tests/unit/test_batch_fast_path.py`` holds it to the pure-Python conversion of :mod:`.rows`,
which stays the reference.

Every function here is None when rows do not land from chunks (``protocol.binlog.native.ARROW``
off: no event carries any) or the extension is not built for :data:`ABI` (the row decoder's
warning covers it: they are built together); the callers then convert Python values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol import native_switch
from protocol.binlog import native as _decoder

__all__ = ["ABI", "ACTIVE", "arrow_bytes", "concat", "gather", "gather_all", "meta_columns",
           "export_batch", "Column"]

#: The ``ABI_VERSION`` of ``_native_batch.c`` this module calls.
ABI = 2

_module: Any
_module, UNAVAILABLE_REASON = native_switch.load(
    f"{__package__}._native_batch", ABI, "the native batch builder")

#: Whether batches are built from chunks here: the row decoder makes them and this is built.
ACTIVE = _module is not None and _decoder.ARROW

Column = tuple[int, int, bytes | None, bytes, bytes | None]
"""One column's buffers: (rows, nulls, validity | None, data, offsets | None)."""

#: ``arrow_bytes(images) -> int``: the bytes of every buffer (validity, data, offsets) of a rows
#: event's Arrow chunks (``RowsEvent.arrow``), summed in C (the sink's memory estimate, per
#: event); None when not :data:`ACTIVE` (the sink then sums them).
arrow_bytes: Callable[[Any], int] | None = _module.arrow_bytes if ACTIVE else None

#: ``gather_all(tags, entries) -> list``: every table column of a batch as :func:`gather` gives
#: it (None for a column whose tag is None, that gather leaves to Python, or over 2 GiB of
#: strings), one call per batch; None when not :data:`ACTIVE`.
gather_all: Callable[[tuple[str | None, ...], list[tuple[Any, Any, Any, int]]],
                     list[Column | None]] | None = _module.gather_all if ACTIVE else None

#: ``meta_columns(tags, ends, kinds) -> tuple``: a batch's metadata columns, per ``kinds`` byte
#: (``i`` int64, ``s`` string, ``r`` row number = the row's index plus the tag, ``-`` none),
#: as ``(nulls, validity | None, data, offsets | None)``, or None when all NULL; ``tags[i]``
#: holds event i's values, its rows end at ``ends[i]``. TypeError / OverflowError for a value
#: the column cannot hold (the caller then converts in Python). None as for :data:`gather_all`.
meta_columns: Callable[[list[tuple[Any, ...]], list[int], bytes],
                       tuple[tuple[int, bytes | None, bytes, bytes | None] | None, ...]] | None = (
    _module.meta_columns if ACTIVE else None)

#: ``export_batch(spec) -> (capsule, address, size)``: an Arrow C data interface array built
#: from ``spec`` = ``(length, null_count, validity, buffers, children)`` (validity: None, bytes,
#: or an int = that many zero bytes; buffers: bytes or ints, in Arrow's order for the type;
#: children: specs), every buffer copied into memory the array owns, for
#: ``pyarrow.RecordBatch._import_from_c(address, schema)``; the capsule (an Arrow PyCapsule
#: interface ``arrow_array``, which the small-file writer's pool reads as it is) frees the
#: struct (and the array, unless Arrow took it); ``size`` bounds the buffers' bytes from above.
#: The spec must match the schema (Arrow sees no sizes). None as for :data:`gather_all`.
export_batch: Callable[[tuple[Any, ...]], tuple[object, int, int]] | None = (
    _module.export_batch if ACTIVE else None)


def concat(tag: str, segments: list[tuple[_decoder.Chunk | None, int]]) -> Column:
    """One column's buffers from chunks of ``tag`` and runs of NULLs (``(None, rows)``), copied
    once. OverflowError: strings over 2 GiB. Only when :data:`ACTIVE`."""
    result: Column = _module.concat(tag, segments)
    return result


def gather(tag: str, k: int, entries: list[tuple[Any, Any, Any, int]]) -> Column | None:
    """Table column ``k`` of a batch, as :func:`concat` returns it, from its images' entries
    ``(slots, chunks, values, rows)`` (see :mod:`.rows`); None when an image holds it in no
    chunk of ``tag``. Only when :data:`ACTIVE`."""
    result: Column | None = _module.gather(tag, k, entries)
    return result
