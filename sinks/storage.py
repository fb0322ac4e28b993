"""The storage seam: what binlake needs from the place a lake lives, and what each part promises.

Every byte the Parquet sink puts on or reads from a lake goes through one :class:`Storage`
(today's local-POSIX one is ``sinks.parquet.commit.OS``, a ``commit.FileSystem``; a test's
recording model replays power losses through the same interface, ``tests/unit/
test_power_loss.py``). A second backend — object storage, say — implements this protocol, and
where it cannot keep a promise below, the commit protocol (``sinks/parquet/commit.py``) is what
must change, not the callers: that is the design problem pyarrow's and Iceberg's file-system
layers leave to the table format above them, and so does this one.

Paths are absolute strings (``lake`` joined with a name from ``sinks/parquet/layout.py``).
Errors are ``OSError`` (``FileNotFoundError``, ``FileExistsError`` where noted), naming the path;
the sink turns them into a :class:`~sinks.errors.LakeError`.

The promises, by kind:

* **Atomicity.** :meth:`Storage.replace` moves a file, or a directory with everything in it,
  to a name that did not exist or held a file, in one step: a reader, and a recovery after a
  crash at any instant, finds the old state or the new, never a mixture and never neither. The
  whole commit protocol rests on this (a staged file, or a staged tree of new directories,
  becomes visible by one rename; the checkpoint is replaced by one rename).
* **Durability.** Nothing written, created, renamed or removed survives a power loss until a
  :meth:`Storage.fsync` (or :meth:`Storage.fsync_many`) of it — of the file for its bytes, of
  its directory for its name — has returned. Once it has, it does. Order between two
  operations is only promised across such a call: the protocol fsyncs what a later step
  relies on before taking that step.
* **Listing consistency.** After a call that created, renamed or removed a name has returned,
  :meth:`Storage.listdir`, :meth:`Storage.exists` and :meth:`Storage.isdir` in any process see
  it (read-after-write); a listing shows each name that existed throughout the call and none
  that did not exist at any time during it.
* **Exclusivity.** One writer per lake: ``sinks/parquet/lock.py`` takes an exclusive lock that
  the storage drops when its holder dies (a local ``flock``); compaction and the writer's
  renames exclude each other the same way (``commit.publish_lock``). A backend without such
  locks needs another arbiter (a conditional create of one object, a lease) before it can
  carry a lake.
"""

from __future__ import annotations

from collections.abc import Iterable
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
