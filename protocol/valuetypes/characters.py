"""Character columns: the stored bytes in the column's charset → the text ``SELECT`` returns.

CHAR, VARCHAR, TEXT (ENUM/SET labels aside), as a utf8mb4 connection receives them.

**Stored**: the bytes in the column's own character set (the collation id of the TABLE_MAP's
metadata names it). **Value**: ``str``, or the ``bytes`` themselves where there is no character
set to decode with (binary collation, none known) or the value is not well-formed in it — never
a guess. :func:`text_rule` says which rule a collation takes; :func:`text_decoder` applies it.

The legacy (non-Unicode) charsets decode through the server-derived tables of
``protocol.binlog.charsets``; MySQL's ``latin1`` is :func:`decode_mysql_latin1`.

**Snapshot**: the column itself, read on a connection whose ``character_set_results`` is NULL
(``protocol.snapshot.SESSION_SETUP``), gives the stored bytes (no conversion to the connection's
charset, which could replace what does not convert), decoded with the same rule. A
``CAST(c AS BINARY)`` gives the same bytes, but costs the server a copy of every value (a large
share of its CPU in a snapshot of a table with text columns).

**Text**: the outputs print the ``str`` value itself; where one carries a value's bytes (the
Open Protocol output's base64 of TEXT and BLOB columns), :func:`output_bytes` gives them: the
text in UTF-8, whatever the column's charset, the bytes as stored where they did not decode.
"""

from __future__ import annotations

from collections.abc import Callable

from ..binlog import charsets as _charsets
from ..binlog.coltypes import charset_name, codec_for_collation

__all__ = ["decode_mysql_latin1", "text_rule", "text_decoder", "select_expression",
           "output_bytes"]

# MySQL's latin1 is Windows-1252, except that the five bytes cp1252 leaves undefined map to the
# C1 controls of the same number; Python's cp1252 codec rejects those, so decode as ISO-8859-1
# (every byte → U+00XX) and translate 0x80–0x9F to what cp1252 defines.
_CP1252_HIGH = {
    i: ord(bytes([i]).decode("cp1252")) for i in range(0x80, 0xA0)
    if i not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}


def decode_mysql_latin1(data: bytes) -> str:
    """Decode MySQL/MariaDB ``latin1`` (cp1252 with the C1 holes filled)."""
    return data.decode("latin-1").translate(_CP1252_HIGH)


def text_rule(collation: int | None) -> tuple[str, str | None]:
    """How a character column's stored bytes become its value, by its collation id:
    ``("legacy", charset)`` — the server-derived table of ``charsets``; ``("bytes", None)`` —
    kept as stored (no collation, binary, no codec); ``("latin1", None)`` — MySQL's latin1;
    ``("codec", codec)`` — that Python codec, bytes where the value is not valid in it.
    """
    codec = codec_for_collation(collation)
    name = charset_name(collation) if collation is not None else None
    if name is not None and codec not in ("utf-8", "mysql-latin1") and _charsets.decoder(name):
        return "legacy", name
    if codec is None:
        return "bytes", None
    if codec == "mysql-latin1":
        return "latin1", None
    return "codec", codec


def text_decoder(collation: int | None) -> Callable[[bytes], str | bytes]:
    """A function applying :func:`text_rule` to one value."""
    kind, how = text_rule(collation)
    if kind == "legacy":
        legacy = _charsets.decoder(how or "")
        assert legacy is not None
        return legacy
    if kind == "bytes":
        return bytes
    if kind == "latin1":
        return decode_mysql_latin1
    codec = how or "utf-8"

    def decode(data: bytes) -> str | bytes:
        try:
            return data.decode(codec)
        except UnicodeDecodeError:
            return data

    return decode


def select_expression(quoted_name: str) -> str:
    """What a snapshot selects for the column: the column, whose text is its stored bytes on a
    connection that converts no results (``character_set_results = NULL``)."""
    return quoted_name


def output_bytes(value: str | bytes | bytearray | memoryview) -> bytes:
    """The bytes an output carries for a character or binary value: a decoded text in UTF-8 (a
    legacy charset's text too: the outputs speak UTF-8), bytes as they are."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)
