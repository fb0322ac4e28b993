"""TiCDC Open Protocol encoding of the transaction stream (seed 000), as JSON objects.

Consumers that already parse TiCDC's Open Protocol can read binlake's output unchanged: every
item becomes ``{"key": {...}, "value": {...}}``:

* Row Changed Event (``"t": 1``) — one per changed row: ``{"u": cols}`` for an insert or an
  update (with ``"p": cols`` holding the before image when the row image carries it), and
  ``{"d": cols}`` for a delete. Like TiCDC, an UPDATE that changes the handle key (the primary
  key) is emitted as a delete of the old key followed by an insert of the new one — when the
  after image is complete. A MINIMAL/NOBLOB after image lacks columns, and an insert of the new
  key alone would lose them; such a key change stays one ``{"u": new, "p": old}`` (the update
  with its old value), which links the two keys so a consumer can carry the unchanged columns
  from the old key to the new one.
* A MySQL partial JSON update (``binlog_row_value_options=PARTIAL_JSON``) whose row image has
  no before value for the column (``binlog_row_image=MINIMAL``) cannot give the new document:
  the column is left out of ``"u"``, like any column absent from the image, and the value gains
  ``"jd": {column: operations}`` where operations is the JSON text of
  :meth:`protocol.binlog.values.JsonDiff.to_json_text` (apply them to the previous document).
* DDL Event (``"t": 2``) — ``{"q": query, "t": ddl_type}`` with the seed's DDL type codes.
* Resolved Event (``"t": 3``) — after every transaction; value ``null``.

``ts`` (TiDB's TSO) is derived from the binlog so that it strictly increases in commit order:
``ts = (T_ms << 18) + n`` where ``T_ms`` is the transaction's binlog timestamp in milliseconds
(second resolution on MariaDB's GTID event; MySQL's commit timestamps where the begin carries
them are not yet used) and the logical part ``n`` is bumped whenever a transaction's physical
time is not later than the previous one's. Binlog order is commit order, so ``ts`` orders
transactions exactly as the server committed them; ``ts >> 18`` is still a wall-clock time in ms.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
from collections.abc import Iterator
from typing import Any

from protocol.binlog.coltypes import FieldType
from protocol.binlog.model import Column, ColumnFlag, RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.transactions import (
    Statement,
    TransactionBegin,
    TransactionCommit,
    TransactionItem,
    TransactionRollback,
)
from protocol.valuetypes import characters, newdecimal, time2, timestamp2
from protocol.valuetypes.binary_json import JsonDiff
from protocol.valuetypes.temporal import InvalidTemporal, wall_clock_text

# Open Protocol column type codes are the MYSQL_TYPE_* codes of the type a column stores; the
# binlog's own variants (TIMESTAMP2, NEWDATE, VAR_STRING, …) map to that type.
_OPEN_TYPE: dict[int, int] = {
    FieldType.DECIMAL: FieldType.NEWDECIMAL,
    FieldType.TIMESTAMP2: FieldType.TIMESTAMP, FieldType.DATETIME2: FieldType.DATETIME,
    FieldType.TIME2: FieldType.TIME, FieldType.NEWDATE: FieldType.DATE,
    FieldType.VAR_STRING: FieldType.VARCHAR,
}
# BLOB columns carry their length-prefix size (1–4 bytes) as metadata: TINY/…/LONG.
_BLOB_BY_PACKLEN = {1: FieldType.TINY_BLOB, 2: FieldType.BLOB, 3: FieldType.MEDIUM_BLOB,
                    4: FieldType.LONG_BLOB}
# Open Protocol carries these as base64 text.
_BASE64_TYPES = frozenset({FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB,
                           FieldType.BLOB, FieldType.GEOMETRY})

# Open Protocol column flags.
FLAG_BINARY = 0x01
FLAG_HANDLE_KEY = 0x02
FLAG_GENERATED = 0x04
FLAG_PRIMARY_KEY = 0x08
FLAG_UNIQUE_KEY = 0x10
FLAG_MULTIPLE_KEY = 0x20
FLAG_NULLABLE = 0x40
FLAG_UNSIGNED = 0x80

_LOGICAL_BITS = 18


def open_type_code(column: Column) -> int:
    """The Open Protocol type code of a column (the seed's "Column type code" table)."""
    code = column.type_code
    if code == FieldType.BLOB:
        return int(_BLOB_BY_PACKLEN.get(column.meta, FieldType.BLOB))
    return int(_OPEN_TYPE.get(code, code))


def column_flags(column: Column, table: TableMapEvent) -> int:
    """Open Protocol bit flags from the column's attributes and the table's primary key."""
    flags = 0
    if column.flags & ColumnFlag.BINARY:
        flags |= FLAG_BINARY
    if column.flags & ColumnFlag.GENERATED:
        flags |= FLAG_GENERATED
    if column.index in table.primary_key:
        flags |= FLAG_PRIMARY_KEY | FLAG_HANDLE_KEY
        if len(table.primary_key) > 1:
            flags |= FLAG_MULTIPLE_KEY
    if column.flags & ColumnFlag.UNIQUE:
        flags |= FLAG_UNIQUE_KEY
    if column.flags & ColumnFlag.NULLABLE:
        flags |= FLAG_NULLABLE
    if column.flags & ColumnFlag.UNSIGNED:
        flags |= FLAG_UNSIGNED
    return flags


def _escape_binary(data: bytes) -> str:
    """VARBINARY/BINARY values: printable ASCII as is, everything else escaped (``\\x89``)."""
    out = []
    for b in data:
        if b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        elif b in (0x0A, 0x0D, 0x09):
            out.append({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}[b])
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def _label_index(labels: tuple[str, ...] | None, value: Any) -> Any:
    if not isinstance(value, str) or labels is None:
        return value
    if value == "":
        return 0
    try:
        return labels.index(value) + 1
    except ValueError:
        return value


def _set_mask(labels: tuple[str, ...] | None, value: Any) -> Any:
    if not isinstance(value, str) or labels is None:
        return value
    mask = 0
    for part in value.split(",") if value else ():
        try:
            mask |= 1 << labels.index(part)
        except ValueError:
            return value
    return mask


def encode_value(column: Column, open_code: int, value: Any) -> Any:
    """A decoded value as the seed's column type table prescribes. TIMESTAMP, TIME and DECIMAL
    print by their descriptions in ``protocol.valuetypes``, temporal fractions without trailing
    zeros; character data (legacy charsets included) and JSON arrive decoded to ``str``."""
    if value is None:
        return None
    if isinstance(value, InvalidTemporal):  # a zero or invalid date, as SELECT prints it
        return value.text
    if open_code == FieldType.ENUM:
        return _label_index(column.enum_values, value)
    if open_code == FieldType.SET:
        return _set_mask(column.set_values, value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    if isinstance(value, decimal.Decimal):
        return newdecimal.text(value)
    if isinstance(value, _dt.datetime):  # TIMESTAMP (aware: in UTC) or DATETIME (naive)
        return (timestamp2.text(value, trim=True) if value.tzinfo is not None
                else wall_clock_text(value, trim=True))
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return time2.text(value, trim=True)
    if open_code in _BASE64_TYPES:
        return base64.b64encode(characters.output_bytes(value)).decode("ascii")
    if isinstance(value, bytes | bytearray | memoryview):
        return _escape_binary(bytes(value))
    return value


class OpenProtocolEncoder:
    """Turns transaction items into Open Protocol ``{"key", "value"}`` objects.

    Stateful only in the ``ts`` clock (see the module docstring) and the open transaction's ts.
    """

    def __init__(self) -> None:
        self._last_ts = 0
        self._ts = 0
        # The last table described, kept alive so that its id() cannot be reused by another.
        self._described: tuple[TableMapEvent, tuple[tuple[str, int, int], ...]] | None = None

    def _next_ts(self, seconds: int) -> int:
        ts = max((seconds * 1000) << _LOGICAL_BITS, self._last_ts + 1)
        self._last_ts = ts
        return ts

    def encode(self, item: TransactionItem) -> Iterator[dict[str, Any]]:
        if isinstance(item, TransactionBegin):
            self._ts = self._next_ts(item.timestamp)
        elif isinstance(item, RowsEvent):
            yield from self._rows(item)
        elif isinstance(item, Statement):
            if item.is_ddl:
                yield self._ddl(item)
        elif isinstance(item, TransactionCommit | TransactionRollback):
            if isinstance(item, TransactionCommit):
                yield {"key": {"ts": self._ts, "t": 3}, "value": None}

    def _ddl(self, item: Statement) -> dict[str, Any]:
        from protocol.binlog import ddl

        parsed = ddl.classify(item.query, item.schema)
        query = ddl.redact_secrets(item.query)
        return {
            "key": {"ts": self._ts, "scm": parsed.schema if parsed else item.schema,
                    "tbl": parsed.table if parsed else "", "t": 2},
            "value": {"q": query, "t": int(parsed.kind) if parsed else 0},
        }

    def _describe(self, table: TableMapEvent) -> tuple[tuple[str, int, int], ...]:
        if self._described is not None and self._described[0] is table:
            return self._described[1]
        described = tuple(
            (c.name or f"col_{c.index + 1}", open_type_code(c), column_flags(c, table))
            for c in table.columns
        )
        self._described = (table, described)  # keep one: table maps repeat per txn
        return described

    def _image(self, table: TableMapEvent, described: tuple[tuple[str, int, int], ...],
               indexes: tuple[int, ...], values: tuple[list[Any], ...], row: int,
               diffs: dict[str, str] | None = None) -> dict[str, Any]:
        image: dict[str, Any] = {}
        for pos, index in enumerate(indexes):
            name, code, flags = described[index]
            value = values[pos][row]
            if isinstance(value, JsonDiff):  # no before value to apply it to: see the docstring
                if diffs is not None:
                    diffs[name] = value.to_json_text()
                continue
            cell: dict[str, Any] = {"t": code}
            if flags & FLAG_HANDLE_KEY:
                cell["h"] = True
            cell["f"] = flags
            cell["v"] = encode_value(table.columns[index], code, value)
            image[name] = cell
        return image

    def _rows(self, event: RowsEvent) -> Iterator[dict[str, Any]]:
        table = event.table
        described = self._describe(table)
        key = {"ts": self._ts, "scm": table.schema, "tbl": table.table, "t": 1}
        pk = table.primary_key
        for row in range(event.row_count):
            if event.kind is RowsKind.INSERT:
                assert event.after is not None
                yield {"key": key, "value": {
                    "u": self._image(table, described, event.after_columns, event.after, row)}}
            elif event.kind is RowsKind.DELETE:
                assert event.before is not None
                yield {"key": key, "value": {
                    "d": self._image(table, described, event.before_columns, event.before, row)}}
            else:
                assert event.before is not None and event.after is not None
                before = self._image(table, described, event.before_columns, event.before, row)
                diffs: dict[str, str] = {}
                after = self._image(table, described, event.after_columns, event.after, row,
                                    diffs)
                value: dict[str, Any] = {"u": after, "p": before}
                if (pk and len(after) == len(table.columns)
                        and _key_changed(before, after, [described[i][0] for i in pk])):
                    # a complete new row: TiCDC's delete + insert (see the module docstring)
                    yield {"key": key, "value": {"d": before}}
                    value = {"u": after}
                if diffs:
                    value["jd"] = diffs
                yield {"key": key, "value": value}


    def encode_lines(self, item: TransactionItem) -> str:
        """The JSON lines of :meth:`encode` (each ending in a newline) as one str."""
        return "".join(f"{dumps(obj)}\n" for obj in self.encode(item))


def _key_changed(before: dict[str, Any], after: dict[str, Any], names: list[str]) -> bool:
    return any(
        name in before and name in after and before[name]["v"] != after[name]["v"]
        for name in names
    )


def dumps(obj: Any) -> str:
    """One JSON line (or value), compact like TiCDC's output."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
