"""The sink worker: the daemon's lake work (flushes, spills, XA files, chunks) off the event loop.

A flush writes and fsyncs files and renames them into the lake; on a slow disk (or a remote
store) it takes seconds. Run on the trio loop, it would stall everything else the loop does:
the metrics server (/healthz, /metrics), signal handling, the side connection's reads. So the
daemon runs such calls in a thread, one at a time, through :meth:`SinkWorker.run`
(``trio.to_thread.run_sync`` with a limiter of one: a thread of trio's cache, never two at once).

The sink is not thread-safe, and the cheap calls that hand it items stay on the loop (a thread
hop per item would cost more than the item); they do no lake I/O themselves — what an item
would write or read (a spill, an XA PREPARE's files) waits for ``Sink.run_io``, run here. So the rule is: **nothing touches the sink while a
worker call is queued or running**. Every task that calls the sink on the loop first awaits
:meth:`SinkWorker.idle` (free when nothing is queued), then makes its calls without awaiting in
between; trio runs one task at a time, so no worker call can start meanwhile. A quick in-memory
call that cannot wait (a synchronous caller) goes through :meth:`SinkWorker.call_soon`: now if
the worker is idle, else on the loop right after the running call returns.

A worker call is not cancellable: a cancelled caller waits until the call returns (a flush in
progress completes; the cancellation is raised at the caller's next checkpoint), so the sink
never sees a call abandoned half-way. The time a caller waits here is not time a socket read
waits: the replication session's stall timeout runs per read
(:meth:`~replica.core.session.ReplicationSession.next_event`), so a long flush delays the
stream but is not a heartbeat timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import trio

__all__ = ["SinkWorker"]

T = TypeVar("T")


class SinkWorker:
    """Runs sink calls in a thread, one at a time, and tells the loop when the sink is free."""

    def __init__(self, after: Callable[[], None] | None = None) -> None:
        """``after``: called on the loop after each call returns (before the next starts),
        e.g. to take what the call reported from its thread."""
        self._after = after
        self._limiter = trio.CapacityLimiter(1)
        self._lock = trio.Lock()  # FIFO: calls run in the order they were asked for
        self._queued = 0  # calls asked for and not returned yet
        self._running = False  # a call is in the thread now
        self._idle = trio.Event()
        self._idle.set()
        self._soon: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        #: Calls run so far (for tests and the architecture's claims).
        self.calls = 0

    @property
    def busy(self) -> bool:
        """A call is queued or running: the sink must not be touched from the loop."""
        return self._queued > 0

    async def idle(self) -> None:
        """Return once no call is queued or running (at once, without a checkpoint, if none)."""
        while self._queued:
            await self._idle.wait()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the worker thread, after the calls queued before it."""
        self._queued += 1
        if self._idle.is_set():
            self._idle = trio.Event()
        try:
            async with self._lock:
                self.calls += 1
                self._running = True
                try:
                    return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
                finally:
                    self._running = False
                    if self._after is not None:
                        self._after()
        finally:
            self._queued -= 1
            if not self._running:  # (a call cancelled in the queue: another may be running)
                self._run_soon()
            if not self._queued:
                self._idle.set()

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """A quick in-memory sink call from synchronous code: now if the worker is idle, else
        on the loop right after the call running now returns (before the next one starts)."""
        if self._queued:
            self._soon.append((fn, args))
        else:
            fn(*args)

    def _run_soon(self) -> None:
        soon, self._soon = self._soon, []
        for fn, args in soon:
            fn(*args)
