"""The one exception hierarchy of ``sinks/``.

Everything a sink raises on purpose derives from :class:`SinkError`. Errors say which table,
column or file is involved, never anything about the connection that fed the sink.
"""

from __future__ import annotations


class SinkError(Exception):
    """Root of every error raised by ``sinks/``."""


class UnsupportedValue(SinkError):
    """A decoded value that cannot be landed in its column's Arrow type."""

    def __init__(self, table: str, column: str, value_type: str, arrow_type: str) -> None:
        super().__init__(
            f"{table}.{column}: cannot land a {value_type} value as {arrow_type}"
        )
        self.table = table
        self.column = column
        self.value_type = value_type
        self.arrow_type = arrow_type


class LakeCorrupted(SinkError):
    """The lake's on-disk state contradicts itself (a commit record names a file that is gone)."""


class SinkStateError(SinkError):
    """The item stream broke the sink's protocol (rows outside a transaction, use after close)."""
