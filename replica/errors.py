"""Errors of the I/O layer: the network, timeouts, a stalled stream and a closed connection.

``protocol.errors`` says what went wrong with the bytes or the server's answer; the classes here
say what went wrong getting bytes at all. They also derive from the matching builtin
(``ConnectionError``/``TimeoutError``, both ``OSError``) so code that already treats network
failures as retryable — ``replica.core.backoff.classify`` among it — sees them as such.
"""

from __future__ import annotations

__all__ = ["ReplicaError", "ConnectError", "NoWritablePrimary", "ConnectTimeout", "ConnectionLost", "ReadTimeout",
           "HeartbeatTimeout", "sole_exception", "describe"]


class ReplicaError(Exception):
    """Root of the errors raised by ``replica/`` itself."""


class ConnectError(ReplicaError, ConnectionError):
    """The server could not be reached (refused, unreachable, no such socket)."""


class NoWritablePrimary(ReplicaError, ConnectionError):
    """None of server.host's candidates is a writable primary now (a switchover in progress:
    the old primary is read-only or down, the new one not yet promoted); retried."""


class ConnectTimeout(ReplicaError, TimeoutError):
    """Connecting, the TLS handshake and authentication did not finish within connect_timeout."""


class ConnectionLost(ReplicaError, ConnectionError):
    """An established connection broke or was closed by the server."""


class ReadTimeout(ReplicaError, TimeoutError):
    """The server sent nothing within the read timeout."""


class HeartbeatTimeout(ReplicaError, TimeoutError):
    """No event or heartbeat arrived within twice the heartbeat period: the stream stalled.

    Only a clock can tell, so it lives here rather than in the sans-I/O ``protocol.errors``;
    the daemon reconnects (``replica.core.backoff`` retries it)."""


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one real error inside a nursery's exception group (trio ≥ 0.25 always wraps).

    A nursery whose body or task failed raises a group holding that failure, plus
    ``trio.Cancelled`` from the sibling tasks it cancelled. Callers of the daemon's building
    blocks want the failure itself (``HeartbeatTimeout``, ``GtidPurged``…) to classify, log and
    count it; this returns it when there is exactly one, else the group unchanged.
    """
    import trio

    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


def describe(exc: BaseException) -> str:
    """``Type: detail`` in one line, never with an empty detail: an exception without text of
    its own (an SSL EOF, a reset socket) is described by its cause's text, else by its type."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip()
        if text and not text.endswith(":"):
            line = text.splitlines()[0]
            return f"{type(exc).__name__}: {line}" if current is exc else \
                f"{type(exc).__name__}: {line} ({type(current).__name__})"
        current = current.__cause__ or current.__context__
    return type(exc).__name__
