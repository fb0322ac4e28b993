"""The storage seam: what binlake needs from the place a lake lives, and what each part promises.

Every byte the sink, compaction, the readers' pins and ``binlake status`` put on or read from a
lake goes through one :class:`Storage` (today's local-POSIX one is ``sinks.parquet.commit.OS``,
a ``commit.FileSystem``; a test's recording model replays power losses through the same
interface, ``tests/unit/test_power_loss.py``), and so do the Spark helpers' own reads and
writes of small files (schema files, compaction records, the DDL log, a streaming query's
fence); only Spark itself reads and writes Parquet by path. A second backend — object storage,
say — implements this protocol, and where it cannot keep a promise below, the commit protocol
(``sinks/parquet/commit.py``) is what must change, not the callers: that is the design problem
pyarrow's and Iceberg's file-system layers leave to the table format above them, and so does
this one. An operation a backend cannot provide at all raises ``OSError`` with ``errno.ENOTSUP``
(naming the path); the feature built on it then stops with that error, it is never emulated
with weaker promises.

Paths are absolute strings (``lake`` joined with a name from ``sinks/parquet/layout.py``).
Errors are ``OSError`` (``FileNotFoundError``, ``FileExistsError`` where noted), naming the path;
the sink turns them into a :class:`~sinks.errors.LakeError`.

The promises, by kind:

* **Atomicity.** :meth:`Storage.replace` moves a file, or a directory with everything in it,
  to a name that did not exist or held a file, in one step: a reader, and a recovery after a
  crash at any instant, finds the old state or the new, never a mixture and never neither. The
  whole commit protocol rests on this (a staged file, or a staged tree of new directories,
  becomes visible by one rename; the checkpoint is replaced by one rename).
  :meth:`Storage.exchange` swaps two directories the same way (compaction's switch of a
  partition).
* **Durability.** Nothing written, created, renamed, linked or removed survives a power loss
  until a :meth:`Storage.fsync` (or :meth:`Storage.fsync_many`) of it — of the file for its
  bytes, of its directory for its name — has returned. Once it has, it does. Order between
  two operations is only promised across such a call: the protocol fsyncs what a later step
  relies on before taking that step.
* **Listing consistency.** After a call that created, renamed or removed a name has returned,
  :meth:`Storage.listdir`, :meth:`Storage.exists` and :meth:`Storage.isdir` in any process see
  it (read-after-write); a listing shows each name that existed throughout the call and none
  that did not exist at any time during it. :meth:`Storage.walk` lists each directory so, but
  is no snapshot of a tree: a directory switched while it runs is seen before or after.
* **Exclusivity.** :meth:`Storage.lock` gives locks that exclude each other across processes
  and that the storage drops when their holder dies (a local ``flock``): one writer per lake
  (``sinks/parquet/lock.py``), one compaction at a time (``compact.compact_lock``), and the
  writer's renames into partitions shared against compaction's exclusive switch
  (``commit.publish_lock``). A backend without such locks needs another arbiter (a
  conditional create of one object, a lease) before it can carry a lake.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Storage"]


class Storage(Protocol):
    """See the module docstring: the operations, and what each promises."""

    # --- bytes ----------------------------------------------------------------------------------

    def write(self, path: str, data: bytes) -> None:
        """Create ``path`` (or replace its content) with exactly ``data``. Not durable until
        :meth:`fsync`; a crash before may leave it empty, partial or absent."""
        ...

    def read(self, path: str) -> bytes:
        """The whole content of ``path`` (``FileNotFoundError`` if absent)."""
        ...

    def open_output(self, path: str) -> pa.NativeFile:
        """A new file at ``path`` to stream into (Arrow IPC, Parquet); its bytes are ``path``'s
        once it is closed. Not durable until :meth:`fsync`."""
        ...

    def open_input(self, path: str) -> pa.NativeFile:
        """``path`` to read (random access: a Parquet footer is read first)."""
        ...

    def size(self, path: str) -> int:
        """Bytes in ``path`` as written so far (a file still being streamed into counts)."""
        ...

    def mtime(self, path: str) -> float:
        """When ``path`` last changed, in seconds since the epoch: a file's bytes last written,
        a directory's entries last created, renamed or removed. Ages are measured with it
        (compaction's ``min_age``, the trash's grace period), so it must come from the same
        clock as ``time.time()`` within seconds; it promises no order between two paths."""
        ...

    # --- names ----------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        """Whether ``path`` names a file or directory (listing consistency applies)."""
        ...

    def isdir(self, path: str) -> bool:
        """Whether ``path`` names a directory."""
        ...

    def listdir(self, path: str) -> list[str]:
        """The names in directory ``path``, in no particular order (listing consistency)."""
        ...

    def mkdir(self, path: str) -> None:
        """Create directory ``path``; its parent must exist (``FileExistsError`` if taken).
        Durable once its parent is fsync-ed."""
        ...

    def makedirs(self, path: str) -> None:
        """Create ``path`` and any missing parents; nothing if it exists."""
        ...

    def mkdir_many(self, paths: Iterable[str]) -> None:
        """:meth:`mkdir` each of ``paths`` (none inside another), leaving any that exists."""
        ...

    def make_many(self, dirs: list[str], files: list[str]) -> None:
        """:meth:`mkdir` each of ``dirs`` (parents first), then create each of ``files``
        empty: a batch of new names, made ahead of the files' content."""
        ...

    def replace(self, src: str, dst: str) -> None:
        """Rename ``src`` (a file or a directory) to ``dst`` atomically (module docstring).
        Onto a directory that exists and is not empty it fails (``ENOTEMPTY``/``EEXIST``)."""
        ...

    def link(self, src: str, dst: str) -> None:
        """A second name ``dst`` for the file ``src``, with ``src``'s bytes as they are now:
        replacing or removing ``src`` later leaves ``dst`` as it is (``FileNotFoundError`` if
        ``src`` is gone, ``FileExistsError`` if ``dst`` is taken). Durable once ``dst``'s
        directory is fsync-ed. Locally a hard link (no byte copied); a store may copy."""
        ...

    def exchange(self, a: str, b: str) -> None:
        """Swap the directories ``a`` and ``b`` atomically: whoever lists either name sees all
        of its old entries or all of its new ones, never a mixture and never neither, and so
        does a recovery after a crash. Durable once both parents are fsync-ed. Locally
        ``renameat2(RENAME_EXCHANGE)``; where it cannot be done (``ENOTSUP``, ``EINVAL``,
        ``ENOSYS``) it fails, never two renames that would show a partition missing."""
        ...

    def remove(self, path: str) -> None:
        """Delete file ``path`` (``FileNotFoundError`` if absent)."""
        ...

    def rmdir(self, path: str) -> None:
        """Delete the empty directory ``path``."""
        ...

    def rmtree(self, path: str) -> None:
        """Delete directory ``path`` and everything in it (not atomic: used on staging only,
        which no reader lists and no manifest names)."""
        ...

    def walk(self, path: str) -> Iterator[tuple[str, list[str], list[str]]]:
        """Directory ``path`` and everything under it, top-down, as ``os.walk`` yields it:
        (a directory, its subdirectories' names, its files' names). The caller may prune the
        list of subdirectories in place to skip them. Each directory is listed once, with
        listing consistency; a directory gone by the time it is reached is passed over, and
        one switched while the walk runs is seen as before or as after (a caller needing one
        view of a tree walks again, as ``binlake status`` does)."""
        ...

    # --- exclusion ------------------------------------------------------------------------------

    def lock(self, path: str, *, exclusive: bool,
             wait: bool = True) -> AbstractContextManager[None]:
        """Hold the lock named ``path`` (made if absent, and left behind) while the context is
        entered: ``exclusive`` against every other holder, else shared with other shared ones.
        A lock excludes any other holder, in this process (another call) or another; it is
        dropped when the context exits or its holder dies (``kill -9`` included), so a
        crashed holder never leaves it stale. ``wait=False``: raise ``BlockingIOError`` at
        once if it is held against us, instead of waiting. Taking a lock writes nothing the
        file's readers see: its holder may write a note into ``path`` (:meth:`write`)."""
        ...

    # --- durability -----------------------------------------------------------------------------

    def fsync(self, path: str) -> None:
        """Make ``path`` durable: a file's bytes, or a directory's entries (the names created,
        renamed into or removed from it)."""
        ...

    def fsync_many(self, paths: Iterable[str]) -> None:
        """:meth:`fsync` every one of ``paths``: all durable when it returns, in any order
        between them (a backend may overlap them, or make its whole store durable at once)."""
        ...

    def watch(self, lake: str) -> None:
        """A writer is about to write ``lake``: the storage may prepare to make many paths
        durable at once (the local one opens the descriptor its ``syncfs`` reports errors on)."""
        ...

    def unwatch(self, lake: str) -> None:
        """The end of :meth:`watch`."""
        ...
