"""Server responses: OK / ERR / EOF packets and text-protocol result sets; command builders.

A COM_QUERY is answered by an OK (statement without result), an ERR, or a result set:
``column count | column definitions | [EOF] | rows | EOF or OK(0xFE)``. The bracketed EOF and the
kind of terminator depend on ``CLIENT_DEPRECATE_EOF``. A text row starting with 0xFE is told
apart from a terminator by its length: OK/EOF packets are short (< 9 bytes for EOF, < 0xFFFFFF
for OK), while a row whose first field is that long would be 0xFE + 8 bytes of length + data.

:class:`TextResultReader` is a small state machine: feed it the payloads of one response in
order; once :attr:`TextResultReader.done` is true it holds the columns, rows and final status.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .binlog.native import text_row as _native_text_row
from .capabilities import Capability, Command, ServerStatus
from .errors import AccessDenied, MalformedPacket, ProtocolError, ServerError, TruncatedData
from .packets import PacketCodec, read_lenenc, read_lenenc_bytes, read_lenenc_int

__all__ = [
    "OkPacket",
    "EofPacket",
    "ColumnDefinition",
    "ResultSet",
    "TextResultReader",
    "parse_ok",
    "parse_eof",
    "parse_err",
    "is_ok",
    "is_err",
    "is_eof",
    "parse_column_definition",
    "parse_text_row",
    "cell_text",
    "cell_text_or_none",
    "com_query",
    "com_ping",
    "com_quit",
    "ACCESS_DENIED_CODES",
    "BINARY_CHARSET",
    "is_binary_column",
    "TEXT_STR",
    "TEXT_BYTES",
    "TEXT_INT",
    "TEXT_FLOAT",
    "TEXT_UTF8",
    "TEXT_DEFAULT",
    "kept_payloads",
    "kept_row",
    "check_kept",
]

#: What a columnar read (``TextResultReader(kinds=...)``) makes of a column's non-NULL values:
#: ``str`` (UTF-8, surrogateescape) / ``bytes`` — what :func:`parse_text_row` gives a
#: non-binary / binary column —, ``int`` / ``float`` of a plain number (``int(text)``,
#: ``float(text)``), ``str`` when valid UTF-8 else ``bytes``. The last three are what a
#: snapshot's converters would make of the text anyway, done while parsing (native extension
#: only: see :attr:`ResultSet.converted`).
TEXT_STR, TEXT_BYTES, TEXT_INT, TEXT_FLOAT, TEXT_UTF8 = range(5)
#: A requested kind meaning "as :func:`parse_text_row` gives it" (by the binary flag).
TEXT_DEFAULT = 255

_U16 = struct.Struct("<H")
_U16_U16 = struct.Struct("<HH")
_COLUMN_FIXED = struct.Struct("<HIBHB")  # charset, length, type, flags, decimals

_SESSION_TRACK = int(Capability.SESSION_TRACK)
_DEPRECATE_EOF = int(Capability.DEPRECATE_EOF)
_EXTENDED_METADATA = int(Capability.MARIADB_EXTENDED_METADATA)
_SESSION_STATE_CHANGED = int(ServerStatus.SESSION_STATE_CHANGED)
_MORE_RESULTS = int(ServerStatus.MORE_RESULTS_EXISTS)

#: Error codes that mean "these credentials are refused" rather than "something broke":
#: 1044 ER_DBACCESS_DENIED_ERROR, 1045 ER_ACCESS_DENIED_ERROR, 1251 ER_NOT_SUPPORTED_AUTH_MODE,
#: 1698 ER_ACCESS_DENIED_NO_PASSWORD_ERROR, 1820/1862 password expired, 3118 account locked.
ACCESS_DENIED_CODES = frozenset({1044, 1045, 1251, 1698, 1820, 1862, 3118})

#: Collation id of the ``binary`` character set.
BINARY_CHARSET = 63


@dataclass(frozen=True, slots=True)
class OkPacket:
    """An OK packet (header 0x00, or 0xFE when it ends a result set under DEPRECATE_EOF).

    ``info`` is the human-readable message; in the first OK of a MariaDB 11.4+ connection it
    carries the zero-configuration TLS fingerprint instead. ``session_state`` holds the raw
    session-tracking items as ``(type, data)`` pairs.
    """

    affected_rows: int
    last_insert_id: int
    status: int
    warnings: int
    info: bytes = b""
    session_state: tuple[tuple[int, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class EofPacket:
    """The pre-DEPRECATE_EOF end marker: warnings and server status."""

    warnings: int
    status: int


@dataclass(frozen=True, slots=True)
class ColumnDefinition:
    """One column of a result set (Protocol::ColumnDefinition41)."""

    schema: str
    table: str
    org_table: str
    name: str
    org_name: str
    charset: int
    length: int
    type: int
    flags: int
    decimals: int


@dataclass(frozen=True, slots=True)
class ResultSet:
    """A complete text result set (or just the OK of a statement without one)."""

    columns: tuple[ColumnDefinition, ...]
    rows: list[tuple[str | bytes | None, ...]]
    status: int
    warnings: int
    ok: OkPacket | None = None  # the OK of a statement without result set
    #: A columnar read's values, one list per column (``rows`` is then empty).
    values: tuple[list[Any], ...] | None = None
    #: A columnar read applied every column's requested kind; False: the values are
    #: ``str``/``bytes`` as :func:`parse_text_row` gives them, or a mix with the kinds' values.
    converted: bool = False
    #: A kept read's rows, unparsed (``rows`` is then empty): each a 4-byte little-endian
    #: length and the row payload (:func:`kept_payloads`); how many, and where the last starts.
    kept: bytearray | None = None
    kept_rows: int = 0
    kept_last: int = -1

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


#: Column types whose values are byte strings; with the binary charset they are returned as
#: bytes (numbers and temporal values also carry charset 63 but are text).
_STRING_TYPES = frozenset({15, 16, 249, 250, 251, 252, 253, 254, 255})


def is_binary_column(column: ColumnDefinition) -> bool:
    """True for BINARY/VARBINARY/BLOB/BIT/GEOMETRY columns, whose text values are raw bytes."""
    return column.charset == BINARY_CHARSET and column.type in _STRING_TYPES


# --- classification ------------------------------------------------------------------------------


def is_err(payload: bytes | memoryview) -> bool:
    return len(payload) > 0 and payload[0] == 0xFF


def is_ok(payload: bytes | memoryview) -> bool:
    """An OK packet that answers a command (header 0x00)."""
    return len(payload) >= 7 and payload[0] == 0x00


def is_eof(payload: bytes | memoryview, capabilities: int = 0) -> bool:
    """An EOF packet, or under DEPRECATE_EOF the 0xFE-headed OK that ends a result set."""
    if not payload or payload[0] != 0xFE:
        return False
    if capabilities & _DEPRECATE_EOF:
        return len(payload) < 0xFFFFFF
    return len(payload) < 9


# --- parsers ---------------------------------------------------------------------------------------


def parse_ok(payload: bytes | memoryview, capabilities: int) -> OkPacket:
    """Parse an OK packet (header 0x00 or 0xFE).

    Raises:
        MalformedPacket: not an OK packet, or truncated.
    """
    if len(payload) < 1 or payload[0] not in (0x00, 0xFE):
        raise MalformedPacket("not an OK packet")
    affected, offset = read_lenenc_int(payload, 1)
    insert_id, offset = read_lenenc_int(payload, offset)
    if affected is None or insert_id is None:
        raise MalformedPacket("NULL marker inside an OK packet")
    if offset + 4 > len(payload):
        raise TruncatedData("OK packet truncated before status and warnings")
    status, warnings = _U16_U16.unpack_from(payload, offset)
    offset += 4
    info = b""
    state: list[tuple[int, bytes]] = []
    if offset < len(payload):
        if capabilities & _SESSION_TRACK:
            raw_info, offset = read_lenenc_bytes(payload, offset)
            info = raw_info or b""
            if status & _SESSION_STATE_CHANGED and offset < len(payload):
                blob, offset = read_lenenc_bytes(payload, offset)
                state = _parse_session_state(blob or b"")
        else:
            info = bytes(payload[offset:])
    return OkPacket(affected, insert_id, status, warnings, info, tuple(state))


def _parse_session_state(blob: bytes) -> list[tuple[int, bytes]]:
    items: list[tuple[int, bytes]] = []
    offset = 0
    while offset < len(blob):
        kind = blob[offset]
        data, offset = read_lenenc_bytes(blob, offset + 1)
        items.append((kind, data or b""))
    return items


def parse_eof(payload: bytes | memoryview) -> EofPacket:
    """Parse a (pre-DEPRECATE_EOF) EOF packet."""
    if len(payload) < 1 or payload[0] != 0xFE:
        raise MalformedPacket("not an EOF packet")
    if len(payload) < 5:
        # Pre-4.1 servers sent a bare 0xFE; binlake speaks 4.1+ only.
        raise TruncatedData("EOF packet truncated")
    warnings, status = _U16_U16.unpack_from(payload, 1)
    return EofPacket(warnings, status)


def parse_err(payload: bytes | memoryview) -> ServerError:
    """Turn an ERR packet into the exception to raise (AccessDenied for refused credentials).

    Returns the exception rather than raising it so callers can choose the subclass (e.g. the
    binlog dump maps 1236 to its own hierarchy).
    """
    if len(payload) < 3 or payload[0] != 0xFF:
        raise MalformedPacket("not an ERR packet")
    (code,) = _U16.unpack_from(payload, 1)
    offset = 3
    sqlstate = ""
    if code == 0xFFFF:
        raise MalformedPacket("progress-report packet where an ERR packet was expected")
    if len(payload) >= 9 and payload[3] == 0x23:  # '#'
        sqlstate = bytes(payload[4:9]).decode("ascii", "replace")
        offset = 9
    message = bytes(payload[offset:]).decode("utf-8", "replace")
    cls = AccessDenied if code in ACCESS_DENIED_CODES else ServerError
    return cls(code, sqlstate, message)


def parse_column_definition(payload: bytes | memoryview, capabilities: int) -> ColumnDefinition:
    """Parse a ColumnDefinition41 packet."""
    offset = 0
    fields: list[str] = []
    for _ in range(6):  # catalog, schema, table, org_table, name, org_name
        raw, offset = read_lenenc_bytes(payload, offset)
        fields.append((raw or b"").decode("utf-8", "surrogateescape"))
    if capabilities & _EXTENDED_METADATA:
        _, offset = read_lenenc_bytes(payload, offset)
    fixed_len, offset = read_lenenc_int(payload, offset)
    if fixed_len is None or fixed_len < 10:
        raise MalformedPacket(f"column definition with fixed-field length {fixed_len}")
    if offset + fixed_len > len(payload):
        raise TruncatedData("column definition truncated in its fixed fields")
    charset, length, col_type, flags, decimals = _COLUMN_FIXED.unpack_from(payload, offset)
    return ColumnDefinition(fields[1], fields[2], fields[3], fields[4], fields[5],
                            charset, length, col_type, flags, decimals)


def parse_text_row(payload: bytes | memoryview,
                   binary: tuple[bool, ...]) -> tuple[str | bytes | None, ...]:
    """Parse one text-protocol row: ``str`` values, ``bytes`` for binary columns, None for NULL.

    Inlined for the common one-byte lengths: a snapshot parses millions of rows here, and a
    call per value (``read_lenenc_bytes``) was half of its CPU time. The native extension's
    ``text_row`` parses the row when it is built (the same values; a malformed row comes back
    here so the error is this function's).
    """
    data = payload if isinstance(payload, bytes) else bytes(payload)
    if _native_text_row is not None:
        row = _native_text_row(data, binary)
        if row is not None:
            return row
    size = len(data)
    offset = 0
    values: list[str | bytes | None] = []
    append = values.append
    for is_binary in binary:
        if offset >= size:
            raise TruncatedData(f"text row truncated at offset {offset}")
        first = data[offset]
        if first < 0xFB:
            start = offset + 1
            end = start + first
        elif first == 0xFB:  # NULL
            append(None)
            offset += 1
            continue
        else:
            length, start = read_lenenc(data, offset)
            end = start + length
        if end > size:
            raise TruncatedData(
                f"length-encoded string of {end - start} bytes truncated at offset {start}")
        raw = data[start:end]
        append(raw if is_binary else raw.decode("utf-8", "surrogateescape"))
        offset = end
    if offset != len(payload):
        raise MalformedPacket(
            f"text row has {len(payload) - offset} bytes after its {len(binary)} values")
    return tuple(values)


_U32 = struct.Struct("<I")


def cell_text(value: str | bytes | None) -> str:
    """A text-protocol cell as ``str``, for a query whose column cannot be NULL: a NULL there
    is the server answering something else (:class:`~protocol.errors.ProtocolError`)."""
    if value is None:
        raise ProtocolError("unexpected NULL from the server")
    return value.decode() if isinstance(value, bytes) else value


def cell_text_or_none(value: str | bytes | None) -> str | None:
    """A text-protocol cell as ``str``, NULL as ``None``."""
    return None if value is None else cell_text(value)


def kept_payloads(kept: bytes | bytearray) -> list[bytes]:
    """The row payloads of a kept read (:attr:`ResultSet.kept`), one by one (the slow path:
    for errors and tests).

    Raises:
        TruncatedData: the framing runs past the end.
    """
    payloads = []
    offset = 0
    while offset < len(kept):
        if offset + 4 > len(kept):
            raise TruncatedData(f"kept rows truncated at offset {offset}")
        (length,) = _U32.unpack_from(kept, offset)
        if offset + 4 + length > len(kept):
            raise TruncatedData(f"kept row of {length} bytes truncated at offset {offset}")
        payloads.append(bytes(kept[offset + 4:offset + 4 + length]))
        offset += 4 + length
    return payloads


def kept_row(kept: bytes | bytearray, at: int,
             binary: tuple[bool, ...]) -> tuple[str | bytes | None, ...]:
    """The kept row starting at ``at`` (e.g. :attr:`ResultSet.kept_last`), parsed as
    :func:`parse_text_row` parses a row."""
    if at < 0 or at + 4 > len(kept):
        raise TruncatedData(f"no kept row at offset {at}")
    (length,) = _U32.unpack_from(kept, at)
    if at + 4 + length > len(kept):
        raise TruncatedData(f"kept row of {length} bytes truncated at offset {at}")
    return parse_text_row(bytes(kept[at + 4:at + 4 + length]), binary)


def check_kept(kept: bytes | bytearray, binary: tuple[bool, ...]) -> None:
    """Parse every kept row as :func:`parse_text_row` would when the rows were read: raises
    the same typed error (a malformed row), else returns. For a native conversion of kept
    rows that refused them, so the error is the one a parsed read raises."""
    for payload in kept_payloads(kept):
        parse_text_row(payload, binary)


# --- the response to one COM_QUERY -----------------------------------------------------------------


class TextResultReader:
    """Assemble the response to one COM_QUERY from its packets.

    Feed payloads in order with :meth:`feed` until :attr:`done`; then :attr:`result` is set.
    An ERR packet raises the :class:`ServerError` it carries. If the server announces more
    results (MORE_RESULTS_EXISTS, e.g. from a stored procedure), they are read and appended to
    :attr:`more` so the connection stays in sync.

    With ``kinds`` (``TEXT_*`` of the first columns; the others by their binary flag), the rows
    are gathered column-wise in :attr:`ResultSet.values`, and :meth:`take_rows` lets the packet
    codec parse the buffered row packets in bulk. With ``keep``, the rows are kept unparsed in
    :attr:`ResultSet.kept` (the codec copies the buffered row packets in bulk), for a
    conversion of the whole result at once (a snapshot chunk straight into Arrow).
    """

    def __init__(self, capabilities: int, kinds: bytes | None = None, *,
                 keep: bool = False) -> None:
        self.capabilities = capabilities
        self._requested = kinds
        self._keep = keep
        self.done = False
        self.result: ResultSet | None = None
        self.more: list[ResultSet] = []
        self._reset()

    def _reset(self) -> None:
        self._state = "first"
        self._column_count = 0
        self._columns: list[ColumnDefinition] = []
        self._binary: tuple[bool, ...] = ()
        self._rows: list[tuple[str | bytes | None, ...]] = []
        self._kinds = b""
        self._values: list[list[Any]] | None = None
        self._parsed_here = 0  # columnar rows parsed by feed, not by take_rows
        self._fallbacks = 0
        self._kept: bytearray | None = None
        self._kept_rows = 0
        self._kept_last = -1

    @property
    def reading_rows(self) -> bool:
        """Between the column definitions and the end of the rows: :meth:`take_rows` applies."""
        return self._state == "rows" and not self.done

    def pump(self, codec: PacketCodec) -> bool:
        """Feed every packet ``codec`` holds (buffered row packets in bulk: :meth:`take_rows`);
        True once the response is complete, False when it needs more bytes from the server."""
        while not self.done:
            if self.reading_rows:
                self.take_rows(codec)
            packet = codec.next_packet()
            if packet is None:
                return False
            self.feed(packet[1])
        return True

    @property
    def gathered(self) -> int:
        """Rows of a columnar read gathered and not yet taken (:meth:`take_values`)."""
        return len(self._values[0]) if self._values else 0

    def take_values(self, count: int) -> tuple[tuple[list[Any], ...], bool]:
        """Take the first ``count`` gathered rows of a columnar read, one list per column, and
        whether they are converted (as :attr:`ResultSet.converted` would say so far): a reader
        of a result bigger than memory hands it on in pieces instead of holding it whole. The
        rows left make up :attr:`result` (or the next take)."""
        values = self._values or []
        taken = tuple(column[:count] for column in values)
        for column in values:
            del column[:count]
        converted = not self._fallbacks and (
            not self._parsed_here or max(self._kinds, default=0) <= TEXT_BYTES)
        return taken, converted

    def take_rows(self, codec: PacketCodec) -> int:
        """Take the complete row packets ``codec`` holds in bulk (a columnar read with the
        native extension; else nothing); how many."""
        if self._state != "rows":
            return 0
        if self._kept is not None:
            rows, last = codec.text_collect(self._kept)
            if rows:
                self._kept_rows += rows
                self._kept_last = last
            return rows
        if self._values is None:
            return 0
        rows, fallbacks = codec.text_rows(self._kinds, self._values)
        self._fallbacks += fallbacks
        return rows

    def feed(self, payload: bytes) -> None:
        if self.done:
            raise MalformedPacket("packet after the end of a query response")
        if is_err(payload):
            self.done = True
            raise parse_err(payload)
        state = self._state
        if state == "rows":
            if is_eof(payload, self.capabilities):
                self._finish_rows(payload)
            elif self._kept is not None:
                self._kept_last = len(self._kept)
                self._kept += _U32.pack(len(payload))
                self._kept += payload
                self._kept_rows += 1
            elif self._values is None:
                self._rows.append(parse_text_row(payload, self._binary))
            else:
                for values, value in zip(self._values, parse_text_row(payload, self._binary),
                                         strict=True):
                    values.append(value)
                self._parsed_here += 1
        elif state == "first":
            if payload and payload[0] == 0x00:
                ok = parse_ok(payload, self.capabilities)
                self._emit(ResultSet((), [], ok.status, ok.warnings, ok), ok.status)
            elif payload and payload[0] == 0xFB:
                raise MalformedPacket("server asked for LOCAL INFILE, which binlake never allows")
            else:
                count, _ = read_lenenc_int(payload, 0)
                if not count:
                    raise MalformedPacket(f"result set with column count {count}")
                self._column_count = count
                self._state = "columns"
        elif state == "columns":
            column = parse_column_definition(payload, self.capabilities)
            self._columns.append(column)
            if len(self._columns) == self._column_count:
                self._binary = tuple(is_binary_column(c) for c in self._columns)
                if self._keep:
                    self._kept = bytearray()
                elif self._requested is not None:
                    requested = self._requested
                    self._kinds = bytes(
                        requested[i] if i < len(requested) and requested[i] != TEXT_DEFAULT
                        else TEXT_BYTES if b else TEXT_STR for i, b in enumerate(self._binary))
                    self._values = [[] for _ in self._binary]
                self._state = "rows" if self.capabilities & _DEPRECATE_EOF else "column-eof"
        elif state == "column-eof":
            parse_eof(payload)
            self._state = "rows"

    def _finish_rows(self, payload: bytes) -> None:
        if self.capabilities & _DEPRECATE_EOF:
            ok = parse_ok(payload, self.capabilities)
            status, warnings = ok.status, ok.warnings
        else:
            eof = parse_eof(payload)
            status, warnings = eof.status, eof.warnings
        values = tuple(self._values) if self._values is not None else None
        converted = values is not None and not self._fallbacks and (
            not self._parsed_here or max(self._kinds) <= TEXT_BYTES)
        self._emit(ResultSet(tuple(self._columns), self._rows, status, warnings, None, values,
                             converted, self._kept, self._kept_rows, self._kept_last), status)

    def _emit(self, result: ResultSet, status: int) -> None:
        if self.result is None:
            self.result = result
        else:
            self.more.append(result)
        if status & _MORE_RESULTS:
            self._reset()
        else:
            self.done = True


# --- command builders ----------------------------------------------------------------------------


def com_query(sql: str | bytes) -> bytes:
    """COM_QUERY payload for one SQL statement (sent with sequence id 0)."""
    return bytes((Command.QUERY,)) + (sql.encode("utf-8") if isinstance(sql, str) else sql)


def com_ping() -> bytes:
    return bytes((Command.PING,))


def com_quit() -> bytes:
    return bytes((Command.QUIT,))
