"""MySQL JSON: a document, stored in the binlog in MySQL's binary JSON.

**Stored** (binlog row image, JSON; metadata: the length prefix's size): binary JSON — a type
byte, then objects and arrays as counted, sized containers of key and value entries (small: 16-bit
offsets, large: 32-bit), inline small scalars, strings with a 7-bit variable length, and *opaque*
values carrying a column type's own bytes (DECIMAL, dates, TIME, binary strings).

**Value**: the document's JSON text exactly as ``SELECT`` prints it (:func:`json_to_text`:
MySQL's key order, spacing and number forms). A PARTIAL_UPDATE_ROWS diff whose document is not in
the before image stays a :class:`JsonDiff`.

**Snapshot**: ``SELECT`` prints the same text; :func:`from_text` (strict UTF-8).
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from . import newdecimal, time2

__all__ = ["JsonDiff", "JsonDiffOp", "JSON_DIFF_OP_NAMES", "Opaque", "json_binary_to_text",
           "json_binary_to_python", "json_to_text", "mysql_double_text", "apply_json_diff",
           "apply_json_diff_text", "select_expression", "from_text"]


def select_expression(quoted_name: str) -> str:
    """What a snapshot selects for the column: the column itself prints exactly."""
    return quoted_name


def from_text(raw: str | bytes) -> str:
    """The value of ``SELECT``'s text of a JSON column (``str`` or ``bytes``): strict UTF-8."""
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw
    return data.decode("utf-8")


_JSONB_SMALL_OBJECT, _JSONB_LARGE_OBJECT = 0x0, 0x1
_JSONB_SMALL_ARRAY, _JSONB_LARGE_ARRAY = 0x2, 0x3
_JSONB_LITERAL = 0x4
_JSONB_INT16, _JSONB_UINT16, _JSONB_INT32, _JSONB_UINT32 = 0x5, 0x6, 0x7, 0x8
_JSONB_INT64, _JSONB_UINT64, _JSONB_DOUBLE = 0x9, 0xA, 0xB
_JSONB_STRING, _JSONB_OPAQUE = 0xC, 0xF

_S_I16 = struct.Struct("<h")
_S_U16 = struct.Struct("<H")
_S_I32 = struct.Struct("<i")
_S_U32 = struct.Struct("<I")
_S_I64 = struct.Struct("<q")
_S_U64 = struct.Struct("<Q")
_S_F64 = struct.Struct("<d")

_SCALARS = {
    _JSONB_INT16: _S_I16, _JSONB_UINT16: _S_U16, _JSONB_INT32: _S_I32, _JSONB_UINT32: _S_U32,
    _JSONB_INT64: _S_I64, _JSONB_UINT64: _S_U64, _JSONB_DOUBLE: _S_F64,
}


@dataclass(frozen=True, slots=True)
class Opaque:
    """A JSON opaque value (DECIMAL, temporal, binary…), kept as its ready JSON text."""

    text: str


def _varlen(buf: bytes, offset: int, end: int) -> tuple[int, int]:
    """MySQL JSON variable-length integer: 7 bits per byte, least significant first."""
    value = 0
    shift = 0
    while True:
        if offset >= end or shift > 28:
            raise ValueError("bad JSON length")
        b = buf[offset]
        offset += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, offset
        shift += 7


def _opaque_text(field_type: int, data: bytes) -> str:
    if field_type == 246:  # NEWDECIMAL: precision, scale, decimal bytes
        value, _ = newdecimal.decode(data, 2, data[0], data[1])
        return format(value, "f")
    if field_type in (7, 10, 12, 11) and len(data) >= 8:
        packed = _S_I64.unpack_from(data, 0)[0]
        if field_type == 11:
            return json.dumps(time2.text(time2.decode_packed(packed), 6))
        negative = packed < 0
        packed = -packed if negative else packed
        intpart, us = packed >> 24, packed & 0xFFFFFF
        ymd, hms = intpart >> 17, intpart & 0x1FFFF
        year, month = divmod(ymd >> 5, 13)
        day = ymd & 31
        if field_type == 10:
            return f'"{year:04d}-{month:02d}-{day:02d}"'
        return (f'"{year:04d}-{month:02d}-{day:02d} {hms >> 12:02d}:{(hms >> 6) & 63:02d}:'
                f'{hms & 63:02d}.{us:06d}"')
    return f'"base64:type{field_type}:{base64.b64encode(data).decode("ascii")}"'


def _jsonb_value(buf: bytes, type_byte: int, offset: int, end: int) -> Any:
    """Decode the value of JSON type ``type_byte`` whose data starts at ``offset``."""
    if type_byte in (_JSONB_SMALL_OBJECT, _JSONB_LARGE_OBJECT, _JSONB_SMALL_ARRAY,
                     _JSONB_LARGE_ARRAY):
        return _jsonb_container(buf, type_byte, offset, end)
    if type_byte == _JSONB_LITERAL:
        return _literal(buf[offset])
    scalar = _SCALARS.get(type_byte)
    if scalar is not None:
        if offset + scalar.size > end:
            raise ValueError("JSON scalar runs past its container")
        return scalar.unpack_from(buf, offset)[0]
    if type_byte == _JSONB_STRING:
        length, offset = _varlen(buf, offset, end)
        if offset + length > end:
            raise ValueError("JSON string runs past its container")
        return buf[offset:offset + length].decode("utf-8")
    if type_byte == _JSONB_OPAQUE:
        field_type = buf[offset]
        length, offset = _varlen(buf, offset + 1, end)
        if offset + length > end:
            raise ValueError("JSON opaque value runs past its container")
        return Opaque(_opaque_text(field_type, buf[offset:offset + length]))
    raise ValueError(f"unknown JSON value type {type_byte:#x}")


def _literal(b: int) -> Any:
    if b == 0:
        return None
    if b == 1:
        return True
    if b == 2:
        return False
    raise ValueError(f"unknown JSON literal {b}")


def _jsonb_container(buf: bytes, type_byte: int, base: int, end: int) -> Any:
    large = type_byte in (_JSONB_LARGE_OBJECT, _JSONB_LARGE_ARRAY)
    is_object = type_byte in (_JSONB_SMALL_OBJECT, _JSONB_LARGE_OBJECT)
    word = _S_U32 if large else _S_U16
    w = word.size
    if base + 2 * w > end:
        raise ValueError("JSON container header runs past the value")
    count = word.unpack_from(buf, base)[0]
    size = word.unpack_from(buf, base + w)[0]
    cend = base + size
    if cend > end:
        raise ValueError("JSON container larger than its value")
    pos = base + 2 * w
    keys: list[str] = []
    if is_object:
        for _ in range(count):
            if pos + w + 2 > cend:
                raise ValueError("JSON key entry runs past the container")
            key_off = word.unpack_from(buf, pos)[0]
            key_len = _S_U16.unpack_from(buf, pos + w)[0]
            pos += w + 2
            if base + key_off + key_len > cend:
                raise ValueError("JSON key runs past the container")
            keys.append(buf[base + key_off:base + key_off + key_len].decode("utf-8"))
    values: list[Any] = []
    for _ in range(count):
        if pos + 1 + w > cend:
            raise ValueError("JSON value entry runs past the container")
        t = buf[pos]
        if t == _JSONB_LITERAL:
            values.append(_literal(buf[pos + 1]))
        elif t in (_JSONB_INT16, _JSONB_UINT16) or (large and t in (_JSONB_INT32, _JSONB_UINT32)):
            values.append(_SCALARS[t].unpack_from(buf, pos + 1)[0])
        else:
            value_off = word.unpack_from(buf, pos + 1)[0]
            if base + value_off >= cend:
                raise ValueError("JSON value offset past the container")
            values.append(_jsonb_value(buf, t, base + value_off, cend))
        pos += 1 + w
    if is_object:
        return dict(zip(keys, values, strict=True))
    return values


def json_binary_to_python(data: bytes) -> Any:
    """Decode MySQL binary JSON into Python values (dict/list/str/int/float/bool/None).

    Opaque values (DECIMAL, dates, binary strings inside JSON) become ``Opaque``
    objects holding their JSON text; :func:`json_to_text` prints them. An empty value is JSON
    ``null`` (what the server reads it as).

    Raises:
        ValueError: malformed binary JSON (also ``IndexError``/``struct.error`` on truncation;
            the row decoder turns all of them into ``RowDecodeError``).
    """
    if not data:
        return None
    return _jsonb_value(data, data[0], 1, len(data))


def mysql_double_text(x: float) -> str:
    """A double as MySQL prints it (``my_gcvt`` with its widest field width), without ``.0``."""
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError("JSON cannot hold NaN or infinity")
    if x == 0:
        return "-0" if str(x).startswith("-") else "0"
    sign = "-" if x < 0 else ""
    _, digits_t, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digits_t))
    assert isinstance(exponent, int)
    n = len(digits)
    decpt = n + exponent  # position of the decimal point relative to the digits
    width = 34 - (1 if sign else 0)
    if decpt <= 0:
        flen = n - decpt + 2
    elif decpt < n:
        flen = n + 1
    else:
        flen = decpt
    if flen <= width and -14 <= decpt and (decpt <= 15 or n > decpt):
        if decpt <= 0:
            return f"{sign}0.{'0' * -decpt}{digits}"
        if decpt < n:
            return f"{sign}{digits[:decpt]}.{digits[decpt:]}"
        return f"{sign}{digits}{'0' * (decpt - n)}"
    e = decpt - 1
    mantissa = digits[0] + ("." + digits[1:] if n > 1 else "")
    return f"{sign}{mantissa}e{e}"


def _mysql_key_order(item: tuple[str, Any]) -> tuple[int, bytes]:
    key = item[0].encode("utf-8")
    return len(key), key


def json_to_text(value: Any) -> str:
    """JSON text as MySQL prints it: ``{"a": 1, "b": [true, null]}``, keys in MySQL's order
    (shorter keys first, then bytewise), doubles with a decimal point or exponent."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = mysql_double_text(value)
        if all(c == "-" or c.isdigit() for c in text):
            text += ".0"
        return text
    if isinstance(value, dict):
        items = sorted(value.items(), key=_mysql_key_order)
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {json_to_text(v)}"
                               for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(json_to_text(v) for v in value) + "]"
    if isinstance(value, Opaque):
        return value.text
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def json_binary_to_text(data: bytes) -> str:
    """MySQL binary JSON → JSON text as ``SELECT`` prints it."""
    return json_to_text(json_binary_to_python(data))


# --- PARTIAL_UPDATE_ROWS JSON diffs --------------------------------------------------------------


class JsonDiffOp:
    REPLACE = 0
    INSERT = 1
    REMOVE = 2


JSON_DIFF_OP_NAMES = ("REPLACE", "INSERT", "REMOVE")  # by JsonDiffOp value


@dataclass(frozen=True, slots=True)
class JsonDiff:
    """The JSON diff vector of a partially updated JSON column, surfaced as is.

    Used as the after value when the before image does not carry the column (MINIMAL image), so
    the full after value cannot be computed. ``ops`` are ``(op, path, value_json_text|None)``.
    """

    ops: tuple[tuple[int, str, str | None], ...]

    def to_json_text(self) -> str:
        """The operations as JSON text, the form every output keeps them in:
        ``[{"op": "REPLACE", "path": "$.a", "value": 2}, {"op": "REMOVE", "path": "$.b"}]`` —
        ``op`` is REPLACE, INSERT or REMOVE, ``value`` the JSON value exactly as MySQL prints it
        (absent for REMOVE). Applying them in order to the previous document gives the new one
        (JSON_REPLACE / JSON_ARRAY_INSERT-or-JSON_INSERT / JSON_REMOVE semantics)."""
        parts = []
        for op, path, value in self.ops:
            text = f'{{"op": "{_op_name(op)}", "path": {json.dumps(path, ensure_ascii=False)}'
            parts.append(text + ("}" if value is None else f', "value": {value}}}'))
        return "[" + ", ".join(parts) + "]"

    def to_call_text(self) -> str:
        """The operations on one line, as ``binlake decode``'s text prints them:
        ``JSON_DIFF(REPLACE $.a 2, REMOVE $.b)`` — each operation's name, path and (but for
        REMOVE) the value's JSON text, as :meth:`to_json_text` has them."""
        return "JSON_DIFF(" + ", ".join(
            f"{_op_name(op)} {path}" + ("" if value is None else f" {value}")
            for op, path, value in self.ops) + ")"


def _op_name(op: int) -> str:
    """REPLACE, INSERT or REMOVE; the number itself for an operation no server writes."""
    return JSON_DIFF_OP_NAMES[op] if 0 <= op < len(JSON_DIFF_OP_NAMES) else str(op)


def _parse_path(path: str) -> list[str | int]:
    """Parse the simple JSON paths the server writes into diffs: ``$``, ``.key``, ``."key"``,
    ``[n]``."""
    if not path.startswith("$"):
        raise ValueError(f"JSON path must start with $: {path!r}")
    legs: list[str | int] = []
    i = 1
    n = len(path)
    while i < n:
        c = path[i]
        if c == ".":
            i += 1
            if i < n and path[i] == '"':
                j = i + 1
                while j < n and path[j] != '"':
                    j += 2 if path[j] == "\\" else 1
                legs.append(json.loads(path[i:j + 1]))
                i = j + 1
            else:
                j = i
                while j < n and path[j] not in ".[":
                    j += 1
                legs.append(path[i:j])
                i = j
        elif c == "[":
            j = path.index("]", i)
            legs.append(int(path[i + 1:j].strip()))
            i = j + 1
        elif c.isspace():
            i += 1
        else:
            raise ValueError(f"unsupported JSON path {path!r}")
    return legs


def apply_json_diff_text(document: str, operations: str) -> str:
    """Apply a :meth:`JsonDiff.to_json_text` operations text to a JSON document's text (as MySQL
    prints it) and return the new document's text, as MySQL prints it: what a reader of the
    lake does with a ``_json_diff`` (``sinks.spark.state``)."""
    ops = [(JSON_DIFF_OP_NAMES.index(o["op"]), o["path"], o.get("value"))
           for o in json.loads(operations)]
    return json_to_text(apply_json_diff(json.loads(document), ops))


def apply_json_diff(before: Any, ops: list[tuple[int, str, Any]]) -> Any:
    """Apply a JSON diff vector (``(op, path, python_value)``) to a decoded JSON document.

    Mirrors the server: REPLACE sets an existing member/element, INSERT adds an object member or
    inserts into an array (appending past the end), REMOVE deletes. Raises ``ValueError`` if a
    path does not resolve.
    """
    import copy

    doc = copy.deepcopy(before)
    for op, path, value in ops:
        legs = _parse_path(path)
        if not legs:
            if op != JsonDiffOp.REPLACE:
                raise ValueError("only REPLACE may target the document root")
            doc = value
            continue
        parent = doc
        for leg in legs[:-1]:
            parent = parent[leg]
        last = legs[-1]
        if op == JsonDiffOp.REPLACE:
            parent[last] = value
        elif op == JsonDiffOp.INSERT:
            if isinstance(parent, list):
                assert isinstance(last, int)
                parent.insert(min(last, len(parent)), value)
            else:
                parent[last] = value
        elif op == JsonDiffOp.REMOVE:
            del parent[last]
        else:
            raise ValueError(f"unknown JSON diff operation {op}")
    return doc
