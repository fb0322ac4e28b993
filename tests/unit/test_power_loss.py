"""Power loss during the commit protocol, modelled: the page cache does not survive.

The crash tests kill the process, and the kernel still writes back everything it was given, so
they never test which ``fsync`` makes what durable. Here the real :func:`commit` and
:func:`recover` run over :class:`ModelFs`, an in-memory filesystem that records every operation
(in the manner of ALICE and CrashMonkey). For every crash point — after each operation of a
series of commits — and every subset of the operations not yet made durable, the state a power
loss could leave is rebuilt, :func:`recover` runs on it, and the lake must equal the lake after
some prefix of the commits: every commit that returned (was acknowledged) is there, the one under
way is there entirely or not at all, nothing is there twice, and the checkpoint names exactly
that prefix. Where a commit was under way, a second power loss during its recovery is explored
the same way (recovery must be crash-safe too).

The persistence model (pessimistic where POSIX is silent, as Linux filesystems behave where it
matters):

* a file's data is durable once the file is ``fsync``-ed; until then a power loss may leave the
  file empty;
* a directory entry — a creation, a ``mkdir``, a hard link, an unlink — is durable once its
  directory is ``fsync``-ed; a rename once the destination directory is (renames are atomic:
  the journal commits both halves together), a directory's rename — a staged tree's
  (``sinks/parquet/trees.py``) — moving everything under it; an exchange of two directories
  (compaction's ``renameat2(RENAME_EXCHANGE)``) once both parents are, as
  ``sinks/storage.py`` promises;
* anything not yet durable may or may not have reached the disk, independently of everything
  else (every subset is tried).

What it found: a staged file's *name* in ``_staging/`` was never made durable before the
manifest that names it (its data was ``fsync``-ed, its directory was not); a power loss then left
a manifest whose file no directory held, and recovery stopped with ``LakeCorrupted``. ``commit``
now ``fsync``s the staging directory first. The workload stages as ``ParquetSink`` does: files
in new directories go to staged trees made on the trees' thread, renamed whole by the commit.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import posixpath
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from sinks.parquet import commit as C
from sinks.parquet.trees import StagedTrees, in_tree

LAKE = "/lake"
STAGING = f"{LAKE}/_staging"
#: Subsets tried per crash point when more operations than this are pending: all of the small
#: ones, then a seeded sample.
MAX_EXHAUSTIVE = 10
SAMPLES = int(os.environ.get("BINLAKE_POWER_LOSS_SAMPLES", "256"))


@dataclass(frozen=True)
class Op:
    kind: str  # create, write, mkdir, link, rename, renamedir, exchange, unlink, rmtree, fsync
    path: str
    dst: str = ""
    inode: int = 0
    data: bytes = b""


@dataclass
class State:
    dirs: set[str] = field(default_factory=set)
    entries: dict[str, int] = field(default_factory=dict)  # path -> inode
    data: dict[int, bytes] = field(default_factory=dict)

    def copy(self) -> State:
        return State(set(self.dirs), dict(self.entries), dict(self.data))


class ModelFs(C.FileSystem):
    """An in-memory filesystem that logs what the protocol does to it."""

    def __init__(self, state: State | None = None) -> None:
        self.state = state or State(dirs={"/", LAKE})
        self.log: list[Op] = []
        self._next_inode = 1 + max(self.state.data, default=0)
        self.writing: dict[str, _ModelOutput] = {}  # files open for streaming, not yet closed
        self.locks: dict[str, bool] = {}  # held: path -> exclusive
        self.renames_locked: list[tuple[str, dict[str, bool]]] = []  # a rename, the locks held

    @contextlib.contextmanager
    def lock(self, path: str, *, exclusive: bool, wait: bool = True) -> Iterator[None]:
        """Locks exclude nothing on disk (a power loss drops them all), so they are not
        logged as operations; the model records which were held at each rename instead. One
        thread runs the protocol here: a lock held against it could never be released."""
        if path in self.locks:
            raise BlockingIOError(11, "Resource temporarily unavailable", path)
        self.locks[path] = exclusive
        try:
            yield
        finally:
            del self.locks[path]

    def _need_dir(self, path: str) -> None:
        if posixpath.dirname(path) not in self.state.dirs:
            raise FileNotFoundError(2, "No such file or directory", path)

    def write(self, path: str, data: bytes) -> None:
        self._need_dir(path)
        inode = self.state.entries.get(path)
        if inode is None:
            inode = self._next_inode
            self._next_inode += 1
            self.state.entries[path] = inode
            self.state.data[inode] = b""
            self.log.append(Op("create", path, inode=inode))
        self.state.data[inode] = data
        self.log.append(Op("write", path, inode=inode, data=data))

    def fsync(self, path: str) -> None:
        if path not in self.state.dirs and path not in self.state.entries:
            raise FileNotFoundError(2, "No such file or directory", path)
        self.log.append(Op("fsync", path, inode=self.state.entries.get(path, 0)))

    def read(self, path: str) -> bytes:
        if path not in self.state.entries:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.state.data[self.state.entries[path]]

    def listdir(self, path: str) -> list[str]:
        if path not in self.state.dirs:
            raise FileNotFoundError(2, "No such file or directory", path)
        prefix = path + "/"
        return sorted({p[len(prefix):].split("/", 1)[0]
                       for p in itertools.chain(self.state.dirs, self.state.entries)
                       if p.startswith(prefix)})

    def mtime(self, path: str) -> float:
        """Everything is old: compaction's ``min_age`` and the trash's grace have passed."""
        if not self.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        return 0.0

    def open_output(self, path: str) -> _ModelOutput:
        self._need_dir(path)
        return _ModelOutput(self, path)

    def open_input(self, path: str) -> pa.BufferReader:
        return pa.BufferReader(self.read(path))

    def size(self, path: str) -> int:
        writing = self.writing.get(path)
        return len(writing.buffer) if writing is not None else len(self.read(path))

    def link(self, src: str, dst: str) -> None:
        self._need_dir(dst)
        if self.exists(dst):
            raise FileExistsError(17, "File exists", dst)
        inode = self.state.entries[src]
        self.state.entries[dst] = inode
        self.log.append(Op("link", dst, inode=inode))

    def exchange(self, a: str, b: str) -> None:
        if a not in self.state.dirs or b not in self.state.dirs:
            raise FileNotFoundError(2, "No such file or directory", b)
        _swap_trees(self.state, a, b)
        self.log.append(Op("exchange", a, b))

    def mkdir(self, path: str) -> None:
        self._need_dir(path)
        if path in self.state.dirs or path in self.state.entries:
            raise FileExistsError(17, "File exists", path)
        self.state.dirs.add(path)
        self.log.append(Op("mkdir", path))

    def makedirs(self, path: str) -> None:
        if path not in self.state.dirs:
            self.makedirs(posixpath.dirname(path))
            self.mkdir(path)

    def isdir(self, path: str) -> bool:
        return path in self.state.dirs

    def exists(self, path: str) -> bool:
        return path in self.state.dirs or path in self.state.entries

    def replace(self, src: str, dst: str) -> None:
        self._need_dir(dst)
        self.renames_locked.append((src, dict(self.locks)))
        if src in self.state.dirs:  # a staged tree (sinks/parquet/trees.py)
            if dst in self.state.dirs or dst in self.state.entries:
                raise FileExistsError(17, "File exists", dst)
            _move_tree(self.state, src, dst)
            self.log.append(Op("renamedir", src, dst))
            return
        inode = self.state.entries.pop(src)
        self.state.entries[dst] = inode
        self.log.append(Op("rename", src, dst, inode=inode))

    def remove(self, path: str) -> None:
        del self.state.entries[path]
        self.log.append(Op("unlink", path))

    def rmtree(self, path: str) -> None:
        prefix = path + "/"
        for name in [p for p in self.state.entries if p.startswith(prefix)]:
            del self.state.entries[name]
        self.state.dirs -= {d for d in self.state.dirs if d == path or d.startswith(prefix)}
        self.log.append(Op("rmtree", path))


class _ModelOutput:
    """A file streamed into (``FileSystem.open_output``): its bytes are written to the model
    in one operation when it is closed, as the protocol relies on nothing before."""

    def __init__(self, fs: ModelFs, path: str) -> None:
        self.fs, self.path, self.buffer, self.closed = fs, path, bytearray(), False
        fs.writing[path] = self

    def write(self, data: bytes) -> int:
        self.buffer += data
        return len(data)

    def tell(self) -> int:
        return len(self.buffer)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            del self.fs.writing[self.path]
            self.fs.write(self.path, bytes(self.buffer))


def _durable_after(ops: list[Op], crash: int) -> set[int]:
    """Indexes of the operations before ``crash`` that a later ``fsync`` (before it) made durable."""
    durable: set[int] = set()
    for i, op in enumerate(ops[:crash]):  # an exchange: once both parents are fsync-ed after it
        if op.kind == "exchange":
            synced = {sync.path for sync in ops[i + 1:crash] if sync.kind == "fsync"}
            if {posixpath.dirname(op.path), posixpath.dirname(op.dst)} <= synced:
                durable.add(i)
    for f in range(crash):
        sync = ops[f]
        if sync.kind != "fsync":
            continue
        for i in range(f):
            op = ops[i]
            if op.kind == "write" and op.inode == sync.inode and sync.inode:
                durable.add(i)
            elif op.kind in ("create", "mkdir", "link", "unlink", "rmtree") and \
                    posixpath.dirname(op.path) == sync.path:
                durable.add(i)
            elif op.kind in ("rename", "renamedir") and posixpath.dirname(op.dst) == sync.path:
                durable.add(i)
    return durable


def _replay(base: State, ops: list[Op], kept: set[int]) -> State:
    """The disk after a power loss: ``base`` plus the kept operations, in their order."""
    state = base.copy()
    for i, op in enumerate(ops):
        if i not in kept:
            continue
        if op.kind == "create":
            state.entries[op.path] = op.inode
            state.data.setdefault(op.inode, b"")
        elif op.kind == "write":
            state.data[op.inode] = op.data
        elif op.kind == "mkdir":
            state.dirs.add(op.path)
        elif op.kind == "link":
            state.entries[op.path] = op.inode
            state.data.setdefault(op.inode, b"")
        elif op.kind == "exchange":  # the two directories' own entries come with it
            state.dirs |= {op.path, op.dst}
            _swap_trees(state, op.path, op.dst)
        elif op.kind == "rename":
            if state.entries.get(op.path) == op.inode:
                del state.entries[op.path]
            state.entries[op.dst] = op.inode
            state.data.setdefault(op.inode, b"")
        elif op.kind == "renamedir":
            if op.path in state.dirs and op.dst not in state.dirs:
                _move_tree(state, op.path, op.dst)
        elif op.kind == "unlink":
            state.entries.pop(op.path, None)
        elif op.kind == "rmtree":
            prefix = op.path + "/"
            state.entries = {p: n for p, n in state.entries.items() if not p.startswith(prefix)}
            state.dirs -= {d for d in state.dirs if d == op.path or d.startswith(prefix)}
    # an entry whose directory never reached the disk is not there
    reachable: dict[str, bool] = {"/": True, "": True}
    state.entries = {p: n for p, n in state.entries.items() if _reachable(state, p, reachable)}
    state.dirs = {d for d in state.dirs if d == "/" or _reachable(state, d, reachable)}
    return state


def _move_tree(state: State, src: str, dst: str) -> None:
    """``rename(src, dst)`` of a directory: everything under it moves with it."""
    def moved(path: str) -> str:
        return dst + path[len(src):] if path == src or path.startswith(src + "/") else path

    state.dirs = {moved(d) for d in state.dirs}
    state.entries = {moved(p): n for p, n in state.entries.items()}


def _swap_trees(state: State, a: str, b: str) -> None:
    """``renameat2(a, b, RENAME_EXCHANGE)``: what was under ``a`` is under ``b`` and back."""
    def swapped(path: str) -> str:
        if path == a or path.startswith(a + "/"):
            return b + path[len(a):]
        if path == b or path.startswith(b + "/"):
            return a + path[len(b):]
        return path

    state.dirs = {swapped(d) for d in state.dirs}
    state.entries = {swapped(p): n for p, n in state.entries.items()}


def _reachable(state: State, path: str, known: dict[str, bool]) -> bool:
    """Whether every directory above ``path`` is in ``state`` (``known``: answers so far, by
    directory)."""
    parent = posixpath.dirname(path)
    found = known.get(parent)
    if found is None:
        found = known[parent] = parent in state.dirs and _reachable(state, parent, known)
    return found


# --- the workload: commits as ParquetSink makes them ------------------------------------------


@dataclass(frozen=True)
class Commit:
    files: tuple[tuple[str, bytes], ...]  # final path (relative), content
    deletes: tuple[str, ...] = ()


COMMITS = (
    Commit((("shop/orders/v=1/d=1/part-1.parquet", b"txn 1 orders"),
            ("shop/users/v=1/d=1/part-1.parquet", b"txn 1 users"))),
    Commit((("shop/orders/v=1/d=1/part-2.parquet", b"txn 2 orders"),
            ("_xa/xa-2-0.arrow", b"txn 2 prepared"))),
    Commit(()),  # a transaction that landed no file: the checkpoint alone
    Commit((("bank/acct/v=1/d=2/part-4.parquet", b"txn 4 acct"),), ("_xa/xa-2-0.arrow",)),
    Commit((("shop/orders/v=2/d=2/part-5.parquet", b"txn 5 orders"),
            ("bank/acct/v=1/d=2/part-5.parquet", b"txn 5 acct"))),
)


def _expected(prefix: int) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for c in COMMITS[:prefix]:
        files.update({f"{LAKE}/{path}": data for path, data in c.files})
        for path in c.deletes:
            files.pop(f"{LAKE}/{path}")
    return files


def _run_commits(fs: ModelFs) -> list[int]:
    """Land COMMITS as the sink does; returns, per commit, the log length when it returned."""
    C.recover(LAKE, fs)
    known: set[str] = set()
    trees = StagedTrees(LAKE, known, fs)
    returned = []
    staged_count = 0
    try:
        for seq, c in enumerate(COMMITS, start=1):
            # step 1 as ParquetSink._flush does it: a file in a new directory goes to a staged
            # tree, made with its directories on the trees' thread; one in an existing directory
            # (and an _xa file, as the sink's XA parts) is staged flat, made on the thread too
            staged_paths = []
            for path, _ in c.files:
                staged = None if path.startswith("_") else trees.place(path, create=True)
                if staged is None:
                    staged_count += 1
                    staged = f"_staging/part-{staged_count:08d}"
                    trees.submit([], [f"{LAKE}/{staged}"])
                staged_paths.append(staged)
            trees.wait()
            for staged, (_, data) in zip(staged_paths, c.files, strict=True):
                fs.write(f"{LAKE}/{staged}", data)  # the made file, reopened
            fs.fsync_many([f"{LAKE}/{staged}" for staged in staged_paths]
                          + trees.directories())
            renames = [(staged, path) for staged, (path, _) in zip(staged_paths, c.files,
                                                                  strict=True)
                       if not in_tree(staged)] + trees.renames()
            doc = {"seq": seq}
            if renames or c.deletes:
                C.commit(LAKE, renames, doc, known, c.deletes, fs)
            else:
                C.write_checkpoint(LAKE, doc, fs)
            trees.committed()
            returned.append(len(fs.log))
    finally:
        trees.close()
    return returned


def _check(state: State, acknowledged: int, started: int) -> int:
    """Recover ``state``; assert the lake is a prefix of COMMITS covering what was acknowledged."""
    fs = ModelFs(state)
    doc = C.recover(LAKE, fs)
    seq = int(doc["seq"]) if doc else 0
    assert acknowledged <= seq <= started, (acknowledged, seq, started)
    lake = {path: fs.state.data[inode] for path, inode in fs.state.entries.items()
            if not path.startswith((STAGING + "/", f"{LAKE}/_checkpoint", f"{LAKE}/_commit"))}
    assert lake == _expected(seq), f"checkpoint {seq} but the lake holds {sorted(lake)}"
    assert not any(p.startswith(STAGING + "/") for p in fs.state.entries)
    assert not fs.exists(f"{LAKE}/_commit.json")
    again = C.recover(LAKE, fs)  # recovery is idempotent
    assert (int(again["seq"]) if again else 0) == seq
    return seq


def _subsets(pending: list[int], rng: random.Random) -> list[set[int]]:
    if len(pending) <= MAX_EXHAUSTIVE:
        return [set(chosen) for n in range(len(pending) + 1)
                for chosen in itertools.combinations(pending, n)]
    out = [set(), set(pending)]
    out += [{i for i in pending if rng.random() < 0.5} for _ in range(SAMPLES)]
    return out


def _crash_states(base: State, ops: list[Op], rng: random.Random) -> Any:
    """(crash point, operations lost, state) for every crash point and pending subset."""
    for crash in range(len(ops) + 1):
        durable = _durable_after(ops, crash)
        pending = [i for i in range(crash) if i not in durable and ops[i].kind != "fsync"]
        for chosen in _subsets(pending, rng):
            lost = [ops[i] for i in pending if i not in chosen]
            yield crash, lost, _replay(base, ops, durable | chosen)


def _recovery_crashes(state: State, acknowledged: int, started: int,
                      rng: random.Random) -> int:
    """A second power loss, during the recovery of ``state``: recovering again must still give
    a prefix. Returns the number of states checked."""
    fs = ModelFs(state.copy())
    C.recover(LAKE, fs)
    checked = 0
    for crash, lost, again in _crash_states(state, fs.log, rng):
        try:
            _check(again, acknowledged, started)
        except Exception as exc:
            raise AssertionError(f"power loss during recovery, after its operation {crash}, "
                                 f"with these lost: {lost}: {exc!r}") from exc
        checked += 1
    return checked


def explore() -> dict[str, int]:
    """Every crash point × every durable-or-not subset of the pending operations (and, where a
    commit was under way, every power loss during its recovery); returns counts, raises
    AssertionError at the first state that recovers wrongly."""
    fs = ModelFs()
    base = fs.state.copy()
    returned = _run_commits(fs)
    ops = fs.log
    starts = [0, *returned[:-1]]
    rng = random.Random(8)
    states = nested = 0
    prefixes: set[int] = set()
    for crash, lost, state in _crash_states(base, ops, rng):
        acknowledged = sum(1 for r in returned if r <= crash)
        started = max(acknowledged, sum(1 for s in starts if s < crash) if crash else 0)
        try:
            seq = _check(state.copy(), acknowledged, started)
        except Exception as exc:
            raise AssertionError(
                f"power loss after operation {crash} ({ops[crash - 1] if crash else '-'}) "
                f"with these never reaching the disk: {lost}: {exc!r}") from exc
        states += 1
        prefixes.add(seq)
        if f"{LAKE}/_commit.json" in state.entries:
            nested += _recovery_crashes(state, acknowledged, started, rng)
    return {"operations": len(ops), "states": states, "during_recovery": nested,
            "prefixes": len(prefixes)}


def test_every_power_loss_recovers_to_a_prefix_of_the_commits() -> None:
    result = explore()
    assert result["prefixes"] == len(COMMITS) + 1  # every prefix, 0..5, was reached
    assert result == {"operations": 129, "states": 5078, "during_recovery": 2926, "prefixes": 6}


def test_the_workload_stages_new_directories_as_trees() -> None:
    """What the model explores: the staged trees' directories made on the trees' thread, and
    the renames of whole trees (a new database, a new schema version) next to flat files."""
    fs = ModelFs()
    _run_commits(fs)
    renamed = [(op.path, op.dst) for op in fs.log if op.kind == "renamedir"]
    assert renamed == [(f"{STAGING}/tree-1", f"{LAKE}/shop"), (f"{STAGING}/tree-2", f"{LAKE}/bank"),
                       (f"{STAGING}/tree-3", f"{LAKE}/shop/orders/v=2")]
    made = [op.path for op in fs.log if op.kind == "mkdir" and op.path.startswith(STAGING + "/")]
    assert len(made) == 7 + 4 + 2  # the three trees: shop (two tables), bank, orders v=2
    flat = [(op.path, op.dst) for op in fs.log if op.kind == "rename" and "/_staging/p" in op.path]
    assert [dst for _, dst in flat] == [f"{LAKE}/shop/orders/v=1/d=1/part-2.parquet",
                                        f"{LAKE}/_xa/xa-2-0.arrow",
                                        f"{LAKE}/bank/acct/v=1/d=2/part-5.parquet"]


def test_files_are_published_under_the_shared_publish_lock() -> None:
    """Step 3's renames out of staging run holding ``_publish.lock`` shared (compaction takes
    it exclusively to switch a partition); the manifest's and checkpoint's renames need not."""
    fs = ModelFs()
    _run_commits(fs)
    published = [held for src, held in fs.renames_locked if src.startswith(STAGING + "/")]
    assert len(published) == 6  # three flat files and three trees
    assert all(held == {f"{LAKE}/_publish.lock": False} for held in published)
    documents = [held for src, held in fs.renames_locked if not src.startswith(STAGING + "/")]
    assert documents and all(held == {} for held in documents)
    assert fs.locks == {}


def test_the_model_catches_a_tree_directory_not_made_durable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fsync of the trees' directories before the manifest, the model fails."""
    monkeypatch.setattr(StagedTrees, "directories", lambda self: [])
    with pytest.raises(AssertionError, match="the lake holds"):
        explore()


def test_the_model_catches_a_missing_directory_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the staging fsync before the manifest (the bug it found), the model fails."""
    real_fsync = ModelFs.fsync

    def no_staging_fsync(self: ModelFs, path: str) -> None:
        if path != STAGING:
            real_fsync(self, path)

    monkeypatch.setattr(ModelFs, "fsync", no_staging_fsync)
    with pytest.raises(AssertionError, match="LakeCorrupted"):
        explore()


def test_the_model_replays_what_the_disk_would_hold() -> None:
    fs = ModelFs()
    base = fs.state.copy()
    fs.mkdir(f"{LAKE}/d")
    fs.fsync(LAKE)
    C.write_durably(f"{LAKE}/d/a", b"x", fs)
    fs.replace(f"{LAKE}/d/a", f"{LAKE}/b")
    ops = fs.log
    durable = _durable_after(ops, len(ops))
    assert [ops[i].kind for i in sorted(durable)] == ["mkdir", "write"]
    lost = _replay(base, ops, durable)  # create and rename never reached the disk
    assert lost.entries == {}
    kept = _replay(base, ops, set(range(len(ops))))
    assert kept.entries == {f"{LAKE}/b": 1} and kept.data[1] == b"x"
