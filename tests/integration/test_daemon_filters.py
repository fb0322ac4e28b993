"""Filters on a real server: include/exclude by table glob, and loop prevention — transactions
that originated on a given server_id or GTID domain are skipped, yet the checkpoint moves past
them (a restart does not stream them again)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import (
    DaemonProcess,
    binlog_end,
    catch_up,
    catch_up_config,
    daemon_settings,
    unique_db,
)
from .workload import read_lake

pytestmark = pytest.mark.server


async def test_filters_and_loop_prevention(mariadb_10_11: ServerHandle, tmp_path: Path) -> None:
    server = mariadb_10_11
    db, other = f"keep_{uuid.uuid4().hex[:6]}", f"drop_{uuid.uuid4().hex[:6]}"
    start = binlog_end(server)
    server.sql(
        f"CREATE DATABASE {db}; CREATE DATABASE {other};"
        f"CREATE TABLE {db}.t (id INT PRIMARY KEY); CREATE TABLE {db}.audit (id INT PRIMARY KEY);"
        f"CREATE TABLE {other}.t (id INT PRIMARY KEY);"
        f"INSERT INTO {db}.t VALUES (1); INSERT INTO {db}.audit VALUES (1);"
        f"INSERT INTO {other}.t VALUES (1);"
        # written as if replicated from server 4242 (another primary): loop prevention skips it
        f"SET SESSION server_id = 4242; INSERT INTO {db}.t VALUES (2); SET SESSION server_id = "
        f"{server.server_id};"
        # and a transaction in GTID domain 9
        f"SET SESSION gtid_domain_id = 9; INSERT INTO {db}.t VALUES (3); "
        "SET SESSION gtid_domain_id = 0;"
        f"INSERT INTO {db}.t VALUES (4)")
    lake = tmp_path / "lake"
    daemon = await catch_up(catch_up_config(
        server, lake, start, include=(f"{db}.*",), exclude=(f"{db}.audit",),
        skip_server_ids=(4242,), skip_gtid_domains=(9,)))

    landed = read_lake(lake, db).rows
    assert [r["id"] for r in landed["t"]] == [1, 4]
    assert "audit" not in landed
    assert not (lake / other).exists()
    assert daemon.pipeline.stats.skipped_transactions == 2
    checkpoint = json.loads((lake / "_checkpoint.json").read_text())
    assert (checkpoint["binlog_file"], checkpoint["binlog_pos"]) == binlog_end(server)
    assert "9-" in checkpoint["gtid_state"]  # the skipped domain's GTID is in the state too


# --- list values from --set and the environment; unmatched patterns said once ----------------------


class _DaemonWithFlags(DaemonProcess):
    """``binlake run --config FILE`` plus command-line flags."""

    def __init__(self, *args: Any, flags: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flags = flags

    @property
    def argv(self) -> list[str]:
        return [*super().argv, *self.flags]


def test_filter_lists_from_set_and_environment_land_exactly(mariadb_10_11: ServerHandle,
                                                            tmp_path: Path) -> None:
    server = mariadb_10_11
    db = unique_db("flt")
    settings = daemon_settings(server, tmp_path / "unused", db,
                               overrides={"replica": {"stop_at_end": True}})
    del settings["filter"]
    server.sql(f"CREATE DATABASE {db}; CREATE TABLE {db}.orders (id INT PRIMARY KEY);"
               f"CREATE TABLE {db}.items (id INT PRIMARY KEY);"
               f"INSERT INTO {db}.orders VALUES (1), (2); INSERT INTO {db}.items VALUES (10)")
    password = server.users["repl"].password

    def run(name: str, *, flags: list[str] = (), env: dict[str, str] | None = None,  # type: ignore[assignment]
            ) -> tuple[int, str, Path]:
        lake = tmp_path / name
        these = {**settings, "lake": {**settings["lake"], "path": str(lake)}}
        daemon = _DaemonWithFlags(tmp_path, these, flags=list(flags), password=password,
                                  env=env, name=name)
        code = daemon.start().wait(60)
        return code, daemon.stderr(), lake

    def landed(lake: Path) -> dict[str, list[int]]:
        return {table: [r["id"] for r in rows] for table, rows in read_lake(lake, db).rows.items()}

    # TOML list syntax in --set, as the file takes it; a pattern matching nothing is a warning
    code, stderr, lake = run("set_toml", flags=[
        "--set", f'filter.include=["{db}.orders", "{db}.nosuch"]',
        "--set", f"filter.exclude=['{db}.gone']"])
    assert code == 0, stderr
    assert landed(lake) == {"orders": [1, 2]}
    warnings = [line for line in stderr.splitlines() if " WARNING " in line]
    assert warnings == [line for line in stderr.splitlines()
                        if f"filter.include pattern '{db}.nosuch' matches no table" in line]
    assert len(warnings) == 1
    assert len([line for line in stderr.splitlines() if " INFO " in line and
                f"filter.exclude pattern '{db}.gone' matches no table" in line]) == 1

    # the same syntax from the environment
    code, stderr, lake = run("env_toml", env={"BINLAKE_FILTER_INCLUDE": f'["{db}.items"]'})
    assert code == 0, stderr
    assert landed(lake) == {"items": [10]}
    assert " WARNING " not in stderr

    # the plain comma-separated form
    code, stderr, lake = run("set_commas", flags=["--set", f"filter.include={db}.orders,{db}.items"])
    assert code == 0, stderr
    assert landed(lake) == {"items": [10], "orders": [1, 2]}

    # a malformed list is a configuration error (exit 2), before anything is landed
    code, stderr, lake = run("set_broken", flags=["--set", f'filter.include=["{db}.orders"'])
    assert code == 2
    assert f"filter.include: '[\"{db}.orders\"' is not a TOML list" in stderr
    assert not lake.exists()
    code, stderr, lake = run("env_quoted", env={"BINLAKE_FILTER_INCLUDE": f'"{db}.orders"'})
    assert code == 2 and "contains quotes" in stderr and "(from env BINLAKE_FILTER_INCLUDE)" in stderr
    assert not lake.exists()


# --- DDL follows the filters; DDL without a database has a readable directory; _seq has gaps ------


async def test_ddl_follows_filters_and_seq_has_gaps(mariadb_10_11: ServerHandle,
                                                    tmp_path: Path) -> None:
    server = mariadb_10_11
    db, other = unique_db("ddlkeep"), unique_db("ddldrop")
    user = f"u{uuid.uuid4().hex[:6]}"
    start = binlog_end(server)
    server.sql(f"CREATE DATABASE {db}; CREATE DATABASE {other}")                        # 2 DDL
    server.sql(f"CREATE TABLE {db}.t (id INT PRIMARY KEY); CREATE TABLE {other}.t (id INT "
               f"PRIMARY KEY); CREATE TABLE {db}.skip (id INT PRIMARY KEY)")            # 3 DDL
    server.sql(f"INSERT INTO {db}.t VALUES (1); INSERT INTO {other}.t VALUES (1);"       # 3 txns
               f"INSERT INTO {db}.skip VALUES (1)")
    server.sql(f"ALTER TABLE {other}.t ADD COLUMN c INT; ALTER TABLE {db}.t ADD COLUMN c INT;"
               f"CREATE USER '{user}'@'%' IDENTIFIED BY 'x'")                           # 3 DDL
    server.sql(f"INSERT INTO {db}.t VALUES (2, 2); DROP USER '{user}'@'%'; DROP DATABASE {other}")
    lake = tmp_path / "lake"
    daemon = await catch_up(catch_up_config(server, lake, start, include=(f"{db}.t",)))

    by_dir: dict[str, list[str]] = {}
    for path in sorted(lake.glob("_ddl/*/*.jsonl")):
        for line in path.read_text().splitlines():
            by_dir.setdefault(path.parent.name, []).append(json.loads(line)["query"])
    assert by_dir == {
        db: [f"CREATE DATABASE {db}", f"CREATE TABLE {db}.t (id INT PRIMARY KEY)",
             f"ALTER TABLE {db}.t ADD COLUMN c INT"],
        "_no_database": [f"CREATE USER '{user}'@'%' IDENTIFIED BY '<redacted>'",
                         f"DROP USER '{user}'@'%'"],
    }
    # other's CREATE DATABASE, CREATE TABLE, ALTER TABLE, DROP DATABASE; db.skip's CREATE TABLE
    assert daemon.pipeline.stats.filtered_ddl == 5

    # _seq: unique and increasing, with gaps — 14 transactions, rows in two of them
    rows = read_lake(lake, db).rows["t"]
    seqs = [r["_seq"] for r in rows]
    checkpoint = json.loads((lake / "_checkpoint.json").read_text())
    assert [r["id"] for r in rows] == [1, 2]
    assert seqs == [6, 12]  # the 6th and the 12th transaction; the others took numbers too
    assert checkpoint["seq"] == 14
