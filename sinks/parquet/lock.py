"""One writer per lake: an exclusive lock on ``<lake>/_lock`` (locally an ``flock``).

Two writers on one lake (a rolling update starts the new daemon before the old one stopped)
would empty each other's ``_staging``, roll each other's commits forward and land every
transaction twice. The writer therefore holds an exclusive, non-blocking lock
(:meth:`~sinks.storage.Storage.lock`) on ``<lake>/_lock`` from before it touches anything
(recovery included) until it closes. The storage drops the lock when the process dies
(``kill -9`` included: the kernel drops a ``flock``), so a crashed writer never leaves a stale
lock behind; the file itself stays and only says who held it last (its pid, for the refusal
message). Readers (``binlake status``, the Spark helpers) never take it.

A lock excludes every other holder, even inside one process (a local ``flock`` belongs to an
open file description): a second :class:`LakeLock` on the same lake conflicts, as it must.
"""

from __future__ import annotations

import contextlib
import os

from ..errors import LakeError, LakeLocked
from ..storage import Storage
from .commit import OS
from .layout import LOCK

__all__ = ["LOCK", "LakeLock"]


class LakeLock:
    """``acquire()`` or raise :class:`~sinks.errors.LakeLocked`; ``release()`` (idempotent).
    ``storage``: where the lake lives (:meth:`~sinks.storage.Storage.lock`)."""

    def __init__(self, lake: str, storage: Storage = OS) -> None:
        self.lake = os.path.abspath(lake)
        self.path = os.path.join(self.lake, LOCK)
        self._storage = storage
        self._held: contextlib.ExitStack | None = None

    @property
    def held(self) -> bool:
        return self._held is not None

    def acquire(self) -> None:
        if self._held is not None:
            return
        held = contextlib.ExitStack()
        try:
            self._storage.makedirs(self.lake)
            held.enter_context(self._storage.lock(self.path, exclusive=True, wait=False))
        except BlockingIOError:
            raise LakeLocked(self.lake, self.path, self._holder()) from None
        except OSError as exc:
            raise LakeError.from_os_error(exc, self.path, "taking the lake's lock") from exc
        try:
            self._storage.write(self.path, b"%d\n" % os.getpid())
        except OSError:
            pass  # the pid is informative only: a full disk must not stop the lock
        self._held = held

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()  # drops the lock

    def __enter__(self) -> LakeLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _holder(self) -> int | None:
        """The pid the lock file names (its holder's note, :meth:`acquire`)."""
        try:
            text = self._storage.read(self.path)[:32].decode("ascii", "replace").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None
