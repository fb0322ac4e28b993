"""A real, small filesystem for tests of a full or read-only lake: a size-limited tmpfs.

Mounting needs root (the test machines run as root); elsewhere the test is skipped.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``mount``'s syntax: ``512k``, ``4m``) on ``mountpoint``
    (created), yield it, unmount it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint.mkdir(exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                           str(mountpoint)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=True)


def remount(mountpoint: Path, options: str) -> None:
    """``mount -o remount,<options>``: ``ro``, ``rw``, ``size=64m``…"""
    subprocess.run(["mount", "-o", f"remount,{options}", str(mountpoint)], check=True)
