"""Row images of WRITE/UPDATE/DELETE_ROWS events decoded column-wise: the daemon's hot path.

All their forms: v1, v2, MariaDB's compressed ones (once inflated) and MySQL's PARTIAL_UPDATE.

Body layout (after the header, CRC stripped, already inflated/unwrapped by the caller)::

    table_id   6 bytes (4 when the post-header length is 6)
    flags      2 (unknown bits tolerated: MySQL 9 sets USE_SQL_FOREIGN_KEY_F)
    [v2]       extra_len u16 counting itself, then extra_len - 2 bytes of TLVs (kept verbatim)
    width      lenenc, the table's column count
    columns    (width + 7) // 8 bitmap: columns present in the (before) image
    [UPDATE]   a second bitmap: columns present in the after image
    rows       per row: image = null bitmap over the present columns + their values;
               UPDATE rows are a before image followed by an after image;
               PARTIAL_UPDATE rows carry, between the two, lenenc value_options and (if bit 0)
               a bitmap over the table's JSON columns marking which hold a JSON diff.

**Speed.** One :class:`TableDecoder` per table definition (cached by the stream's
:class:`DecoderCache`) resolves every column's type once. For each combination of image bitmaps it generates — once, then
reuses — a Python function whose loop decodes the whole event with the per-column code inlined:
``struct.Struct.unpack_from`` at an offset into one ``bytes`` object, values appended straight
into per-column lists, no per-row dicts and no per-value dispatch. The generated source is
built only from type codes and integers taken from the TABLE_MAP (never from strings in the
event), and is kept on the decoder (``source_for``) for debugging.

What the generated code does per value, because each of these was measured to matter: DECIMAL,
DATETIME2 and TIMESTAMP2 are inlined (one precompiled ``struct`` unpack of the digit groups or
the packed word, shifts, then one ``Decimal("<digits>e-<scale>")`` or a positional
``datetime(...)``) rather than called; short little-endian lengths and null bitmaps are read
with byte indexing; UTF-8 uses ``bytes.decode()``'s fast path; and an image with no NULL runs a
second copy of the column code without null tests, where consecutive fixed-width numbers are
read by a single ``struct`` unpack. ``python -m tests.unit.test_rows`` prints rows/s.

**Errors.** Anything that does not fit — a length running past the event, an ENUM index with no
label, an impossible date part, a bitmap wider than the table — raises
:class:`~protocol.errors.RowDecodeError` naming the table and the event position. The generated
code raises plain ``IndexError``/``struct.error``/``ValueError`` and is wrapped once per event.

**PARTIAL_UPDATE_ROWS.** A JSON column whose diff bit is set holds a diff vector instead of a
value. When the before image carries the column (binlog_row_image=FULL), the diff is applied to
it and the after value is the full new JSON text — the same as a FULL update would log. When it
does not (MINIMAL), the after value is a :class:`~protocol.binlog.values.JsonDiff` surfacing the
operations faithfully.

**Values.** What ``SELECT`` returns: ``protocol.valuetypes`` describes TIMESTAMP, TIME, DECIMAL,
JSON and character data once (the code generated here is a twin of it, tested against it). Character
columns decode with their collation's codec (``coltypes.codec_for_collation``), legacy charsets
with the server's own conversion (:mod:`.charsets`); a column with no known charset, or the
binary collation, stays ``bytes``; a value that is not well-formed in its declared charset is
returned as ``bytes`` rather than guessed at. ENUM → its label ('' for index
0), SET → comma-joined labels in definition order; without ENUM/SET label metadata they decode
to their numbers. BIT → int, YEAR → int (0 for 0000), GEOMETRY/VECTOR → bytes as stored.
"""

from __future__ import annotations

import datetime
import decimal
import json
import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from ..errors import EventDecodeError, MalformedPacket, RowDecodeError, UnknownTable
from ..frozen import positional_maker
from ..packets import read_lenenc
from ..valuetypes import timestamp2 as _timestamp2
from ..valuetypes.characters import text_decoder, text_rule
from . import charsets as _charsets
from . import native as _native
from . import values as _values
from .coltypes import FieldType
from .model import Column, EventHeader, RowsEvent, RowsKind, TableMapEvent

__all__ = ["decode_rows_event", "TableDecoder", "DecoderCache", "RowsEventFlag", "set_labels",
           "text_rule", "text_decoder"]


class RowsEventFlag:
    STMT_END = 0x0001
    NO_FOREIGN_KEY_CHECKS = 0x0002
    RELAXED_UNIQUE_CHECKS = 0x0004
    COMPLETE_ROWS = 0x0008
    NO_CHECK_CONSTRAINTS = 0x0010  # MariaDB; MySQL 9 uses 0x0010 for USE_SQL_FOREIGN_KEY


PARTIAL_JSON_UPDATES = 1  # value_options bit in PARTIAL_UPDATE_ROWS

_MAX_CACHED_SHAPES = 64

#: Compiled decoder code by its source text: tables of the same column types (shards, one table
#: per tenant: thousands of them) generate the same source, and compiling it is most of a new
#: table's decoding cost. The per-table constants live in each decoder's namespace,
#: not in the code, so sharing it is safe.
_COMPILED: dict[str, Any] = {}
_MAX_COMPILED = 512

#: Per columns tuple, what a TableDecoder derives from the columns alone (JSON columns, the
#: unsupported ones, native specs): thousands of tables of one shape share it (building the
#: native specs was most of a new table's decoder cost). Pure functions of the columns, never
#: mutated; bounded like _COMPILED.
_DERIVED: dict[tuple[Column, ...], tuple[list[int], dict[int, int],
                                         list[tuple[Any, ...] | None] | None]] = {}
_MAX_DERIVED = 4096

_S = struct.Struct
# Names the generated code may use (its globals).
_NAMESPACE: dict[str, Any] = {
    "_i16": _S("<h").unpack_from, "_u16": _S("<H").unpack_from,
    "_i32": _S("<i").unpack_from, "_u32": _S("<I").unpack_from,
    "_i64": _S("<q").unpack_from, "_u64": _S("<Q").unpack_from,
    "_f32": _S("<f").unpack_from, "_f64": _S("<d").unpack_from,
    "_from_bytes": int.from_bytes,
    "_u64be": _S(">Q").unpack_from,
    "_Decimal": Decimal,
    "_NEG_ZERO": Decimal("-0"),
    "_DECIMAL_CONTEXT": decimal.Context(prec=65, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN),
    "_datetime": datetime.datetime,
    "_date_of": datetime.date,
    "_fromts": datetime.datetime.fromtimestamp,
    "_timedelta": datetime.timedelta,
    "_UTC": datetime.UTC,
    "_EPOCH": _timestamp2.EPOCH,
    "_dt2_invalid": _values.datetime2_invalid,
    "_date": _values.decode_date,
    "_dt2": _values.decode_datetime2,
    "_ts2": _values.decode_timestamp2,
    "_t2": _values.decode_time2,
    "_time_old": _values.decode_time_old,
    "_dt_old": _values.decode_datetime_old,
    "_ts_old": _values.decode_timestamp_old,
    "_latin1": _values.decode_mysql_latin1,
    "_json_text": _values.json_binary_to_text,
    "_charset_decoders": _charsets.DECODERS,
    "_lenenc": read_lenenc,
    "UnicodeDecodeError": UnicodeDecodeError,
    "ValueError": ValueError,
}


class _RowOverrun(ValueError):
    pass


_NAMESPACE["_Overrun"] = _RowOverrun


def set_labels(labels: tuple[str, ...]) -> Callable[[int], str]:
    """SET bitmask → comma-joined labels in definition order (what SELECT prints)."""
    cache: dict[int, str] = {}
    limit = 1 << len(labels)

    def text(mask: int) -> str:
        try:
            return cache[mask]
        except KeyError:
            pass
        if mask >= limit:
            raise ValueError(f"SET value {mask:#x} has bits beyond its {len(labels)} members")
        value = ",".join(label for bit, label in enumerate(labels) if mask >> bit & 1)
        if len(cache) < 4096:
            cache[mask] = value
        return value

    return text


def _derive(columns: tuple[Column, ...]) -> tuple[
        list[int], dict[int, int], list[tuple[Any, ...] | None] | None]:
    """What a TableDecoder needs of its columns beyond the code: the JSON columns, the
    unsupported ones (by type) and, with the native decoder on, each column's native spec."""
    json_columns = [c.index for c in columns if c.type_code == FieldType.JSON]
    unsupported = {
        c.index: c.type_code for c in columns
        if c.type_code in (FieldType.DECIMAL, FieldType.TYPED_ARRAY, FieldType.INVALID,
                           FieldType.BOOL)
    }
    specs = [native_spec(c) for c in columns] if _native.ENABLED else None
    return json_columns, unsupported, specs


class TableDecoder:
    """Decodes the row images of one table (one TABLE_MAP) into per-column lists.

    A stream gets it from its :class:`DecoderCache`, which builds one per table definition.
    """

    __slots__ = ("table", "_consts", "_shapes", "_json_columns", "_sources", "_unsupported",
                 "_native_specs", "_native_plans")

    def __init__(self, table: TableMapEvent) -> None:
        self.table = table
        self._consts: dict[str, Any] = {}
        self._shapes: dict[tuple[Any, ...], Callable[..., int]] = {}
        self._sources: dict[tuple[Any, ...], str] = {}
        derived = _DERIVED.get(table.columns)
        if derived is None or (derived[2] is not None) != bool(_native.ENABLED):
            derived = _derive(table.columns)
            if len(_DERIVED) >= _MAX_DERIVED:
                _DERIVED.clear()
            _DERIVED[table.columns] = derived
        self._json_columns, self._unsupported, self._native_specs = derived
        self._native_plans: dict[tuple[Any, ...], tuple[object, object] | None] = {}

    # --- code generation ---------------------------------------------------------------------

    def _const(self, name: str, value: Any) -> str:
        self._consts[name] = value
        return name

    def _length_prefix(self, width: int) -> tuple[str, int]:
        """Code reading a little-endian length of ``width`` bytes at ``off``, and the width."""
        if width == 1:
            return "buf[off]", 1
        if width == 2:
            return "buf[off] | buf[off + 1] << 8", 2
        if width == 3:
            return "buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16", 3
        if width == 4:
            return "_u32(buf, off)[0]", 4
        raise ValueError(f"impossible length-prefix width {width}")

    def _text(self, col: Column, raw: str, out: list[str], ind: str) -> None:
        """Emit code turning the bytes expression ``raw`` into the column's value ``v``
        (the rule of :func:`text_rule`)."""
        kind, how = text_rule(col.charset)
        if kind == "legacy":
            # a legacy charset: the server's own conversion (server-derived tables)
            out.append(f"{ind}v = _charset_decoders[{how!r}]({raw})")
        elif kind == "bytes":
            out.append(f"{ind}v = {raw}")
        elif kind == "latin1":
            out.append(f"{ind}v = _latin1({raw})")
        else:
            codec = how
            # bytes.decode() without arguments takes CPython's UTF-8 fast path
            call = "decode()" if codec == "utf-8" else f"decode({codec!r})"
            out.append(f"{ind}v = {raw}")
            out.append(f"{ind}try:")
            out.append(f"{ind}    v = v.{call}")
            out.append(f"{ind}except UnicodeDecodeError:")
            out.append(f"{ind}    pass")

    def _value_code(self, col: Column, out: list[str], ind: str, n_read: bool = False) -> None:
        """Emit statements that read column ``col`` at ``off`` into ``v`` and advance ``off``.

        ``n_read``: the column's length prefix (see :func:`_prefix_width`) is already in ``n``
        and ``off`` is past it.
        """
        t = col.type_code
        i = col.index
        u = col.unsigned
        if t in self._unsupported:
            raise RowDecodeError(f"column {i + 1} of `{self.table.schema}`.`{self.table.table}` "
                                 f"has type {t}, which no supported server writes into row images")
        if t == FieldType.TINY:
            out.append(f"{ind}v = buf[off]" if u else f"{ind}v = (buf[off] ^ 0x80) - 0x80")
            out.append(f"{ind}off += 1")
        elif t in (FieldType.SHORT, FieldType.LONG, FieldType.LONGLONG, FieldType.FLOAT,
                   FieldType.DOUBLE):
            fn, size = {
                FieldType.SHORT: ("_u16" if u else "_i16", 2),
                FieldType.LONG: ("_u32" if u else "_i32", 4),
                FieldType.LONGLONG: ("_u64" if u else "_i64", 8),
                FieldType.FLOAT: ("_f32", 4),
                FieldType.DOUBLE: ("_f64", 8),
            }[FieldType(t)]
            out.append(f"{ind}v = {fn}(buf, off)[0]")
            out.append(f"{ind}off += {size}")
        elif t == FieldType.INT24:
            raw = "(buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16)"
            out.append(f"{ind}v = {raw}" if u else f"{ind}v = ({raw} ^ 0x800000) - 0x800000")
            out.append(f"{ind}off += 3")
        elif t == FieldType.NEWDECIMAL:
            self._decimal_code(col, out, ind)
        elif t == FieldType.YEAR:
            out.append(f"{ind}v = buf[off]")
            out.append(f"{ind}off += 1")
            out.append(f"{ind}if v:")
            out.append(f"{ind}    v += 1900")
        elif t in (FieldType.DATE, FieldType.NEWDATE):
            # year << 9 | month << 5 | day; a date Python cannot hold: values.decode_date
            out.append(f"{ind}v = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16")
            out.append(f"{ind}off += 3")
            out.append(f"{ind}try:")
            out.append(f"{ind}    v = _date_of(v >> 9, v >> 5 & 15, v & 31)")
            out.append(f"{ind}except ValueError:")
            out.append(f"{ind}    v = _date(v)")
        elif t == FieldType.TIME:
            out.append(f"{ind}v = _time_old(_from_bytes(buf[off:off + 3], 'little', signed=True))")
            out.append(f"{ind}off += 3")
        elif t == FieldType.DATETIME:
            out.append(f"{ind}v = _dt_old(_u64(buf, off)[0])")
            out.append(f"{ind}off += 8")
        elif t == FieldType.TIMESTAMP:
            out.append(f"{ind}v = _ts_old(_u32(buf, off)[0])")
            out.append(f"{ind}off += 4")
        elif t in (FieldType.DATETIME2, FieldType.TIMESTAMP2, FieldType.TIME2):
            fsp = col.meta
            if fsp > 6:
                raise RowDecodeError(f"column {i + 1}: fractional seconds precision {fsp} > 6")
            if t == FieldType.DATETIME2:
                self._datetime2_code(fsp, out, ind)
            elif t == FieldType.TIMESTAMP2:
                self._timestamp2_code(fsp, out, ind)
            else:
                out.append(f"{ind}v = _t2(buf, off, {fsp})")
                out.append(f"{ind}off += {3 + _values.fractional_size(fsp)}")
            # A read past the end of the image is caught by the end-of-row check.
        elif t in (FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING):
            max_len = col.length or 0
            if not n_read:
                prefix, width = self._length_prefix(1 if max_len < 256 else 2)
                out.append(f"{ind}n = {prefix}")
                out.append(f"{ind}off += {width}")
            self._text(col, "buf[off:off + n]", out, ind)
            out.append(f"{ind}off += n")
            if t == FieldType.STRING and col.charset == 63 and max_len:
                # BINARY(n): the server strips trailing 0x00 pad bytes; SELECT returns them.
                out.append(f"{ind}if n < {max_len}:")
                out.append(f"{ind}    v = v.ljust({max_len}, b'\\x00')")
        elif t in (FieldType.BLOB, FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB,
                   FieldType.LONG_BLOB, FieldType.GEOMETRY, FieldType.VECTOR, FieldType.JSON):
            if not n_read:
                prefix, width = self._length_prefix(col.meta)
                out.append(f"{ind}n = {prefix}")
                out.append(f"{ind}off += {width}")
            if t in (FieldType.GEOMETRY, FieldType.VECTOR):
                out.append(f"{ind}v = buf[off:off + n]")
            elif t == FieldType.JSON:
                out.append(f"{ind}if off + n > end:")
                out.append(f"{ind}    raise _Overrun('JSON value runs past the event')")
                out.append(f"{ind}v = _json_text(buf[off:off + n])")
            else:
                self._text(col, "buf[off:off + n]", out, ind)
            out.append(f"{ind}off += n")
        elif t == FieldType.ENUM:
            width = col.length or 1
            code = "buf[off]" if width == 1 else "_u16(buf, off)[0]"
            if col.enum_values is not None:
                labels = self._const(f"_enum{i}", ("",) + tuple(col.enum_values))
                out.append(f"{ind}v = {labels}[{code}]")
            else:
                out.append(f"{ind}v = {code}")
            out.append(f"{ind}off += {width}")
        elif t == FieldType.SET:
            width = col.length or 1
            code = f"_from_bytes(buf[off:off + {width}], 'little')"
            if col.set_values is not None:
                fn = self._const(f"_set{i}", set_labels(tuple(col.set_values)))
                out.append(f"{ind}v = {fn}({code})")
            else:
                out.append(f"{ind}v = {code}")
            out.append(f"{ind}off += {width}")
        elif t == FieldType.BIT:
            nbytes = (col.meta >> 8) + (1 if col.meta & 0xFF else 0)
            out.append(f"{ind}v = _from_bytes(buf[off:off + {nbytes}], 'big')")
            out.append(f"{ind}off += {nbytes}")
        elif t == FieldType.NULL:
            out.append(f"{ind}v = None")
        else:
            raise RowDecodeError(f"column {i + 1} of `{self.table.schema}`.`{self.table.table}` "
                                 f"has unknown type {t}")

    def _decimal_code(self, col: Column, out: list[str], ind: str) -> None:
        """Emit DECIMAL(p, s) decoding inline: one ``struct`` unpack yields the digit groups
        (a 3-byte group as two fields), the sign flips them, and one ``Decimal`` is built from
        ``"<sign><digits>e-<scale>"`` — the same value and exponent as the plain text form."""
        precision, scale = col.meta >> 8, col.meta & 0xFF
        _values.decimal_size_checked(precision, scale)
        fmt = ">"
        fields: list[tuple[str, int]] = []  # (name, bits) in storage order
        groups: list[tuple[str, int]] = []  # (expression, digits), most significant first
        for nbytes, digits in _values.decimal_groups(precision, scale):
            k = len(fields)
            if nbytes == 3:
                fmt += "BH"
                fields += [(f"q{k}", 8), (f"q{k + 1}", 16)]
                groups.append((f"(q{k} << 16 | q{k + 1})", digits))
            else:
                fmt += {1: "B", 2: "H", 4: "I"}[nbytes]
                fields.append((f"q{k}", nbytes * 8))
                groups.append((f"q{k}", digits))
        unpack = self._const(f"_dec{col.index}", struct.Struct(fmt).unpack_from)
        names = [name for name, _ in fields]
        first, first_bits = fields[0]
        top = 1 << (first_bits - 1)
        out.append(f"{ind}{', '.join(names)}{',' if len(names) == 1 else ''} = "
                   f"{unpack}(buf, off)")
        out.append(f"{ind}off += {struct.calcsize(fmt)}")
        out.append(f"{ind}if {first} & {top:#x}:")
        out.append(f"{ind}    {first} ^= {top:#x}")
        out.append(f"{ind}    neg = False")
        out.append(f"{ind}else:")
        out.append(f"{ind}    {first} ^= {top - 1:#x}")
        for name, bits in fields[1:]:
            out.append(f"{ind}    {name} ^= {(1 << bits) - 1:#x}")
        out.append(f"{ind}    neg = True")
        checks = " or ".join(f"{expr} >= {10 ** digits}" for expr, digits in groups)
        out.append(f"{ind}if {checks}:")
        out.append(f"{ind}    raise ValueError('DECIMAL digit group out of range')")
        number = groups[0][0]
        for expr, digits in groups[1:]:
            number = f"({number}) * {10 ** digits} + {expr}"
        out.append(f"{ind}v = {number}")
        out.append(f"{ind}if neg:")  # -0 keeps its sign, as the text form "-0.00" does
        out.append(f"{ind}    v = -v if v else _NEG_ZERO")
        # The integer digits scaled by 10^-scale: exact (the context holds 65 digits, the
        # most a DECIMAL has), and the same exponent as the plain text form.
        scaled = f".scaleb({-scale}, _DECIMAL_CONTEXT)" if scale else ""
        out.append(f"{ind}v = _Decimal(v){scaled}")

    def _datetime2_code(self, fsp: int, out: list[str], ind: str) -> None:
        """Emit DATETIME2 decoding inline: the 5-byte packed value (offset by 2^39) and the
        big-endian fraction read by one ``struct`` unpack, split with shifts, and a positional
        ``datetime(...)``; a date Python cannot hold becomes an InvalidTemporal."""
        if fsp >= 5:  # 5 + 3 bytes: one big-endian 64-bit word
            out.append(f"{ind}p = _u64be(buf, off)[0]")
            out.append(f"{ind}us = p & 0xFFFFFF")
            out.append(f"{ind}p = (p >> 24) - 0x8000000000")
        else:
            fmt, scale = {0: (">IB", 0), 1: (">IBB", 10000), 2: (">IBB", 10000),
                          3: (">IBH", 100), 4: (">IBH", 100)}[fsp]
            unpack = self._const(f"_dt2_{fsp}", struct.Struct(fmt).unpack_from)
            if fsp:
                out.append(f"{ind}p, lo, us = {unpack}(buf, off)")
                out.append(f"{ind}p = (p << 8 | lo) - 0x8000000000")
                out.append(f"{ind}us *= {scale}")
            else:
                out.append(f"{ind}p, lo = {unpack}(buf, off)")
                out.append(f"{ind}p = (p << 8 | lo) - 0x8000000000")
                out.append(f"{ind}us = 0")
        out.append(f"{ind}off += {5 + _values.fractional_size(fsp)}")
        out.append(f"{ind}if p < 0 or us > 999999:")
        out.append(f"{ind}    raise ValueError('negative or out-of-range DATETIME2')")
        out.append(f"{ind}ymd = p >> 17")
        out.append(f"{ind}ym = ymd >> 5")
        out.append(f"{ind}year = ym // 13")
        out.append(f"{ind}try:")
        out.append(f"{ind}    v = _datetime(year, ym - year * 13, ymd & 31, p >> 12 & 31, "
                   "p >> 6 & 63, p & 63, us)")
        out.append(f"{ind}except ValueError:")
        out.append(f"{ind}    v = _dt2_invalid(p, us, {fsp})")

    def _timestamp2_code(self, fsp: int, out: list[str], ind: str) -> None:
        """Emit TIMESTAMP2 decoding inline: big-endian seconds and fraction by one ``struct``
        unpack; 0 is the zero TIMESTAMP (an InvalidTemporal), anything else an aware UTC
        datetime (``fromtimestamp`` when there is no fraction: the cheapest exact way)."""
        fmt, scale = {0: (">I", 0), 1: (">IB", 10000), 2: (">IB", 10000), 3: (">IH", 100),
                      4: (">IH", 100), 5: (">IBH", 0), 6: (">IBH", 0)}[fsp]
        unpack = self._const(f"_ts2_{fsp}", struct.Struct(fmt).unpack_from)
        zero = self._const(f"_ts2_zero_{fsp}", _timestamp2.zero(fsp))
        if fsp == 0:
            out.append(f"{ind}v = {unpack}(buf, off)[0]")
            out.append(f"{ind}off += 4")
            out.append(f"{ind}v = _fromts(v, _UTC) if v else {zero}")
            return
        if fsp >= 5:
            out.append(f"{ind}p, hi, us = {unpack}(buf, off)")
            out.append(f"{ind}us |= hi << 16")
        else:
            out.append(f"{ind}p, us = {unpack}(buf, off)")
            out.append(f"{ind}us *= {scale}")
        out.append(f"{ind}off += {4 + _values.fractional_size(fsp)}")
        out.append(f"{ind}if us > 999999:")
        out.append(f"{ind}    raise ValueError('TIMESTAMP2 fraction out of range')")
        out.append(f"{ind}v = _EPOCH + _timedelta(0, p, us) if p or us else {zero}")

    def _image_code(self, present: tuple[int, ...], lists: str, out: list[str], ind: str,
                    partial: bool = False, before: tuple[int, ...] | None = None) -> None:
        """Emit code decoding one row image: the null bitmap, then each present column."""
        nb = (len(present) + 7) // 8
        if nb == 1:
            out.append(f"{ind}nb = buf[off]")
        elif nb == 2:
            out.append(f"{ind}nb = buf[off] | buf[off + 1] << 8")
        elif nb:
            out.append(f"{ind}nb = _from_bytes(buf[off:off + {nb}], 'little')")
        if nb:
            out.append(f"{ind}off += {nb}")
        cols = self.table.columns
        json_diffs = partial and any(cols[idx].type_code == FieldType.JSON for idx in present)
        if nb and not json_diffs:
            # Rows without a NULL are the common case: they get code with no null tests and
            # runs of fixed-width numbers read by one struct unpack.
            out.append(f"{ind}if not nb:")
            self._no_null_code(present, lists, out, ind + "    ", 0, len(present))
            out.append(f"{ind}else:")
            ind += "    "
            if nb > 1:
                # A wide row seldom has no NULL at all, but most of its groups of 8 columns
                # (one bitmap byte) have none: each gets the same fast path.
                for first in range(0, len(present), 8):
                    stop = min(first + 8, len(present))
                    out.append(f"{ind}if not nb & {((1 << (stop - first)) - 1) << first:#x}:")
                    self._no_null_code(present, lists, out, ind + "    ", first, stop)
                    out.append(f"{ind}else:")
                    self._tested_code(present, lists, out, ind + "    ", first, stop)
                return
        self._tested_code(present, lists, out, ind, 0, len(present), partial, before)

    def _tested_code(self, present: tuple[int, ...], lists: str, out: list[str], ind: str,
                     first: int, stop: int, partial: bool = False,
                     before: tuple[int, ...] | None = None) -> None:
        """Emit the columns ``first``..``stop`` of an image, each tested against ``nb``."""
        cols = self.table.columns
        for k in range(first, stop):
            idx = present[k]
            col = cols[idx]
            out.append(f"{ind}if nb & {1 << k}:")
            out.append(f"{ind}    {lists}{k}(None)")
            out.append(f"{ind}else:")
            if partial and col.type_code == FieldType.JSON:
                jbit = 1 << self._json_columns.index(idx)
                before_k = before.index(idx) if before and idx in before else None
                prev = f"B{before_k}" if before_k is not None else "None"
                out.append(f"{ind}    if pj & {jbit}:")
                out.append(f"{ind}        v, off = _json_diff(buf, off, end, {prev}, {col.meta})")
                out.append(f"{ind}    else:")
                self._value_code(col, out, ind + "        ")
            else:
                self._value_code(col, out, ind + "    ")
            out.append(f"{ind}    {lists}{k}(v)")

    def _no_null_code(self, present: tuple[int, ...], lists: str, out: list[str],
                      ind: str, first: int, stop: int) -> None:
        """Emit the columns ``first``..``stop`` of an image where they hold no NULL:
        consecutive fixed-width integers and floats are read by one precompiled ``struct``
        (``<iqd`` …), with the length prefix of a string right after them, the rest as usual."""
        cols = self.table.columns
        k = first
        while k < stop:
            run = ""
            while k + len(run) < stop:
                code = _struct_code(cols[present[k + len(run)]])
                if code is None:
                    break
                run += code
            after_run = k + len(run)
            prefix = _prefix_width(cols[present[after_run]]) if run and after_run < stop else None
            if len(run) >= 2 or prefix:
                fmt = "<" + run + {None: "", 1: "B", 2: "H"}[prefix]
                unpack = self._const(f"_run_{lists}{k}_{after_run}", struct.Struct(fmt).unpack_from)
                names = [f"x{j}" for j in range(len(run))] + (["n"] if prefix else [])
                out.append(f"{ind}{', '.join(names)} = {unpack}(buf, off)")
                out.append(f"{ind}off += {struct.calcsize(fmt)}")
                for j in range(len(run)):
                    out.append(f"{ind}{lists}{k + j}(x{j})")
                k = after_run
                if prefix:
                    self._value_code(cols[present[k]], out, ind, n_read=True)
                    out.append(f"{ind}{lists}{k}(v)")
                    k += 1
            else:
                self._value_code(cols[present[k]], out, ind)
                out.append(f"{ind}{lists}{k}(v)")
                k += 1

    def _generate(self, before: tuple[int, ...] | None, after: tuple[int, ...] | None,
                  partial: bool) -> tuple[Callable[..., int], str]:
        out = ["def _decode(buf, off, end, before_lists, after_lists):"]
        ind = "    "
        if before is not None:
            for k in range(len(before)):
                out.append(f"{ind}B{k} = before_lists[{k}]")
                out.append(f"{ind}b{k} = B{k}.append")
        if after is not None:
            for k in range(len(after)):
                out.append(f"{ind}a{k} = after_lists[{k}].append")
        out.append(f"{ind}nb = 0")
        out.append(f"{ind}pj = 0")
        out.append(f"{ind}rows = 0")
        out.append(f"{ind}while off < end:")
        body = ind * 2
        if before is not None:
            self._image_code(before, "b", out, body)
        if partial:
            json_bytes = (len(self._json_columns) + 7) // 8
            out.append(f"{body}options, off = _lenenc(buf, off, end)")
            out.append(f"{body}if options & {PARTIAL_JSON_UPDATES}:")
            out.append(f"{body}    pj = _from_bytes(buf[off:off + {json_bytes}], 'little')")
            out.append(f"{body}    off += {json_bytes}")
            out.append(f"{body}else:")
            out.append(f"{body}    pj = 0")
        if after is not None:
            self._image_code(after, "a", out, body, partial=partial, before=before)
        out.append(f"{body}if off > end:")
        out.append(f"{body}    raise _Overrun('row image runs past the end of the event')")
        out.append(f"{body}rows += 1")
        out.append(f"{ind}return rows")
        source = "\n".join(out) + "\n"
        namespace = dict(_NAMESPACE)
        namespace.update(self._consts)
        namespace["_json_diff"] = _read_json_diff
        code = _COMPILED.get(source)
        if code is None:
            if len(_COMPILED) >= _MAX_COMPILED:
                _COMPILED.clear()
            code = _COMPILED[source] = compile(source, "<generated rows decoder>", "exec")
        exec(code, namespace)  # source built from type codes and integers only; see module doc
        return namespace["_decode"], source

    def shape(self, before: tuple[int, ...] | None, after: tuple[int, ...] | None,
              partial: bool = False) -> Callable[..., int]:
        """The (cached) generated decoder for one combination of image bitmaps."""
        key = (before, after, partial)
        fn = self._shapes.get(key)
        if fn is None:
            if len(self._shapes) >= _MAX_CACHED_SHAPES:
                self._shapes.clear()
                self._sources.clear()
            fn, source = self._generate(before, after, partial)
            self._shapes[key] = fn
            self._sources[key] = source
        return fn

    def native_plan(self, before: tuple[int, ...] | None, after: tuple[int, ...] | None,
                    partial: bool = False) -> tuple[object, object] | None:
        """The compiled native plans (before, after) of a shape, or None when the native
        decoder is off or does not cover one of its columns (see native.py)."""
        specs = self._native_specs
        if specs is None or partial:
            return None
        key = (before, after)
        if key in self._native_plans:
            return self._native_plans[key]
        plans: tuple[object, object] | None = None
        images: list[object] = []
        for present in (before, after):
            if present is None:
                images.append(None)
                continue
            image = tuple(specs[i] for i in present)
            if any(spec is None for spec in image):
                break
            images.append(_native.plan(image))  # type: ignore[arg-type]
        else:
            plans = (images[0], images[1])
        if len(self._native_plans) >= _MAX_CACHED_SHAPES:
            self._native_plans.clear()
        self._native_plans[key] = plans
        return plans

    def source_for(self, before: tuple[int, ...] | None, after: tuple[int, ...] | None,
                   partial: bool = False) -> str:
        """The generated Python source for a shape (for debugging and the curious)."""
        self.shape(before, after, partial)
        return self._sources[(before, after, partial)]


_STRUCT_CODES: dict[int, str] = {
    FieldType.TINY: "bB", FieldType.SHORT: "hH", FieldType.LONG: "iI",
    FieldType.LONGLONG: "qQ", FieldType.FLOAT: "ff", FieldType.DOUBLE: "dd",
}


def _prefix_width(col: Column) -> int | None:
    """The width of a string column's little-endian length prefix when it is 1 or 2 bytes."""
    t = col.type_code
    if t in (FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING):
        return 1 if (col.length or 0) < 256 else 2
    if t in (FieldType.BLOB, FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB):
        return col.meta if col.meta in (1, 2) else None
    return None


def _struct_code(col: Column) -> str | None:
    """The little-endian ``struct`` code of a column whose value is just that field."""
    codes = _STRUCT_CODES.get(col.type_code)
    return None if codes is None else codes[col.unsigned]


_NATIVE_INT_SIZES = {FieldType.TINY: 1, FieldType.SHORT: 2, FieldType.INT24: 3,
                     FieldType.LONG: 4, FieldType.LONGLONG: 8}


def native_spec(col: Column) -> tuple[Any, ...] | None:
    """The native plan entry of one column, or None when the native decoder does not cover it
    (an image with it keeps the Python decoder). Mirrors TableDecoder._value_code."""
    t = col.type_code
    if t in _NATIVE_INT_SIZES:
        return (_native.K_INT, _NATIVE_INT_SIZES[FieldType(t)], int(col.unsigned), 0, None, None)
    if t == FieldType.FLOAT:
        return (_native.K_FLOAT, 4, 0, 0, None, None)
    if t == FieldType.DOUBLE:
        return (_native.K_FLOAT, 8, 0, 0, None, None)
    if t in (FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING, FieldType.BLOB,
             FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB):
        if t in (FieldType.VARCHAR, FieldType.VAR_STRING, FieldType.STRING):
            width = 1 if (col.length or 0) < 256 else 2
        elif col.meta in (1, 2, 3, 4):
            width = col.meta
        else:
            return None
        kind, how = text_rule(col.charset)
        pad = 0
        if t == FieldType.STRING and col.charset == 63 and col.length:
            if kind != "bytes":
                return None
            pad = col.length
        if kind == "bytes":
            return (_native.K_STR, width, 0, pad, None, None)
        if kind == "codec" and how == "utf-8":
            return (_native.K_STR, width, 1, 0, None, None)
        return (_native.K_STR, width, 2, 0, text_decoder(col.charset), None)
    if t in (FieldType.GEOMETRY, FieldType.VECTOR) and col.meta in (1, 2, 3, 4):
        return (_native.K_STR, col.meta, 0, 0, None, None)  # the bytes as stored (WKB, floats)
    if t == FieldType.JSON and col.meta in (1, 2, 3, 4):
        return (_native.K_STR, col.meta, 2, 0, _values.json_binary_to_text, None)
    if t in (FieldType.DATE, FieldType.NEWDATE):
        return (_native.K_DATE, 0, 0, 0, _values.decode_date, None)
    if t == FieldType.DATETIME2 and 0 <= col.meta <= 6:
        return (_native.K_DT2, col.meta, 0, 0, _values.datetime2_invalid, None)
    if t == FieldType.TIMESTAMP2 and 0 <= col.meta <= 6:
        return (_native.K_TS2, col.meta, 0, 0, _timestamp2.zero(col.meta), datetime.UTC)
    if t == FieldType.NEWDECIMAL:
        precision, scale = col.meta >> 8, col.meta & 0xFF
        try:
            _values.decimal_size_checked(precision, scale)
        except ValueError:
            return None
        groups = bytes(x for pair in _values.decimal_groups(precision, scale) for x in pair)
        return (_native.K_DEC, scale, 0, precision, groups, Decimal)
    if t == FieldType.ENUM and (col.length or 1) in (1, 2):
        labels = None if col.enum_values is None else ("",) + tuple(col.enum_values)
        return (_native.K_ENUM, col.length or 1, 0, 0, labels, None)
    if t == FieldType.YEAR:
        return (_native.K_YEAR, 0, 0, 0, None, None)
    if t == FieldType.BIT and (col.meta >> 8) + (1 if col.meta & 0xFF else 0) <= 8:
        return (_native.K_BIT, (col.meta >> 8) + (1 if col.meta & 0xFF else 0), 0, 0, None, None)
    if t == FieldType.TIME2 and 0 <= col.meta <= 6:
        return (_native.K_TIME2, col.meta, 0, 0, None, None)
    if t == FieldType.SET and 1 <= (col.length or 1) <= 8:
        if col.set_values is None:
            return (_native.K_SET, col.length or 1, 0, 0, None, None)
        members = tuple(col.set_values)
        return (_native.K_SET, col.length or 1, 0, 0, set_labels(members), members)
    return None


DECODER_CACHE_SIZE = 4096  # tables whose decoders stay: real schemas have thousands


class DecoderCache:
    """The row decoders of one stream, one per table definition (schema, table, columns).

    Generating the code is by far the dearest step of decoding a small transaction, so it
    happens once per definition, not once per TABLE_MAP: a repeated TABLE_MAP (the
    ``tablemap.TableMapCache`` hands on the same columns tuple) finds its decoder by the
    table's name and the identity of that tuple, one dict lookup per rows event (tables of one
    shape share the tuple, and each gets a decoder of its own: its errors name it); what the
    decoder derives from the columns alone is shared between them; a map whose columns are new objects
    of a known definition (completed from a schema source, which builds them per TABLE_MAP)
    finds it by value. Both maps are LRU-bounded. An :class:`~.stream.EventStream` owns one, so
    no decoder outlives its stream and nothing is shared between streams or mutated on the
    frozen TableMapEvent.
    """

    __slots__ = ("size", "built", "arrow", "_by_definition", "_by_name")

    def __init__(self, size: int = DECODER_CACHE_SIZE, arrow: bool = False) -> None:
        self.size = size
        #: Decode images the native decoder covers into Arrow chunks (``RowsEvent.arrow``),
        #: their Python values only on demand: for the Parquet landing path.
        self.arrow = arrow
        self.built = 0  # decoders generated so far (what the cache saves is visible in tests)
        self._by_definition: OrderedDict[tuple[str, str, tuple[Column, ...]], TableDecoder] = \
            OrderedDict()
        # (schema, table) -> (columns, decoder) of its last TABLE_MAP: tables of one shape
        # share a columns tuple (tablemap.TableMapCache), so the identity of the tuple alone
        # does not name the table.
        self._by_name: dict[tuple[str, str], tuple[tuple[Column, ...], TableDecoder]] = {}

    def __len__(self) -> int:
        return len(self._by_definition)

    def decoder_for(self, table: TableMapEvent) -> TableDecoder:
        """The decoder of ``table``'s definition, built on first use."""
        columns = table.columns
        name = (table.schema, table.table)
        known = self._by_name.get(name)
        if known is not None and known[0] is columns:
            return known[1]
        key = (table.schema, table.table, columns)
        decoder = self._by_definition.get(key)
        if decoder is None:
            decoder = self._by_definition[key] = TableDecoder(table)
            self.built += 1
            if len(self._by_definition) > self.size:
                self._by_definition.popitem(last=False)
        else:
            self._by_definition.move_to_end(key)
        if known is None and len(self._by_name) >= self.size:
            del self._by_name[next(iter(self._by_name))]  # oldest first
        self._by_name[name] = (columns, decoder)
        return decoder


class _LazyLists:
    """The Python values of a rows event decoded into Arrow chunks, decoded from the event's
    bytes the first time anything asks (a key-changing UPDATE, a column the chunks could not
    carry, a snapshot's reconciliation). The Arrow pass already ran the same checks over the
    same bytes, so this decoding does not fail."""

    __slots__ = ("_args", "_lists")

    def __init__(self, buf: bytes, off: int, plans: tuple[object, object],
                 widths: tuple[int | None, int | None]) -> None:
        self._args: tuple[Any, ...] | None = (buf, off, plans, widths)
        self._lists: tuple[Any, Any] = (None, None)

    def lists(self, which: int) -> tuple[list[Any], ...]:
        if self._args is not None:
            buf, off, plans, widths = self._args
            before: tuple[list[Any], ...] | None = (
                tuple([[] for _ in range(widths[0])]) if widths[0] is not None else None)
            after: tuple[list[Any], ...] | None = tuple([[] for _ in range(widths[1])]) if widths[1] is not None else None
            _native.decode(buf, off, len(buf), plans[0], plans[1], before, after)
            self._lists = (before, after)
            self._args = None
        lists: tuple[list[Any], ...] = self._lists[which]
        return lists


class LazyImage:
    """``RowsEvent.before``/``after`` of an event decoded for Arrow: reads like the tuple of
    per-column lists it stands for (index, iterate, ``len``, ``==``), decoding on first use."""

    __slots__ = ("_lazy", "_which", "_width")

    def __init__(self, lazy: _LazyLists, which: int, width: int) -> None:
        self._lazy = lazy
        self._which = which
        self._width = width

    def __len__(self) -> int:
        return self._width

    def __getitem__(self, index: Any) -> Any:
        return self._lazy.lists(self._which)[index]

    def __iter__(self) -> Any:
        return iter(self._lazy.lists(self._which))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyImage | tuple):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._lazy.lists(self._which))


def _read_json_diff(buf: bytes, off: int, end: int, before_list: list[Any] | None,
                    pack_length: int) -> tuple[Any, int]:
    """Read a JSON diff vector at ``off`` and produce the after value (see module doc)."""
    length = int.from_bytes(buf[off:off + pack_length], "little")
    off += pack_length
    stop = off + length
    if stop > end:
        raise _RowOverrun("JSON diff runs past the event")
    ops: list[tuple[int, str, Any]] = []
    while off < stop:
        op = buf[off]
        off += 1
        if op > _values.JsonDiffOp.REMOVE:
            raise ValueError(f"unknown JSON diff operation {op}")
        n, off = read_lenenc(buf, off, stop)
        path = buf[off:off + n].decode("utf-8")
        off += n
        value: Any = None
        if op != _values.JsonDiffOp.REMOVE:
            n, off = read_lenenc(buf, off, stop)
            if off + n > stop:
                raise _RowOverrun("JSON diff value runs past the diff")
            value = _values.json_binary_to_python(buf[off:off + n])
            off += n
        ops.append((op, path, value))
    if off != stop:
        raise ValueError("JSON diff vector overruns its length")
    before_text = before_list[-1] if before_list else None
    if isinstance(before_text, str):
        doc = json.loads(before_text, parse_float=_values.Opaque,
                         parse_int=_json_int, parse_constant=_reject_constant)
        return _values.json_to_text(_values.apply_json_diff(doc, ops)), off
    return _values.JsonDiff(tuple(
        (op, path, None if op == _values.JsonDiffOp.REMOVE else _values.json_to_text(value))
        for op, path, value in ops)), off


def _json_int(text: str) -> int:
    return int(text)


def _reject_constant(text: str) -> Any:
    raise ValueError(f"invalid JSON constant {text}")


_bitmaps: dict[tuple[bytes, int], tuple[int, ...]] = {}


def _bitmap_indexes(bitmap: bytes, width: int) -> tuple[int, ...]:
    """The column indexes set in a rows event's column bitmap (remembered: tables are few)."""
    key = (bitmap, width)
    indexes = _bitmaps.get(key)
    if indexes is None:
        if len(_bitmaps) >= 4096:
            _bitmaps.clear()
        indexes = _bitmaps[key] = tuple(
            i for i in range(width) if bitmap[i >> 3] & (1 << (i & 7)))
    return indexes


def _error(header: EventHeader, message: str,
           cls: type[EventDecodeError] = RowDecodeError) -> EventDecodeError:
    return cls(message, type_code=header.type_code, file=header.file or None,
               position=header.position)


#: What decoding bad bytes raises (generated code, native code, JSON): a RowDecodeError.
_BAD_BYTES = (IndexError, KeyError, ValueError, TypeError, OverflowError, struct.error,
              UnicodeDecodeError, MalformedPacket)
_ID4_FLAGS = struct.Struct("<IH")  # table id, flags
_ID6_FLAGS = struct.Struct("<IHH")  # table id (low 4 bytes, high 2), flags


# RowsEvent(...) with every field, built in C when the extension is there: once per rows event
# the Arrow path lands (see protocol/frozen.py).
_make_rows = positional_maker(RowsEvent)
# The kinds decode_rows_event compares every event with, as globals (an Enum class's attribute
# costs a lookup through its metaclass, once per rows event).
_UPDATE, _INSERT = RowsKind.UPDATE, RowsKind.INSERT


def decode_rows_event(header: EventHeader, body: memoryview | bytes, post_header_len: int,
                      table_maps: Mapping[int, TableMapEvent], *, version: int,
                      kind: RowsKind, partial: bool = False,
                      decoders: DecoderCache | None = None) -> RowsEvent:
    """Decode a WRITE/UPDATE/DELETE_ROWS body column-wise.

    Args:
        header: the event's header.
        body: bytes after the 19-byte header, CRC stripped, inflated/unwrapped.
        post_header_len: the FDE's post-header length for this event type (6, 8 or 10).
        table_maps: table id → the TABLE_MAP in force.
        version: 1 (MariaDB, MySQL 5.1–5.5) or 2 (MySQL 5.6+ with the extra-info field).
        kind: INSERT, UPDATE or DELETE.
        partial: MySQL PARTIAL_UPDATE_ROWS_EVENT (39); implies an UPDATE.
        decoders: the stream's decoder cache (without one, the decoder is generated anew).

    Raises:
        UnknownTable: no TABLE_MAP for the event's table id.
        RowDecodeError: the bytes do not match the TABLE_MAP.
    """
    buf = bytes(body)
    try:
        if post_header_len == 6:  # 4-byte table ids (MySQL 5.1.0–5.1.15)
            if len(buf) < 6:
                raise _error(header, "rows event post-header truncated")
            table_id, flags = _ID4_FLAGS.unpack_from(buf)
            off = 6
        else:
            if len(buf) < 8:
                raise _error(header, "rows event post-header truncated")
            id_low, id_high, flags = _ID6_FLAGS.unpack_from(buf)
            table_id = id_high << 32 | id_low
            off = 8
        extra = b""
        if version == 2:
            if off + 2 > len(buf):
                raise _error(header, "rows event extra-info length truncated")
            extra_len = int.from_bytes(buf[off:off + 2], "little")
            if extra_len < 2 or off + extra_len > len(buf):
                raise _error(header, f"rows event extra-info length {extra_len} is impossible")
            extra = buf[off + 2:off + extra_len]
            off += extra_len
        table = table_maps.get(table_id)
        if table is None:
            raise _error(header, f"rows event for table id {table_id} with no TABLE_MAP",
                         UnknownTable)
        width = buf[off] if off < len(buf) else 0xFB
        if width < 0xFB:
            off += 1
        else:
            width, off = read_lenenc(buf, off)
        if width != len(table.columns):
            raise _error(header,
                f"rows event has {width} columns, TABLE_MAP of `{table.schema}`.`{table.table}` "
                f"has {len(table.columns)}")
        nbytes = (width + 7) // 8
        bitmap1 = buf[off:off + nbytes]
        off += nbytes
        bitmap2 = None
        if kind is _UPDATE or partial:
            bitmap2 = buf[off:off + nbytes]
            off += nbytes
        if off > len(buf):
            raise _error(header, "rows event column bitmaps truncated")
    except MalformedPacket as exc:  # EventDecodeError, or a truncated/invalid lenenc
        if isinstance(exc, RowDecodeError | UnknownTable):
            raise
        raise _error(header, str(exc)) from exc

    first = _bitmap_indexes(bitmap1, width)
    before: tuple[int, ...] | None
    after: tuple[int, ...] | None
    if bitmap2 is not None:
        before, after = first, _bitmap_indexes(bitmap2, width)
    elif kind is _INSERT:
        before, after = None, first
    else:
        before, after = first, None
    if not before and not after and off < len(buf):
        raise _error(header, "rows event has row data but no columns in its images")

    decoder = decoders.decoder_for(table) if decoders is not None else TableDecoder(table)
    if decoders is not None and decoders.arrow and _native.ARROW and (before or after):
        native = decoder.native_plan(before, after, partial)
        if native is not None:
            try:
                count, before_chunks, after_chunks = _native.decode_arrow(
                    buf, off, len(buf), native[0], native[1])
            except _BAD_BYTES:
                pass  # bad bytes: the list decoders below raise the typed error
            else:
                lazy = _LazyLists(buf, off, native, (None if before is None else len(before),
                                                     None if after is None else len(after)))
                lazy_before: Any = None if before is None else LazyImage(lazy, 0, len(before))
                lazy_after: Any = None if after is None else LazyImage(lazy, 1, len(after))
                return _make_rows(header, _UPDATE if partial else kind, table, flags,
                                  count, before or (), after or (), lazy_before, lazy_after,
                                  extra, (before_chunks, after_chunks))
    before_lists: tuple[list[Any], ...] | None = (
        tuple([[] for _ in before]) if before is not None else None)
    after_lists: tuple[list[Any], ...] | None = (
        tuple([[] for _ in after]) if after is not None else None)
    try:
        native = decoder.native_plan(before, after, partial)
        if native is not None:
            count = _native.decode(buf, off, len(buf), native[0], native[1], before_lists,
                                   after_lists)
        else:
            fn = decoder.shape(before, after, partial)
            count = fn(buf, off, len(buf), before_lists, after_lists)
    except RowDecodeError as exc:
        raise _error(header, str(exc)) from exc
    except _BAD_BYTES as exc:
        raise _error(header,
            f"row image of `{table.schema}`.`{table.table}` does not match its TABLE_MAP "
            f"({type(exc).__name__}: {exc})") from exc

    return RowsEvent(header, RowsKind.UPDATE if partial else kind, table, flags, count,
                     before or (), after or (), before_lists, after_lists, extra)
