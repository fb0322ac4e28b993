"""Durable, atomic commits of staged files plus the checkpoint that covers them.

A commit makes a set of staged files visible *and* advances ``_checkpoint.json`` as one step,
even across a crash at any instant. The protocol:

1. every staged file is written, ``fsync``-ed and closed (in ``<lake>/_staging/``), then the
   staging directory is ``fsync``-ed (so that the names the manifest uses are durable too);
   a flush of many files makes them durable with one ``syncfs`` instead (``_OsFileSystem``).
   A file whose final directory is new is staged at its final place in a *staged tree*
   (``trees.py``), whose directories are made durable with the files;
2. the *manifest* ``<lake>/_commit.json`` — the renames to do, the files to delete (prepared XA
   parts whose outcome came, see ``xa.py``) and the checkpoint to write — is
   written to a temporary name, ``fsync``-ed, renamed into place, and the lake dir ``fsync``-ed.
   From this instant the commit has happened;
3. each staged file (or staged tree: one directory) is renamed to its final name
   (``os.replace``, atomic) and its directory ``fsync``-ed (new directories also get their parent ``fsync``-ed); the deletions are done
   and their directories ``fsync``-ed;
4. the checkpoint is replaced atomically the same way;
5. the manifest is removed.

Step 3 runs under a shared lock on ``<lake>/_publish.lock`` (:func:`publish_lock`, through
``Storage.lock``: locally a ``flock``):
compaction (``sinks/parquet/compact.py``) takes it exclusively for the instant it swaps a
partition directory, so no file is renamed into a partition while it is being replaced.

At start (:func:`recover`) a manifest, if present, is rolled forward: renames whose source still
exists are redone, files still there are deleted, the checkpoint is written, the manifest removed. Without a manifest nothing
in staging was ever promised, so staging is simply emptied: those transactions are after the
checkpoint and will be streamed and landed again. Either way no transaction is lost, and none
lands twice, because a file name is never reused (names derive from the first ``_seq`` in the
file, which only grows).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import functools
import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol import native_switch
from protocol.binlog.model import BinlogPosition
from protocol.failover import ServerIdentity

from ..errors import LakeCorrupted
from .layout import CHECKPOINT, MANIFEST, PUBLISH_LOCK, STAGING

if TYPE_CHECKING:
    from ..storage import Storage

__all__ = ["CHECKPOINT", "MANIFEST", "OS", "STAGING", "Checkpoint", "FileSystem", "commit",
           "publish_lock",
           "recover", "write_checkpoint"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Everything up to and including transaction ``seq`` is landed.

    ``gtid_state`` is the text a replica resumes from (MariaDB ``@slave_connect_state`` /
    MySQL executed Gtid_set); ``position`` is the binlog position right after the last landed
    transaction's commit, on ``server`` (the server streamed from), for servers without GTIDs.
    ``gtid_state_complete``: the state also covers every transaction before the lake's start
    point (seeded from the server when the lake began), so that a dump by GTID — on any
    server of the topology — sends exactly the transactions after it; lakes begun before
    binlake recorded that resume by position. ``divergences``: failovers where the server
    lacked transactions the lake holds and the lake went on by explicit choice
    (``start.on_divergence``), oldest first.
    """

    seq: int
    position: BinlogPosition | None
    gtid: str | None  # the last landed transaction's GTID
    gtid_state: str | None
    gtid_flavor: str | None  # "mariadb", "mysql" or None
    commit_time_us: int | None
    server_id: int | None = None
    server: ServerIdentity | None = None
    gtid_state_complete: bool = False
    divergences: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "binlog_file": self.position.file if self.position else None,
            "binlog_pos": self.position.pos if self.position else None,
            "gtid": self.gtid,
            "gtid_state": self.gtid_state,
            "gtid_flavor": self.gtid_flavor,
            "commit_time_us": self.commit_time_us,
            "server_id": self.server_id,
            "server": self.server.to_json() if self.server is not None else None,
            "gtid_state_complete": self.gtid_state_complete,
            "divergences": list(self.divergences),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Checkpoint:
        file = doc.get("binlog_file")
        return cls(
            seq=int(doc["seq"]),
            position=BinlogPosition(file, int(doc["binlog_pos"])) if file else None,
            gtid=doc.get("gtid"),
            gtid_state=doc.get("gtid_state"),
            gtid_flavor=doc.get("gtid_flavor"),
            commit_time_us=doc.get("commit_time_us"),
            server_id=doc.get("server_id"),
            server=ServerIdentity.from_json(doc["server"]) if doc.get("server") else None,
            gtid_state_complete=bool(doc.get("gtid_state_complete", False)),
            divergences=tuple(doc.get("divergences") or ()),
        )


# --- durable filesystem primitives -----------------------------------------------------------


class FileSystem:
    """The local-POSIX :class:`~sinks.storage.Storage`: the operations the commit protocol, the
    sink, compaction, pins, the writer's lock, status and the Spark helpers use, and nothing
    else (``sinks/storage.py`` says what each promises).

    The protocol's correctness depends on their *order* and on which ``fsync`` makes what
    durable; this seam lets a test run the real :func:`commit` and :func:`recover` over a
    recording model that replays the states a power loss could leave (see
    ``tests/unit/test_power_loss.py``). :data:`OS` is the real one.
    """

    def write(self, path: str, data: bytes) -> None:
        """Create ``path`` (or replace its content) with ``data``; not durable until
        :meth:`fsync`.

        By descriptor, not ``open()``: a Python file object adds an ``fstat``, an ``ioctl``
        (is it a terminal?) and an ``lseek`` per file, and a flush writes thousands of files.
        Without ``O_TRUNC``, cutting only what an older, longer content leaves behind: a
        flush's files were made empty ahead (``trees.py``), and truncating an existing file to
        nothing arms ext4's ``auto_da_alloc``, which makes its ``close`` start writing it back
        there and then, on the flush's critical path, though ``fsync_many`` syncs it anyway.
        The native pool's threads write as this does (``write_path`` in
        ``_native_parquet.c``)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                view = memoryview(data).cast("B")
                size = view.nbytes
                while view.nbytes:
                    view = view[os.write(fd, view):]
                if os.fstat(fd).st_size > size:
                    os.ftruncate(fd, size)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _named(exc, path) from None

    def fsync(self, path: str) -> None:
        """A file: its data is durable. A directory: its entries (creations, renames into it,
        removals) are durable."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _named(exc, path) from None
        finally:
            os.close(fd)

    def fsync_many(self, paths: Iterable[str]) -> None:
        """:meth:`fsync` each of ``paths``; all are durable when it returns (any order between
        them). One after the other here; :data:`OS` overlaps them."""
        for path in paths:
            self.fsync(path)

    def mkdir_many(self, paths: Iterable[str]) -> None:
        """:meth:`mkdir` each of ``paths`` (siblings or cousins: none inside another), any that
        exists already left as it is. One after the other here; :data:`OS` overlaps them."""
        for path in paths:
            try:
                self.mkdir(path)
            except FileExistsError:
                pass

    def make_many(self, dirs: list[str], files: list[str]) -> None:
        """:meth:`mkdir` each of ``dirs`` (in order: parents first), then create each of
        ``files`` empty (:meth:`write`); nothing durable until fsync-ed. One by one here;
        :data:`OS` makes the whole batch in one call that holds no GIL (``trees.py``)."""
        for path in dirs:
            self.mkdir(path)
        for path in files:
            self.write(path, b"")

    def watch(self, lake: str) -> None:
        """The sink is about to write ``lake``: a real filesystem may prepare to make a large
        :meth:`fsync_many` durable at once (:data:`OS`). Nothing here."""

    def unwatch(self, lake: str) -> None:
        """The end of :meth:`watch`."""

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def open_output(self, path: str) -> Any:
        """A ``pyarrow.OSFile`` to stream into (pyarrow imported here: status and recovery
        never need it)."""
        import pyarrow as pa

        return pa.OSFile(path, "wb")

    def open_input(self, path: str) -> Any:
        import pyarrow as pa

        return pa.OSFile(path, "rb")

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def mtime(self, path: str) -> float:
        return os.stat(path).st_mtime

    def link(self, src: str, dst: str) -> None:
        os.link(src, dst)

    def exchange(self, a: str, b: str) -> None:
        """``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+, glibc 2.28+; ext4, XFS, btrfs, tmpfs)."""
        renameat2 = _renameat2()
        if renameat2 is None:
            raise OSError(errno.ENOSYS, "this C library has no renameat2 (glibc 2.28+ has)", b)
        if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), b)

    def walk(self, path: str) -> Iterator[tuple[str, list[str], list[str]]]:
        return os.walk(path)

    @contextlib.contextmanager
    def lock(self, path: str, *, exclusive: bool, wait: bool = True) -> Iterator[None]:
        """A ``flock`` on ``path``, through a descriptor of its own (so two holders in one
        process exclude each other too), closed — which drops the lock — on exit. Read-only:
        a descriptor open for writing would keep the filesystem from being remounted
        read-only."""
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            try:
                fcntl.flock(fd, operation if wait else operation | fcntl.LOCK_NB)
            except OSError as exc:
                if not wait and exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise BlockingIOError(exc.errno, exc.strerror, path) from None
                raise _named(exc, path) from None
            yield
        finally:
            os.close(fd)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2``, or None where the C library has none."""
    func = getattr(ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True), "renameat2", None)
    if func is not None:
        func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    return func


#: How many fsyncs :data:`OS` keeps in flight at once.
FSYNC_THREADS = 16

#: From this many paths on, :data:`OS` makes them durable with one ``syncfs(2)`` of a watched
#: lake's filesystem instead of a ``fsync`` each.
SYNCFS_AT = 64

#: ``statfs`` magic numbers of the local filesystems whose ``syncfs`` writes back every dirty
#: file and commits the metadata log (ext2/3/4, XFS, btrfs). A FUSE or network filesystem may
#: answer ``syncfs`` without doing either: it keeps its ``fsync`` per path.
_SYNCFS_TYPES = frozenset({0xEF53, 0x58465342, 0x9123683E})


def _load_syncfs() -> Any:
    """libc's ``syncfs`` where it reports write-back errors (Linux 5.8 and later), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
        if (major, minor) < (5, 8):
            return None
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syncfs, libc.statfs
    except (OSError, ValueError, AttributeError):
        return None


#: The ``ABI_VERSION`` of ``_native_fs.c`` this module calls.
NATIVE_FS_ABI = 1


def _load_native_fs() -> tuple[Any, str]:
    """``_native_fs`` (a C extension built from ``_native_fs.c`` with the native row decoder,
    see setup.py), or None: not built, built for another :data:`NATIVE_FS_ABI`
    (the reason: ``trees.warn_once`` says it), or ``BINLAKE_NATIVE=0``."""
    if native_switch.native_off():
        return None, ""
    return native_switch.load(f"{__package__}._native_fs", NATIVE_FS_ABI,
                              "sinks.parquet._native_fs")


_native_fs, NATIVE_FS_MISSING = _load_native_fs()


class _OsFileSystem(FileSystem):
    """The real filesystem; :meth:`fsync_many` overlaps the fsyncs, or replaces them by one
    ``syncfs``.

    A commit of a flush that touched thousands of tables fsyncs thousands of files and
    directories; one after the other they cost a journal commit each, most of a catch-up's
    time on a busy disk. In flight together, the filesystem groups them into a few journal
    commits. ``fsync`` releases the GIL, so threads are enough.

    Over a watched lake (:meth:`watch`: the sink's, on a local filesystem listed in
    ``_SYNCFS_TYPES``, Linux 5.8+) a set of at least :data:`SYNCFS_AT` paths is made durable
    by one ``syncfs(2)`` instead: a first flush over thousands of tables fsyncs several paths
    per table (files, their directories, the directories that gained one), and one ``syncfs``
    costs a small fraction of their time. Why it is as safe:

    * ``syncfs`` writes back every dirty file of the filesystem and commits its journal before
      it returns, so whatever ``fsync`` of each path would have made durable — data written,
      names created or renamed before the call — is durable when it returns: a superset.
      Every caller of :meth:`fsync_many` orders only what it wrote *before* the call against
      what it does *after* it, the way the commit protocol needs (module docstring).
    * Errors: since Linux 5.8 ``syncfs`` returns a write-back error of any file of the
      filesystem that occurred since the descriptor it is called on was opened (each open file
      keeps its own cursor on the filesystem's error sequence, so another process's ``syncfs``
      seeing the error first does not hide it). The descriptor is opened by :meth:`watch`,
      when the sink opens the lake, before it writes anything: a write-back error of any of
      its files raises here as from ``fsync``, and the sink breaks. An error of a file not
      the lake's (the filesystem is shared) breaks it too: a false alarm, on the safe side.
    * The commit protocol already needs the lake on one filesystem (it renames staged files
      into place), so one ``syncfs`` of the filesystem holding the first path covers them all;
      a path on another device falls back to ``fsync`` for the whole set.
    """

    _pool: ThreadPoolExecutor | None = None
    _syncfs: Any = None
    _watched: dict[int, tuple[int, int]] = {}  # st_dev -> (descriptor, watchers)
    _lakes: dict[str, int] = {}  # watched lake -> its st_dev (the lake may be gone at unwatch)

    def watch(self, lake: str) -> None:
        if _OsFileSystem._syncfs is None:
            _OsFileSystem._syncfs = _load_syncfs() or False
        if not _OsFileSystem._syncfs or lake in self._lakes:  # watched already: once per lake
            return
        fd = os.open(lake, os.O_RDONLY | os.O_DIRECTORY)
        try:
            buffer = ctypes.create_string_buffer(256)  # struct statfs: f_type comes first
            if (_OsFileSystem._syncfs[1](os.fsencode(lake), buffer) != 0
                    or ctypes.c_long.from_buffer(buffer).value not in _SYNCFS_TYPES):
                os.close(fd)
                return
            device = os.fstat(fd).st_dev
        except BaseException:
            os.close(fd)
            raise
        held = self._watched.get(device)
        if held is not None:
            os.close(fd)
            fd = held[0]
        self._watched[device] = (fd, (held[1] if held else 0) + 1)
        self._lakes[lake] = device

    def unwatch(self, lake: str) -> None:
        device = self._lakes.pop(lake, None)
        if device is None:
            return
        held = self._watched.get(device)
        if held is None:
            return
        if held[1] > 1:
            self._watched[device] = (held[0], held[1] - 1)
        else:
            del self._watched[device]
            os.close(held[0])

    def _sync_filesystem(self, paths: list[str]) -> bool:
        """One ``syncfs`` for all of ``paths`` if they are many and on a watched filesystem."""
        if len(paths) < SYNCFS_AT or not self._watched:
            return False
        devices = {os.stat(paths[0]).st_dev, os.stat(paths[-1]).st_dev}
        if len(devices) != 1:
            return False
        held = self._watched.get(devices.pop())
        if held is None:
            return False
        if _OsFileSystem._syncfs[0](held[0]) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), paths[0])
        return True

    def fsync_many(self, paths: Iterable[str]) -> None:
        todo = list(paths)
        if self._sync_filesystem(todo):
            return
        if len(todo) < 2:
            super().fsync_many(todo)
            return
        self._overlap(super().fsync_many, todo)

    def mkdir_many(self, paths: Iterable[str]) -> None:
        """Overlapped too: a first flush over thousands of tables creates several directories
        per table, and each ``mkdir`` costs a journal update."""
        todo = list(paths)
        if len(todo) < 2:
            super().mkdir_many(todo)
            return
        self._overlap(super().mkdir_many, todo)

    def make_many(self, dirs: list[str], files: list[str]) -> None:
        """In one call of ``_native_fs`` when it is built: from Python each ``mkdir`` or
        ``open`` gives up the GIL and must win it back from a busy main thread (up to the
        switch interval), so the staged trees' thread made only a small share of them while
        the stream was decoded, and the flush waited for the rest."""
        if _native_fs is None:
            super().make_many(dirs, files)
        else:
            _native_fs.make(dirs, files)

    def _overlap(self, call: Any, paths: list[str]) -> None:
        """``call`` over ``paths`` split in ``FSYNC_THREADS`` shares, one thread each: as many
        in flight at once as a future per path would give, without a future per path (whose
        set-up, over thousands of paths, weighs on the calling thread)."""
        if _OsFileSystem._pool is None:
            _OsFileSystem._pool = ThreadPoolExecutor(FSYNC_THREADS,
                                                     thread_name_prefix="binlake-fsync")
        shares = min(FSYNC_THREADS, len(paths))
        futures = [_OsFileSystem._pool.submit(call, paths[k::shares]) for k in range(shares)]
        errors = [f.exception() for f in futures]  # waits for every one of them
        for error in errors:
            if error is not None:
                raise error


OS: FileSystem = _OsFileSystem()

if TYPE_CHECKING:  # the local file system is the storage seam's local-POSIX implementation
    _LOCAL_STORAGE: Storage = OS


def _named(exc: OSError, path: str) -> OSError:
    """``exc`` naming ``path`` (a failed ``write``/``fsync`` on a descriptor names no file)."""
    if exc.filename is None:
        exc.filename = path
    return exc


def fsync_path(path: str, fs: Storage = OS) -> None:
    """``fsync`` a file or directory by name (directories make renames and creations durable)."""
    fs.fsync(path)


def ensure_dir(path: str, known: set[str] | None = None, fs: Storage = OS) -> None:
    """Create ``path`` and missing parents, ``fsync``-ing each parent that gained an entry."""
    gained: set[str] = set()
    make_dirs(path, known, gained, fs)
    fs.fsync_many(sorted(gained))


def make_dirs(path: str, known: set[str] | None, gained: set[str],
              fs: Storage = OS) -> None:
    """Create ``path`` and missing parents, adding each parent that gained an entry to
    ``gained``: they must be ``fsync``-ed (:meth:`FileSystem.fsync_many`) before anything
    relies on the new directories being durable."""
    if known is not None and path in known:
        return
    if not fs.isdir(path):
        parent = os.path.dirname(path)
        make_dirs(parent, known, gained, fs)
        try:
            fs.mkdir(path)
        except FileExistsError:
            pass
        gained.add(parent)
    if known is not None:
        known.add(path)


def make_dirs_many(paths: Iterable[str], known: set[str] | None, gained: set[str],
                   fs: Storage = OS) -> None:
    """:func:`make_dirs` for each of ``paths``, the missing directories of one depth created
    together (:meth:`FileSystem.mkdir_many`), shallowest first."""
    missing: set[str] = set()
    seen: set[str] = set()
    for path in paths:
        while path not in seen and (known is None or path not in known):
            seen.add(path)
            if fs.isdir(path):
                break
            missing.add(path)
            path = os.path.dirname(path)
    depths: dict[int, list[str]] = {}
    for path in missing:
        depths.setdefault(path.count("/"), []).append(path)
    for depth in sorted(depths):
        fs.mkdir_many(sorted(depths[depth]))
    gained.update(os.path.dirname(path) for path in missing)
    if known is not None:
        known.update(seen)


def write_durably(path: str, data: bytes, fs: Storage = OS) -> None:
    """Write a new file (no rename) and ``fsync`` it."""
    fs.write(path, data)
    fs.fsync(path)


def replace_atomically(path: str, data: bytes, fs: Storage = OS) -> None:
    """Replace ``path`` with ``data``: temp file, ``fsync``, ``os.replace``, ``fsync`` the dir."""
    tmp = path + ".tmp"
    write_durably(tmp, data, fs)
    fs.replace(tmp, path)
    fs.fsync(os.path.dirname(path))


def dumps(doc: dict[str, Any], *, compact: bool = False) -> bytes:
    """A lake document as JSON. ``compact``: one line, by the C encoder — an indented dump
    runs the pure-Python one, many times slower, which a flush over thousands of tables (a
    schema file each, a manifest naming every file) feels."""
    if compact:
        return (json.dumps(doc, sort_keys=True, ensure_ascii=False,
                           separators=(",", ":")) + "\n").encode()
    return (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


@contextlib.contextmanager
def publish_lock(lake: str, *, exclusive: bool = False, fs: Storage = OS) -> Iterator[None]:
    """Hold ``<lake>/_publish.lock``: shared while files are renamed into partitions (the
    daemon), exclusive while compaction swaps a partition directory. Held for milliseconds."""
    with fs.lock(os.path.join(lake, PUBLISH_LOCK), exclusive=exclusive):
        yield


# --- the commit protocol -------------------------------------------------------------------------


def commit(lake: str, renames: Iterable[tuple[str, str]], checkpoint_doc: dict[str, Any],
           known_dirs: set[str], deletes: Iterable[str] = (), fs: Storage = OS) -> None:
    """Steps 2–5 of the protocol; the staged files (step 1) must already be durable.

    ``renames`` are (staged path, final path) pairs, ``deletes`` paths, all relative to the lake.
    """
    pairs = [(src, dst) for src, dst in renames]
    doomed = list(deletes)
    record: dict[str, Any] = {"renames": pairs, "checkpoint": checkpoint_doc}
    if doomed:
        record["deletes"] = doomed
    # A staged file's data is durable (step 1), but its *name* in staging only once staging
    # itself is fsync-ed: without this, a power loss after the manifest could leave a manifest
    # naming a file that no directory holds (found by tests/unit/test_power_loss.py).
    fs.fsync_many(sorted({os.path.dirname(os.path.join(lake, src)) for src, _ in pairs}))
    manifest = os.path.join(lake, MANIFEST)
    replace_atomically(manifest, dumps(record, compact=True), fs)
    _apply(lake, pairs, checkpoint_doc, known_dirs, doomed, fs)
    fs.remove(manifest)
    fs.fsync(lake)


def write_checkpoint(lake: str, checkpoint_doc: dict[str, Any], fs: Storage = OS) -> None:
    """Advance the checkpoint alone (transactions that landed no files)."""
    replace_atomically(os.path.join(lake, CHECKPOINT), dumps(checkpoint_doc), fs)


def _apply(lake: str, pairs: list[tuple[str, str]], checkpoint_doc: dict[str, Any],
           known_dirs: set[str], deletes: list[str], fs: Storage) -> None:
    touched: set[str] = set()
    with publish_lock(lake, fs=fs):
        # Every new directory first, made durable together (before any rename into it), then
        # the renames, then their directories together: a flush over thousands of tables pays
        # a few grouped journal commits, not one per directory (FileSystem.fsync_many).
        moves: list[tuple[str, str]] = []
        gained: set[str] = set()
        for src, dst in pairs:
            src_path = os.path.join(lake, src)
            dst_path = os.path.join(lake, dst)
            if fs.exists(src_path):
                moves.append((src_path, dst_path))
            elif not fs.exists(dst_path):
                raise LakeCorrupted(f"commit record names {src}, but neither it nor {dst} exists")
        make_dirs_many({os.path.dirname(dst) for _, dst in moves}, known_dirs, gained, fs)
        fs.fsync_many(sorted(gained))
        for src_path, dst_path in moves:
            directory = os.path.dirname(dst_path)
            try:
                _move(src_path, dst_path, touched, fs)
            except FileNotFoundError:  # retention removed a partition we had seen
                known_dirs.discard(directory)
                ensure_dir(directory, known_dirs, fs)
                _move(src_path, dst_path, touched, fs)
        for doomed in deletes:
            path = os.path.join(lake, doomed)
            if fs.exists(path):
                fs.remove(path)
                touched.add(os.path.dirname(path))
        fs.fsync_many(sorted(touched))
    write_checkpoint(lake, checkpoint_doc, fs)


def _move(src: str, dst: str, touched: set[str], fs: Storage) -> None:
    """Rename ``src`` to ``dst``, adding each directory that gained an entry to ``touched``.

    A staged tree (``trees.py``) is renamed onto a directory that did not exist when the sink
    looked; should something else have made it since (and put something in it), the rename
    fails and the tree is merged into it entry by entry instead — else every restart would
    fail on the same roll-forward. Each entry's rename is atomic and a merge half done is
    finished by the next one, so a crash during it is rolled forward like any rename."""
    try:
        fs.replace(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not fs.isdir(src) \
                or not fs.isdir(dst):
            raise
        for name in sorted(fs.listdir(src)):
            _move(os.path.join(src, name), os.path.join(dst, name), touched, fs)
        fs.rmdir(src)
        return
    touched.add(os.path.dirname(dst))


def recover(lake: str, fs: Storage = OS) -> dict[str, Any] | None:
    """Finish a half-done commit, empty staging, and return the checkpoint document (if any)."""
    fs.makedirs(lake)
    manifest = os.path.join(lake, MANIFEST)
    for leftover in (manifest + ".tmp", os.path.join(lake, CHECKPOINT) + ".tmp"):
        if fs.exists(leftover):
            fs.remove(leftover)
    if fs.exists(manifest):
        record = json.loads(fs.read(manifest))
        _apply(lake, [(s, d) for s, d in record["renames"]], record["checkpoint"], set(),
               list(record.get("deletes", [])), fs)
        fs.remove(manifest)
        fs.fsync(lake)
    staging = os.path.join(lake, STAGING)
    if fs.isdir(staging):
        fs.rmtree(staging)
    fs.mkdir(staging)
    fs.fsync(lake)
    checkpoint = os.path.join(lake, CHECKPOINT)
    if not fs.exists(checkpoint):
        return None
    doc: dict[str, Any] = json.loads(fs.read(checkpoint))
    return doc
