"""The lake's modes: every file binlake creates is 0640 and every directory 0750 (the defaults of
lake.file_mode and lake.dir_mode), whatever umask the daemon was started with — so the rows in
the lake are readable by the lake's group (a Spark reader in another account) and nobody else.

One fresh lake goes through everything that writes to it: a snapshot at start, streaming, a DDL
(a schema file, a new schema version), a big transaction, and ``binlake compact``; then every
path in it is listed and checked. A Spark job run as another user in the lake's group reads the
table's current state; the same user outside the group cannot open a file of it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.daemon_process import (
    REPO,
    STOP_TIMEOUT,
    DaemonProcess,
    daemon_settings,
    unique_db,
)
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server

NOBODY = 65534


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another account can traverse (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="binlake-modes-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def with_umask(mask: int, call: object) -> None:
    """Run ``call`` (which starts a child process) with the process umask ``mask``: the child
    inherits it, as a daemon started from a careless shell would."""
    saved = os.umask(mask)
    try:
        call()  # type: ignore[operator]
    finally:
        os.umask(saved)


def reader_python(env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """An interpreter the other account may run, and its environment: this one, unless it
    lives in root's home (a pyenv build), in which case the system's python3 of the same
    version with this environment's packages on its path."""
    try:
        if subprocess.run([sys.executable, "-c", ""], user=NOBODY, group=NOBODY,
                          extra_groups=[], capture_output=True).returncode == 0:
            return sys.executable, env
    except PermissionError:
        pass
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        pytest.fail("no python3 another account can run")
    packages = os.pathsep.join(dict.fromkeys(
        [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]))
    return system, {**env, "PYTHONPATH": os.pathsep.join([str(REPO), packages]),
                    "PYSPARK_PYTHON": system}


def lake_rows(lake: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows
               for p in lake.glob("*/*/schema_version=*/*/*.parquet"))


def test_a_fresh_lake_is_0640_and_0750_and_its_group_reads_it(
        mariadb_10_11: ServerHandle, tmp_path: Path, shared_dir: Path) -> None:
    server = mariadb_10_11
    database = unique_db("modes")
    server.sql(f"CREATE DATABASE {database}")
    server.sql(f"CREATE TABLE {database}.t (id INT PRIMARY KEY, v INT, s VARCHAR(20))")
    server.sql(f"INSERT INTO {database}.t VALUES "
               + ",".join(f"({i}, {i * 10}, 'row{i}')" for i in range(1, 51)))
    lake = shared_dir / "lake"
    settings = daemon_settings(server, lake, database, overrides={
        "start": {"from": "snapshot"},
        "lake": {"flush_interval": 0.1}})
    del settings["start"]["file"], settings["start"]["pos"]
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    with_umask(0, daemon.start)  # a umask that would leave everything world-writable
    try:
        daemon.wait_for(r"streaming from", timeout=60)
        # The row count below assumes the snapshot's 50 R rows: a change made while its chunk is
        # read replaces that row's R row (the stream carries the newer image), so wait for it.
        daemon.wait_for(r"snapshot of \S+ done: 50 rows", timeout=60)
        server.sql(f"UPDATE {database}.t SET v = v + 1 WHERE id <= 10")
        server.sql(f"ALTER TABLE {database}.t ADD COLUMN w INT")
        server.sql(f"INSERT INTO {database}.t VALUES "
                   + ",".join(f"({i}, {i}, 'new{i}', {i})" for i in range(51, 61)))
        server.sql(f"UPDATE {database}.t SET w = id WHERE id <= 50")  # one big transaction
        deadline = time.monotonic() + 60
        while lake_rows(lake) < 50 + 10 + 10 + 50:
            daemon.check_alive()
            assert time.monotonic() < deadline, lake_rows(lake)
            time.sleep(0.2)
    finally:
        code, _ = daemon.terminate(timeout=STOP_TIMEOUT + 5)
    assert code == 0, daemon.run_stderr()

    config = tmp_path / "compact.toml"
    config.write_text(f'[lake]\npath = "{lake}"\ncompact_grace = 0\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done: list[subprocess.CompletedProcess[str]] = []
    with_umask(0, lambda: done.append(subprocess.run(
        [sys.executable, "-m", "replica.cli", "compact", "--config", str(config),
         "--min-age", "0"], capture_output=True, text=True, timeout=300, env=env)))
    assert done[0].returncode == 0, done[0].stderr
    assert "compacted" in done[0].stdout + done[0].stderr

    wrong = []
    kinds = {"file": 0, "dir": 0}
    for path in [lake, *sorted(lake.rglob("*"))]:
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            kinds["dir"] += 1
            if mode != 0o750:
                wrong.append(f"{path}: {mode:04o}")
        else:
            kinds["file"] += 1
            if mode != 0o640:
                wrong.append(f"{path}: {mode:04o}")
    assert wrong == []
    names = {p.name for p in lake.rglob("*")}
    assert {"_checkpoint.json", "_staging", "_ddl", "_compact_generation.json"} <= names, \
        sorted(names)
    assert any(n.endswith(".parquet") for n in names)
    assert kinds["file"] >= 8 and kinds["dir"] >= 8, kinds

    # Another account in the lake's group reads it with Spark; outside the group it cannot.
    home = shared_dir / "home"
    home.mkdir()
    os.chown(home, NOBODY, os.getgid())
    out = home / "state"
    python, reader_env = reader_python(
        {**env, "HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1"})
    read = subprocess.run(
        [python, "-m", "sinks.spark.current_state", "--lake", str(lake),
         "--db", database, "--table", "t", "--out", str(out), "--master", "local[1]"],
        capture_output=True, text=True, timeout=300, env=reader_env, cwd=home,
        user=NOBODY, group=lake.stat().st_gid, extra_groups=[])
    assert read.returncode == 0, read.stderr[-3000:]
    state = sorted((r["id"], r["v"], r["s"], r["w"])
                   for r in pq.read_table(out).to_pylist())
    source = sorted((int(i), int(v), s, int(w)) for i, v, s, w in
                    server.sql(f"SELECT id, v, s, w FROM {database}.t"))
    assert state == source and len(state) == 60

    part = next(lake.glob("*/*/schema_version=*/*/*.parquet"))
    outsider = subprocess.run(
        [python, "-c", f"open({str(part)!r}, 'rb')"], capture_output=True, text=True,
        timeout=60, env=reader_env, cwd=home, user=NOBODY, group=NOBODY, extra_groups=[])
    assert outsider.returncode != 0 and "PermissionError" in outsider.stderr, outsider.stderr
