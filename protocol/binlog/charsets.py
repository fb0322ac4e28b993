"""Legacy (non-Unicode) character sets decoded the way the server converts them.

The rule is "decoded value = what ``SELECT`` returns", and ``SELECT`` on a utf8mb4 connection
returns the server's own conversion of the stored bytes. Python's codecs disagree with it on a
few code points (sjis 0x815F is ``\\`` on the server and ``＼`` in ``shift_jis``; eucjpms has
NEC/IBM rows ``euc_jp`` lacks; the server's greek 0xA1 is ``ʽ``, ...), and some server charsets
have no Python codec at all (dec8, hp8, swe7, armscii8, keybcs2, geostd8). So the tables come
from the servers: ``python -m tests.charset_derive`` converts every byte of each single-byte
charset and every well-formed sequence of each multi-byte one on MariaDB 10.11, 11.8 and MySQL
9.7 and writes :mod:`._charset_tables` (where both flavors have a charset they agree on every
sequence; gb18030 is MySQL's only).

- Single-byte charsets decode through a generated 256-character table (``codecs.charmap_decode``,
  C speed).
- Multi-byte charsets decode with the closest Python codec (fast path) and fall back to a
  per-character walk only when the value holds a sequence the server converts differently: one
  Python fails on, or one whose Python character is on the table's "suspect" list.

A byte or a well-formed sequence the server has no character for decodes to ``?``, which is what
``SELECT`` prints. Only bytes that are not a well-formed sequence of the charset at all leave the
whole value as ``bytes`` (the decoder's rule for values not valid in their charset).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable

from . import _charset_tables as _tables

__all__ = ["DECODERS", "SINGLE_BYTE_CHARSETS", "MULTI_BYTE_CODECS", "UNIT_PATTERNS", "decoder",
           "overrides"]

#: The single-byte charsets decoded by a server-derived table.
SINGLE_BYTE_CHARSETS: tuple[str, ...] = tuple(_tables.SINGLE_BYTE)

#: Multi-byte charset → the Python codec closest to the server's conversion (fewest overrides).
MULTI_BYTE_CODECS: dict[str, str] = {
    "sjis": "shift_jis", "cp932": "cp932", "ujis": "euc_jp", "eucjpms": "euc_jp",
    "big5": "big5", "gbk": "gbk", "gb2312": "gb2312", "euckr": "cp949", "gb18030": "gb18030",
}

#: One character of each multi-byte charset, as the server's own scanner delimits it.
UNIT_PATTERNS: dict[str, bytes] = {
    "sjis": rb"[\x81-\x9f\xe0-\xfc][\x40-\x7e\x80-\xfc]|[\x00-\x7f\xa1-\xdf]",
    "cp932": rb"[\x81-\x9f\xe0-\xfc][\x40-\x7e\x80-\xfc]|[\x00-\x7f\xa1-\xdf]",
    "ujis": rb"\x8f[\xa1-\xfe][\xa1-\xfe]|\x8e[\xa1-\xdf]|[\xa1-\xfe][\xa1-\xfe]|[\x00-\x7f]",
    "eucjpms": rb"\x8f[\xa1-\xfe][\xa1-\xfe]|\x8e[\xa1-\xdf]|[\xa1-\xfe][\xa1-\xfe]|[\x00-\x7f]",
    "big5": rb"[\xa1-\xf9][\x40-\x7e\xa1-\xfe]|[\x00-\x7f]",
    "gbk": rb"[\x81-\xfe][\x40-\x7e\x80-\xfe]|[\x00-\x7f]",
    "gb2312": rb"[\xa1-\xf7][\xa1-\xfe]|[\x00-\x7f]",
    "euckr": rb"[\x81-\xfe][\x41-\x5a\x61-\x7a\x81-\xfe]|[\x00-\x7f]",
    "gb18030": rb"[\x81-\xfe][\x30-\x39][\x81-\xfe][\x30-\x39]|[\x81-\xfe][\x40-\x7e\x80-\xfe]"
               rb"|[\x00-\x7f]",
}

Decoder = Callable[[bytes], "str | bytes"]


def overrides(charset: str) -> dict[bytes, str]:
    """Sequence → the server's character, where Python's codec says otherwise (or nothing),
    expanded from the generated runs ``(first sequence hex, code point, count, step)``."""
    out: dict[bytes, str] = {}
    for start_hex, codepoint, count, step in _tables.MULTI_BYTE.get(charset, ()):
        first = int(start_hex, 16)
        width = len(start_hex) // 2
        for k in range(count):
            out[(first + k).to_bytes(width, "big")] = chr(codepoint + k * step)
    return out


def _single_byte(table: str) -> Decoder:
    charmap_decode = codecs.charmap_decode

    def decode(data: bytes) -> str | bytes:
        return charmap_decode(data, "strict", table)[0]

    return decode


def _multi_byte(charset: str) -> Decoder:
    codec = MULTI_BYTE_CODECS[charset]
    table = overrides(charset)
    unit = re.compile(UNIT_PATTERNS[charset], re.DOTALL).match
    # Python characters that the server spells differently: their presence sends a value down
    # the slow path (checked with one regex search over the decoded text).
    suspects = set()
    for seq in table:
        try:
            suspects.add(seq.decode(codec))
        except UnicodeDecodeError:
            pass
    suspect = (re.compile("[" + "".join(re.escape(c) for c in sorted(suspects)) + "]").search
               if suspects else None)

    def walk(data: bytes) -> str | bytes:
        out = []
        pos = 0
        end = len(data)
        while pos < end:
            m = unit(data, pos)
            if m is None:
                return data  # not a well-formed sequence of the charset
            seq = m.group()
            pos = m.end()
            ch = table.get(seq)
            if ch is None:
                try:
                    ch = seq.decode(codec)
                except UnicodeDecodeError:
                    ch = "?"  # well-formed, but the server has no character for it either
            out.append(ch)
        return "".join(out)

    def decode(data: bytes) -> str | bytes:
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            return walk(data)
        if suspect is not None and suspect(text):
            return walk(data)
        return text

    return decode


#: Decoders made so far, by charset name (the row decoder's generated code looks them up here).
DECODERS: dict[str, Decoder] = {}


def decoder(charset: str) -> Decoder | None:
    """The server-faithful decoder of a legacy charset (``bytes`` → ``str``, or the ``bytes``
    back when they are not well-formed), or ``None`` for a charset not handled here (the
    Unicode ones and binary: their Python codecs agree with the server)."""
    dec = DECODERS.get(charset)
    if dec is None:
        if charset in _tables.SINGLE_BYTE:
            dec = _single_byte(_tables.SINGLE_BYTE[charset])
        elif charset in MULTI_BYTE_CODECS:
            dec = _multi_byte(charset)
        else:
            return None
        DECODERS[charset] = dec
    return dec
