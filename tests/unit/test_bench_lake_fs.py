"""bench/lake_fs.py: the fresh journaled ext4 ``bench.many_tables`` puts its lakes on."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from bench import lake_fs


def _mounted(point: Path) -> bool:
    return any(line.split()[1] == os.fspath(point)
               for line in Path("/proc/mounts").read_text().splitlines())


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mkfs.ext4") is None,
                    reason="needs root and mkfs.ext4")
def test_a_fresh_ext4_has_a_journal_and_leaves_nothing_behind(tmp_path) -> None:
    with contextlib.ExitStack() as stack:
        try:
            lakes = stack.enter_context(lake_fs.fresh_ext4(tmp_path, size_gib=1))
        except lake_fs.LakeFsUnavailable as e:  # root in a container without CAP_SYS_ADMIN
            pytest.skip(f"no loop mount here: {e}")
        assert _mounted(lakes)
        assert lake_fs.describe(lakes / "lake-20-0") == f"ext4 at {lakes}, with a journal"
        assert sorted(os.listdir(lakes)) == ["lost+found"]  # nothing but what mkfs makes
        (lakes / "lake").mkdir()
    assert not _mounted(lakes)
    assert os.listdir(tmp_path) == []  # the image and its mount point are gone


def test_without_root_it_says_why(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(lake_fs.LakeFsUnavailable, match="^mounting a loop device needs root$"):
        with lake_fs.fresh_ext4(tmp_path):
            pass
    assert os.listdir(tmp_path) == []


def test_describe_names_the_deepest_mount_holding_the_path() -> None:
    shm = Path("/dev/shm")
    if not _mounted(shm):
        pytest.skip("no /dev/shm mount")
    kind = next(line.split()[2] for line in Path("/proc/mounts").read_text().splitlines()
                if line.split()[1] == "/dev/shm")
    assert lake_fs.describe(shm / "not" / "there") == f"{kind} at /dev/shm"
