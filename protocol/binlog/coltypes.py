"""Column type codes, their TABLE_MAP metadata, and collation ids → Python codecs.

The TABLE_MAP carries one type byte per column and a metadata block whose per-column width
depends on that byte. This module knows, for every type code a server writes, how many metadata
bytes to read and how to turn them into the numbers the row decoder needs (DECIMAL precision and
scale, fractional-second digits, length-prefix widths, the real type hidden in a STRING's
metadata). It also maps collation ids to Python codecs so character columns decode to ``str``.

Byte orders are not uniform, and that is the server's doing, not a typo here: STRING/ENUM/SET
and NEWDECIMAL metadata are big-endian (type or precision first), BIT and VARCHAR little-endian.
"""

from __future__ import annotations

import enum

from ..errors import EventDecodeError


class FieldType(enum.IntEnum):
    """``enum_field_types``: the type byte of a TABLE_MAP column (plus the real types)."""

    DECIMAL = 0  # pre-5.0 decimal; never written by a supported server
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7  # old: 4-byte seconds, no fraction
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11  # old: 3-byte HHMMSS
    DATETIME = 12  # old: 8-byte YYYYMMDDHHMMSS
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    TYPED_ARRAY = 20  # MySQL multi-valued index internals; never in row images
    VECTOR = 242  # MySQL 9
    INVALID = 243
    BOOL = 244
    JSON = 245  # MySQL binary JSON; MariaDB's JSON is a LONGTEXT (BLOB)
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


# Metadata bytes per binlog type byte. Types not listed carry none.
METADATA_LENGTH: dict[int, int] = {
    FieldType.FLOAT: 1,
    FieldType.DOUBLE: 1,
    FieldType.TINY_BLOB: 1,
    FieldType.MEDIUM_BLOB: 1,
    FieldType.LONG_BLOB: 1,
    FieldType.BLOB: 1,
    FieldType.GEOMETRY: 1,
    FieldType.JSON: 1,
    FieldType.VECTOR: 1,
    FieldType.TIMESTAMP2: 1,
    FieldType.DATETIME2: 1,
    FieldType.TIME2: 1,
    FieldType.BIT: 2,
    FieldType.VARCHAR: 2,
    FieldType.VAR_STRING: 2,
    FieldType.NEWDECIMAL: 2,
    FieldType.STRING: 2,
    FieldType.ENUM: 2,
    FieldType.SET: 2,
}

# Types the optional metadata counts as "numeric" (SIGNEDNESS has one bit per such column).
NUMERIC_TYPES = frozenset({
    FieldType.TINY, FieldType.SHORT, FieldType.INT24, FieldType.LONG, FieldType.LONGLONG,
    FieldType.NEWDECIMAL, FieldType.FLOAT, FieldType.DOUBLE,
})

# Integer types: the ones a declared display width (``TINYINT(1)``) belongs to.
INTEGER_TYPES = frozenset({
    FieldType.TINY, FieldType.SHORT, FieldType.INT24, FieldType.LONG, FieldType.LONGLONG,
})

# Types the optional metadata counts as "character" columns (DEFAULT_CHARSET/COLUMN_CHARSET
# have one entry per such column, in column order). ENUM/SET are counted separately.
CHARACTER_TYPES = frozenset({
    FieldType.STRING, FieldType.VAR_STRING, FieldType.VARCHAR, FieldType.BLOB,
    FieldType.TINY_BLOB, FieldType.MEDIUM_BLOB, FieldType.LONG_BLOB,
})

ENUM_SET_TYPES = frozenset({FieldType.ENUM, FieldType.SET})


def read_metadata(type_code: int, block: bytes | memoryview, offset: int) -> tuple[int, int]:
    """Read one column's metadata from the TABLE_MAP metadata block.

    Returns ``(meta, new_offset)`` where ``meta`` is the value as the server composes it:
    big-endian for STRING/ENUM/SET/NEWDECIMAL (``type<<8|length``, ``precision<<8|scale``),
    little-endian for BIT/VARCHAR/VAR_STRING, a single byte for the one-byte types.

    Raises:
        EventDecodeError: the block ends before the column's metadata does.
    """
    width = METADATA_LENGTH.get(type_code, 0)
    end = offset + width
    if end > len(block):
        raise EventDecodeError(f"TABLE_MAP metadata block too short for a column of type {type_code}")
    if width == 0:
        return 0, offset
    if width == 1:
        return block[offset], end
    if type_code in (FieldType.BIT, FieldType.VARCHAR, FieldType.VAR_STRING):
        return block[offset] | (block[offset + 1] << 8), end
    return (block[offset] << 8) | block[offset + 1], end


def resolve_string_meta(meta: int) -> tuple[int, int]:
    """Split a STRING column's metadata into ``(real_type, max_length_in_bytes)``.

    The server squeezes CHAR lengths above 255 into the type byte: bits 4–5 of the type byte hold
    bits 8–9 of the length, XOR-ed so that an unchanged type byte means "no high bits".
    """
    byte0, byte1 = meta >> 8, meta & 0xFF
    if (byte0 & 0x30) != 0x30:
        return byte0 | 0x30, byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    return byte0, byte1


# --- collations ------------------------------------------------------------------------------
#
# Collation id → character set name, for every id the supported servers define (MariaDB 10.11 and
# 11.x, MySQL 8/9). Ids are compact ranges per charset, so the table is written as ranges.
# MariaDB 11's UCA-14.0.0 collations use ids 2048 + (charset_number << 8 | flags), with their own
# small charset numbering, and are matched by the rule in :func:`charset_name`.

_CHARSET_IDS: dict[str, tuple[int | tuple[int, int], ...]] = {
    "big5": (1, 84, 1025, 1108),
    "latin2": (2, 9, 21, 27, 77, 1033, 1101),
    "dec8": (3, 69, 1027, 1093),
    "cp850": (4, 80, 1028, 1104),
    "latin1": (5, 8, 15, 31, 47, 48, 49, 94, 1032, 1071),
    "hp8": (6, 72, 1030, 1096),
    "koi8r": (7, 74, 1031, 1098),
    "swe7": (10, 82, 1034, 1106),
    "ascii": (11, 65, 1035, 1089),
    "ujis": (12, 91, 1036, 1115),
    "sjis": (13, 88, 1037, 1112),
    "cp1251": (14, 23, 50, 51, 52, 1074, 1075),
    "hebrew": (16, 71, 1040, 1095),
    "tis620": (18, 89, 1042, 1113),
    "euckr": (19, 85, 1043, 1109),
    "latin7": (20, 41, 42, 79, 1065, 1103),
    "koi8u": (22, 75, 1046, 1099),
    "gb2312": (24, 86, 1048, 1110),
    "greek": (25, 70, 1049, 1094),
    "cp1250": (26, 34, 44, 66, 99, 1050, 1090),
    "gbk": (28, 87, 1052, 1111),
    "cp1257": (29, 58, 59, 1082, 1083),
    "latin5": (30, 78, 1054, 1102),
    "armscii8": (32, 64, 1056, 1088),
    "utf8mb3": (33, 76, 83, (192, 215), 223, (576, 578), 1057, 1107, 1216, 1238),
    "ucs2": (35, 90, (128, 151), 159, (640, 642), 1059, 1114, 1152, 1174),
    "cp866": (36, 68, 1060, 1092),
    "keybcs2": (37, 73, 1061, 1097),
    "macce": (38, 43, 1062, 1067),
    "macroman": (39, 53, 1063, 1077),
    "cp852": (40, 81, 1064, 1105),
    "utf8mb4": (45, 46, (224, 247), (255, 323), (608, 610), 1069, 1070, 1248, 1270),
    "utf16": (54, 55, (101, 124), (672, 674), 1078, 1079, 1125, 1147),
    "utf16le": (56, 62, 1080, 1086),
    "cp1256": (57, 67, 1081, 1091),
    "utf32": (60, 61, (160, 183), (736, 738), 1084, 1085, 1184, 1206),
    "binary": (63,),
    "geostd8": (92, 93, 1116, 1117),
    "cp932": (95, 96, 1119, 1120),
    "eucjpms": (97, 98, 1121, 1122),
    "gb18030": (248, 249, 250),
}

COLLATION_CHARSET: dict[int, str] = {}
for _name, _ids in _CHARSET_IDS.items():
    for _id in _ids:
        if isinstance(_id, tuple):
            for _i in range(_id[0], _id[1] + 1):
                COLLATION_CHARSET[_i] = _name
        else:
            COLLATION_CHARSET[_id] = _name

# MariaDB 11 UCA-14.0.0 collations: id = 2048 + (n << 8) + accent/case/pad flags.
_UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")

# Character set name → Python codec. ``None`` means "keep bytes". ``latin1`` is special-cased in
# the decoder: MySQL's latin1 is Windows-1252 with the five holes mapped to C1 controls.
CHARSET_CODEC: dict[str, str | None] = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "ascii": "ascii", "binary": None,
    "latin1": "mysql-latin1", "latin2": "iso8859_2", "latin5": "iso8859_9", "latin7": "iso8859_13",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1256": "cp1256", "cp1257": "cp1257",
    "cp850": "cp850", "cp852": "cp852", "cp866": "cp866", "greek": "iso8859_7",
    "hebrew": "iso8859_8", "koi8r": "koi8_r", "koi8u": "koi8_u", "macroman": "mac_roman",
    "macce": "mac_latin2", "tis620": "tis_620", "big5": "big5", "gbk": "gbk",
    "gb2312": "gb2312", "gb18030": "gb18030", "sjis": "shift_jis", "cp932": "cp932",
    "ujis": "euc_jp", "eucjpms": "euc_jp", "euckr": "euc_kr", "ucs2": "utf-16-be",
    "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be",
    # no Python codec: dec8, hp8, swe7, armscii8, keybcs2, geostd8 (the row decoder decodes
    # them, and every other legacy charset, with the server-derived tables of .charsets)
}


def charset_name(collation_id: int) -> str | None:
    """The character set of a collation id, or ``None`` if the id is unknown."""
    name = COLLATION_CHARSET.get(collation_id)
    if name is None and 2048 <= collation_id < 4096:
        n = (collation_id - 2048) >> 8
        name = _UCA1400_CHARSETS[n] if n < len(_UCA1400_CHARSETS) else None
    return name


def codec_for_collation(collation_id: int | None) -> str | None:
    """The Python codec for a column's collation, or ``None`` to keep the value as bytes.

    The rule for what is not known: no collation at all (the server sent no charset metadata,
    binlog_row_metadata=NO_LOG/MINIMAL without it), the ``binary`` collation 63, an unknown id and
    a character set without a Python codec all give ``None`` — the value stays ``bytes``, exactly
    as stored, rather than being guessed at.
    """
    if collation_id is None:
        return None
    name = charset_name(collation_id)
    if name is None:
        return None
    return CHARSET_CODEC.get(name)
