"""Taking a lake to write it, and giving it back.

Before the sink writes anything it holds the lake's writer lock, refuses a lake of a newer
binlake (its format version), finishes or discards a commit a crash left half-done, checks
the ``[types]`` choices against the lake's record of them, and tells the file system layer
which lake it works in (``commit._OsFileSystem.watch``: one ``syncfs`` may then stand for many
``fsync`` calls). Giving the lake back undoes the last two steps.
"""

from __future__ import annotations

import logging

from ..errors import LakeError
from ..storage import Storage
from ..transform import TypeOptions
from . import commit as C
from . import small_file
from . import state as S
from . import trees as T
from .lock import LakeLock
from .type_record import check_types
from .workspace import LakeMirror

__all__ = ["release", "take"]

log = logging.getLogger("binlake.sinks.parquet")


def take(lake: str, lock: LakeLock, types: TypeOptions,
         storage: Storage, mirror: LakeMirror | None = None) -> S.LakeState | None:
    """Lock and recover ``lake``; its durable state (None: a new lake). With a ``mirror``,
    ``lake`` is only the spool of the lake the mirror holds: it is rebuilt from there first.

    Raises :class:`~sinks.errors.LakeLocked` (another writer holds the lake; nothing was
    touched) or :class:`~sinks.errors.LakeError` (the lock is released then).
    """
    lock.acquire()
    try:
        if mirror is not None:
            mirror.restore()
        S.check_lake(lake, storage)  # a lake of a newer binlake: refused before recovery
        doc = C.recover(lake, storage)
        check_types(lake, types, new_lake=doc is None, storage=storage)  # before anything lands
    except BaseException as exc:
        lock.release()
        if mirror is not None:
            mirror.close()
        if isinstance(exc, OSError):
            raise LakeError.from_os_error(exc, lake, "recovering the lake") from exc
        raise
    T.warn_once(log.warning)
    small_file.warn_once(log.warning)
    try:  # before the sink writes anything: see commit._OsFileSystem
        storage.watch(lake)
    except OSError:
        pass  # then every flush fsyncs path by path, as on any other filesystem
    return None if doc is None else S.LakeState.from_json(doc, lake)


def release(lake: str, lock: LakeLock, storage: Storage,
            mirror: LakeMirror | None = None) -> None:
    """Give back a lake :func:`take` took."""
    storage.unwatch(lake)
    lock.release()
    if mirror is not None:
        mirror.close()
