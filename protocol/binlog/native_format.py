"""The switch to the native line formatter of ``binlake decode`` (``_native_format.c``).

``binlake decode`` prints one line per changed row, in text or as Open Protocol JSON. The
per-value Python formatters (``replica.commands.decode.format_value``,
``sinks.openprotocol.encode_value`` + ``json.dumps``) are the reference and define the output;
the extension repeats them for the plain value types (int, float, str, bytes, Decimal, naive
datetime, date, NULL) and a whole event at a time, and calls the reference for every other
value, so both give the same bytes (``tests/unit/test_native_format.py``) at about ten times the
speed. Built with the native row decoder (setup.py); when it is not built (or built for another
:data:`ABI`), or with ``BINLAKE_NATIVE=0`` (which also switches the row decoder off),
:data:`text_lines` and :data:`json_lines` are None and the callers use the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import native_switch
from .model import RowsEvent, RowsKind

__all__ = ["ABI", "UNAVAILABLE_REASON", "text_lines", "json_lines", "maybe_secret", "one_line",
           "plain_rows"]

#: The ``ABI_VERSION`` of ``_native_format.c`` this module calls.
ABI = 1

_module: Any = None
#: Why the extension is not used ("" when it is loaded or switched off with BINLAKE_NATIVE=0):
#: ``protocol.binlog.native.warn_once`` says it.
UNAVAILABLE_REASON = ""
if not native_switch.native_off():
    _module, UNAVAILABLE_REASON = native_switch.load(
        f"{__package__}._native_format", ABI, "protocol.binlog._native_format")

#: ``text_lines(parts, images, rows, fallback, head="", as_bytes=False) -> str | bytes |
#: None``: ``head``, then per row ``parts[0]``, image 0, ``parts[1]``, … ``parts[-1]``; an
#: image ``(prefixes, columns)`` is each column's prefix then its value at the row, as
#: ``fallback(value) -> str`` would print it; ``as_bytes``: UTF-8 bytes instead of a str.
#: None: a str has no UTF-8 form (format that event with the reference).
text_lines: Callable[..., str | bytes | None] | None = (
    None if _module is None else _module.text_lines)

#: ``json_lines(head, before, after, keys, rows) -> str | None``: Open Protocol lines of a rows
#: event (``sinks.openprotocol.OpenProtocolEncoder.encode_lines`` builds the arguments).
json_lines: Callable[[str, Any, Any, tuple[Any, ...], int], str | None] | None = (
    None if _module is None else _module.json_lines)

#: ``maybe_secret(text) -> bool``: False only when ``ddl.redact_secrets`` would return the text
#: unchanged (ASCII without its markers); ``one_line(text) -> str``: statement text escaped onto
#: one line, as ``replica.commands.decode._one_line``.
maybe_secret: Callable[[str], bool] | None = None if _module is None else _module.maybe_secret
one_line: Callable[[str], str] | None = None if _module is None else _module.one_line


def plain_rows(event: RowsEvent) -> bool:
    """Whether :data:`text_lines` / :data:`json_lines` can take the rows event: not a
    snapshot's READ rows, and each image a plain tuple of column lists (else the reference)."""
    return event.kind is not RowsKind.READ and all(
        image is None or type(image) is tuple for image in (event.before, event.after))
