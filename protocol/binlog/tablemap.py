"""TABLE_MAP_EVENT (19): bind a table id to a table, its column types and column metadata.

What the server tells about the columns beyond their types is its *optional metadata* (below).

Layout of the body (after the 19-byte header, CRC stripped)::

    table_id      6 bytes (4 when the FDE's post-header length for TABLE_MAP is 6)
    flags         2
    schema        u8 length, name, NUL
    table         u8 length, name, NUL
    column_count  lenenc
    column_types  column_count bytes
    metadata      lenenc length, then per-column metadata (widths in ``coltypes``)
    null_bits     (column_count + 7) // 8, bit i set = column i nullable
    optional metadata   TLVs ``type u8, length lenenc, value`` up to the end of the body

Optional metadata (MariaDB 10.5+ and MySQL 8 with ``binlog_row_metadata=MINIMAL|FULL``) gives
signedness, character sets, column names, ENUM/SET labels, geometry types, the primary key and
(MySQL) visibility and vector dimensions. Unknown TLV types are skipped by their length. Without
it, integers decode as signed, character columns stay ``bytes`` and ENUM/SET decode to their
numbers (see ``rows``); the Column records say so by carrying ``charset=None`` /
``enum_values=None``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..errors import EventDecodeError, MalformedPacket
from ..frozen import positional_maker
from ..packets import read_lenenc
from .charsets import decoder
from .coltypes import (
    CHARACTER_TYPES,
    ENUM_SET_TYPES,
    NUMERIC_TYPES,
    FieldType,
    charset_name,
    codec_for_collation,
    read_metadata,
    resolve_string_meta,
)
from .model import Column, ColumnFlag, EventHeader, TableMapEvent

__all__ = ["decode_table_map", "TableMapCache", "OptionalMetadata"]

TABLE_MAP_EVENT = 19

TABLE_MAP_CACHE_SIZE = 4096  # as rows.DECODER_CACHE_SIZE: thousands of tables


class OptionalMetadata:
    """TLV type codes of the TABLE_MAP optional metadata."""

    SIGNEDNESS = 1
    DEFAULT_CHARSET = 2
    COLUMN_CHARSET = 3
    COLUMN_NAME = 4
    SET_STR_VALUE = 5
    ENUM_STR_VALUE = 6
    GEOMETRY_TYPE = 7
    SIMPLE_PRIMARY_KEY = 8
    PRIMARY_KEY_WITH_PREFIX = 9
    ENUM_AND_SET_DEFAULT_CHARSET = 10
    ENUM_AND_SET_COLUMN_CHARSET = 11
    COLUMN_VISIBILITY = 12
    VECTOR_DIMENSIONALITY = 13


def _name(buf: bytes, offset: int, what: str) -> tuple[str, int]:
    if offset >= len(buf):
        raise EventDecodeError(f"TABLE_MAP ends before the {what} name", type_code=TABLE_MAP_EVENT)
    length = buf[offset]
    start = offset + 1
    end = start + length
    if end >= len(buf) or buf[end] != 0:
        raise EventDecodeError(f"TABLE_MAP {what} name is not NUL-terminated",
                               type_code=TABLE_MAP_EVENT)
    return buf[start:end].decode("utf-8", "surrogateescape"), end + 1


def _bits_msb_first(value: bytes, count: int) -> list[bool]:
    return [bool(value[i >> 3] & (0x80 >> (i & 7))) for i in range(min(count, len(value) * 8))]


def _decode_label(raw: bytes, collation: int | None) -> str:
    name = charset_name(collation) if collation is not None else None
    legacy = decoder(name) if name is not None else None
    if legacy is not None:
        label = legacy(raw)
        if isinstance(label, str):
            return label
    codec = codec_for_collation(collation) or "utf-8"
    if codec == "mysql-latin1":
        from .values import decode_mysql_latin1

        return decode_mysql_latin1(raw)
    return raw.decode(codec, "backslashreplace")


def decode_table_map(header: EventHeader, body: memoryview | bytes,
                     post_header_len: int, *, mariadb: bool = False) -> TableMapEvent:
    """Decode a TABLE_MAP_EVENT body.

    Args:
        header: the event's header (kept on the result).
        body: the bytes after the 19-byte header, CRC stripped.
        post_header_len: the FDE's post-header length for TABLE_MAP (8, or 6 for 4-byte ids).
        mariadb: the server is MariaDB (from the FDE): its character-set TLVs count GEOMETRY
            columns among the character columns (each with the binary collation), MySQL's
            do not — read the wrong way, every later string column gets its neighbour's
            collation.

    Raises:
        EventDecodeError: the body is truncated or inconsistent.
    """
    return _guarded(header, bytes(body), post_header_len, mariadb, None)


def _guarded(header: EventHeader, buf: bytes, post_header_len: int, mariadb: bool,
             definitions: _Definitions | None) -> TableMapEvent:
    """:func:`_decode`, every way a body can be malformed raised as one EventDecodeError."""
    try:
        return _decode(header, buf, post_header_len, mariadb, definitions)
    except MalformedPacket as exc:  # EventDecodeError, or a truncated/invalid lenenc
        if isinstance(exc, EventDecodeError) and exc.type_code is not None:
            raise
        raise EventDecodeError(str(exc), type_code=TABLE_MAP_EVENT, file=header.file,
                               position=header.position) from exc
    except (IndexError, ValueError) as exc:  # slices that ran short
        raise EventDecodeError(f"malformed TABLE_MAP: {exc}", type_code=TABLE_MAP_EVENT,
                               file=header.file, position=header.position) from exc


# TableMapEvent(...) with every field, built in C when the extension is there: a cached
# definition under a new header, once per TABLE_MAP event.
_make_table_map = positional_maker(TableMapEvent)


class TableMapCache:
    """Parsed TABLE_MAPs of one stream, by body (an :class:`~.stream.EventStream` owns one).

    Servers send a TABLE_MAP before every statement, so a stream of small transactions decodes
    the same table definition over and over. The parsed TableMapEvent depends only on the body
    after the table id (and on the id's width and the server's flavour), so it is cached under
    those: a hit costs a copy of the body (none when the whole body, table id included,
    repeats one seen before), a dict lookup and a new TableMapEvent sharing the
    columns tuple (by which ``rows.DecoderCache`` finds the row decoder at once). An ALTER
    changes the body, so it gets a new entry; old ones age out (LRU, ``size`` entries).

    A table seen for the first time is parsed up to its name only when another table of the
    same definition (the bytes after the name) came before: thousands of tables of a few
    shapes cost a few parses, and share their columns tuple.
    """

    __slots__ = ("size", "_maps", "_bodies", "_definitions")

    def __init__(self, size: int = TABLE_MAP_CACHE_SIZE) -> None:
        self.size = size
        self._maps: OrderedDict[tuple[int, bool, bytes], TableMapEvent] = OrderedDict()
        # Whole bodies (table id included) seen before → the fields of the TableMapEvent they
        # make, under the id width and flavour they were parsed with: the usual TABLE_MAP
        # repeats its predecessor byte for byte, and then costs one lookup and no slicing.
        self._bodies: dict[bytes, tuple[int, bool, tuple[Any, ...]]] = {}
        # A definition first seen under another table's name: one parse per table shape.
        self._definitions: _Definitions = {}

    def __len__(self) -> int:
        return len(self._maps)

    def decode(self, header: EventHeader, body: memoryview | bytes,
               post_header_len: int, *, mariadb: bool = False) -> TableMapEvent:
        """:func:`decode_table_map`, parsing each distinct definition once."""
        if type(body) is bytes:
            seen = self._bodies.get(body)
            if seen is not None and seen[0] == post_header_len and seen[1] is mariadb:
                return _make_table_map(header, *seen[2])
        id_width = 4 if post_header_len == 6 else 6
        key = (post_header_len, mariadb, bytes(body[id_width:]))
        known = self._maps.get(key)
        if known is not None:
            self._maps.move_to_end(key)
            table = _make_table_map(
                header, int.from_bytes(body[:id_width], "little"), known.flags, known.schema,
                known.table, known.columns, known.primary_key, known.has_full_metadata,
                known.optional_metadata, known.described_by, ())
        else:
            definitions = self._definitions
            table = _guarded(header, bytes(body), post_header_len, mariadb, definitions)
            if len(definitions) > self.size:
                del definitions[next(iter(definitions))]  # the oldest
            self._maps[key] = table
            if len(self._maps) > self.size:
                self._maps.popitem(last=False)
        if type(body) is bytes:
            bodies = self._bodies
            if len(bodies) >= self.size:
                bodies.clear()  # rare (that many distinct ids or definitions): start over
            bodies[body] = (post_header_len, mariadb, (
                table.table_id, table.flags, table.schema, table.table, table.columns,
                table.primary_key, table.has_full_metadata, table.optional_metadata,
                table.described_by, ()))
        return table


#: A table definition as the bytes after the table's name give it (column count, types,
#: metadata, nullability, optional metadata) under the server's flavour → the fields of the
#: TableMapEvent those bytes make: columns, primary key, full metadata, optional metadata seen.
_Definition = tuple[tuple[Column, ...], tuple[int, ...], bool, frozenset[int]]
_Definitions = dict[tuple[bool, bytes], _Definition]


def _decode(header: EventHeader, buf: bytes, post_header_len: int, mariadb: bool,
            definitions: _Definitions | None) -> TableMapEvent:
    id_width = 4 if post_header_len == 6 else 6
    if len(buf) < id_width + 2:
        raise EventDecodeError("TABLE_MAP post-header truncated")
    table_id = int.from_bytes(buf[:id_width], "little")
    flags = int.from_bytes(buf[id_width:id_width + 2], "little")
    off = post_header_len if post_header_len in (6, 8) else id_width + 2
    schema, off = _name(buf, off, "schema")
    table, off = _name(buf, off, "table")
    if definitions is None:
        definition = _definition(buf, off, mariadb)
    else:
        # The definition depends on nothing before it: tables of one shape (a table per
        # customer, per month...) share one parse and one columns tuple, which every cache
        # keyed by that tuple (row decoders, schema signatures) then finds at once.
        key = (mariadb, buf[off:])
        known = definitions.get(key)
        if known is None:
            known = definitions[key] = _definition(buf, off, mariadb)
        definition = known
    columns, primary_key, has_full_metadata, optional_metadata = definition
    return _make_table_map(header, table_id, flags, schema, table, columns, primary_key,
                           has_full_metadata, optional_metadata, None, ())


def _definition(buf: bytes, off: int, mariadb: bool) -> _Definition:
    """Parse the table definition that starts at ``off`` (after the table's name)."""
    count, off = read_lenenc(buf, off)
    types = buf[off:off + count]
    if len(types) != count:
        raise EventDecodeError("TABLE_MAP column types truncated")
    off += count
    meta_len, off = read_lenenc(buf, off)
    meta_block = buf[off:off + meta_len]
    if len(meta_block) != meta_len:
        raise EventDecodeError("TABLE_MAP metadata block truncated")
    off += meta_len
    null_len = (count + 7) // 8
    null_bits = buf[off:off + null_len]
    if len(null_bits) != null_len:
        raise EventDecodeError("TABLE_MAP null bitmap truncated")
    off += null_len

    # Per-column raw facts first; optional metadata then refines them.
    real_types: list[int] = []
    metas: list[int] = []
    lengths: list[int | None] = []
    moff = 0
    for i in range(count):
        t = types[i]
        meta, moff = read_metadata(t, meta_block, moff)
        real = t
        length: int | None = None
        if t in (FieldType.STRING, FieldType.ENUM, FieldType.SET):
            real, length = resolve_string_meta(meta)
            if real not in (FieldType.STRING, FieldType.ENUM, FieldType.SET):
                real = FieldType.STRING
        elif t in (FieldType.VARCHAR, FieldType.VAR_STRING):
            length = meta
        elif t == FieldType.BIT:
            length = (meta >> 8) * 8 + (meta & 0xFF)
        elif t in (FieldType.BLOB, FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB,
                   FieldType.LONG_BLOB, FieldType.GEOMETRY, FieldType.JSON, FieldType.VECTOR):
            length = meta
        real_types.append(real)
        metas.append(meta)
        lengths.append(length)

    opt = _OptionalFields()
    end = len(buf)
    while off < end:
        tag = buf[off]
        length, off = read_lenenc(buf, off + 1)
        value = buf[off:off + length]
        if len(value) != length:
            raise EventDecodeError(f"TABLE_MAP optional metadata {tag} truncated")
        off += length
        opt.add(tag, value)

    # MariaDB gives YEAR a signedness bit too (its Field_year is a Field_tiny); MySQL does not.
    # Skipping that bit shifted every later numeric column's: an INT UNSIGNED after a YEAR
    # decoded as signed. YEAR itself takes no flag from it (it is always 0..2155).
    numeric = [i for i, t in enumerate(real_types)
               if t in NUMERIC_TYPES or (mariadb and t == FieldType.YEAR)]
    character = [i for i, t in enumerate(real_types)
                 if t in CHARACTER_TYPES or (mariadb and t == FieldType.GEOMETRY)]
    enum_set = [i for i, t in enumerate(real_types) if t in ENUM_SET_TYPES]
    geometry = [i for i, t in enumerate(real_types) if t == FieldType.GEOMETRY]
    enums = [i for i, t in enumerate(real_types) if t == FieldType.ENUM]
    sets = [i for i, t in enumerate(real_types) if t == FieldType.SET]
    vectors = [i for i, t in enumerate(real_types) if t == FieldType.VECTOR]

    unsigned: set[int] = set()
    if opt.signedness is not None:
        for idx, bit in zip(numeric, _bits_msb_first(opt.signedness, len(numeric)), strict=False):
            if bit and real_types[idx] != FieldType.YEAR:
                unsigned.add(idx)
    charsets = opt.charsets(character, opt.default_charset, opt.column_charset)
    enum_charsets = opt.charsets(enum_set, opt.enum_default_charset, opt.enum_column_charset)
    names = opt.column_names(count)
    enum_labels = opt.str_values(opt.enum_values, enums, enum_charsets)
    set_labels = opt.str_values(opt.set_values, sets, enum_charsets)
    geometry_types = dict(zip(geometry, opt.lenenc_list(opt.geometry_type), strict=False))
    vector_dims = dict(zip(vectors, opt.lenenc_list(opt.vector_dims), strict=False))
    primary_key = opt.primary_key()
    pk_set = set(primary_key)
    visible: list[bool] | None = None
    if opt.visibility is not None:
        visible = _bits_msb_first(opt.visibility, count)

    columns = []
    for i in range(count):
        t = real_types[i]
        meta = metas[i]
        flags_ = ColumnFlag.NONE
        if null_bits[i >> 3] & (1 << (i & 7)):
            flags_ |= ColumnFlag.NULLABLE
        if i in unsigned:
            flags_ |= ColumnFlag.UNSIGNED
        if i in pk_set:
            flags_ |= ColumnFlag.PRIMARY_KEY
        if visible is None or (i < len(visible) and visible[i]):
            flags_ |= ColumnFlag.VISIBLE
        charset = charsets.get(i) if t in CHARACTER_TYPES else enum_charsets.get(i)
        if t in CHARACTER_TYPES and charset == 63:
            flags_ |= ColumnFlag.BINARY
        precision = scale = None
        length = lengths[i]
        if t == FieldType.NEWDECIMAL:
            precision, scale = meta >> 8, meta & 0xFF
        elif t in (FieldType.DATETIME2, FieldType.TIMESTAMP2, FieldType.TIME2):
            scale = meta
        elif t in (FieldType.FLOAT, FieldType.DOUBLE):
            length = meta
        elif t == FieldType.VECTOR and i in vector_dims:
            precision = vector_dims[i]
        columns.append(Column(
            index=i, type_code=t, meta=meta, name=names[i] if names else None, flags=flags_,
            charset=charset, enum_values=enum_labels.get(i), set_values=set_labels.get(i),
            geometry_type=geometry_types.get(i), precision=precision, scale=scale,
            length=length,
        ))

    return tuple(columns), primary_key, names is not None, frozenset(opt.seen)


class _OptionalFields:
    """The raw optional-metadata TLV values of one TABLE_MAP, interpreted on demand."""

    def __init__(self) -> None:
        self.signedness: bytes | None = None
        self.default_charset: bytes | None = None
        self.column_charset: bytes | None = None
        self.names: bytes | None = None
        self.set_values: bytes | None = None
        self.enum_values: bytes | None = None
        self.geometry_type: bytes | None = None
        self.simple_pk: bytes | None = None
        self.pk_with_prefix: bytes | None = None
        self.enum_default_charset: bytes | None = None
        self.enum_column_charset: bytes | None = None
        self.visibility: bytes | None = None
        self.vector_dims: bytes | None = None
        self.seen: set[int] = set()

    _ATTRS = {
        OptionalMetadata.SIGNEDNESS: "signedness",
        OptionalMetadata.DEFAULT_CHARSET: "default_charset",
        OptionalMetadata.COLUMN_CHARSET: "column_charset",
        OptionalMetadata.COLUMN_NAME: "names",
        OptionalMetadata.SET_STR_VALUE: "set_values",
        OptionalMetadata.ENUM_STR_VALUE: "enum_values",
        OptionalMetadata.GEOMETRY_TYPE: "geometry_type",
        OptionalMetadata.SIMPLE_PRIMARY_KEY: "simple_pk",
        OptionalMetadata.PRIMARY_KEY_WITH_PREFIX: "pk_with_prefix",
        OptionalMetadata.ENUM_AND_SET_DEFAULT_CHARSET: "enum_default_charset",
        OptionalMetadata.ENUM_AND_SET_COLUMN_CHARSET: "enum_column_charset",
        OptionalMetadata.COLUMN_VISIBILITY: "visibility",
        OptionalMetadata.VECTOR_DIMENSIONALITY: "vector_dims",
    }

    def add(self, tag: int, value: bytes) -> None:
        self.seen.add(tag)
        attr = self._ATTRS.get(tag)
        if attr is not None:  # unknown TLV types are skipped by their length
            setattr(self, attr, value)

    @staticmethod
    def lenenc_list(value: bytes | None) -> list[int]:
        out: list[int] = []
        if value is None:
            return out
        off = 0
        while off < len(value):
            n, off = read_lenenc(value, off)
            out.append(n)
        return out

    def charsets(self, indexes: list[int], default: bytes | None,
                 per_column: bytes | None) -> dict[int, int]:
        """Collation id per column index, from a DEFAULT_* or a COLUMN_* TLV."""
        if default is not None:
            pairs = self.lenenc_list(default)
            if not pairs:
                raise EventDecodeError("empty DEFAULT_CHARSET optional metadata")
            result = dict.fromkeys(indexes, pairs[0])
            for k in range(1, len(pairs) - 1, 2):
                nth, collation = pairs[k], pairs[k + 1]
                if nth >= len(indexes):
                    raise EventDecodeError("DEFAULT_CHARSET names a column that does not exist")
                result[indexes[nth]] = collation
            return result
        if per_column is not None:
            return dict(zip(indexes, self.lenenc_list(per_column), strict=False))
        return {}

    def column_names(self, count: int) -> list[str] | None:
        if self.names is None:
            return None
        names: list[str] = []
        off = 0
        value = self.names
        while off < len(value):
            n, off = read_lenenc(value, off)
            raw = value[off:off + n]
            if len(raw) != n:
                raise EventDecodeError("COLUMN_NAME optional metadata truncated")
            names.append(raw.decode("utf-8", "surrogateescape"))
            off += n
        if len(names) != count:
            raise EventDecodeError(f"COLUMN_NAME has {len(names)} names for {count} columns")
        return names

    def str_values(self, value: bytes | None, indexes: list[int],
                   collations: dict[int, int]) -> dict[int, tuple[str, ...]]:
        out: dict[int, tuple[str, ...]] = {}
        if value is None:
            return out
        off = 0
        for idx in indexes:
            if off >= len(value):
                break
            n, off = read_lenenc(value, off)
            labels = []
            for _ in range(n):
                length, off = read_lenenc(value, off)
                raw = value[off:off + length]
                if len(raw) != length:
                    raise EventDecodeError("ENUM/SET labels truncated")
                labels.append(_decode_label(raw, collations.get(idx)))
                off += length
            out[idx] = tuple(labels)
        return out

    def primary_key(self) -> tuple[int, ...]:
        if self.simple_pk is not None:
            return tuple(self.lenenc_list(self.simple_pk))
        if self.pk_with_prefix is not None:
            pairs = self.lenenc_list(self.pk_with_prefix)
            return tuple(pairs[0::2])
        return ()
