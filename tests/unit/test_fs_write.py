"""``commit.OS.write`` leaves a file holding exactly the bytes written, without ``O_TRUNC``.

The flush's files are made empty ahead (``trees.py``); opening them with ``O_TRUNC`` armed
ext4's ``auto_da_alloc``, whose ``close`` then starts writeback on the flush's critical path. The write cuts only what a longer old content leaves behind.
"""

from __future__ import annotations

import os

import pytest

from sinks.parquet import commit as C


@pytest.mark.parametrize("old", [None, b"", b"abc", b"x" * 10_000])
def test_the_file_holds_exactly_the_new_bytes(tmp_path, old: bytes | None) -> None:
    path = tmp_path / "f"
    if old is not None:
        path.write_bytes(old)
    C.OS.write(os.fspath(path), b"hello")
    assert path.read_bytes() == b"hello"


def test_no_file_is_opened_to_be_truncated(tmp_path, monkeypatch) -> None:
    flags: list[int] = []
    real_open = os.open

    def recording_open(path, flag, *args, **kwargs):  # type: ignore[no-untyped-def]
        flags.append(flag)
        return real_open(path, flag, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    path = os.fspath(tmp_path / "f")
    C.OS.write(path, b"")
    C.OS.write(path, b"data")
    assert len(flags) == 2
    assert [f & os.O_TRUNC for f in flags] == [0, 0]
    with open(path, "rb") as f:
        assert f.read() == b"data"
