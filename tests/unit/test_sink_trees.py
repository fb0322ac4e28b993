"""New directories land as staged trees made ahead on a thread (sinks/parquet/trees.py).

Through the sink's own interface, counting the exact ``commit.FileSystem`` calls of each flush:
a new table's directories and files are made in ``_staging/tree-<k>/`` while the stream is
handled, the flush reopens the files, and the commit renames one directory per tree. A crash
between the manifest and the renames is rolled forward; a failure on the thread breaks the sink
at the flush with nothing visible, and a restart lands every transaction exactly once.
"""

from __future__ import annotations

import errno
import glob
import os
import threading
from collections import Counter
from typing import Any

import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from sinks.errors import LakeError
from sinks.parquet import ParquetSink
from sinks.parquet import commit as C
from sinks.parquet.testing import StreamBuilder, col

COLUMNS = [col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "name", charset=45)]
DAY_US = 86_400 * 1_000_000
DATE = "2026-01-01"  # StreamBuilder's first commit date


class Calls:
    """Every call of the commit protocol's filesystem, by method (both threads). The trees'
    thread batches what was queued meanwhile (``make_many``): its directories and files are
    counted one by one (:meth:`made`), however the thread happened to batch them."""

    def __init__(self) -> None:
        self.log: list[tuple[str, tuple[Any, ...]]] = []
        self.inside = threading.local()

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for method, args in self.log if method == name]

    def made(self, lake: str) -> tuple[list[str], list[str]]:
        """The directories and the empty files made (relative to ``lake``), in order."""
        dirs = [_rel(lake, d) for batch, _ in self.of("make_many") for d in batch]
        files = [_rel(lake, f) for _, batch in self.of("make_many") for f in batch]
        return dirs, files

    def counts(self) -> Counter[str]:
        return Counter(method for method, _ in self.log if method != "make_many")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    recorded = Calls()
    cls = type(C.OS)
    for name in ("mkdir", "write", "replace", "remove", "fsync", "make_many"):
        real = getattr(cls, name)

        def method(self: C.FileSystem, *args: Any, _real: Any = real, _name: str = name) -> Any:
            if getattr(recorded.inside, "batch", False):  # make_many's own, if not native
                return _real(self, *args)
            recorded.log.append((_name, tuple(list(a) if isinstance(a, list) else a
                                              for a in args)))
            recorded.inside.batch = _name == "make_many"
            try:
                return _real(self, *args)
            finally:
                recorded.inside.batch = False

        monkeypatch.setattr(cls, name, method)  # the class: the sink's threads call C.OS
    return recorded


def _rel(lake: str, path: str) -> str:
    return os.path.relpath(path, lake)


def _ids(lake: str, db: str = "shop") -> list[int]:
    files = glob.glob(os.path.join(lake, db, "*", "schema_version=*", "*", "*.parquet"))
    return sorted(i for f in files for i in pq.read_table(f, columns=["id"])["id"].to_pylist())


def _txn(b: StreamBuilder, table: Any, key: int, **commit: Any) -> list[Any]:
    return [b.begin(), b.insert(table, [(key, "x")]), b.commit(**commit)]


def test_two_new_tables_cost_nine_directories_in_staging_and_one_rename(tmp_path,
                                                                        calls) -> None:
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t1, t2 = b.table("shop", "t1", COLUMNS), b.table("shop", "t2", COLUMNS)
    sink = ParquetSink(lake)
    sink.open()
    calls.log.clear()
    for item in _txn(b, t1, 1) + _txn(b, t2, 2):
        sink.handle(item)
    sink.flush()
    # made ahead on the thread: the tree (the new database), per table its directory, _schema,
    # schema_version=1 and commit_date=…, and its two files, empty
    made, empty = calls.made(lake)
    assert made == ["_staging/tree-1",
                    "_staging/tree-1/t1", "_staging/tree-1/t1/_schema",
                    "_staging/tree-1/t1/schema_version=1",
                    f"_staging/tree-1/t1/schema_version=1/commit_date={DATE}",
                    "_staging/tree-1/t2", "_staging/tree-1/t2/_schema",
                    "_staging/tree-1/t2/schema_version=1",
                    f"_staging/tree-1/t2/schema_version=1/commit_date={DATE}"]
    assert sorted(empty) == ["_staging/tree-1/t1/_schema/v1.json",
                             f"_staging/tree-1/t1/schema_version=1/commit_date={DATE}/"
                             "part-0000000000000001-000.parquet",
                             "_staging/tree-1/t2/_schema/v1.json",
                             f"_staging/tree-1/t2/schema_version=1/commit_date={DATE}/"
                             "part-0000000000000002-000.parquet"]
    # the flush writes them (reopened) and the manifest and checkpoint; the commit renames the
    # tree onto the new database, the manifest and checkpoint into place, creates nothing
    written = [_rel(lake, path) for path, data in calls.of("write") if data]
    assert sorted(written) == sorted([*empty, "_commit.json.tmp", "_checkpoint.json.tmp"])
    assert [(_rel(lake, s), _rel(lake, d)) for s, d in calls.of("replace")] == [
        ("_commit.json.tmp", "_commit.json"), ("_staging/tree-1", "shop"),
        ("_checkpoint.json.tmp", "_checkpoint.json")]
    # durable before the manifest: the 4 files and the tree's 9 directories; then the commit's
    fsynced = [_rel(lake, args[0]) for args in calls.of("fsync")]
    assert sorted(fsynced[:13]) == sorted([*empty, *made])
    assert fsynced[13:] == ["_staging", "_commit.json.tmp", ".", ".", "_checkpoint.json.tmp",
                            ".", "."]
    assert calls.counts() == {"write": 6, "fsync": 20, "replace": 3, "remove": 1}
    assert _ids(lake) == [1, 2]

    # the tables exist now: the next flush stages its two files flat and renames them
    calls.log.clear()
    for item in _txn(b, t1, 3) + _txn(b, t2, 4):
        sink.handle(item)
    sink.flush()
    assert calls.of("mkdir") == [] and calls.made(lake)[0] == []
    assert len(calls.made(lake)[1]) == 2  # the flat staged files, made ahead too
    assert sorted((_rel(lake, s), _rel(lake, d)) for s, d in calls.of("replace")) == [
        ("_checkpoint.json.tmp", "_checkpoint.json"), ("_commit.json.tmp", "_commit.json"),
        ("_staging/part-00000001.parquet",
         f"shop/t1/schema_version=1/commit_date={DATE}/part-0000000000000003-000.parquet"),
        ("_staging/part-00000002.parquet",
         f"shop/t2/schema_version=1/commit_date={DATE}/part-0000000000000004-000.parquet")]
    assert calls.counts() == {"write": 4, "fsync": 10, "replace": 4, "remove": 1}

    # a new table in the database: a tree of its own; a new commit date: a tree of one directory
    calls.log.clear()
    t3 = b.table("shop", "t3", COLUMNS)
    for item in _txn(b, t1, 5, advance_us=DAY_US) + _txn(b, t3, 6) + _txn(b, t1, 7):
        sink.handle(item)
    sink.close()
    assert calls.made(lake)[0] == [
        "_staging/tree-2", "_staging/tree-2/_schema", "_staging/tree-2/schema_version=1",
        "_staging/tree-2/schema_version=1/commit_date=2026-01-02", "_staging/tree-3"]
    assert sorted((_rel(lake, s), _rel(lake, d)) for s, d in calls.of("replace")) == [
        ("_checkpoint.json.tmp", "_checkpoint.json"), ("_commit.json.tmp", "_commit.json"),
        ("_staging/part-00000003.parquet",
         f"shop/t1/schema_version=1/commit_date={DATE}/part-0000000000000005-000.parquet"),
        ("_staging/tree-2", "shop/t3"),
        ("_staging/tree-3", "shop/t1/schema_version=1/commit_date=2026-01-02")]
    assert _ids(lake) == [1, 2, 3, 4, 5, 6, 7]
    assert os.listdir(os.path.join(lake, "_staging")) == []
    assert sorted(os.listdir(os.path.join(lake, "shop", "t3"))) == ["_schema",
                                                                    "schema_version=1"]


def test_a_new_schema_version_of_a_table_is_a_tree_of_its_own(tmp_path, calls) -> None:
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t1 = b.table("shop", "t1", COLUMNS)
    sink = ParquetSink(lake)
    sink.open()
    for item in _txn(b, t1, 1):
        sink.handle(item)
    sink.flush()
    calls.log.clear()
    wider = b.table("shop", "t1", [*COLUMNS, col(2, T.LONG, "n")])
    for item in [b.begin(), b.ddl("shop", "ALTER TABLE t1 ADD n INT"), b.commit(),
                 b.begin(), b.insert(wider, [(2, "y", 7)]), b.commit()]:
        sink.handle(item)
    sink.close()
    # the schema file goes to the existing _schema (flat); the new version's partition is a tree
    assert calls.made(lake)[0] == ["_staging/tree-2", f"_staging/tree-2/commit_date={DATE}"]
    assert [_rel(lake, d) for d, in calls.of("mkdir")] == ["_ddl", "_ddl/shop"]  # the commit's
    assert sorted(_rel(lake, d) for _, d in calls.of("replace")) == [
        "_checkpoint.json", "_commit.json", "_ddl/shop/ddl-0000000000000002.jsonl",
        "shop/t1/_schema/v2.json", "shop/t1/schema_version=2"]
    assert _ids(lake) == [1, 2]


def test_a_crash_between_the_manifest_and_the_tree_rename_rolls_forward(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t1, t2 = b.table("shop", "t1", COLUMNS), b.table("shop", "t2", COLUMNS)
    items = _txn(b, t1, 1) + _txn(b, t2, 2)

    class Crash(BaseException):
        pass

    real = type(C.OS).replace

    def replace(self: C.FileSystem, src: str, dst: str) -> None:
        if "/_staging/tree-" in src:
            raise Crash
        real(self, src, dst)

    monkeypatch.setattr(type(C.OS), "replace", replace)
    sink = ParquetSink(lake)
    sink.open()
    for item in items:
        sink.handle(item)
    with pytest.raises(Crash):
        sink.flush()
    sink._lock.release()  # the process "died": its lock goes with it
    assert os.path.exists(os.path.join(lake, "_commit.json"))
    assert not os.path.exists(os.path.join(lake, "shop"))
    monkeypatch.setattr(type(C.OS), "replace", real)
    again = ParquetSink(lake)
    checkpoint = again.open()  # recovery renames the tree, writes the checkpoint
    assert checkpoint is not None and checkpoint.seq == 2
    assert _ids(lake) == [1, 2]
    assert sorted(os.listdir(os.path.join(lake, "shop", "t1"))) == ["_schema",
                                                                    "schema_version=1"]
    for item in items:  # replayed from the start: the checkpoint covers both
        again.handle(item)
    again.close()
    assert _ids(lake) == [1, 2]
    assert os.listdir(os.path.join(lake, "_staging")) == []


@pytest.mark.parametrize(("failing", "code"), [("t2", errno.ENOSPC),
                                               ("t2/_schema/v1.json", errno.EACCES)])
def test_a_failure_on_the_thread_breaks_the_sink_at_the_flush_with_nothing_visible(
        tmp_path, monkeypatch: pytest.MonkeyPatch, failing: str, code: int) -> None:
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t1, t2 = b.table("shop", "t1", COLUMNS), b.table("shop", "t2", COLUMNS)
    items = _txn(b, t1, 1) + _txn(b, t2, 2)
    sink = ParquetSink(lake)
    sink.open()
    real = type(C.OS).make_many
    failing = os.path.join(lake, "_staging", "tree-1", failing)

    def fail(self: C.FileSystem, dirs: list[str], files: list[str]) -> None:
        for path in (*dirs, *files):  # a directory (ENOSPC) or a file (EACCES) of table t2
            if path == failing:
                raise OSError(code, os.strerror(code), path)
        real(self, dirs, files)

    monkeypatch.setattr(type(C.OS), "make_many", fail)
    for item in items:
        sink.handle(item)  # the thread failed meanwhile: said at the flush
    with pytest.raises(LakeError) as caught:
        sink.flush()
    assert caught.value.errno == code
    assert caught.value.path == failing
    assert sink.durable_position is None
    sink.close()  # broken: lands nothing more
    assert sorted(os.listdir(lake)) == ["_lock", "_staging"]
    monkeypatch.setattr(type(C.OS), "make_many", real)
    again = ParquetSink(lake)
    assert again.open() is None
    for item in items:
        again.handle(item)
    again.close()
    assert _ids(lake) == [1, 2]
    assert os.listdir(os.path.join(lake, "_staging")) == []


def test_the_thread_makes_a_batch_in_one_call_without_the_gil(tmp_path) -> None:
    """The real filesystem's ``make_many`` is one C call (``_native_fs``, when built): what
    the thread found queued, made in order, and a failure named like ``os.mkdir``'s."""
    native = C._native_fs
    if native is None:
        pytest.skip("sinks.parquet._native_fs is not built")
    base = str(tmp_path)
    C.OS.make_many([f"{base}/a", f"{base}/a/b"], [f"{base}/a/b/f", f"{base}/a/g"])
    assert sorted(os.listdir(f"{base}/a")) == ["b", "g"]
    assert os.path.getsize(f"{base}/a/b/f") == 0
    with open(f"{base}/a/g", "wb") as f:
        f.write(b"x")
    C.OS.make_many([], [f"{base}/a/g"])  # an existing file is truncated, as O_TRUNC does
    assert os.path.getsize(f"{base}/a/g") == 0
    with pytest.raises(FileExistsError) as exists:
        C.OS.make_many([f"{base}/c", f"{base}/a"], [])
    assert (exists.value.errno, exists.value.filename) == (errno.EEXIST, f"{base}/a")
    assert os.path.isdir(f"{base}/c")  # made before the failure
    with pytest.raises(FileNotFoundError) as missing:
        C.OS.make_many([], [f"{base}/none/f"])
    assert missing.value.filename == f"{base}/none/f"


def test_a_missing_extension_is_said_once(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    from sinks.parquet import trees

    monkeypatch.setattr(C, "_native_fs", None)
    monkeypatch.setattr(trees, "_warned", False)
    monkeypatch.delenv("BINLAKE_NATIVE", raising=False)
    for name in ("a", "b"):
        sink = ParquetSink(str(tmp_path / name))
        sink.open()
        sink.close()
    said = [r.getMessage() for r in caplog.records if "_native_fs" in r.getMessage()]
    assert said == ["sinks.parquet._native_fs is not built: the lake's new directories and "
                    "files are made one call at a time (the same lake, slower over many "
                    "tables); reinstall binlake (or `python setup.py build_ext --inplace` in a "
                    "checkout) to build it"]


def test_a_tree_whose_directory_appeared_meanwhile_is_merged_into_it(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Something else made the new table's directory (and put a file in it) after the sink
    found it missing: the tree's rename fails, and its entries are moved in one by one — also
    when a crash stopped that half-way and recovery finishes it."""
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t1, t2 = b.table("shop", "t1", COLUMNS), b.table("shop", "t2", COLUMNS)
    sink = ParquetSink(lake)
    sink.open()
    for item in _txn(b, t1, 1):
        sink.handle(item)
    sink.flush()
    for item in _txn(b, t2, 2):  # shop/t2 is missing: staged as a tree
        sink.handle(item)
    foreign = os.path.join(lake, "shop", "t2", "_state", "note")
    os.makedirs(os.path.dirname(foreign))
    with open(foreign, "w") as f:
        f.write("not the sink's")

    class Crash(BaseException):
        pass

    real = type(C.OS).replace
    moved: list[str] = []

    def replace(self: C.FileSystem, src: str, dst: str) -> None:
        if "/_staging/tree-" in src and moved:
            raise Crash  # at the merge's second entry
        real(self, src, dst)
        if "/_staging/tree-" in src:
            moved.append(_rel(lake, dst))

    monkeypatch.setattr(type(C.OS), "replace", replace)
    with pytest.raises(Crash):
        sink.flush()
    sink._lock.release()  # the process "died"
    assert moved == ["shop/t2/_schema"]  # the tree's own rename failed: merged, name by name
    monkeypatch.setattr(type(C.OS), "replace", real)
    again = ParquetSink(lake)
    assert again.open().seq == 2  # type: ignore[union-attr]
    again.close()
    assert _ids(lake) == [1, 2]
    assert sorted(os.listdir(os.path.join(lake, "shop", "t2"))) == [
        "_schema", "_state", "schema_version=1"]
    with open(foreign) as f:
        assert f.read() == "not the sink's"
    assert os.listdir(os.path.join(lake, "_staging")) == []


def test_committed_trees_join_the_known_directories_under_their_final_names(tmp_path) -> None:
    """After the commit every directory of every tree is known by its place in the lake (the
    next flush asks the filesystem about none of them), each tree's own, whatever the number
    of trees."""
    from sinks.parquet.trees import StagedTrees

    lake = str(tmp_path)
    os.makedirs(os.path.join(lake, "_staging"))
    os.makedirs(os.path.join(lake, "shop", "t0"))
    known: set[str] = set()
    trees = StagedTrees(lake, known)
    try:
        for final in ("shop/t1/_schema/v1.json",
                      f"shop/t1/schema_version=1/commit_date={DATE}/p.parquet",
                      f"shop/t0/schema_version=1/commit_date={DATE}/p.parquet",
                      "other/t/_schema/v1.json"):
            trees.place(final, create=True)
        trees.wait()
        assert trees.renames() == [("_staging/tree-1", "shop/t1"),
                                   ("_staging/tree-2", "shop/t0/schema_version=1"),
                                   ("_staging/tree-3", "other")]
        trees.committed()
    finally:
        trees.close()
    assert sorted(_rel(lake, d) for d in known) == [
        "other", "other/t", "other/t/_schema", "shop", "shop/t0",
        "shop/t0/schema_version=1", f"shop/t0/schema_version=1/commit_date={DATE}",
        "shop/t1", "shop/t1/_schema", "shop/t1/schema_version=1",
        f"shop/t1/schema_version=1/commit_date={DATE}"]
    assert trees.renames() == [] and trees.directories() == []


@pytest.mark.parametrize("suffix", ["", "/"])
def test_a_lake_named_with_a_trailing_slash_gets_the_same_directory_names(
        tmp_path, suffix: str) -> None:
    """The trees spell absolute paths as ``os.path.join(lake, relative)`` does (the commit
    shares the set of known directories): with or without a trailing slash on the lake."""
    from sinks.parquet.trees import StagedTrees

    lake = str(tmp_path) + suffix
    os.makedirs(os.path.join(lake, "_staging"))
    os.makedirs(os.path.join(lake, "shop"))
    known: set[str] = set()
    trees = StagedTrees(lake, known)
    try:
        staged = trees.place("shop/t1/_schema/v1.json", create=True)
        trees.wait()
        assert staged == "_staging/tree-1/_schema/v1.json"
        assert os.path.isfile(os.path.join(lake, staged))
        assert trees.directories() == [os.path.join(lake, "_staging/tree-1"),
                                       os.path.join(lake, "_staging/tree-1/_schema")]
        trees.committed()
    finally:
        trees.close()
    assert sorted(known) == [os.path.join(lake, "shop"), os.path.join(lake, "shop/t1"),
                             os.path.join(lake, "shop/t1/_schema")]


def test_the_flush_writes_a_table_whose_tree_is_made_while_a_later_tree_is_not(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flush waits for each table's own tree, not for all of them: t1's file is written
    while the thread is still making t2's directories (which here wait for that file)."""
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    t1, t2 = b.table("shop", "t1", COLUMNS), b.table("shop", "t2", COLUMNS)
    sink = ParquetSink(lake)
    sink.open()
    real = type(C.OS).make_many
    written_first: list[bool] = []

    def make_many(self: C.FileSystem, dirs: list[str], files: list[str]) -> None:
        if any("/t2" in d for d in dirs):
            t1_files = glob.glob(os.path.join(lake, "_staging", "tree-*", "t1", "**",
                                              "*.parquet"), recursive=True)
            deadline = threading.Event()
            for _ in range(200):  # up to 10 s: the flush writes t1's file meanwhile
                if t1_files and os.path.getsize(t1_files[0]) > 0:
                    break
                deadline.wait(0.05)
            written_first.append(bool(t1_files) and os.path.getsize(t1_files[0]) > 0)
        real(self, dirs, files)

    monkeypatch.setattr(type(C.OS), "make_many", make_many)
    for item in _txn(b, t1, 1):
        sink.handle(item)
    for _ in range(200):  # t1's tree made before t2's is queued: two batches
        if glob.glob(os.path.join(lake, "_staging", "tree-*", "t1", "**", "*.parquet"),
                     recursive=True):
            break
        threading.Event().wait(0.05)
    for item in _txn(b, t2, 2):
        sink.handle(item)
    sink.flush()
    sink.close()
    assert written_first == [True]
    assert _ids(lake) == [1, 2]
