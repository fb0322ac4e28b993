"""Every byte compaction, status, pins, the writer's lock and the Spark helpers put on or read from
a lake goes through the storage seam (``sinks.storage.Storage``).

Two proofs. The source: no module of ``sinks/`` outside the local storage implementation calls
the file system itself (an AST scan with a short allow-list, each entry justified). The
behaviour: the lake is served under a path that does not exist on this machine by a storage that
maps it onto the real directory, and each entry point, given that storage, returns exactly what
it returns over the real path — any call that bypassed the storage would meet the missing path.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sinks.errors import LakeLocked
from sinks.parquet import commit as C
from sinks.parquet import compact as K
from sinks.parquet import layout as L
from sinks.parquet import pins as P
from sinks.parquet import status as S
from sinks.parquet.lock import LakeLock
from tests.unit.test_compact import build_lake, build_more

ROOT = Path(__file__).resolve().parents[2]

# --- the source ------------------------------------------------------------------------------

#: Calls that reach the file system without the storage seam.
_OS_CALLS = {"open", "fdopen", "rename", "renames", "replace", "link", "symlink", "remove",
             "unlink", "rmdir", "mkdir", "makedirs", "removedirs", "listdir", "scandir", "walk",
             "stat", "lstat", "fsync", "fdatasync", "pread", "pwrite", "truncate", "ftruncate",
             "utime", "chmod", "chown", "statvfs", "sync"}
_OS_PATH_CALLS = {"exists", "lexists", "isdir", "isfile", "islink", "getsize", "getmtime",
                  "getctime", "getatime", "samefile"}
_MODULES_OF_FILES = {"shutil", "fcntl", "glob", "tempfile", "pathlib", "io", "mmap"}
#: pyarrow calls that open a file when given a path (a file from ``Storage.open_input`` or
#: ``open_output`` is what they must be given).
_ARROW_BY_PATH = {"read_table", "read_schema", "read_metadata", "ParquetFile", "ParquetDataset",
                  "ParquetWriter", "write_table", "OSFile", "memory_map", "input_stream",
                  "output_stream", "open_stream", "open_file"}

#: Where the file system is used directly, and why.
ALLOWED: dict[str, set[str]] = {
    # the local-POSIX storage itself: its classes and the libc calls they load
    "sinks/parquet/commit.py": {"FileSystem", "_OsFileSystem", "_load_syncfs", "_renameat2"},
    # reads pyarrow's version from its installed package, never a lake path
    "sinks/parquet/lean_import.py": {"pyarrow_major"},
}
#: Packages that are storage implementations of their own (another backend).
ALLOWED_PACKAGES = ("sinks/objectstore/",)


def _call_name(node: ast.Call) -> tuple[str, ...]:
    """A call's dotted name, e.g. ("os", "path", "exists"); () for anything else."""
    parts: list[str] = []
    func: ast.expr = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return ()
    parts.append(func.id)
    return tuple(reversed(parts))


def _looks_like_a_path(node: ast.expr) -> bool:
    """An argument that names a file rather than being an open one: text, ``os.path.join``,
    or a name that says it is a path."""
    if isinstance(node, ast.Constant | ast.JoinedStr | ast.BinOp):
        return True
    if isinstance(node, ast.Call):
        return _call_name(node)[-2:] in {("path", "join"), ("os", "fspath")} or \
            _call_name(node) == ("str",)
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return "path" in name.lower() or name in {"where", "file_name", "filename"}


def _bypasses(path: Path, root: Path = ROOT) -> list[str]:
    """Each call in ``path`` that reaches the file system without the storage seam."""
    relative = os.fspath(path.relative_to(root))
    allowed_scopes = ALLOWED.get(relative, set())
    tree = ast.parse(path.read_text(encoding="utf-8"), relative)
    found: list[str] = []

    def visit(node: ast.AST, scope: str) -> None:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and not scope:
            scope = node.name
        if scope in allowed_scopes:
            return
        if isinstance(node, ast.Call):
            name = _call_name(node)
            hit = (name == ("open",)
                   or (len(name) == 2 and name[0] == "os" and name[1] in _OS_CALLS)
                   or (name[:2] == ("os", "path") and name[-1] in _OS_PATH_CALLS)
                   or (len(name) >= 2 and name[0] in _MODULES_OF_FILES)
                   or (len(name) >= 2 and name[0] in {"pq", "pa", "ipc", "parquet"}
                       and name[-1] in _ARROW_BY_PATH and node.args
                       and _looks_like_a_path(node.args[0])))
            if hit:
                found.append(f"{relative}:{node.lineno} {'.'.join(name)}()")
        if isinstance(node, ast.Import | ast.ImportFrom) and not allowed_scopes:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            found.extend(f"{relative}:{node.lineno} import {n}" for n in names
                         if n.split(".")[0] in _MODULES_OF_FILES - {"io"})
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, "")
    return found


def test_no_module_of_sinks_touches_the_file_system_but_the_storage() -> None:
    modules = sorted((ROOT / "sinks").rglob("*.py"))
    assert ROOT / "sinks" / "parquet" / "compact.py" in modules
    found = [hit for path in modules
             if not os.fspath(path.relative_to(ROOT)).startswith(ALLOWED_PACKAGES)
             for hit in _bypasses(path)]
    assert found == []


#: Where the local storage is named other than as a parameter's default, and why.
LOCAL_BY_NAME: dict[str, set[str]] = {
    # the native writer pool writes by path in C: only when the storage is the real one
    "sinks/parquet/files.py": {"_REAL_FS", "_REAL_WRITE"},
    # an object lake is read from a local directory its view materialised
    "sinks/spark/state.py": {"read_current_state"},
    # a script's function that imports lazily: ``storage or OS`` is its default
    "sinks/spark/materialize.py": {"tables"},
}


def _local_storage_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Each use of ``commit.OS`` in ``path`` that is not a parameter's default: everything else
    is handed its storage by its caller (the sink by its ``Workspace``)."""
    relative = os.fspath(path.relative_to(root))
    tree = ast.parse(path.read_text(encoding="utf-8"), relative)
    defaults = {id(node) for func in ast.walk(tree)
                if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
                for node in [*func.args.defaults, *func.args.kw_defaults] if node is not None}
    found: list[str] = []

    def visit(node: ast.AST, scope: str) -> None:
        if id(node) in defaults:
            return
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and not scope:
            scope = node.name
        elif isinstance(node, ast.Assign) and not scope and isinstance(node.targets[0], ast.Name):
            scope = node.targets[0].id
        if (isinstance(node, ast.Name) and node.id == "OS") or \
                (isinstance(node, ast.Attribute) and node.attr == "OS"):
            if scope not in LOCAL_BY_NAME.get(relative, set()):
                found.append(f"{relative}:{node.lineno} in {scope or 'the module'}")
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, "")
    return found


def test_the_storage_is_passed_not_reached_for() -> None:
    """``commit.OS`` (the local storage) is a default of entry points' ``storage`` parameters;
    nothing in ``sinks/`` reaches for it otherwise, so a caller's storage is the one used."""
    modules = sorted((ROOT / "sinks").rglob("*.py"))
    found = [hit for path in modules
             if not os.fspath(path.relative_to(ROOT)).startswith(ALLOWED_PACKAGES)
             and path.name != "commit.py" for hit in _local_storage_uses(path)]
    assert found == []


def test_the_scan_sees_a_bypass(tmp_path: Path) -> None:
    """The scan is not vacuous: each kind of bypass is reported."""
    module = tmp_path / "sinks" / "x.py"
    module.parent.mkdir()
    module.write_text("import os, shutil, fcntl\nimport pyarrow.parquet as pq\n"
                      "def f(path, fd, source):\n"
                      "    open(path)\n    os.rename(path, path)\n    os.path.exists(path)\n"
                      "    shutil.rmtree(path)\n    fcntl.flock(fd, 2)\n"
                      "    pq.read_metadata(path)\n    pq.read_metadata(source)\n")
    assert [hit.split(" ", 1)[1] for hit in _bypasses(module, tmp_path)] == [
        "import shutil", "import fcntl", "open()", "os.rename()", "os.path.exists()",
        "shutil.rmtree()", "fcntl.flock()", "pq.read_metadata()"]
    module.write_text("from .commit import OS\n"
                      "def f(storage=OS):\n    return storage\n"
                      "def g():\n    return OS.read('x')\n")
    assert _local_storage_uses(module, tmp_path) == ["sinks/x.py:5 in g"]


# --- the behaviour ---------------------------------------------------------------------------

VIRTUAL = "/nonexistent-binlake-root/lake"


class Rooted(C.FileSystem):
    """The local storage with every path moved under ``root``: the lake at :data:`VIRTUAL` is
    the directory ``root + VIRTUAL``. Records each operation it is asked for."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.calls: list[str] = []

    def _real(self, path: str, call: str = "") -> str:
        assert path.startswith(VIRTUAL), path  # every path the product hands over is the lake's
        if call:
            self.calls.append(call)
        return self.root + path

    def write(self, path: str, data: bytes) -> None:
        super().write(self._real(path, "write"), data)

    def read(self, path: str) -> bytes:
        return super().read(self._real(path, "read"))

    def fsync(self, path: str) -> None:
        super().fsync(self._real(path, "fsync"))

    def open_output(self, path: str) -> Any:
        return super().open_output(self._real(path, "open_output"))

    def open_input(self, path: str) -> Any:
        return super().open_input(self._real(path, "open_input"))

    def size(self, path: str) -> int:
        return super().size(self._real(path, "size"))

    def mtime(self, path: str) -> float:
        return super().mtime(self._real(path, "mtime"))

    def mkdir(self, path: str) -> None:
        super().mkdir(self._real(path, "mkdir"))

    def makedirs(self, path: str) -> None:
        super().makedirs(self._real(path, "makedirs"))

    def isdir(self, path: str) -> bool:
        return super().isdir(self._real(path, "isdir"))

    def exists(self, path: str) -> bool:
        return super().exists(self._real(path, "exists"))

    def listdir(self, path: str) -> list[str]:
        return super().listdir(self._real(path, "listdir"))

    def replace(self, src: str, dst: str) -> None:
        super().replace(self._real(src, "replace"), self._real(dst))

    def link(self, src: str, dst: str) -> None:
        super().link(self._real(src, "link"), self._real(dst))

    def exchange(self, a: str, b: str) -> None:
        super().exchange(self._real(a, "exchange"), self._real(b))

    def remove(self, path: str) -> None:
        super().remove(self._real(path, "remove"))

    def rmdir(self, path: str) -> None:
        super().rmdir(self._real(path, "rmdir"))

    def rmtree(self, path: str) -> None:
        super().rmtree(self._real(path, "rmtree"))

    def walk(self, path: str) -> Iterator[tuple[str, list[str], list[str]]]:
        for directory, dirs, files in super().walk(self._real(path, "walk")):
            yield directory[len(self.root):], dirs, files

    @contextlib.contextmanager
    def lock(self, path: str, *, exclusive: bool, wait: bool = True) -> Iterator[None]:
        with super().lock(self._real(path, "lock"), exclusive=exclusive, wait=wait):
            yield


@pytest.fixture
def rooted(tmp_path: Path) -> Rooted:
    """A lake landed by the sink through the storage: _seq 1..12, a file each, 20 rows."""
    storage = Rooted(os.fspath(tmp_path))
    os.makedirs(os.path.dirname(storage.root + VIRTUAL))
    build_lake(VIRTUAL, 12, storage=storage)
    assert not os.path.exists(VIRTUAL)
    return storage


def test_the_sink_lands_through_the_storage(rooted: Rooted) -> None:
    """Every file of the lake the sink made is where the storage put it, and the storage was
    asked for each kind of operation a flush and a commit make."""
    real = rooted.root + VIRTUAL
    facts = S.lake_facts(real)
    assert facts.checkpoint is not None and facts.checkpoint["seq"] == 12
    assert (facts.files, facts.rows, facts.unreadable) == (12, 20, [])
    assert {"makedirs", "lock", "write", "read", "fsync", "replace", "remove", "mkdir",
            "listdir", "isdir", "exists"} <= set(rooted.calls)


def test_status_reads_the_lake_through_the_storage(rooted: Rooted) -> None:
    facts = S.lake_facts(VIRTUAL, rooted)
    real = S.lake_facts(rooted.root + VIRTUAL)
    assert (facts.path, facts.exists) == (VIRTUAL, True)
    assert facts.checkpoint == real.checkpoint and facts.checkpoint is not None
    assert facts.checkpoint["seq"] == 12
    [users] = facts.tables
    assert (users.database, users.table, users.schema_versions, users.files, users.rows) == \
        ("shop", "users", [1], 12, 20)
    assert users.bytes == real.tables[0].bytes > 0 and facts.unreadable == []
    assert {"walk", "open_input", "size", "read"} <= set(rooted.calls)


def test_the_writer_lock_through_the_storage(rooted: Rooted) -> None:
    with LakeLock(VIRTUAL, rooted):
        assert S.lake_in_use(VIRTUAL, rooted) is True
        assert S.lake_in_use(rooted.root + VIRTUAL) is True  # the same lock on the real path
        assert S.lock_holder(VIRTUAL, rooted) == os.getpid()
        with pytest.raises(LakeLocked) as refused:
            LakeLock(VIRTUAL, rooted).acquire()
        assert refused.value.holder_pid == os.getpid()
        assert refused.value.lock_path == f"{VIRTUAL}/{L.LOCK}"
    assert S.lake_in_use(VIRTUAL, rooted) is False


def test_compaction_and_retention_through_the_storage(rooted: Rooted) -> None:
    real_lake = rooted.root + VIRTUAL
    options = K.CompactOptions(min_age=0, grace=0)
    before = sorted(_rows(real_lake), key=repr)
    stats = K.compact_lake(VIRTUAL, options, storage=rooted)
    assert (stats.partitions, stats.files_in, stats.files_out, stats.rows) == (1, 12, 1, 20)
    assert sorted(_rows(real_lake), key=repr) == before
    assert {"lock", "exchange", "open_output", "open_input", "mtime"} <= set(rooted.calls)
    [partition] = K.partitions(VIRTUAL, rooted)
    record = K.CompactionRecord.read(
        os.path.join(VIRTUAL, L.compaction_record(partition, 1)), rooted)
    assert (record.generation, len(record.inputs), len(record.outputs)) == (1, 12, 1)
    # a second generation links the compacted file along: new daemon files make it worth it
    build_more(real_lake, 2)
    stats = K.compact_lake(VIRTUAL, options, storage=rooted)
    assert (stats.partitions, stats.files_in, stats.files_out) == (1, 2, 1)
    assert "link" in rooted.calls
    names = os.listdir(os.path.join(real_lake, partition))
    assert sorted(L.compacted_generation(n) for n in names) == [1, 2]
    assert K.recover_if_idle(VIRTUAL, rooted) is None  # nothing left behind
    top = max(K.max_seq(os.path.join(VIRTUAL, partition, n), rooted) for n in names)
    assert top == 14
    assert K.drop_history(VIRTUAL, "shop", "users", covered_seq=13, before="2026-01-02",
                          storage=rooted) == 0  # not every row covered
    assert K.drop_history(VIRTUAL, "shop", "users", covered_seq=14, before="2026-01-02",
                          storage=rooted) == 1
    assert list(K.partitions(VIRTUAL, rooted)) == []
    assert S.lake_facts(VIRTUAL, rooted).tables[0].rows == 0


def test_pins_through_the_storage(rooted: Rooted) -> None:
    pinned = P.pin_table(VIRTUAL, "shop", "users", storage=rooted)
    assert pinned is not None and pinned.startswith(f"{VIRTUAL}/{L.PINS_DIR}/")
    real_pin = rooted.root + pinned
    files = sorted(n for _, _, names in os.walk(real_pin) for n in names)
    live = sorted(n for _, _, names in os.walk(os.path.join(rooted.root + VIRTUAL, "shop",
                                                             "users"))
                  for n in names if L.is_data_file(n))
    assert files == live and len(files) == 12
    assert rooted.calls.count("link") == 12
    pins = os.path.join(VIRTUAL, L.PINS_DIR)
    assert P.purge_pins(VIRTUAL, 0, storage=rooted) == 1
    assert rooted.listdir(pins) == []


def test_the_spark_helpers_read_through_the_storage(rooted: Rooted) -> None:
    """What the Spark readers read in Python (schema files, the DDL log, the streaming
    source's listings and files, a state's covered files) comes through the storage; Spark reads Parquet by
    path, which needs a session and is covered by the Spark tests."""
    pytest.importorskip("pyspark")
    from sinks.spark import schema, state

    versions = schema.load_versions(VIRTUAL, "shop", "users", rooted)
    assert list(versions) == [1] and versions[1]["table"] == "users"
    assert state.ddl_entries(VIRTUAL, "shop", "users", rooted) == []
    assert state.state_dirs(VIRTUAL, "shop", "users", rooted) == []
    from pyspark.sql.pandas.types import to_arrow_schema

    from sinks.spark.localstream import LocalBackend

    stream = LocalBackend(VIRTUAL, "shop", "users", rooted)  # the streaming source's reads
    target = to_arrow_schema(schema.union_schema(versions), timezone="UTC")

    def streamed() -> int:
        newest = stream.latest(0, 0)
        return sum(b.num_rows for p in stream.partitions(0, newest) for b in stream.read(p, target))

    before = streamed()
    K.compact_lake(VIRTUAL, K.CompactOptions(min_age=0, grace=0), storage=rooted)
    assert streamed() == before > 0
    covered = os.path.join(VIRTUAL, L.state_dir("shop", "users", 12), L.STATE_COVERED)
    rooted.makedirs(os.path.dirname(covered))
    rooted.write(covered, json.dumps({"seq": 12, "files": ["a", "b"]}).encode())
    assert state.covered_files(VIRTUAL, "shop", "users", 12, rooted) == {"a", "b"}


def _rows(lake: str) -> list[tuple[Any, ...]]:
    import pyarrow.parquet as pq

    tables = [pq.read_table(os.path.join(d, n)) for d, _, names in os.walk(lake)
              if "/_" not in d for n in names if L.is_data_file(n)]
    return [tuple(sorted(r.items())) for r in pa.concat_tables(tables).to_pylist()] \
        if tables else []


# --- the local storage keeps the promises ----------------------------------------------------


def test_the_local_locks_exclude_as_promised(tmp_path: Path) -> None:
    path = os.fspath(tmp_path / "a.lock")
    with C.OS.lock(path, exclusive=False):
        with C.OS.lock(path, exclusive=False, wait=False):  # shared beside shared
            with pytest.raises(BlockingIOError):
                with C.OS.lock(path, exclusive=True, wait=False):
                    pass
    with C.OS.lock(path, exclusive=True):
        with pytest.raises(BlockingIOError) as refused:  # even within one process
            with C.OS.lock(path, exclusive=False, wait=False):
                pass
        assert refused.value.filename == path
    with C.OS.lock(path, exclusive=True, wait=False):  # dropped on exit
        pass
    with pytest.raises(FileNotFoundError):  # its directory must exist
        with C.OS.lock(os.fspath(tmp_path / "no" / "a.lock"), exclusive=True):
            pass


def test_the_local_link_exchange_walk_and_mtime_keep_their_promises(tmp_path: Path) -> None:
    import time

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_bytes(b"old")
    C.OS.link(os.fspath(a / "x"), os.fspath(b / "x"))
    C.OS.write(os.fspath(tmp_path / "new"), b"new bytes")
    C.OS.replace(os.fspath(tmp_path / "new"), os.fspath(a / "x"))
    assert (b / "x").read_bytes() == b"old"  # the link keeps the bytes it named
    with pytest.raises(FileExistsError):
        C.OS.link(os.fspath(a / "x"), os.fspath(b / "x"))
    (b / "y").write_bytes(b"y")
    C.OS.exchange(os.fspath(a), os.fspath(b))
    assert sorted(os.listdir(a)) == ["x", "y"] and os.listdir(b) == ["x"]
    assert (b / "x").read_bytes() == b"new bytes"
    with pytest.raises(OSError):
        C.OS.exchange(os.fspath(a), os.fspath(tmp_path / "missing"))
    walked = [(d[len(os.fspath(tmp_path)):], sorted(ds), sorted(fs))
              for d, ds, fs in C.OS.walk(os.fspath(tmp_path))]
    assert walked[0] == ("", ["a", "b"], [])
    assert sorted(walked[1:]) == [("/a", [], ["x", "y"]), ("/b", [], ["x"])]
    assert list(C.OS.walk(os.fspath(tmp_path / "missing"))) == []
    assert abs(C.OS.mtime(os.fspath(a / "y")) - time.time()) < 60
