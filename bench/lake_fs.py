"""Where ``bench.many_tables`` puts its lakes: a fresh ext4 with a journal, on a loop device.

A first flush over 2,000 tables creates ~12,000 inodes (per new table four directories, its
Parquet file and its schema file), so the many-tables figure includes the kernel's cost of
creating them — and on a filesystem that just freed many inodes that cost is not binlake's.
This project's machine runs its root ext4 *without a journal*, and there the inode allocator
checks every free inode it meets for a recent deletion (``find_inode_bit`` → ``recently_deleted``
in ``fs/ext4/ialloc.c``; only without a journal), skipping those freed in the last ~30 s, or
~330 s while their inode table block is still dirty. Measured here with a 15-line script that
makes those 12,000 inodes (no binlake): 0.61 s in a fresh directory of the root ext4, 2.4 and
3.4 s right after deleting the previous such tree, against 0.31–0.36 s on a fresh journaled ext4
image (before or after a deletion) and 0.14 s on tmpfs. A sandbox server's clean-up deletes
~40,000 files, so the 2,000-table runs swung 1.43×–2.86× with no change in binlake.

A journaled ext4, the default everywhere ext4 is made, measures what a user's lake meets; a
fresh one per bench run makes the figure independent of what the machine deleted before. It
needs root and ``mkfs.ext4`` (the servers' own directories stay in TMPDIR); without them the
bench says why and uses TMPDIR (``--lake-fs tmpdir`` asks for that).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LakeFsUnavailable", "describe", "fresh_ext4"]


class LakeFsUnavailable(Exception):
    """No fresh ext4 can be made here; the message says why."""


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise LakeFsUnavailable(f"{' '.join(argv)} failed ({done.returncode}): "
                                f"{(done.stderr or done.stdout).strip()[:300]}")


@contextlib.contextmanager
def fresh_ext4(parent: Path, size_gib: int = 4) -> Iterator[Path]:
    """A new ext4 (default features: a journal, ordered data) on a sparse ``size_gib`` image in
    ``parent``, mounted through a loop device; unmounted and deleted on exit. Its inode tables
    and journal are written by ``mkfs`` (``lazy_itable_init=0``), so no background
    initialisation runs during the measurements."""
    if os.geteuid() != 0:
        raise LakeFsUnavailable("mounting a loop device needs root")
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            raise LakeFsUnavailable(f"{tool} is not installed (e2fsprogs, mount)")
    image, mount_point = parent / "lakes.ext4", parent / "lakes"
    with open(image, "wb") as f:
        f.truncate(size_gib << 30)
    try:
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0",
             os.fspath(image))
        mount_point.mkdir()
        _run("mount", "-o", "loop", os.fspath(image), os.fspath(mount_point))
        try:
            yield mount_point
        finally:
            # The daemons have exited; a lazy unmount still frees the loop device if something
            # (a shell's working directory) holds the mount.
            if subprocess.run(["umount", os.fspath(mount_point)], capture_output=True,
                              check=False).returncode != 0:
                subprocess.run(["umount", "-l", os.fspath(mount_point)], capture_output=True,
                               check=False)
            with contextlib.suppress(OSError):
                mount_point.rmdir()
    finally:
        image.unlink(missing_ok=True)


def describe(path: Path) -> str:
    """The filesystem holding ``path`` as ``/proc/mounts`` names it: type, mount point, and
    for an ext4 whether it has a journal (``/proc/fs/jbd2`` lists the journals in use)."""
    resolved, best = os.path.realpath(path), ("?", "", "?")
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown filesystem"
    for line in mounts:
        device, point, kind = line.split()[:3]
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[1]):  # the deepest mount holding it
            best = (device, point, kind)
    device, point, kind = best
    text = f"{kind} at {point}"
    if kind == "ext4":
        journals = os.listdir("/proc/fs/jbd2") if os.path.isdir("/proc/fs/jbd2") else []
        name = os.path.basename(device)
        text += (", with a journal" if any(j.rsplit("-", 1)[0] == name for j in journals)
                 else ", without a journal")
    return text
