"""Unit tests of the parts of devtools.sandbox and the test bed's chroot cache that need no server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from devtools import sandbox
from devtools.sandbox import SandboxError, SandboxServer, in_root_argv, parse_batch_output
from tests.servers import chroot


def test_batch_output_unescapes_and_maps_null() -> None:
    text = "a\\tb\tNULL\tx\\ny\t\tback\\\\slash\tnul\\0\n1\t2\t3\t4\t5\t6\n"
    assert parse_batch_output(text) == [
        ("a\tb", None, "x\ny", "", "back\\slash", "nul\0"),
        ("1", "2", "3", "4", "5", "6"),
    ]


def test_batch_output_empty() -> None:
    assert parse_batch_output("") == []


def test_in_root_argv_host_is_unchanged() -> None:
    assert in_root_argv("/", ["mariadb", "-e", "x"]) == ["mariadb", "-e", "x"]


def test_in_root_argv_chroot_uses_a_private_mount_namespace(tmp_path: Path) -> None:
    argv = in_root_argv(tmp_path, ["mysqld", "--x"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[-3:] == [os.path.realpath(tmp_path), "mysqld", "--x"]


def test_paths_are_translated_into_the_root(tmp_path: Path) -> None:
    base = tmp_path / "tmp" / "binlake-sandbox-x"
    base.mkdir(parents=True)
    server = SandboxServer(kind=sandbox.MYSQL, root=tmp_path, server_id=7, base_dir=base)
    assert server.inside(server.socket) == "/tmp/binlake-sandbox-x/mysqld.sock"
    assert "--socket=/tmp/binlake-sandbox-x/mysqld.sock" in server.server_argv()
    assert "--gtid-mode=ON" in server.server_argv()
    with pytest.raises(SandboxError, match="not inside root"):
        server.inside("/etc/passwd")
    assert server.pid is None
    server.stop()  # a server that never started stops quietly


def test_mariadb_argv_has_binlake_binlog_settings(tmp_path: Path) -> None:
    server = SandboxServer(
        kind=sandbox.MARIADB, root="/", server_id=42, base_dir=tmp_path, extra_args=["--a=1"]
    )
    argv = server.server_argv()
    for option in (
        "--binlog-format=ROW",
        "--binlog-row-metadata=FULL",
        "--binlog-checksum=CRC32",
        "--server-id=42",
        "--bind-address=127.0.0.1",
        "--innodb-log-file-size=8M",
    ):
        assert option in argv
    assert argv[0] == "/usr/sbin/mariadbd" and argv[-1] == "--a=1"


def test_overlong_socket_path_is_refused(tmp_path: Path) -> None:
    base = tmp_path / ("x" * 120)
    with pytest.raises(SandboxError, match="socket path"):
        SandboxServer(kind=sandbox.MARIADB, root="/", server_id=1, base_dir=base)


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_stale_sandboxes_are_removed_only_when_their_owner_is_gone(tmp_path: Path) -> None:
    dead = tmp_path / "binlake-sandbox-dead"
    alive = tmp_path / "binlake-sandbox-alive"
    young = tmp_path / "binlake-sandbox-young"
    other = tmp_path / "not-ours"
    for directory in (dead, alive, young, other):
        directory.mkdir()
    (dead / "owner.pid").write_text(f"{_dead_pid()}\n")
    (alive / "owner.pid").write_text(f"{os.getpid()}\n")
    assert sandbox.remove_stale_sandboxes(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "binlake-sandbox-alive",
        "binlake-sandbox-young",
        "not-ours",
    ]
    assert sandbox.remove_stale_sandboxes(tmp_path, min_age=0) == [young]


def test_chroot_marker_must_match_the_recipe(tmp_path: Path) -> None:
    spec = chroot.TRIXIE_MARIADB
    for binary in (spec.server_binary, spec.client_binary):
        (tmp_path / binary).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / binary).touch()
    assert not chroot._is_built(tmp_path, spec)  # no marker: half-built
    marker = chroot._marker_content(spec)
    (tmp_path / chroot.MARKER).write_text(json.dumps(marker))
    assert chroot._is_built(tmp_path, spec)
    (tmp_path / chroot.MARKER).write_text(json.dumps({**marker, "recipe": -1}))
    assert not chroot._is_built(tmp_path, spec)
    (tmp_path / chroot.MARKER).write_text("{not json")
    assert not chroot._is_built(tmp_path, spec)


def test_chroot_marker_without_the_newer_fields_still_matches(tmp_path: Path) -> None:
    """A chroot built before a spec could name extra suites and binaries stays valid: its
    marker records only the five first fields, and a spec that leaves the new ones at their
    defaults asks for no more."""
    spec = chroot.SID_MYSQL
    for binary in (spec.server_binary, spec.client_binary):
        (tmp_path / binary).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / binary).touch()
    (tmp_path / chroot.MARKER).write_text(json.dumps({
        "recipe": chroot.RECIPE_VERSION, "name": "sid", "suite": "sid",
        "packages": ["mysql-server-core", "mysql-client-core"],
        "server_binary": "usr/sbin/mysqld", "client_binary": "usr/bin/mysql"}))
    assert chroot._is_built(tmp_path, spec)


def test_ceph_chroot_needs_every_daemon(tmp_path: Path) -> None:
    spec = chroot.CEPH
    binaries = (spec.server_binary, spec.client_binary, *spec.other_binaries)
    assert set(binaries) >= {"usr/bin/ceph-mon", "usr/bin/ceph-osd", "usr/bin/radosgw"}
    for binary in binaries:
        (tmp_path / binary).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / binary).touch()
    (tmp_path / chroot.MARKER).write_text(json.dumps(chroot._marker_content(spec)))
    assert chroot._is_built(tmp_path, spec)
    (tmp_path / "usr/bin/ceph-osd").unlink()
    assert not chroot._is_built(tmp_path, spec)


def test_cache_dir_honours_binlake_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BINLAKE_CACHE", os.fspath(tmp_path))
    assert chroot.chroot_path(chroot.SID_MYSQL) == tmp_path / "chroots" / "sid"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_remove_tree_unmounts_before_deleting(tmp_path: Path) -> None:
    tree = tmp_path / "fake-chroot"
    mount_point = tree / "dev"
    mount_point.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("must survive")
    subprocess.run(["mount", "--bind", os.fspath(outside), os.fspath(mount_point)], check=True)
    try:
        assert chroot.mounts_under(tree) == [os.path.realpath(mount_point)]
        chroot.remove_tree(tree)
    finally:
        subprocess.run(["umount", os.fspath(mount_point)], capture_output=True)
    assert not tree.exists()
    assert (outside / "precious").read_text() == "must survive"


# --- failures of the datadir tool say what the tool said ---------------------------------------


def _fake_runs(monkeypatch: pytest.MonkeyPatch, outcomes: list[tuple[int, str, str]],
               server: SandboxServer) -> list[list[str]]:
    """Replace subprocess.run in the sandbox: each call takes the next (exit, stdout, stderr);
    a 0 exit creates the datadir's mysql/ as the real tool would."""
    calls: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        code, out, err = outcomes[len(calls) - 1]
        server.datadir.mkdir(parents=True, exist_ok=True)
        if code == 0:
            (server.datadir / "mysql").mkdir()
        return subprocess.CompletedProcess(argv, code, out, err)

    monkeypatch.setattr(sandbox.subprocess, "run", run)
    return calls


def test_install_failure_with_silent_tool_says_so_and_shows_the_error_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = SandboxServer(kind=sandbox.MARIADB, root="/", server_id=1, base_dir=tmp_path)
    server.error_log.write_text("2026-11-25 [ERROR] InnoDB: Cannot allocate memory\n")
    calls = _fake_runs(monkeypatch, [(1, "", ""), (1, "", "FATAL ERROR: out of disk\n")], server)
    with pytest.raises(SandboxError) as info:
        server.initialize()
    message = str(info.value)
    assert len(calls) == 2  # retried once
    assert message.startswith("mariadb-install-db failed (exit 1):\n--- mariadb-install-db stdout ---\n(empty)")
    assert "--- mariadb-install-db stderr ---\n(empty)" in message
    assert "--- retried once with a fresh datadir ---" in message
    assert "--- mariadb-install-db stderr ---\nFATAL ERROR: out of disk" in message
    assert message.count("InnoDB: Cannot allocate memory") == 1  # the log was reset for the retry


def test_install_retry_succeeds_after_a_transient_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = SandboxServer(kind=sandbox.MARIADB, root="/", server_id=1, base_dir=tmp_path)
    calls = _fake_runs(monkeypatch, [(1, "partial\n", ""), (0, "ok\n", "")], server)
    server.initialize()
    assert len(calls) == 2 and (server.datadir / "mysql").is_dir()


def test_tool_failure_message_labels_every_stream() -> None:
    text = sandbox.tool_failure("mysqld", "failed (exit 1):", "out line\n", "", "")
    assert text == ("mysqld failed (exit 1):\n--- mysqld stdout ---\nout line\n"
                    "--- mysqld stderr ---\n(empty)\n--- server error log ---\n(none written)")


def test_timeout_scale_from_environment_and_load(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sandbox.timeout_scale({sandbox.TIMEOUT_SCALE_ENV: "3"}) == 3.0
    with pytest.raises(SandboxError, match="not a number"):
        sandbox.timeout_scale({sandbox.TIMEOUT_SCALE_ENV: "fast"})
    with pytest.raises(SandboxError, match="greater than 0"):
        sandbox.timeout_scale({sandbox.TIMEOUT_SCALE_ENV: "0"})
    monkeypatch.setattr(sandbox.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(sandbox.os, "getloadavg", lambda: (7.0, 0.0, 0.0))
    assert sandbox.timeout_scale({}) == 3.5
    monkeypatch.setattr(sandbox.os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    assert sandbox.timeout_scale({}) == 1.0
    monkeypatch.setattr(sandbox.os, "getloadavg", lambda: (100.0, 0.0, 0.0))
    assert sandbox.timeout_scale({}) == 5.0
