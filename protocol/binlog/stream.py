"""A sans-I/O binlog event stream: raw events in, typed events with positions out.

``EventStream`` is fed one whole event at a time (from the network, after the session has
removed the OK byte and any semi-sync header; or from a binlog file via
:class:`protocol.binlog.filereader.BinlogFileReader`) and returns the decoded events::

    stream = EventStream()
    for raw in raw_events:
        for event in stream.feed(raw):
            ...

It keeps what decoding needs across events and nothing else:

* the binlog **file and position**: a (fake or real) ROTATE names the file and the position
  it continues at; each event's start is ``log_pos - event_size`` when the server filled
  ``log_pos``, else (MariaDB 11.4+ writes 0 inside transactions) the previous event's end.
  Artificial events (fake ROTATE, fake GTID_LIST, heartbeats, an FDE with ``log_pos`` 0) do
  not move the position. Every returned event's header carries ``file``, ``position`` and
  ``next_position``; ``next_position`` after a commit is the resume point.
* the **checksum algorithm** of the current file, from its FORMAT_DESCRIPTION_EVENT. Before
  the first FDE (the fake ROTATE of a dump) the caller's ``checksum`` hint is used; without a
  hint a trailing CRC32 is recognised by matching it.
* the **table map**: table id → :class:`~protocol.binlog.model.TableMapEvent`, dropped at the
  end of each statement (STMT_END_F), because servers repeat TABLE_MAP for every statement.
  The layer above may complete a TABLE_MAP that lacks metadata (no binlog_row_metadata=FULL)
  before the rows that follow it are decoded: synchronously with ``table_map_hook``, or with
  :meth:`EventStream.set_table_map` between two ``feed`` calls. A TRANSACTION_PAYLOAD holds
  its TABLE_MAPs and rows in one ``feed``, so :meth:`EventStream.tables_mapped_by` names the
  tables of an event *before* it is fed, for a hook that needs them prepared.

CRC32 trailers are verified by default (``verify_checksums=False`` skips the check, not the
stripping). MariaDB compressed events are decompressed and MySQL TRANSACTION_PAYLOADs unwrapped
here, so consumers only ever see plain events (the payload event itself is returned first, then
its inner events, which share its position).
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..errors import EventDecodeError, MalformedPacket
from ..frozen import positional_maker
from ..native_frames import feed_plain as _native_feed_plain
from .compression import (
    MAX_DECOMPRESSED_SIZE,
    decompress_rows_event,
    unwrap_transaction_payload,
)
from .events import (
    BinlogEvent,
    ChecksumAlg,
    EventType,
    FormatDescriptionEvent,
    MariadbGtidEvent,
    RotateEvent,
    TransactionPayloadEvent,
    XidEvent,
    decode_event,
    decode_format_description,
    decode_mariadb_gtid,
    decode_mysql_gtid,
    decode_xid,
)
from .header import (
    CHECKSUM_LEN,
    HEADER_LEN,
    LOG_EVENT_ARTIFICIAL_F,
    crc32_of,
    parse_header,
    verify_crc32,
)
from .model import BinlogPosition, EventHeader, RowsEvent, RowsKind, TableMapEvent

__all__ = ["Event", "EventStream"]

Event = BinlogEvent | TableMapEvent | RowsEvent

_ROWS_KIND = {
    23: RowsKind.INSERT, 24: RowsKind.UPDATE, 25: RowsKind.DELETE,
    30: RowsKind.INSERT, 31: RowsKind.UPDATE, 32: RowsKind.DELETE,
    39: RowsKind.UPDATE,
}
_STMT_END_F = 0x0001
# Events a server sends that are not in the binlog and so never move the position.
_NEVER_MOVE = frozenset({EventType.HEARTBEAT, EventType.HEARTBEAT_V2})
# ... nor do these when their log_pos is 0 (a fake ROTATE/GTID_LIST, an FDE sent on a dump).
_ARTIFICIAL_WHEN_LOG_POS_0 = frozenset({EventType.FORMAT_DESCRIPTION, EventType.ROTATE,
                                        EventType.GTID_LIST})
# Everything the row layer decodes: TABLE_MAP, rows v1/v2/partial, MariaDB compressed rows.
_ROW_LAYER = frozenset({int(EventType.TABLE_MAP), *_ROWS_KIND, *range(166, 172)})
_TABLE_MAP = int(EventType.TABLE_MAP)
_FORMAT_DESCRIPTION = int(EventType.FORMAT_DESCRIPTION)
_TRANSACTION_PAYLOAD = int(EventType.TRANSACTION_PAYLOAD)
_ROTATE = int(EventType.ROTATE)

# The header fields as header.parse_header reads them, unpacked here directly so that each
# event's header is built once, already placed (this is the per-event hot path).
_HEADER = struct.Struct("<IBIIIH")
# zlib.crc32 of any bytes followed by their own CRC32 (little-endian): the CRC's residue.
_CRC32_RESIDUE = 0x2144DF1C
# The non-row events of every transaction, each decoded straight by its decoder (as
# events.decode_event would, which they need nothing else of: no FDE, no inflating).
_PER_TRANSACTION: dict[int, Callable[[EventHeader, bytes | memoryview], BinlogEvent]] = {
    int(EventType.XID): decode_xid, int(EventType.MARIADB_GTID): decode_mariadb_gtid,
    int(EventType.GTID): decode_mysql_gtid,
}
# EventHeader(...) with every field, built in C when the extension is there (once per event).
_make_header = positional_maker(EventHeader)
# What the C loop builds a plain MariaDB GTID and an XID with (decode_mariadb_gtid's and
# decode_xid's own construction, without their calls).
_make_gtid_event = positional_maker(MariadbGtidEvent)
_make_xid_event = positional_maker(XidEvent)


def _row_decoders() -> tuple[Callable[..., TableMapEvent], Callable[..., RowsEvent], Any]:
    """The TABLE_MAP and rows decoders of :mod:`.tablemap` / :mod:`.rows`, and the caches the
    calling stream owns: its parsed TABLE_MAPs (behind the first) and its generated row
    decoders (the third, handed to the second with every rows event).

    Imported on first use: they are a separate, heavier layer (column types, Arrow-friendly
    value decoding), and a stream of non-row events must not depend on them.
    """
    tablemap: Any = importlib.import_module(f"{__package__}.tablemap")
    rows: Any = importlib.import_module(f"{__package__}.rows")
    return tablemap.TableMapCache().decode, rows.decode_rows_event, rows.DecoderCache()


class EventStream:
    """Decode a sequence of whole binlog events, tracking file, position, FDE and table maps.

    Args:
        file: the binlog file the first event is in, if known (a fake ROTATE will set it).
        position: the position of the first event, if known.
        verify_checksums: check CRC32 trailers (raise ``ChecksumMismatch`` on a bad one).
        checksum: whether events before the first FDE carry a CRC32 (``None``: detect).
        max_decompressed_size: refuse compressed events that inflate beyond this.
        table_map_decoder, rows_decoder: replace :func:`.tablemap.decode_table_map` and
            :func:`.rows.decode_rows_event` (same signatures, the ``mariadb`` keyword
            included; the rows decoder gets the stream's ``decoders`` cache), e.g. in tests.
        table_map_hook: called with every decoded TABLE_MAP; what it returns is registered
            and returned instead (e.g. the TABLE_MAP completed from a schema source).
        arrow: rows events the native decoder covers also carry their columns in Arrow's
            layout (``RowsEvent.arrow``) and decode Python values only on demand: what the
            Parquet landing path wants (the daemon sets it).
    """

    def __init__(self, *, file: str = "", position: int = 4, verify_checksums: bool = True,
                 checksum: bool | None = None,
                 max_decompressed_size: int = MAX_DECOMPRESSED_SIZE,
                 table_map_decoder: Callable[..., TableMapEvent] | None = None,
                 rows_decoder: Callable[..., RowsEvent] | None = None,
                 table_map_hook: Callable[[TableMapEvent], TableMapEvent] | None = None,
                 arrow: bool = False) -> None:
        self._file = file
        self._arrow = arrow  # rows events carry Arrow chunks (RowsEvent.arrow): see rows.py
        self._position = position
        self._verify = verify_checksums
        self._checksum = checksum
        self._max_decompressed = max_decompressed_size
        self._fde: FormatDescriptionEvent | None = None
        self._mariadb = False  # the FDE names a MariaDB server (TABLE_MAPs differ in a detail)
        self._fde_crc: bool | None = None  # the FDE's checksum_alg is CRC32; None: no FDE
        self._post_header: dict[int, int] = {}  # post-header length by type, for this FDE
        self._table_maps: dict[int, TableMapEvent] = {}
        self._decode_table_map = table_map_decoder
        self._decode_rows = rows_decoder
        self._row_decoder_cache: Any = None
        self._table_map_hook = table_map_hook
        self._plain_decoders: tuple[Callable[..., Event] | None, ...] | None = None
        # The row layer's decoder of each type under the FDE in force (_row_layer_decoder).
        self._row_layer: dict[int, Callable[..., Event]] = {}

    # --- state -----------------------------------------------------------------------------------

    @property
    def file(self) -> str:
        return self._file

    @property
    def position(self) -> BinlogPosition:
        """Where the next event starts: after the last event fed (the resume point)."""
        return BinlogPosition(self._file, self._position)

    @property
    def format_description(self) -> FormatDescriptionEvent | None:
        return self._fde

    @property
    def table_maps(self) -> Mapping[int, TableMapEvent]:
        return self._table_maps

    def set_table_map(self, table: TableMapEvent) -> None:
        """Use ``table`` for the rows events of its table id that are fed from now on.

        For a TABLE_MAP completed by the layer above (see :mod:`.enrich`) after ``feed``
        returned it and before the rows that follow it are fed. It must replace the TABLE_MAP
        registered for the same id, so that a table map cannot outlive its statement.

        Raises:
            KeyError: no TABLE_MAP is registered for ``table.table_id``.
        """
        if table.table_id not in self._table_maps:
            raise KeyError(f"no TABLE_MAP registered for table id {table.table_id}")
        self._table_maps[table.table_id] = table

    def tables_mapped_by(self, event: bytes | bytearray | memoryview) -> list[tuple[str, str]]:
        """The (schema, table) of each TABLE_MAP in ``event``, without feeding it.

        A TABLE_MAP event names its own table; a TRANSACTION_PAYLOAD (decompressed for the
        purpose) names those of its inner TABLE_MAPs. Any other event, or one that does not
        parse, gives ``[]`` — :meth:`feed` will report what is wrong with it.
        """
        data = memoryview(event)
        if len(data) <= HEADER_LEN or data[4] not in (EventType.TABLE_MAP,
                                                      EventType.TRANSACTION_PAYLOAD):
            return []
        try:
            header = replace(parse_header(data), file=self._file, position=self._position)
            end = len(data) - CHECKSUM_LEN if self._has_checksum(data) else len(data)
            body = data[HEADER_LEN:end]
            if header.type_code == EventType.TABLE_MAP:
                return [self._mapped_table(header, body)]
            payload = decode_event(header, body, self._fde)
            if not isinstance(payload, TransactionPayloadEvent):
                return []
            tables = []
            for raw_event in unwrap_transaction_payload(payload, self._max_decompressed):
                inner = parse_header(raw_event)
                if inner.type_code == EventType.TABLE_MAP:
                    tables.append(self._mapped_table(inner, memoryview(raw_event)[HEADER_LEN:]))
            return tables
        except MalformedPacket:
            return []

    def _mapped_table(self, header: EventHeader, body: memoryview) -> tuple[str, str]:
        decode_table_map = self._decode_table_map or self._load_row_decoders()[0]
        table = decode_table_map(header, body, self._post_header_len(EventType.TABLE_MAP),
                                 mariadb=self._mariadb)
        return table.schema, table.table

    def start_file(self, file: str, position: int = 4) -> None:
        """Continue in another binlog file (offline reading of several files in order)."""
        self._file = file
        self._position = position
        self._fde = None
        self._mariadb = False
        self._fde_crc = None
        self._post_header.clear()
        self._row_layer.clear()
        self._plain_decoders = None
        self._table_maps.clear()

    # --- decoding ----------------------------------------------------------------------------------

    def feed(self, event: bytes | bytearray | memoryview) -> list[Event]:
        """Decode one whole event (header, body and CRC32 trailer if the binlog has them).

        Returns:
            The decoded event, followed by the inner events for a TRANSACTION_PAYLOAD.

        Raises:
            ChecksumMismatch: bad CRC32 (names the file and position).
            UnknownEventType: unknown type without LOG_EVENT_IGNORABLE_F.
            EventDecodeError: anything else that does not parse (names type, file, position).
        """
        out: list[Event] = []
        self.feed_into((event,), out)
        return out

    def feed_into(self, events: Iterable[bytes | bytearray | memoryview],
                  out: list[Event]) -> None:
        """:meth:`feed` each of ``events`` in order, appending what it returns to ``out``.

        For a batch of events (all those received in one read): one call, not one per event.
        When an event fails, ``out`` holds those decoded before it, and the error is raised
        as :meth:`feed` raises it.

        A list's plain events (GTID, TABLE_MAP, rows, XID of an FDE'd stream) go through the
        C loop of ``protocol/_native_frames.c`` when it is built: the same headers, positions,
        CRC32 checks and decoders, stopping before any other event, which the Python loop
        (:meth:`_feed_python`) then takes. An event that fails to decode in C is fed again
        in Python, which raises the error :meth:`feed` raises.
        """
        native = _native_feed_plain
        if native is None or type(events) is not list:
            self._feed_python(events, out)
            return
        index, count = 0, len(events)
        while index < count:
            crc = self._fde_crc
            if crc is not None:
                plain = self._plain_decoders  # an FDE fed since drops them
                if plain is None:
                    plain = self._plain_decoders = self._plain_table()
                index, self._position, error = native(
                    events, index, out, self._file, self._position, crc, self._verify,
                    _make_header, plain, zlib.crc32, _make_gtid_event, _make_xid_event)
                if error is not None and not isinstance(error, MalformedPacket):
                    raise error
                if index >= count:
                    return
            self._feed_python((events[index],), out)
            index += 1

    def _plain_table(self) -> tuple[Callable[..., Event] | None, ...]:
        """The decoder of each plain event type by type code, for the C loop (None: not
        plain, the Python loop takes it)."""
        table: list[Callable[..., Event] | None] = [None] * 256
        for type_code, decoder in _PER_TRANSACTION.items():
            table[type_code] = decoder
        for type_code in _ROW_LAYER:
            table[type_code] = self._decode_row_event
        if self._decode_table_map is not None and self._decode_rows is not None:
            for type_code in (_TABLE_MAP, *_ROWS_KIND):  # loaded: each type's own, directly
                decode = self._row_layer.get(type_code)
                if decode is None:
                    decode = self._row_layer[type_code] = self._row_layer_decoder(type_code)
                table[type_code] = decode
        return tuple(table)

    def _feed_python(self, events: Iterable[bytes | bytearray | memoryview],
                     out: list[Event]) -> None:
        """:meth:`feed_into` in Python: the reference, and every event the C loop leaves."""
        append = out.append
        unpack = _HEADER.unpack_from
        crc32 = zlib.crc32
        for event in events:
            # bytes stay bytes (the daemon's events: slicing a small one copies less than a
            # view costs); anything else is read through a view
            data: bytes | memoryview = (event if type(event) is bytes or type(event) is memoryview
                                        else memoryview(event))
            size = len(data)
            if size < HEADER_LEN:
                raise EventDecodeError(f"event header needs {HEADER_LEN} bytes, got {size}",
                                       file=self._file, position=self._position)
            timestamp, type_code, server_id, event_size, log_pos, flags = unpack(data)
            # The event's file, start and end. Artificial events (flag, heartbeats, a log_pos
            # of 0 on the kinds a dump makes up) do not move; log_pos is the end when the
            # server filled it (else 0 inside a MariaDB 11.4+ transaction, or wrapped past
            # 4 GiB: our own count).
            if (flags & LOG_EVENT_ARTIFICIAL_F or type_code in _NEVER_MOVE
                    or (not log_pos and type_code in _ARTIFICIAL_WHEN_LOG_POS_0)):
                start = following = self._position
            elif log_pos >= event_size:
                start, following = log_pos - event_size, log_pos
            else:
                start = self._position
                following = start + event_size
            header = _make_header(timestamp, type_code, server_id, event_size, log_pos, flags,
                                  self._file, start, following)
            if event_size != size:
                raise EventDecodeError(
                    f"event_size says {event_size} bytes, the event has {size}",
                    type_code=type_code, file=header.file, position=header.position)
            if type_code == _FORMAT_DESCRIPTION:
                fde = self._format_description(header, data)
                self._position = following
                append(fde)
                continue
            crc = self._fde_crc
            if crc is None:
                crc = self._has_checksum(data)
            if crc:
                # A CRC32 over the event with its own CRC32 appended gives a constant: one
                # pass, no slice; the slow path names what is wrong (too short, which CRC).
                if self._verify and (size < HEADER_LEN + CHECKSUM_LEN
                                     or crc32(data) != _CRC32_RESIDUE):
                    verify_crc32(data, file=header.file, position=header.position)
                body = data[HEADER_LEN:size - CHECKSUM_LEN]
            else:
                body = data[HEADER_LEN:]
            plain = _PER_TRANSACTION.get(type_code)
            if plain is not None or type_code in _ROW_LAYER:
                try:  # GTID, XID: decode_event's dispatch without its call; rows, TABLE_MAP
                    decoded = (plain(header, body) if plain is not None
                               else self._decode_row_event(header, body))
                except EventDecodeError:
                    raise
                except MalformedPacket as exc:
                    raise EventDecodeError(str(exc), type_code=type_code, file=header.file,
                                           position=start) from exc
                self._position = following
                append(decoded)
                continue
            decoded = decode_event(header, body, self._fde, self._max_decompressed)
            self._position = following
            if type_code == _ROTATE and isinstance(decoded, RotateEvent):
                self._file, self._position = decoded.next_file, decoded.position
                if decoded.is_fake:
                    decoded = replace(decoded, header=replace(
                        header, file=self._file, position=self._position,
                        next_position=self._position))
            elif (type_code == _TRANSACTION_PAYLOAD
                  and isinstance(decoded, TransactionPayloadEvent)):
                append(decoded)
                out += self._unwrap(decoded)
                continue
            append(decoded)

    def _has_checksum(self, data: bytes | memoryview) -> bool:
        if self._fde is not None:
            return self._fde.checksum_alg == ChecksumAlg.CRC32
        if self._checksum is not None:
            return self._checksum
        # Before any FDE and without a hint: a CRC32 trailer is one that matches.
        if len(data) < HEADER_LEN + CHECKSUM_LEN:
            return False
        end = len(data) - CHECKSUM_LEN
        return crc32_of(data[:end]) == int.from_bytes(data[end:], "little")

    def _format_description(self, header: EventHeader, data: bytes | memoryview
                            ) -> FormatDescriptionEvent:
        try:
            fde = decode_format_description(header, data[HEADER_LEN:])
        except MalformedPacket as exc:
            raise EventDecodeError(str(exc), type_code=header.type_code, file=header.file,
                                   position=header.position) from exc
        if fde.checksum_alg == ChecksumAlg.CRC32 and self._verify:
            verify_crc32(data, file=header.file, position=header.position)
        self._fde = fde
        self._mariadb = fde.is_mariadb  # asked for every TABLE_MAP
        self._checksum = self._fde_crc = fde.checksum_alg == ChecksumAlg.CRC32
        self._post_header.clear()
        self._row_layer.clear()
        self._plain_decoders = None
        self._table_maps.clear()
        return fde

    def _post_header_len(self, type_code: int) -> int:
        length = self._post_header.get(type_code)
        if length is None:
            fde = self._fde if self._fde is not None else _V4_DEFAULTS
            length = self._post_header[type_code] = fde.post_header_len(type_code)
        return length

    def _decode(self, header: EventHeader, body: bytes | memoryview) -> Event:
        if header.type_code in _ROW_LAYER:
            return self._decode_row_layer(header, body)
        return decode_event(header, body, self._fde, self._max_decompressed)

    def _decode_row_layer(self, header: EventHeader, body: bytes | memoryview) -> Event:
        try:
            return self._decode_row_event(header, body)
        except EventDecodeError:
            raise
        except MalformedPacket as exc:
            raise EventDecodeError(str(exc), type_code=header.type_code, file=header.file,
                                   position=header.position) from exc

    def _load_row_decoders(self) -> tuple[Callable[..., TableMapEvent], Callable[..., RowsEvent]]:
        table_map_decoder, rows_decoder, self._row_decoder_cache = _row_decoders()
        self._plain_decoders = None  # the next batch calls the row layer's decoders directly
        self._row_layer.clear()
        self._row_decoder_cache.arrow = self._arrow
        self._decode_table_map = self._decode_table_map or table_map_decoder
        self._decode_rows = self._decode_rows or rows_decoder
        return self._decode_table_map, self._decode_rows

    def _decode_row_event(self, header: EventHeader, body: bytes | memoryview) -> Event:
        type_code = header.type_code
        if 166 <= type_code <= 171:
            if self._decode_rows is None:
                self._load_row_decoders()
            type_code, plain = decompress_rows_event(type_code, body,
                                                     self._post_header_len(type_code),
                                                     self._max_decompressed)
            body = memoryview(plain)
        decode = self._row_layer.get(type_code)
        if decode is None:
            decode = self._row_layer[type_code] = self._row_layer_decoder(type_code)
        return decode(header, body)

    def _row_layer_decoder(self, type_code: int) -> Callable[..., Event]:
        """``decode(header, body)`` of one TABLE_MAP or (uncompressed) rows type, under the
        FDE in force: its post-header length, flavour and the stream's table map bound in
        (the C loop calls it once per event; the FDE or a new file drops them all)."""
        decode_table_map, decode_rows = self._decode_table_map, self._decode_rows
        if decode_table_map is None or decode_rows is None:
            decode_table_map, decode_rows = self._load_row_decoders()
        post_header_len = self._post_header_len(type_code)
        table_maps = self._table_maps
        if type_code == _TABLE_MAP:
            mariadb, hook = self._mariadb, self._table_map_hook

            def table_map(header: EventHeader, body: bytes | memoryview) -> Event:
                table = decode_table_map(header, body, post_header_len, mariadb=mariadb)
                if hook is not None:
                    table = hook(table)
                table_maps[table.table_id] = table
                return table

            return table_map
        version, kind, partial = 2 if type_code >= 30 else 1, _ROWS_KIND[type_code], type_code == 39
        cache = self._row_decoder_cache

        def rows(header: EventHeader, body: bytes | memoryview) -> Event:
            event = decode_rows(header, body, post_header_len, table_maps, version=version,
                                kind=kind, partial=partial, decoders=cache)
            if event.flags & _STMT_END_F:
                table_maps.clear()
            return event

        return rows

    def _unwrap(self, payload: TransactionPayloadEvent) -> list[Event]:
        """Decode the inner events; they have no CRC32 and share the payload's position."""
        try:
            inner = unwrap_transaction_payload(payload, self._max_decompressed)
        except EventDecodeError:
            raise
        except MalformedPacket as exc:
            where = payload.header
            raise EventDecodeError(str(exc), type_code=where.type_code, file=where.file,
                                   position=where.position) from exc
        out: list[Event] = []
        for raw_event in inner:
            header = replace(parse_header(raw_event), file=payload.header.file,
                             position=payload.header.position,
                             next_position=payload.header.next_position)
            if header.type_code in (EventType.TRANSACTION_PAYLOAD, EventType.FORMAT_DESCRIPTION):
                raise EventDecodeError("nested event inside a transaction payload",
                                       type_code=header.type_code, file=header.file,
                                       position=header.position)
            out.append(self._decode(header, raw_event[HEADER_LEN:]))
        return out


# An FDE stand-in with no listed post-header lengths: FormatDescriptionEvent.post_header_len
# then falls back to the v4 defaults. Used before the first FDE of a stream.
_V4_DEFAULTS = FormatDescriptionEvent(EventHeader(0, 15, 0, 0, 0, 0), 4, "", 0, 19, b"", 0)
