"""The switch to the C framing of a binlog dump (``protocol/_native_frames.c``).

:func:`split_payloads` takes the place of the Python loop of
:meth:`protocol.packets.PacketCodec.next_payloads_after` and :func:`feed_plain` that of
:meth:`protocol.binlog.stream.EventStream.feed_into` for the plain events of a batch (GTID,
TABLE_MAP, rows, XID), :func:`end_positions` that of the session's position tracking
(``replica.core.session``): the same results, and the same state after them, stopping before
anything else, which the Python code then takes (and raises its typed errors for).
``tests/unit/test_native_frames.py`` runs both ways over random, truncated and corrupted input.

They are None when the extension is not built (no compiler when binlake was installed) or built
for another :data:`ABI` (``protocol.binlog.native.warn_once`` says so once), or with
``BINLAKE_NATIVE=0`` (``protocol.native_switch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import native_switch

__all__ = ["ABI", "UNAVAILABLE_REASON", "split_payloads", "feed_plain", "end_positions"]

#: The ``ABI_VERSION`` of ``_native_frames.c`` this module calls.
ABI = 1

_module: Any = None
#: Why the extension is not used ("" when it is loaded or switched off with BINLAKE_NATIVE=0).
UNAVAILABLE_REASON = ""
if not native_switch.native_off():
    _module, UNAVAILABLE_REASON = native_switch.load(
        "protocol._native_frames", ABI, "the native binlog framing")

#: ``split_payloads(buf, start, end, seq, check, limit, status) -> (payloads, pos, seq)``.
split_payloads: Callable[..., tuple[list[bytes], int, int]] | None = (
    None if _module is None else _module.split_payloads)

#: ``feed_plain(events, index, out, file, position, crc, verify, make_header, decoders,
#: crc32, make_gtid, make_xid) -> (index, position, error)``: ``error`` the exception a decoder raised (then
#: ``index`` is its event's) or None.
feed_plain: Callable[..., tuple[int, int, BaseException | None]] | None = (
    None if _module is None else _module.feed_plain)

#: ``end_positions(events, index, pos) -> (index, pos)``: the end position a replica tracks
#: over events[index:] up to the first ROTATE, FORMAT_DESCRIPTION, heartbeat or short event
#: (``replica.core.session.ReplicationSession.buffered_events``).
end_positions: Callable[..., tuple[int, int]] | None = (
    None if _module is None else _module.end_positions)
