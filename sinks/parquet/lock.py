"""One writer per lake: an exclusive ``flock`` on ``<lake>/_lock``.

Two writers on one lake (a rolling update starts the new daemon before the old one stopped)
would empty each other's ``_staging``, roll each other's commits forward and land every
transaction twice. The writer therefore holds an exclusive, non-blocking ``fcntl.flock`` on
``<lake>/_lock`` from before it touches anything (recovery included) until it closes. The
kernel drops the lock when the process dies, ``kill -9`` included, so a crashed writer never
leaves a stale lock behind; the file itself stays and only says who held it last (its pid,
for the refusal message). Readers (``binlake status``, the Spark helpers) never take it.

A ``flock`` belongs to an open file description: a second :class:`LakeLock` on the same lake
conflicts even inside one process, as it must.
"""

from __future__ import annotations

import errno
import fcntl
import os

from ..errors import LakeError, LakeLocked
from .layout import LOCK

__all__ = ["LOCK", "LakeLock"]


class LakeLock:
    """``acquire()`` or raise :class:`~sinks.errors.LakeLocked`; ``release()`` (idempotent)."""

    def __init__(self, lake: str) -> None:
        self.lake = os.path.abspath(lake)
        self.path = os.path.join(self.lake, LOCK)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        try:
            os.makedirs(self.lake, exist_ok=True)
            # Read-only: a descriptor open for writing would keep the filesystem from being
            # remounted read-only. Only the holder writes its pid, through a second one.
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise LakeError.from_os_error(exc, self.path, "taking the lake's lock") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LakeLocked(self.lake, self.path, holder) from None
            raise LakeError.from_os_error(exc, self.path, "taking the lake's lock") from exc
        try:
            with open(self.path, "wb") as f:
                f.write(b"%d\n" % os.getpid())
        except OSError:
            pass  # the pid is informative only: a full disk must not stop the lock
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> LakeLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
