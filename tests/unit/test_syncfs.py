"""A flush over many tables makes its files durable with one ``syncfs``.

``commit._OsFileSystem`` replaces the ``fsync`` of each of at least ``SYNCFS_AT`` paths by one
``syncfs(2)`` on a descriptor the sink opened on the lake before writing (its docstring says
why that is as durable). These tests stand a recording ``syncfs`` in for libc's — it runs
``os.sync()``, which makes the same promise for every filesystem — so that they hold on any
Linux test machine, whatever filesystem its temporary directory is on.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

import pyarrow.parquet as pq
import pytest

from sinks.parquet import ParquetSink
from sinks.parquet import commit as C

from .test_sink_many_tables import TABLES, _data_files, _failed_flush, _stream

EXT4 = 0xEF53


class _Libc:
    """``syncfs`` and ``statfs`` as ``commit`` calls them, recording and steerable."""

    def __init__(self, fs_type: int = EXT4, fail: int = 0) -> None:
        self.fs_type = fs_type
        self.fail = fail  # an errno to fail syncfs with, or 0
        self.synced: list[int] = []

    def syncfs(self, fd: int) -> int:
        os.fstat(fd)  # a descriptor still open
        self.synced.append(fd)
        if self.fail:
            ctypes.set_errno(self.fail)
            return -1
        os.sync()
        return 0

    def statfs(self, path: bytes, buffer: Any) -> int:
        ctypes.c_long.from_buffer(buffer).value = self.fs_type
        return 0


@pytest.fixture
def libc(monkeypatch) -> _Libc:
    fake = _Libc()
    monkeypatch.setattr(C._OsFileSystem, "_syncfs", (fake.syncfs, fake.statfs))
    monkeypatch.setattr(C._OsFileSystem, "_watched", {})
    monkeypatch.setattr(C._OsFileSystem, "_lakes", {})
    return fake


@pytest.fixture
def fsynced(monkeypatch) -> list[str]:
    """The paths ``FileSystem.fsync`` was called on (the per-path way)."""
    paths: list[str] = []
    real = C.FileSystem.fsync

    def fsync(self: C.FileSystem, path: str) -> None:
        paths.append(path)
        real(self, path)

    monkeypatch.setattr(C.FileSystem, "fsync", fsync)
    return paths


def _land(lake: str) -> ParquetSink:
    sink = ParquetSink(lake)
    sink.open()
    for item in _stream():
        sink.handle(item)
    sink.close()
    return sink


def test_a_flush_over_many_tables_syncs_the_filesystem_once(tmp_path, libc,
                                                             fsynced) -> None:
    lake = str(tmp_path / "lake")
    sink = _land(lake)
    assert sink.stats.files == TABLES
    # the staged files (120 Parquet + 120 schema) and the directories of their staged tree
    # (481: sinks/parquet/trees.py); the commit then renames one tree, the new database, into
    # the lake: a few paths, fsync-ed one by one (after the lake's, at open)
    assert len(libc.synced) == 1
    assert fsynced == [lake, f"{lake}/_staging", f"{lake}/_commit.json.tmp", lake, lake,
                       f"{lake}/_checkpoint.json.tmp", lake, lake]
    assert not [p for p in fsynced if p.endswith((".parquet", ".json")) and "_staging" in p]
    assert not [p for p in fsynced if "schema_version=" in p or "_schema" in p]
    assert len(_data_files(lake)) == TABLES
    assert C.OS._watched == {}  # type: ignore[attr-defined]  # closed with the sink


def test_the_descriptor_is_closed_also_when_the_lake_is_gone(tmp_path, libc) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    C.OS.watch(str(lake))
    C.OS.watch(str(lake))  # twice: still one descriptor, one watcher
    [(fd, watchers)] = C.OS._watched.values()  # type: ignore[attr-defined]
    assert watchers == 1
    lake.rmdir()
    C.OS.unwatch(str(lake))
    assert C.OS._watched == {}  # type: ignore[attr-defined]
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_few_paths_are_fsynced_one_by_one(tmp_path, libc, fsynced) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    paths = [str(lake / f"f{i}") for i in range(C.SYNCFS_AT - 1)]
    for path in paths:
        C.OS.write(path, b"x")
    C.OS.watch(str(lake))
    C.OS.fsync_many(paths)
    assert libc.synced == [] and sorted(fsynced) == sorted(paths)
    C.OS.fsync_many([*paths, str(lake / "f0")])  # SYNCFS_AT paths: one syncfs instead
    assert len(libc.synced) == 1 and len(fsynced) == C.SYNCFS_AT - 1
    C.OS.unwatch(str(lake))
    C.OS.fsync_many([*paths, str(lake / "f0")])  # not watched any more: path by path
    assert len(libc.synced) == 1 and len(fsynced) == 2 * C.SYNCFS_AT - 1


def test_a_filesystem_not_known_to_sync_whole_keeps_fsync(tmp_path, libc, fsynced) -> None:
    libc.fs_type = 0x65735546  # FUSE: its syncfs may do nothing
    lake = str(tmp_path / "lake")
    _land(lake)
    assert libc.synced == []
    assert len([p for p in fsynced if p.endswith(".parquet")]) == TABLES


def test_a_failed_syncfs_breaks_the_flush_and_a_restart_lands_exactly_once(
        tmp_path, libc) -> None:
    lake = str(tmp_path / "lake")
    libc.fail = errno.EIO
    sink = ParquetSink(lake)
    assert _failed_flush(sink, _stream()).errno == errno.EIO
    sink.close()
    assert _data_files(lake) == []  # the files' syncfs failed before the manifest
    assert not os.path.exists(os.path.join(lake, "_checkpoint.json"))

    libc.fail = 0
    _land(lake)
    files = _data_files(lake)
    assert len(files) == TABLES
    ids = sorted(i for path in files for i in pq.read_table(path, columns=["id"])["id"].to_pylist())
    assert ids == list(range(TABLES * 3 * 2))


def test_the_real_syncfs_is_taken_on_a_filesystem_that_has_it(tmp_path, monkeypatch,
                                                              fsynced) -> None:
    """libc's own ``syncfs`` and ``statfs``, only counted: on the test machine's ext4/XFS/btrfs
    the many-tables flush really goes through ``syncfs``."""
    loaded = C._load_syncfs()
    if not loaded:
        pytest.skip("no syncfs that reports write-back errors (Linux < 5.8)")
    real_syncfs, real_statfs = loaded
    buffer = ctypes.create_string_buffer(256)
    assert real_statfs(os.fsencode(str(tmp_path)), buffer) == 0
    if ctypes.c_long.from_buffer(buffer).value not in C._SYNCFS_TYPES:
        pytest.skip("the temporary directory is not on ext4, XFS or btrfs")
    results: list[int] = []

    def syncfs(fd: int) -> int:
        results.append(real_syncfs(fd))
        return results[-1]

    monkeypatch.setattr(C._OsFileSystem, "_syncfs", (syncfs, real_statfs))
    monkeypatch.setattr(C._OsFileSystem, "_watched", {})
    monkeypatch.setattr(C._OsFileSystem, "_lakes", {})
    lake = str(tmp_path / "lake")
    _land(lake)
    assert results == [0]  # the staged files and trees; the commit fsyncs a few paths
    assert not [p for p in fsynced if p.endswith((".parquet", ".json")) and "_staging" in p]
    assert len(_data_files(lake)) == TABLES
