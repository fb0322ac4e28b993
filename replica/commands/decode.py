"""``binlake decode FILE…``: decode binlog files from disk and print their events.

The files are read in the order given, each checked for the binlog magic, its
FORMAT_DESCRIPTION_EVENT read and every CRC32 verified (``--no-verify-checksum`` skips the
check, not the stripping), with the very decoders the daemon uses on the wire
(:class:`~protocol.binlog.filereader.BinlogFileReader` → :class:`~protocol.binlog.stream.EventStream`
→ :class:`~protocol.binlog.transactions.TransactionAssembler`). Files are read in chunks and
every line is written as soon as its event is decoded: memory holds one event, never a file.

Output formats
--------------

``--format text`` (the default) writes one line per event and one line per changed row, in the
spirit of ``mariadb-binlog -v``. The layout is stable (scripts may parse it)::

    # <file>:<pos> end=<next pos> <UTC time> server_id=<id> <EVENT_TYPE> <details>
    ### INSERT INTO db.t SET id=1, name='ann'
    ### UPDATE db.t WHERE id=1, name='ann' SET id=1, name='bob'
    ### DELETE FROM db.t WHERE id=1, name='bob'

``<EVENT_TYPE>`` is the binlog's name for the type (``WRITE_ROWS_V1``, ``MARIADB_GTID``,
``QUERY``…). Row columns are named from the TABLE_MAP (``binlog_row_metadata=FULL``) and
called ``@1``, ``@2``… (1-based, like ``mariadb-binlog``) when the server sent no names (what else
such files lack — signedness, charsets, ENUM/SET labels — is said once on stderr, see
:func:`metadata_gaps`; ``--schema-from-server`` fills them in from the configured server's
information_schema, like the daemon's schema source); a column
absent from a MINIMAL/NOBLOB image is not listed, a NULL is ``NULL``. Values are SQL-like
literals: numbers bare, strings ``'quoted'`` with ``\\n``-style escapes (so a row is one line),
bytes ``X'hex'``, temporal values quoted as ``SELECT`` prints them (zero dates too), JSON as its
text. Events inside a MySQL TRANSACTION_PAYLOAD follow the payload event and share its position.
Statement text (QUERY, ANNOTATE_ROWS, ROWS_QUERY) has its password literals replaced by
``'<redacted>'`` (:func:`protocol.binlog.ddl.redact_secrets`), as in every other output.

``--format open-protocol`` writes the TiCDC Open Protocol: one JSON object
``{"key": …, "value": …}`` per line, from :class:`sinks.openprotocol.OpenProtocolEncoder`
(row changed events ``t=1``, DDL ``t=2``, a resolved event ``t=3`` after every committed
transaction; see that module for how ``ts`` derives from the binlog).

Positions and filters
---------------------

``--start-position N`` applies to the first file and ``--stop-position N`` to the last, like
``mariadb-binlog``: events that start before N (first file) are still decoded, as context
(FORMAT_DESCRIPTION, TABLE_MAPs), but not printed; printing stops at the first event of the
last file that starts at or after the stop position. ``--database``/``--table`` (globs,
repeatable) keep the row changes, TABLE_MAPs and statements of matching tables only; the
transaction boundaries are always printed.

A damaged or truncated file stops the decoding with one line naming the file, the event type and
the position (exit 1), after everything before it has been printed.

Speed
-----

:func:`format_value` and :func:`format_rows` (and ``sinks.openprotocol``'s encoder) define and
print the output, in Python: this is a debugging command, and its text is not on the daemon's
path, so it has no native formatter of its own (the decoding itself is the daemon's).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import decimal
import fnmatch
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Any, TextIO

import trio

from protocol.binlog import ddl
from protocol.binlog import native as native_rows
from protocol.binlog.coltypes import CHARACTER_TYPES, ENUM_SET_TYPES, NUMERIC_TYPES, FieldType
from protocol.binlog.events import (
    AnnotateRowsEvent,
    BinlogCheckpointEvent,
    ChecksumAlg,
    EventType,
    ExecuteLoadQueryEvent,
    FormatDescriptionEvent,
    GtidListEvent,
    HeartbeatEvent,
    IntvarEvent,
    MariadbGtidEvent,
    MysqlGtidEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RotateEvent,
    RowsQueryEvent,
    TransactionPayloadEvent,
    UserVarEvent,
    XaPrepareEvent,
    XidEvent,
)
from protocol.binlog.filereader import END_OF_FILE, NEED_DATA, BinlogFileReader
from protocol.binlog.model import ColumnFlag, RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.stream import Event, EventStream
from protocol.binlog.tablemap import OptionalMetadata
from protocol.binlog.transactions import Statement, TransactionAssembler
from protocol.errors import ChecksumMismatch, ProtocolError, TruncatedData
from protocol.valuetypes import newdecimal, time2, timestamp2
from protocol.valuetypes.binary_json import JsonDiff
from protocol.valuetypes.temporal import InvalidTemporal, wall_clock_text
from replica.config import ServerConfig
from sinks.transform import Transform

__all__ = [
    "FORMATS",
    "DecodeOptions",
    "BinlogFileError",
    "add_arguments",
    "read_events",
    "selected_events",
    "format_event",
    "format_rows",
    "rows_text",
    "format_value",
    "metadata_gaps",
    "write_text",
    "write_open_protocol",
    "run",
]

FORMATS = ("text", "open-protocol")
_CHUNK = 1 << 20
_LOG_EVENT_ARTIFICIAL_F = 0x20
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """What ``binlake decode`` was asked to do (its command line, typed)."""

    files: tuple[str, ...]
    output_format: str = "text"
    start_position: int | None = None
    stop_position: int | None = None
    verify_checksums: bool = True
    databases: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DecodeOptions:
        return cls(
            files=tuple(args.files),
            output_format=getattr(args, "format", "text"),
            start_position=getattr(args, "start_position", None),
            stop_position=getattr(args, "stop_position", None),
            verify_checksums=getattr(args, "verify_checksum", True),
            databases=tuple(getattr(args, "database", None) or ()),
            tables=tuple(getattr(args, "table", None) or ()),
        )


class BinlogFileError(Exception):
    """A binlog file that cannot be decoded: which file, and the typed protocol error."""

    def __init__(self, path: str, error: ProtocolError) -> None:
        super().__init__(f"{path}: {type(error).__name__}: {error}")
        self.path = path
        self.error = error


# --- command line ------------------------------------------------------------------------------


def _position(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a byte offset, got {text!r}") from None
    if value < 4:
        raise argparse.ArgumentTypeError(
            "binlog positions start at 4 (the first event, after the 4-byte magic)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``binlake decode`` (called by :mod:`replica.cli`)."""
    parser.description = (
        "Decode binlog files offline, in the order given (e.g. mysql-bin.000001 "
        "mysql-bin.000002), with the same decoders as `binlake run`, and print every event "
        "and every row change to stdout.")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="binlog files, oldest first")
    parser.add_argument("-f", "--format", choices=FORMATS, default="text",
                        help="text: one readable line per event and per row change, like "
                             "mariadb-binlog -v (default); open-protocol: TiCDC Open Protocol "
                             "JSON objects {\"key\", \"value\"}, one per line")
    parser.add_argument("--start-position", type=_position, metavar="POS",
                        help="skip the events of the first file that start before POS")
    parser.add_argument("--stop-position", type=_position, metavar="POS",
                        help="stop at the first event of the last file that starts at or "
                             "after POS")
    parser.add_argument("--no-verify-checksum", dest="verify_checksum", action="store_false",
                        help="do not verify CRC32 checksums (decode a damaged file anyway)")
    parser.add_argument("-d", "--database", action="append", metavar="GLOB",
                        help="only row changes and statements of these databases (repeatable)")
    parser.add_argument("-t", "--table", action="append", metavar="DB.TABLE",
                        help="only row changes of these tables, globs like shop.* "
                             "(repeatable)")
    parser.add_argument("--schema-from-server", action="store_true",
                        help="for tables logged without binlog_row_metadata=FULL, read column "
                             "names, signedness, charsets, ENUM/SET labels and keys from "
                             "information_schema of the server in binlake's configuration, "
                             "as `binlake run` does (today's schema, applied only to TABLE_MAPs "
                             "it matches)")
    parser.add_argument("-c", "--config", metavar="PATH",
                        help="the TOML config whose column rules ([[transform.column]]) apply "
                             "to the rows printed, and whose [server] --schema-from-server "
                             "asks (default: $BINLAKE_CONFIG, else /etc/binlake/binlake.toml "
                             "if present; BINLAKE_* variables apply too)")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``binlake decode`` (called by :mod:`replica.cli`)."""
    options = DecodeOptions.from_args(args)
    from replica.config import DEFAULT_CONFIG_PATH, load_config

    path = getattr(args, "config", None)
    if getattr(args, "schema_from_server", False) or path is not None or os.environ.get(
            "BINLAKE_CONFIG") or os.path.exists(DEFAULT_CONFIG_PATH):
        config = load_config(path, require_server_id=False)
        args.transform = config.column_transform()
        if getattr(args, "schema_from_server", False):
            return trio.run(_with_server_schema, options, config.server, args)
    return _decode(options, args)


async def _with_server_schema(options: DecodeOptions, server: ServerConfig,
                              args: argparse.Namespace) -> int:
    """Decode in a worker thread while this trio loop answers its schema questions: each
    TABLE_MAP without full metadata is described from information_schema (once per table,
    :class:`~replica.core.schema_source.SchemaSource`, checked against the TABLE_MAP)."""
    from replica.core.connection import ConnectOptions
    from replica.core.schema_source import SchemaSource

    transform = getattr(args, "transform", None)
    widths = transform is not None and transform.types.tinyint1_as_boolean
    source = SchemaSource(ConnectOptions.from_config(server), display_widths=widths)

    def hook(table_map: TableMapEvent) -> TableMapEvent:
        if table_map.has_full_metadata and not widths:
            return table_map
        trio.from_thread.run(source.describe, table_map.schema, table_map.table)
        return source.enrich(table_map)

    try:
        return await trio.to_thread.run_sync(_decode, options, args, hook)
    finally:
        await source.aclose()


def _decode(options: DecodeOptions, args: argparse.Namespace,
            table_map_hook: Callable[[TableMapEvent], TableMapEvent] | None = None) -> int:
    # the real stdout, not the CLI's pipe-safe wrapper: a broken pipe must stop decoding here
    out = getattr(sys.stdout, "unwrapped", sys.stdout)
    native_rows.warn_once(lambda line: print(f"binlake decode: warning: {line}", file=sys.stderr))
    accepts = _matcher(options)
    events = _noting_missing_metadata(selected_events(options, table_map_hook=table_map_hook),
                                      accepts, sys.stderr)
    transform = getattr(args, "transform", None)
    if transform is not None:
        events = _transformed(events, transform)
    try:
        if options.output_format == "open-protocol":
            write_open_protocol(events, out, accepts)
        else:
            write_text(events, out, accepts)
        out.flush()
    except BrokenPipeError:
        # `binlake decode … | head`: the reader has seen enough. Silence the final flush.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        return EXIT_OK
    except BinlogFileError as exc:
        out.flush()
        if getattr(args, "verbose", 0):
            traceback.print_exception(exc.error, file=sys.stderr)
        print(f"binlake: error: {exc}", file=sys.stderr)
        print(f"  fix: {_fix_for(exc.error)}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _transformed(events: Iterable[tuple[Event, bool]], transform: Transform
                 ) -> Iterator[tuple[Event, bool]]:
    """The events with the column rules applied, as the daemon lands them: rows and table maps
    ruled; the statement text of row events (ANNOTATE_ROWS, ROWS_QUERY) left out, since it
    holds the values in clear and cannot be ruled."""
    for event, selected in events:
        if isinstance(event, RowsEvent):
            yield transform.rows(event), selected
        elif isinstance(event, TableMapEvent):
            yield transform.table_map(event), selected
        elif not isinstance(event, AnnotateRowsEvent | RowsQueryEvent):
            yield event, selected


def _fix_for(error: ProtocolError) -> str:
    if isinstance(error, ChecksumMismatch):
        return ("the file is damaged at that position (or was changed while read); "
                "--no-verify-checksum decodes it anyway, at your own risk")
    if isinstance(error, TruncatedData):
        return ("the file ends inside an event: it is still being written, the server crashed "
                "while writing it, or the event header is damaged; --stop-position can end "
                "before the cut")
    return ("the file is damaged, or not a binlog; --start-position can skip to a later "
            "event boundary")


# --- reading ------------------------------------------------------------------------------------


def read_events(paths: Iterable[str], *, verify_checksums: bool = True,
                chunk_size: int = _CHUNK) -> Iterator[Event]:
    """Every decoded event of the files, in order, read incrementally.

    Each file starts a new file for the stream (its name is the path's base name, as the server
    names it in ROTATE events and positions).

    Raises:
        BinlogFileError: a file does not decode (the path and the typed protocol error).
        OSError: a file cannot be read.
    """
    for _index, event in _read(list(paths), verify_checksums, chunk_size):
        yield event


def _read(paths: list[str], verify_checksums: bool, chunk_size: int,
          table_map_hook: Callable[[TableMapEvent], TableMapEvent] | None = None,
          ) -> Iterator[tuple[int, Event]]:
    """``(index of the file in paths, event)`` for every event of the files."""
    stream = EventStream(verify_checksums=verify_checksums, table_map_hook=table_map_hook)
    for index, path in enumerate(paths):
        stream.start_file(os.path.basename(path), 4)
        reader = BinlogFileReader()
        with open(path, "rb") as f:
            try:
                while True:
                    raw = reader.next_event()
                    if raw is NEED_DATA:
                        reader.receive_data(f.read(chunk_size))
                        continue
                    if raw is END_OF_FILE:
                        break
                    assert isinstance(raw, bytes)
                    for event in stream.feed(raw):
                        yield index, event
            except ProtocolError as exc:
                raise BinlogFileError(path, exc) from exc


def selected_events(options: DecodeOptions, *, chunk_size: int = _CHUNK,
                    table_map_hook: Callable[[TableMapEvent], TableMapEvent] | None = None,
                    ) -> Iterator[tuple[Event, bool]]:
    """``(event, selected)`` for every event up to the stop position.

    ``selected`` is False for the events of the first file before the start position: they are
    decoded for their context (FORMAT_DESCRIPTION, TABLE_MAP) but not to be printed.
    ``table_map_hook`` completes TABLE_MAPs (``--schema-from-server``).
    """
    last = len(options.files) - 1
    start, stop = options.start_position, options.stop_position
    for index, event in _read(list(options.files), options.verify_checksums, chunk_size,
                              table_map_hook):
        position = event.header.position
        if stop is not None and index == last and position >= stop:
            return
        yield event, start is None or index > 0 or position >= start


# --- row metadata -------------------------------------------------------------------------------


_INTEGER_TYPES = NUMERIC_TYPES - {FieldType.NEWDECIMAL, FieldType.FLOAT, FieldType.DOUBLE}


def metadata_gaps(table: TableMapEvent) -> list[str]:
    """What the output of ``table``'s rows lacks because its TABLE_MAP carried no (or only
    MINIMAL) row metadata: one phrase per gap, empty when nothing is missing."""
    sent = table.optional_metadata
    types = {c.type_code for c in table.columns}
    gaps = []
    if any(c.name is None for c in table.columns):
        gaps.append("columns are named by position (@1, @2… in text, col_1, col_2… in "
                    "open-protocol)")
    if OptionalMetadata.SIGNEDNESS not in sent and types & _INTEGER_TYPES:
        gaps.append("every integer is read as signed (a TINYINT UNSIGNED 255 prints -1)")
    if (not sent & {OptionalMetadata.DEFAULT_CHARSET, OptionalMetadata.COLUMN_CHARSET}
            and types & CHARACTER_TYPES):
        gaps.append("character columns stay raw bytes (X'…')")
    if (not sent & {OptionalMetadata.ENUM_STR_VALUE, OptionalMetadata.SET_STR_VALUE}
            and types & ENUM_SET_TYPES):
        gaps.append("ENUM/SET values print as their numbers")
    return gaps


def _noting_missing_metadata(events: Iterable[tuple[Event, bool]], accepts: _Matcher | None,
                             err: TextIO) -> Iterator[tuple[Event, bool]]:
    """The events unchanged; the first printed TABLE_MAP without full row metadata is said once
    on ``err`` (what is missing, and why), so output that looks wrong is never unexplained."""
    noted = False
    for event, selected in events:
        if (not noted and selected and isinstance(event, TableMapEvent)
                and event.described_by is None
                and (accepts is None or accepts(event.schema, event.table))):
            gaps = metadata_gaps(event)
            if gaps:
                noted = True
                err.write(
                    f"binlake decode: note: {event.header.file} was written without "
                    f"binlog_row_metadata=FULL (first seen for {event.schema}.{event.table} at "
                    f"{event.header.position}), so {'; '.join(gaps)}. --schema-from-server "
                    "reads them from the server's information_schema (as `binlake run` does); "
                    "binlog_row_metadata=FULL puts them in the binlog.\n")
                err.flush()
        yield event, selected


# --- filters ------------------------------------------------------------------------------------

_Matcher = Callable[[str, "str | None"], bool]


def _matcher(options: DecodeOptions) -> _Matcher | None:
    """``accepts(database, table_or_None)`` for the --database/--table globs, or None (all)."""
    databases, tables = options.databases, options.tables
    if not databases and not tables:
        return None
    table_globs = [t if "." in t else f"{t}.*" for t in tables]
    table_databases = [g.split(".", 1)[0] for g in table_globs]

    def accepts(database: str, table: str | None) -> bool:
        if any(fnmatch.fnmatchcase(database, g) for g in databases):
            return True
        if table is None:
            return any(fnmatch.fnmatchcase(database, g) for g in table_databases)
        name = f"{database}.{table}"
        return any(fnmatch.fnmatchcase(name, g) for g in table_globs)

    return accepts


def _statement_target(schema: str, query: str) -> tuple[str, str | None]:
    parsed = ddl.classify(query, schema)
    if parsed is None:
        return schema, None
    return parsed.schema or schema, parsed.table or None


# --- writers ------------------------------------------------------------------------------------


def write_text(events: Iterable[tuple[Event, bool]], out: TextIO,
               accepts: _Matcher | None = None) -> None:
    """The text format (see the module docstring), one line per event and per row."""
    write = out.write
    for event in _printed(events, accepts):
        if isinstance(event, RowsEvent):
            write(f"{format_event(event)}\n{rows_text(event)}")
        else:
            write(f"{format_event(event)}\n")


def _printed(events: Iterable[tuple[Event, bool]], accepts: _Matcher | None
             ) -> Iterator[Event]:
    """The events the text format prints: selected, and accepted by the filters."""
    for event, selected in events:
        if selected and (accepts is None or _accepted_event(event, accepts)):
            yield event


def _accepted_event(event: Event, accepts: _Matcher) -> bool:
    if isinstance(event, RowsEvent):
        return accepts(event.table.schema, event.table.table)
    if isinstance(event, TableMapEvent):
        return accepts(event.schema, event.table)
    if isinstance(event, QueryEvent | ExecuteLoadQueryEvent):
        if _is_transaction_control(event.query):
            return True
        return accepts(*_statement_target(event.schema, event.query))
    if isinstance(event, AnnotateRowsEvent | RowsQueryEvent):
        return False  # the statement text of rows that may be filtered out
    return True


_CONTROL = re.compile(r"\s*(BEGIN|COMMIT|ROLLBACK|XA\s)", re.IGNORECASE)


def _is_transaction_control(query: str) -> bool:
    return _CONTROL.match(query) is not None


def write_open_protocol(events: Iterable[tuple[Event, bool]], out: TextIO,
                        accepts: _Matcher | None = None) -> None:
    """TiCDC Open Protocol JSON lines, through the transaction assembler and the encoder."""
    from sinks.openprotocol import OpenProtocolEncoder

    assembler = TransactionAssembler()
    encoder = OpenProtocolEncoder()
    write = out.write
    for event, selected in events:
        if not selected:
            continue
        for item in assembler.feed(event):
            if accepts is not None:
                if isinstance(item, RowsEvent):
                    if not accepts(item.table.schema, item.table.table):
                        continue
                elif isinstance(item, Statement) and not accepts(
                        *_statement_target(item.schema, item.query)):
                    continue
            write(encoder.encode_lines(item))


# --- formatting ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _type_name(type_code: int) -> str:
    try:
        return EventType(type_code).name
    except ValueError:
        return f"UNKNOWN_{type_code}"


@functools.lru_cache(maxsize=4)  # consecutive events share their second
def _utc(timestamp: int) -> str:
    try:
        moment = _dt.datetime.fromtimestamp(timestamp, _dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"@{timestamp}"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_event(event: Event) -> str:
    """The event's line: where, when, who, what type, and what it says."""
    header = event.header
    details = _details(event)
    line = (f"# {header.file}:{header.position} end={header.next_position} "
            f"{_utc(header.timestamp)} server_id={header.server_id} "
            f"{_type_name(header.type_code)}")
    return f"{line} {details}" if details else line


def _details(event: Event) -> str:
    formatter = _DETAILS.get(type(event))
    if formatter is not None:
        return formatter(event)
    return _generic_details(event)


def _generic_details(event: object) -> str:
    parts = []
    for f in fields(event):  # type: ignore[arg-type]
        if f.name == "header":
            continue
        value = getattr(event, f.name)
        if isinstance(value, bytes | bytearray):
            parts.append(f"{f.name}=<{len(value)} bytes>")
        else:
            parts.append(f"{f.name}={value}")
    return " ".join(parts)


def _fde(event: FormatDescriptionEvent) -> str:
    try:
        checksum = ChecksumAlg(event.checksum_alg).name
    except ValueError:
        checksum = str(event.checksum_alg)
    return (f"server_version={event.server_version} binlog_version={event.binlog_version} "
            f"checksum={checksum}")


def _rotate(event: RotateEvent) -> str:
    fake = " (artificial)" if event.header.flags & _LOG_EVENT_ARTIFICIAL_F else ""
    return f"next={event.next_file}:{event.position}{fake}"


def _query(event: QueryEvent | ExecuteLoadQueryEvent) -> str:
    compressed = " compressed" if getattr(event, "compressed", False) else ""
    error = f" error_code={event.error_code}" if event.error_code else ""
    return (f"db={_identifier(event.schema) if event.schema else '-'} "
            f"thread_id={event.thread_id} exec_time={event.exec_time}{error}{compressed} "
            f"query={_statement(event.query)}")


_GTID_FLAGS = (
    (MariadbGtidEvent.FL_STANDALONE, "STANDALONE"),
    (MariadbGtidEvent.FL_GROUP_COMMIT_ID, "GROUP_COMMIT_ID"),
    (MariadbGtidEvent.FL_TRANSACTIONAL, "TRANSACTIONAL"),
    (MariadbGtidEvent.FL_ALLOW_PARALLEL, "ALLOW_PARALLEL"),
    (MariadbGtidEvent.FL_WAITED, "WAITED"),
    (MariadbGtidEvent.FL_DDL, "DDL"),
    (MariadbGtidEvent.FL_PREPARED_XA, "PREPARED_XA"),
    (MariadbGtidEvent.FL_COMPLETED_XA, "COMPLETED_XA"),
)


def _mariadb_gtid(event: MariadbGtidEvent) -> str:
    flags = ",".join(name for bit, name in _GTID_FLAGS if event.flags & bit) or "-"
    parts = [f"gtid={event}", f"flags={flags}"]
    if event.commit_id is not None:
        parts.append(f"commit_id={event.commit_id}")
    if event.xid is not None:
        parts.append(f"xid={event.xid}")
    if event.flags_extra:
        parts.append(f"flags_extra={event.flags_extra:#x}")
    if event.thread_id is not None:
        parts.append(f"thread_id={event.thread_id}")
    return " ".join(parts)


def _mysql_gtid(event: MysqlGtidEvent) -> str:
    parts = [f"gtid={event}"]
    if event.last_committed is not None:
        parts.append(f"last_committed={event.last_committed}")
    if event.sequence_number is not None:
        parts.append(f"sequence_number={event.sequence_number}")
    if event.immediate_commit_timestamp is not None:
        parts.append(f"commit_time={_micros(event.immediate_commit_timestamp)}")
    if event.transaction_length is not None:
        parts.append(f"transaction_length={event.transaction_length}")
    return " ".join(parts)


def _micros(value: int) -> str:
    try:
        moment = _dt.datetime.fromtimestamp(value / 1_000_000, _dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"@{value}us"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _previous_gtids(event: PreviousGtidsEvent) -> str:
    entries = []
    for sid, tag, intervals in event.sids:
        ranges = ":".join(f"{a}" if a == b else f"{a}-{b}" for a, b in intervals)
        entries.append(f"{sid}:{tag}:{ranges}" if tag else f"{sid}:{ranges}")
    return "gtids=" + (",".join(entries) or "-")


def _gtid_list(event: GtidListEvent) -> str:
    return "gtids=" + (",".join(f"{d}-{s}-{n}" for d, s, n in event.gtids) or "-")


def _intvar(event: IntvarEvent) -> str:
    kind = {1: "LAST_INSERT_ID", 2: "INSERT_ID"}.get(event.kind, str(event.kind))
    return f"{kind}={event.value}"


def _user_var(event: UserVarEvent) -> str:
    value = "NULL" if event.is_null or event.value is None else format_value(event.value)
    return f"@{_identifier(event.name)}={value}"


def _payload(event: TransactionPayloadEvent) -> str:
    compression = {0: "zstd", 255: "none"}.get(event.compression, str(event.compression))
    size = f" uncompressed_size={event.uncompressed_size}" if event.uncompressed_size else ""
    return f"compression={compression} payload_size={event.payload_size}{size}"


def _table_map(event: TableMapEvent) -> str:
    columns = ", ".join(_column_text(event, c.index) for c in event.columns)
    metadata = "" if event.has_full_metadata else " (no column names: binlog_row_metadata!=FULL)"
    return (f"table_id={event.table_id} {_table_name(event)} "
            f"columns=({columns}){metadata}")


def _column_text(table: TableMapEvent, index: int) -> str:
    column = table.columns[index]
    try:
        type_name = FieldType(column.type_code).name
    except ValueError:
        type_name = f"TYPE_{column.type_code}"
    if column.precision is not None and column.type_code in (0, 246):
        type_name += f"({column.precision},{column.scale or 0})"
    words = [_column_name(table, index), type_name]
    if column.flags & ColumnFlag.UNSIGNED:
        words.append("UNSIGNED")
    if index in table.primary_key:
        words.append("PK")
    return " ".join(words)


def _rows(event: RowsEvent) -> str:
    flags = "STMT_END" if event.flags & 1 else f"{event.flags:#x}"
    return (f"table_id={event.table.table_id} {_table_name(event.table)} "
            f"rows={event.row_count} flags={flags}")


_DETAILS: dict[type, Callable[[Any], str]] = {
    FormatDescriptionEvent: _fde,
    RotateEvent: _rotate,
    QueryEvent: _query,
    ExecuteLoadQueryEvent: _query,
    XidEvent: lambda e: f"xid={e.xid}",
    IntvarEvent: _intvar,
    UserVarEvent: _user_var,
    AnnotateRowsEvent: lambda e: f"query={_statement(e.query)}",
    RowsQueryEvent: lambda e: f"query={_statement(e.query)}",
    BinlogCheckpointEvent: lambda e: f"file={e.file}",
    MariadbGtidEvent: _mariadb_gtid,
    MysqlGtidEvent: _mysql_gtid,
    GtidListEvent: _gtid_list,
    PreviousGtidsEvent: _previous_gtids,
    TransactionPayloadEvent: _payload,
    XaPrepareEvent: lambda e: f"xid={e.xid} one_phase={int(e.one_phase)}",
    HeartbeatEvent: lambda e: f"at={e.file}:{e.position}",
    TableMapEvent: _table_map,
    RowsEvent: _rows,
}


# --- rows and values ----------------------------------------------------------------------------

_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z0-9_$]+\Z")


@functools.lru_cache(maxsize=4096)  # every rows event names its table and columns again
def _identifier(name: str) -> str:
    if _PLAIN_IDENTIFIER.match(name) and not name.isdigit():
        return name
    return "`" + name.replace("`", "``") + "`"


def _table_name(table: TableMapEvent) -> str:
    return f"{_identifier(table.schema)}.{_identifier(table.table)}"


def _column_name(table: TableMapEvent, index: int) -> str:
    name = table.columns[index].name
    return _identifier(name) if name is not None else f"@{index + 1}"


def format_rows(event: RowsEvent) -> Iterator[str]:
    """One ``###`` line per changed row (see the module docstring)."""
    table = event.table
    target = _table_name(table)
    after_names = [_column_name(table, i) for i in event.after_columns]
    before_names = [_column_name(table, i) for i in event.before_columns]
    for row in range(event.row_count):
        if event.kind is RowsKind.INSERT:
            assert event.after is not None
            yield f"### INSERT INTO {target} SET {_image(after_names, event.after, row)}"
        elif event.kind is RowsKind.DELETE:
            assert event.before is not None
            yield f"### DELETE FROM {target} WHERE {_image(before_names, event.before, row)}"
        else:
            assert event.before is not None and event.after is not None
            yield (f"### UPDATE {target} WHERE {_image(before_names, event.before, row)} "
                   f"SET {_image(after_names, event.after, row)}")


def rows_text(event: RowsEvent) -> str:
    """Every ``###`` line of the event (each ending in a newline), as :func:`format_rows`
    writes them."""
    return "".join(f"{line}\n" for line in format_rows(event))


def _image(names: list[str], values: tuple[list[Any], ...], row: int) -> str:
    return ", ".join(f"{name}={format_value(column[row])}"
                     for name, column in zip(names, values, strict=True))


_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\x00": "\\0"}
_NEEDS_ESCAPE = re.compile(r"[\\'\x00-\x1f\x7f]")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    return _ESCAPES.get(char) or f"\\x{ord(char):02x}"


def _quote(text: str) -> str:
    return "'" + _NEEDS_ESCAPE.sub(_escape_char, text) + "'"


def _statement(query: str) -> str:
    """A statement as the text format prints it: passwords redacted, on one line."""
    return _one_line(ddl.redact_secrets(query))


def _one_line(text: str) -> str:
    """Statement text on one line: newlines and control characters escaped, not quoted."""
    return re.sub(r"[\\\x00-\x1f\x7f]", _escape_char, text)


def format_value(value: Any) -> str:
    """A decoded column value as an SQL-like literal on one line. TIMESTAMP, TIME, DECIMAL and
    a partial JSON update print by their descriptions in ``protocol.valuetypes``; JSON and
    character data (legacy charsets included) are decoded to ``str`` there and quoted here."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, decimal.Decimal):
        return newdecimal.text(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, InvalidTemporal):  # a zero or invalid date, as SELECT prints it
        return _quote(value.text)
    if isinstance(value, _dt.datetime):  # TIMESTAMP (aware, UTC) or DATETIME (naive)
        return _quote(timestamp2.iso_text(value) if value.tzinfo is not None
                      else wall_clock_text(value))
    if isinstance(value, _dt.date):
        return _quote(value.isoformat())
    if isinstance(value, _dt.timedelta):
        return _quote(time2.text(value))
    if isinstance(value, JsonDiff):  # a MINIMAL image's partial JSON update (MySQL)
        return value.to_call_text()
    return _quote(str(value))
