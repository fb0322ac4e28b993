"""The shared data model of decoded binlog data: positions, event headers, tables, row changes.

These types are the contract between the event decoder (``protocol.binlog.events``), the row
decoder (``protocol.binlog.rows`` / ``protocol.binlog.tablemap``), the transaction assembler
(``protocol.binlog.transactions``) and the sinks. They are frozen, slotted dataclasses; the
row values inside a :class:`RowsEvent` are stored column-wise (one Python list per column
present in the image) so that sinks can hand each list to Arrow in one call — no per-row dicts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..frozen import fast_init


@fast_init
@dataclass(frozen=True, slots=True, order=True)
class BinlogPosition:
    """A place in the server's binlog: file name and byte offset.

    Ordering compares the file name first; binlog file names share a base name and a
    zero-padded, increasing sequence number, so this is the server's order within one server.
    """

    file: str
    pos: int

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


@fast_init
@dataclass(frozen=True, slots=True)
class EventHeader:
    """The 19-byte v4 event header plus where the event sits in the stream.

    ``log_pos`` is the header field verbatim (the *end* position of the event, 0 for fake
    events and, on MariaDB 11.4+, for events inside a transaction). ``position`` and
    ``next_position`` are what the stream tracker computed: the event's own start and the
    position right after it in the named binlog file — use these, never ``log_pos``.
    """

    timestamp: int
    type_code: int
    server_id: int
    event_size: int
    log_pos: int
    flags: int
    file: str = ""
    position: int = 0
    next_position: int = 0


class ColumnFlag(enum.IntFlag):
    """Column attributes, learned from TABLE_MAP optional metadata (binlog_row_metadata=FULL)."""

    NONE = 0
    NULLABLE = 1
    UNSIGNED = 2
    PRIMARY_KEY = 4
    BINARY = 8  # binary charset (BINARY/VARBINARY/BLOB, or a string column with collation 63)
    VISIBLE = 16
    UNIQUE = 32
    GENERATED = 64


@fast_init
@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table as the binlog describes it.

    ``type_code`` is the *real* type: for ENUM/SET columns that travel as MYSQL_TYPE_STRING it is
    MYSQL_TYPE_ENUM/SET, resolved from the metadata. ``meta`` is the raw per-type metadata from
    the TABLE_MAP. ``name`` is ``None`` when the server sent no COLUMN_NAME metadata.
    """

    index: int
    type_code: int
    meta: int
    name: str | None
    flags: ColumnFlag
    charset: int | None = None  # collation id, for character columns
    enum_values: tuple[str, ...] | None = None
    set_values: tuple[str, ...] | None = None
    geometry_type: int | None = None
    # DECIMAL precision/scale, temporal fsp, string max bytes, BIT bits etc. as the decoder
    # derived them from ``meta``; kept for sinks that need to choose an Arrow type.
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    #: The column rule that made this column what it is (``sinks.transform``: "hash:…",
    #: "mask", "truncate:N"...); None for a column as the server sent it.
    transform: str | None = None
    #: An integer column's declared display width (the ``1`` of ``TINYINT(1)``): the binlog
    #: never carries it, so it is known only where a schema source described the column
    #: (``information_schema.COLUMNS.COLUMN_TYPE``); None elsewhere. Not part of the schema
    #: version by itself: only what a ``[types]`` choice makes of it is.
    display_width: int | None = None

    @property
    def unsigned(self) -> bool:
        return bool(self.flags & ColumnFlag.UNSIGNED)

    @property
    def nullable(self) -> bool:
        return bool(self.flags & ColumnFlag.NULLABLE)


@fast_init
@dataclass(frozen=True, slots=True)
class TableMapEvent:
    """TABLE_MAP_EVENT (19): binds a numeric table id to a table and its column types."""

    header: EventHeader
    table_id: int
    flags: int
    schema: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[int, ...] = ()  # column indexes, from SIMPLE_PK / PK_WITH_PREFIX
    # Column names present: from binlog_row_metadata=FULL, or (``described_by`` set) from a
    # schema source that the layer above checked against this TABLE_MAP.
    has_full_metadata: bool = False
    # The optional-metadata TLV types the TABLE_MAP carried (``tablemap.OptionalMetadata``):
    # tells "no SIGNEDNESS sent" from "every column signed".
    optional_metadata: frozenset[int] = frozenset()
    # Where names/labels/keys not in the binlog came from ("information_schema"); None: binlog.
    described_by: str | None = None
    #: Columns a rule took out (``sinks.transform``), by source name: recorded with the
    #: table's schema so a reader knows they existed and never landed.
    excluded: tuple[str, ...] = ()


class RowsKind(enum.Enum):
    INSERT = "I"
    UPDATE = "U"
    DELETE = "D"
    #: Rows a snapshot read with SELECT (never in a binlog): an after image only, landed as
    #: ``_op = "R"``, which readers treat as an upsert like ``I``.
    READ = "R"


@fast_init
@dataclass(frozen=True, slots=True)
class RowsEvent:
    """WRITE/UPDATE/DELETE_ROWS (v1, v2, MariaDB compressed, MySQL partial) decoded column-wise.

    ``before_columns``/``after_columns`` are the indexes (into ``table.columns``) of the columns
    present in each image (the image bitmaps; fewer than all with binlog_row_image=MINIMAL or
    NOBLOB). A column absent from an image is absent from these tuples — distinguishable from a
    column present with value ``None`` (SQL NULL).

    ``before[i]`` is the list of values of column ``before_columns[i]`` for every row, and
    likewise ``after``. INSERT has only ``after``; DELETE only ``before``; UPDATE both.
    ``row_count`` rows in all.
    """

    header: EventHeader
    kind: RowsKind
    table: TableMapEvent
    flags: int
    row_count: int
    before_columns: tuple[int, ...]
    after_columns: tuple[int, ...]
    before: tuple[list[Any], ...] | None
    after: tuple[list[Any], ...] | None
    extra: bytes = b""  # ROWS v2 extra-info bytes (MySQL NDB/partition info), verbatim
    #: With a stream decoding for Arrow (``EventStream(arrow=True)``): the images' columns in
    #: Arrow's layout, (before chunks, after chunks) in the order of ``before_columns`` /
    #: ``after_columns`` (see ``native.decode_arrow``); ``before``/``after`` then decode their
    #: Python values only when asked (``rows.LazyImage``). None otherwise.
    arrow: tuple[Any, Any] | None = None

    def rows_after(self) -> list[dict[str, Any]]:
        """Convenience (slow path, for tests and tools): the after images as dicts by name."""
        return _as_dicts(self.table, self.after_columns, self.after, self.row_count)

    def rows_before(self) -> list[dict[str, Any]]:
        """Convenience (slow path, for tests and tools): the before images as dicts by name."""
        return _as_dicts(self.table, self.before_columns, self.before, self.row_count)


def _as_dicts(table: TableMapEvent, indexes: tuple[int, ...],
              values: tuple[list[Any], ...] | None, count: int) -> list[dict[str, Any]]:
    if values is None:
        return []
    names = [table.columns[i].name or f"@{i + 1}" for i in indexes]
    return [{n: values[c][r] for c, n in enumerate(names)} for r in range(count)]
