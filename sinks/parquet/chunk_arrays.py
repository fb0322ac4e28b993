"""An Arrow array over a native chunk's buffers: the one way a decoder's chunk becomes Arrow.

The row decoder fills a column's buffers in C (``protocol.binlog.native``: validity, offsets,
data); both the landing (:mod:`.rows`) and the column rules reading a chunk's values back
(``sinks.transform``) wrap them the same way, without a copy.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["wrap_chunk"]


def wrap_chunk(arrow_type: pa.DataType, rows: int, nulls: int, valid: bytes | None, data: bytes,
               offsets: bytes | None) -> pa.Array:
    """An array of ``rows`` values of ``arrow_type`` over the buffers, ``nulls`` of them null."""
    buffers = [None if valid is None else pa.py_buffer(valid)]
    if offsets is not None:
        buffers.append(pa.py_buffer(offsets))
    buffers.append(pa.py_buffer(data))
    return pa.Array.from_buffers(arrow_type, rows, buffers, null_count=nulls)
