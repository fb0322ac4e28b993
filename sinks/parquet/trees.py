"""Staged trees: a flush's new directories built in staging, and made visible by one rename.

On a local filesystem every new inode — a ``mkdir``, a file created — costs far more kernel CPU
than a rename or a reopened file (on ext4, tens of times more), and a new table needs six of
them (``<db>/<table>/``, ``_schema/``, ``schema_version=N/``, ``commit_date=D/``, its Parquet
file, its ``_schema/vN.json``). Made at the commit, one after the other, they would hold up the
end of a first flush over thousands of tables. So:

* A file whose final directory does not exist yet is written in a *staged tree*: the first
  missing directory of its final path (a new database, table, schema version or commit date)
  becomes ``_staging/tree-<k>/``, and the file goes to its final place under it. The commit
  renames the whole tree onto the missing directory: one rename, listed in the manifest like any
  other (``commit._apply`` redoes it if its source still exists, else it is done), so the new
  directories appear in the lake at once, complete, and the lake's layout is the same as ever.
  A directory rename onto a path that does not exist is atomic, as a file's is.
* Those directories, and the staged files themselves, are created ahead of the flush, on a
  background thread (:class:`StagedTrees`), as soon as a table version or a partition first
  appears: then the main thread is decoding and the machine's other core mostly idle. The flush
  only rewrites the files it writes, without ``O_TRUNC`` (``commit.FileSystem.write``), each once
  the thread has made its own tree (:meth:`StagedTrees.wait_for`); an ``OSError`` there is
  raised by the flush, which breaks the sink like any failed write. The thread makes
  what was queued meanwhile in one ``FileSystem.make_many``: for the real filesystem one C call
  without the GIL (``_native_fs.c``), so it wins the GIL back from the busy main thread once per
  batch, not once per ``mkdir``.

Crash safety: the trees' directories are made durable with the staged files, before the manifest
(``ParquetSink._flush`` lists them for ``FileSystem.fsync_many``); ``commit`` fsyncs ``_staging``,
which holds the trees' names. Until a manifest names a tree nothing of it is visible, and
recovery empties staging (``tests/unit/test_power_loss.py`` replays every power loss over them).
"""

from __future__ import annotations

import posixpath
import queue
import threading
from collections.abc import Callable
from typing import Any

from protocol import native_switch

from ..storage import Storage
from . import commit as C
from .layout import STAGED_TREE_PREFIX, staged_tree

__all__ = ["StagedTrees", "in_tree", "warn_once"]

_warned = False


def warn_once(log: Callable[[str], None]) -> None:
    """Say once per process that the trees' thread makes directories and files one call at a
    time because ``_native_fs`` is not built, or built for another ABI version (nothing when
    BINLAKE_NATIVE=0 asked for that)."""
    global _warned
    if _warned or C._native_fs is not None or native_switch.native_off():
        return
    _warned = True
    log(f"{C.NATIVE_FS_MISSING or 'sinks.parquet._native_fs is not built'}: the lake's new "
        "directories and files are made "
        "one call at a time (the same lake, slower over many tables); reinstall binlake (or "
        "`python setup.py build_ext --inplace` in a checkout) to build it")


def in_tree(staged: str) -> bool:
    """Whether a staged path (relative to the lake) lies in a staged tree: the tree's rename,
    not its own, makes it visible."""
    return staged.startswith(STAGED_TREE_PREFIX)


class StagedTrees:
    """The staged trees of the flush under way, and the thread that prepares them.

    ``known`` is the sink's set of lake directories known to exist (absolute paths, shared
    with ``commit.commit``); a
    committed tree's directories join it (:meth:`committed`). ``fs``: the lake's storage."""

    def __init__(self, lake: str, known: set[str], fs: Storage = C.OS) -> None:
        self.lake = lake
        # ``prefix + path`` is ``posixpath.join(lake, path)`` for the relative paths used here,
        # without its checks: thousands of new tables join a dozen paths each.
        self._prefix = posixpath.join(lake, "")
        self.known = known
        self._fs = fs
        self._roots: dict[str, str] = {}  # missing final directory -> its tree (relative)
        self._dirs: set[str] = set()  # directories in trees, created or queued (relative)
        self._count = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        #: Batches submitted (the caller's thread), and made or failed (the thread; changed
        #: under ``_progress``): :meth:`wait_for` waits for a batch, :meth:`wait` for all.
        self.submitted = 0
        self._made = 0
        self._progress = threading.Condition()
        self._error: BaseException | None = None

    @property
    def fs(self) -> Storage:
        return self._fs

    # --- placing files ------------------------------------------------------------------------

    def place(self, final: str, *, create: bool = False, now: bool = False) -> str | None:
        """Where to stage the file whose final path (relative to the lake) is ``final``: its
        place in a staged tree, or None when its directory exists (stage it flat).

        The tree's directories not made yet are created on the thread (``now``: in the calling
        thread, before returning), and so is the empty file itself with ``create``."""
        directory = final.rpartition("/")[0]  # posixpath.dirname: the paths here are clean
        root = self._missing_root(directory)
        if root is None:
            return None
        tree = self._roots.get(root)
        if tree is None:
            self._count += 1
            tree = self._roots[root] = staged_tree(self._count)
        staged_dir = tree + directory[len(root):]
        new: list[str] = []
        path = staged_dir
        while path not in self._dirs:
            new.append(path)
            if path == tree:
                break
            path = path.rpartition("/")[0]
        self._dirs.update(new)
        staged = staged_dir + final[len(directory):]
        files = [staged] if create else []
        if new or files:
            prefix = self._prefix
            dirs = [prefix + d for d in reversed(new)]
            paths = [prefix + f for f in files]
            if now:
                self.wait()
                _prepare(self.fs, dirs, paths)
            else:
                self.submit(dirs, paths)
        return staged

    def _missing_root(self, directory: str) -> str | None:
        """The first missing directory on the way from the lake to ``directory`` (relative),
        or None when it exists. Directories already given a tree count as missing."""
        path = ""
        for name in directory.split("/"):
            path = f"{path}/{name}" if path else name
            if path in self._roots:
                return path
            absolute = self._prefix + path
            if absolute in self.known:
                continue
            if not self.fs.isdir(absolute):
                return path
            self.known.add(absolute)
        return None

    def renames(self) -> list[tuple[str, str]]:
        """(tree, the missing directory it becomes) for the manifest, relative to the lake."""
        return [(tree, root) for root, tree in self._roots.items()]

    def directories(self) -> list[str]:
        """Every directory of the trees (absolute): each gained entries, which must be durable
        before the manifest."""
        prefix = self._prefix
        return [prefix + d for d in sorted(self._dirs)]

    def committed(self) -> None:
        """The trees are in place: their directories exist in the lake now.

        Each directory finds its tree by its own first two names (``_staging/tree-<k>``), not
        by a pass over every directory per tree: a flush that starts a commit date for each of
        thousands of tables has a tree per table, and that pass grew with their square."""
        roots = {tree: root for root, tree in self._roots.items()}
        prefix, start, add = self._prefix, len(STAGED_TREE_PREFIX), self.known.add
        for d in self._dirs:
            end = d.find("/", start)
            tree = d if end < 0 else d[:end]
            add(prefix + roots[tree] + d[len(tree):])
        self.forget()

    def forget(self) -> None:
        """Start the next flush's trees (the staged ones are gone or about to be)."""
        self._roots.clear()
        self._dirs.clear()

    # --- the thread ---------------------------------------------------------------------------

    def submit(self, dirs: list[str], files: list[str]) -> None:
        """Create ``dirs`` (in order: parents first) and empty ``files`` on the thread: the
        :attr:`submitted`-th batch."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="binlake-trees", daemon=True)
            self._thread.start()
        self.submitted += 1
        self._queue.put((self.fs, dirs, files))

    def wait_for(self, batch: int) -> None:
        """Return once the ``batch``-th batch submitted and those before it are done; raise the
        thread's first error, if any (the sink breaks on it, so it stays raised). The thread
        makes them in order, so a flush can write the first tables' files while the last
        tables' directories are still being made (over thousands of new tables, the new inodes'
        kernel CPU adds up, and the trees may still be in the making when the backlog's last
        event is decoded)."""
        if self._made < batch:
            with self._progress:
                while self._made < batch:
                    self._progress.wait()
        if self._error is not None:
            raise self._error

    def wait(self) -> None:
        """:meth:`wait_for` everything submitted."""
        self.wait_for(self.submitted)

    def close(self) -> None:
        """Wait for the thread and stop it (its errors no longer matter: the sink is done)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        """Everything queued meanwhile is made in one batch per file system
        (``FileSystem.make_many``: one call without the GIL for the real filesystem), so the
        thread waits for the GIL once per batch, not once per directory or file."""
        while True:
            items = [self._queue.get()]
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            work = [item for item in items if item is not None]
            start = 0
            while start < len(work):
                fs, dirs, files = work[start][0], [], []
                end = start
                while end < len(work) and work[end][0] is fs:
                    dirs += work[end][1]
                    files += work[end][2]
                    end += 1
                self._make(fs, dirs, files)
                with self._progress:
                    self._made += end - start
                    self._progress.notify_all()
                start = end
            if len(work) < len(items):
                return

    def _make(self, fs: Storage, dirs: list[str], files: list[str]) -> None:
        if self._error is not None:  # after a failure, nothing more: the flush raises it
            return
        try:
            _prepare(fs, dirs, files)
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits
            self._error = exc


def _prepare(fs: Storage, dirs: list[str], files: list[str]) -> None:
    fs.make_many(dirs, files)
