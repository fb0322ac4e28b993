"""The switch to the native row decoder, and the thin wrapper rows.py calls it through.

``_native_rows`` (a C extension built from ``_native_rows.c`` when binlake is installed, see
setup.py) decodes a rows event's images into the same per-column lists as the generated Python
code of :class:`~.rows.TableDecoder`, without executing bytecode per value. It covers the common
types — integers, FLOAT/DOUBLE, CHAR/VARCHAR/BINARY/TEXT/BLOB, DATE, DATETIME2, TIMESTAMP2,
TIME2, NEWDECIMAL, ENUM, SET, BIT, YEAR, JSON (other charsets and binary JSON through the
reference's own Python functions), GEOMETRY, VECTOR — and an image with any other column
(legacy temporal types; MySQL partial updates) keeps the Python decoder, which stays the reference:
``tests/unit/test_native_rows.py`` runs both over random and corrupted rows and requires the
same values and the same typed errors.

It also decodes an image straight into typed column buffers (:func:`decode_arrow`): per
column a *chunk* ``(tag, nulls, validity, data, offsets)`` — the validity bitmap (None: no
NULL), the values in an Arrow layout (integers signed or unsigned as the column is, in a width
that holds them, DECIMAL <= 38 digits as 128-bit scaled integers, FLOAT/DOUBLE as stored, DATE as days,
DATETIME2/TIMESTAMP2 as epoch microseconds, TIME2 as signed microseconds, BIT as int64, strings
and ENUM/SET labels as int32 offsets + UTF-8 bytes) — or None where that column of that event
has a value the layout cannot carry (a string that is not well-formed in its charset, a zero or
invalid date, DECIMAL wider than 38 digits, ENUM/SET without labels). ``tag`` names the layout:
``i1``, ``i2``, ``i4``, ``i8``, ``u1``, ``u2``, ``u4``, ``u8``, ``dec``, ``f4``, ``f8``,
``str``, ``bin``, ``date``, ``ts`` (the extension's ``LAYOUTS``). What a batch of them becomes is the consumer's: the Parquet
sink's ``sinks.parquet.native_batch``.

A snapshot's chunks land through the same chunks: their text-protocol rows are kept unparsed
(:data:`text_collect`) and converted column by column (:data:`text_arrow`, by the binlog's plan
entries: the same layouts and tags), Python values made only for the columns that need them
(:data:`text_lists`; ``protocol.snapshot.KeptImage``).

``BINLAKE_NATIVE=0`` forces the Python reference; ``BINLAKE_NATIVE_ARROW=0`` keeps the native
decoder but lands from its Python values (no Arrow chunks): ``protocol.native_switch`` reads
both. When the extension is not built (no compiler when binlake was installed), or built for
another :data:`ABI` (an in-place build older than the code), none of it is used,
:func:`warn_once` says so once, and decoding is the same, slower.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import native_switch

__all__ = ["AVAILABLE", "ENABLED", "ARROW", "TEXT_ARROW", "UNAVAILABLE_REASON", "plan", "decode",
           "decode_arrow", "Chunk", "text_row",
           "text_rows", "text_collect", "text_arrow", "text_lists", "TEXT_SKIP", "warn_once"]

#: The ``ABI_VERSION`` of ``_native_rows.c`` this module calls.
ABI = 3

_module: Any
_module, UNAVAILABLE_REASON = native_switch.load(
    f"{__package__}._native_rows", ABI, "the native row decoder")

AVAILABLE = _module is not None
ENABLED = AVAILABLE and not native_switch.native_off()

#: ``text_row(payload, binary)``: one text-protocol row as ``protocol.results.parse_text_row``
#: returns it, or None when malformed (the Python parser then raises its typed error); None
#: when the extension is off. A snapshot's chunks are parsed by :data:`text_rows` instead.
text_row: Callable[[bytes, tuple[bool, ...]], tuple[str | bytes | None, ...] | None] | None = (
    _module.text_row if ENABLED else None)

#: Whether rows land from Arrow chunks: the extension is on and ``BINLAKE_NATIVE_ARROW=0``
#: does not ask for the Python values (the same lake; for measuring one path against the other).
ARROW = ENABLED and not native_switch.arrow_off()

#: ``text_rows(buf, start, end, seq, limit, kinds, columns) -> (start, seq, rows, fallbacks)``:
#: every complete plain row packet buffered in ``buf[start:end]`` parsed straight into column
#: lists (``protocol.packets.PacketCodec.text_rows`` says how); None as for ``text_row``.
text_rows: Callable[..., tuple[int, int, int, int]] | None = (
    _module.text_rows if ENABLED else None)

#: Whether a snapshot's chunks land from Arrow chunks made straight from their text rows, as
#: :data:`ARROW`: ``text_collect`` keeps a chunk's row packets unparsed, ``text_arrow`` turns
#: their values' text into :func:`decode_arrow`'s chunks (by a :func:`plan` of text specs:
#: ``protocol.snapshot.values.text_spec``) and ``text_lists`` makes the Python text values of
#: the columns that need them. Else a snapshot parses its rows with :data:`text_rows`.
TEXT_ARROW = ARROW

#: ``text_collect(buf, start, end, seq, limit, out) -> (start, seq, rows, last)``: every
#: complete plain row packet buffered in ``buf[start:end]`` appended to the bytearray ``out``
#: unparsed, each as a 4-byte little-endian length and its payload (``last``: where the last
#: one starts in ``out``, -1 for none); the same stop rules as :data:`text_rows`.
text_collect: Callable[..., tuple[int, int, int, int]] | None = (
    _module.text_collect if TEXT_ARROW else None)

#: ``text_arrow(raw, plan, values) -> chunks``: the rows ``raw`` keeps (``values`` values each)
#: as one Arrow chunk per column of ``plan`` (:data:`Chunk`), or None where the column's
#: values are left to Python. A malformed row raises ValueError.
text_arrow: Callable[[Any, object, int], tuple[Chunk | None, ...]] | None = (
    _module.text_arrow if TEXT_ARROW else None)

#: ``text_lists(raw, kinds, columns) -> rows``: the rows ``raw`` keeps appended to the column
#: lists as :data:`text_rows` would, for the columns whose kind is not :data:`TEXT_SKIP`.
text_lists: Callable[[Any, bytes, list[list[Any]]], int] | None = (
    _module.text_lists if TEXT_ARROW else None)

#: The ``text_lists`` kind of a column not wanted.
TEXT_SKIP = 255

# The column kinds of a plan entry ``(kind, a, b, c, obj1, obj2)``; _native_rows.c says what
# a, b, c and the objects mean for each, rows.native_spec builds them.
(K_INT, K_FLOAT, K_STR, K_DATE, K_DT2, K_TS2, K_DEC, K_ENUM, K_YEAR, K_BIT, K_TIME2,
 K_SET) = range(1, 13)
_warned = False


def warn_once(log: Callable[[str], None]) -> None:
    """Say once per process that Python does the work of a missing extension: the row decoder
    (built with the others, so its line stands for all), else each of the binlog framing
    (``protocol/_native_frames.c``) and the frozen events' constructors (``_native_slots.c``)
    that is missing or built for another ABI version; nothing when switched off on purpose with
    BINLAKE_NATIVE=0.
    """
    global _warned
    if _warned or native_switch.native_off():
        return
    _warned = True
    if not AVAILABLE:
        log(f"{UNAVAILABLE_REASON}: rows decode with the pure-Python decoder (same values, "
            "slower); install gcc and the Python headers (python3-dev) and reinstall binlake to "
            "build it")
        return
    from .. import frozen
    from ..native_frames import UNAVAILABLE_REASON as frames_missing

    rebuild = "reinstall binlake (or `python setup.py build_ext --inplace` in a checkout) to build it"
    if frames_missing:
        log(f"{frames_missing}: events are framed in Python (same events, slower); {rebuild}")
    if frozen.NATIVE_SLOTS_MISSING:
        log(f"{frozen.NATIVE_SLOTS_MISSING}: events are made by their Python classes "
            f"(same events, slower); {rebuild}")


def plan(specs: tuple[tuple[Any, ...], ...]) -> object:
    """Compile the specs of an image's present columns (the extension keeps them in C)."""
    return _module.plan(specs)


def decode(buf: bytes, off: int, end: int, before: object, after: object,
           before_lists: tuple[list[Any], ...] | None,
           after_lists: tuple[list[Any], ...] | None) -> int:
    """Decode every row of the event into the column lists; the row count. Bad bytes raise
    ValueError (rows.decode_rows_event makes it a RowDecodeError)."""
    count: int = _module.decode(buf, off, end, before, after, before_lists, after_lists)
    return count


Chunk = tuple[str, int, bytes | None, bytes, bytes | None]
"""One column of one image of one event in Arrow's layout (see the module docstring)."""


def decode_arrow(buf: bytes, off: int, end: int, before: object, after: object
                 ) -> tuple[int, tuple[Chunk | None, ...] | None, tuple[Chunk | None, ...] | None]:
    """Decode every row of the event into Arrow chunks: (rows, before chunks, after chunks).
    Bad bytes raise ValueError wherever :func:`decode` would (the same reads and checks)."""
    result: tuple[int, Any, Any] = _module.decode_arrow(buf, off, end, before, after)
    return result
