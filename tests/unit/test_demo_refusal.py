"""`binlake demo --lake DIR` on a directory it did not make: exit 2, every file byte-identical,
and nothing started — the refusal comes before the sandbox, a server or a package installer
(server-free: the demo refuses first)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

#: Programs the demo's sandbox would run to provision and start a server.
PROVISIONERS = ("apt-get", "apt", "dpkg", "debootstrap", "unshare", "chroot", "sudo", "mariadbd",
                "mysqld", "mariadb-install-db", "mariadb", "mysql")


def tree_state(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every entry under ``root``: (sha256 or 'dir', mode, mtime_ns)."""
    state = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        state[os.fspath(path.relative_to(root))] = (digest, info.st_mode, info.st_mtime_ns)
    return state


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    lake = tmp_path / "prod-lake"  # looks like a real lake: the old demo deleted such a one
    (lake / "shop" / "orders" / "schema_version=1" / "commit_date=2024-01-02").mkdir(parents=True)
    (lake / "_checkpoint.json").write_text('{"seq": 42}')
    (lake / "shop" / "orders" / "schema_version=1" / "commit_date=2024-01-02"
     / "part-0000000000000001-000.parquet").write_bytes(bytes(range(256)) * 8)
    (lake / "_staging").mkdir()
    (lake / "notes.txt").write_text("keep me")
    before = tree_state(lake)

    # stand-ins for every provisioning program: each leaves a trace if it is ever run
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    trace = tmp_path / "ran"
    for name in PROVISIONERS:
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho {name} >> {trace}\nexit 1\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    binlake = Path(sys.executable).with_name("binlake")  # the installed console script
    assert binlake.exists(), "scripts/setup.sh installs the binlake command into the venv"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               HOME=os.fspath(tmp_path))
    result = subprocess.run([os.fspath(binlake), "demo", "--lake", os.fspath(lake)],
                            capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (f"binlake demo: {lake} is not empty and was not made by binlake "
                             "demo; nothing was changed. Pass --lake with a new or empty "
                             "directory\n")
    assert result.stdout == ""
    assert tree_state(lake) == before
    assert not trace.exists()
