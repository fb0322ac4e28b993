"""binlake status on a lake written by the Parquet sink: checkpoint, tables, versions and rows
from the footers; the server unreachable; the lag arithmetic; text and JSON output."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from protocol.binlog.model import BinlogPosition, Column, ColumnFlag
from replica.commands import status
from replica.config import Config, LakeConfig, ReplicaConfig, ServerConfig
from replica.observe.lag import BinlogFile, ServerEnd
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col

LONGLONG, VARCHAR = 8, 15


def _build_lake(path: Path) -> StreamBuilder:
    sink = ParquetSink(str(path))
    sink.open()
    b = StreamBuilder()
    users = b.table("shop", "users", [col(0, LONGLONG, "id", pk=True), col(1, VARCHAR, "name")])
    odd = b.table("shop", "_audit", [col(0, LONGLONG, "id", pk=True)])
    items = [b.begin(), b.insert(users, [(1, "ann"), (2, "bob")]), b.insert(odd, [(7,)]),
             b.commit(),
             b.begin(), b.update(users, [((1, "ann"), (1, "anne"))]), b.commit()]
    wider = b.table("shop", "users", [col(0, LONGLONG, "id", pk=True), col(1, VARCHAR, "name"),
                                      Column(2, LONGLONG, 0, "age", ColumnFlag.NULLABLE)])
    items += [b.begin(), b.ddl("shop", "ALTER TABLE users ADD age BIGINT"), b.commit(),
              b.begin(), b.insert(wider, [(3, "cy", 30)]), b.delete(wider, [(2, "bob", None)]),
              b.commit()]
    for item in items:
        sink.handle(item)
    sink.close()
    return b


def _config(lake: Path, **server: object) -> Config:
    return Config(replica=ReplicaConfig(server_id=5), lake=LakeConfig(path=str(lake)),
                  server=ServerConfig(**server))  # type: ignore[arg-type]


def test_lake_facts(tmp_path: Path) -> None:
    _build_lake(tmp_path / "lake")
    facts = status.lake_facts(str(tmp_path / "lake"))
    assert facts.exists and not facts.commit_in_progress
    assert facts.checkpoint is not None and facts.checkpoint["seq"] == 4
    tables = {(t.database, t.table): t for t in facts.tables}
    assert set(tables) == {("shop", "users"), ("shop", "_audit")}  # names from _schema
    users = tables[("shop", "users")]
    assert users.schema_versions == [1, 2]
    assert users.rows == 5  # 2 inserts, 1 update, 1 insert, 1 delete
    assert users.files >= 2 and users.bytes > 0
    assert tables[("shop", "_audit")].rows == 1
    assert facts.rows == 6 and not facts.unreadable


def test_a_missing_lake(tmp_path: Path) -> None:
    facts = status.lake_facts(str(tmp_path / "nowhere"))
    assert not facts.exists
    out = io.StringIO()
    status.render_text(status.Status(facts, None), out)
    assert "does not exist" in out.getvalue()


async def test_unreachable_server_is_reported_after_the_lake_and_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _build_lake(tmp_path / "lake")
    config = _config(tmp_path / "lake", socket=str(tmp_path / "no.sock"))
    assert await status.run(config) == 1
    out = capsys.readouterr().out
    assert "checkpoint      transaction 4, GTID 0-1-4" in out
    assert "last commit     2026-01-01T00:00:03.000000Z" in out
    assert "6 rows in" in out and "2 tables" in out
    assert "schema v1,v2" in out
    assert "server unreachable: " in out
    assert await status.run(config, argparse.Namespace(json=True, no_server=False)) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["lake"]["rows"] == 6 and doc["lake"]["checkpoint"]["seq"] == 4
    assert doc["server"]["reachable"] is False and doc["server"]["error"]
    assert {t["table"] for t in doc["tables"]} == {"users", "_audit"}
    assert await status.run(config, argparse.Namespace(json=True, no_server=True)) == 0
    assert json.loads(capsys.readouterr().out)["server"] is None


async def test_missing_lake_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path / "nowhere", socket=str(tmp_path / "no.sock"))
    assert await status.run(config) == 1


def test_status_through_the_cli_exits_1_when_the_server_is_unreachable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from replica import cli

    for name in list(os.environ):
        if name.startswith("BINLAKE_"):
            monkeypatch.delenv(name)
    _build_lake(tmp_path / "lake")
    base = ["status", "--config", str(tmp_path / "empty.toml"), "--lake", str(tmp_path / "lake"),
            "--socket", str(tmp_path / "no.sock")]
    (tmp_path / "empty.toml").write_text("")
    assert cli.run(base) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"lake {tmp_path / 'lake'}"
    assert "  landed          6 rows in" in "\n".join(out)
    assert out[-1] == (f"server unreachable: ConnectError: cannot connect to {tmp_path}/no.sock: "
                       "[Errno 2] No such file or directory")
    assert cli.run([*base, "--no-server"]) == 0
    assert "server" not in capsys.readouterr().out.splitlines()[-1]


def test_interrupted_commit_is_mentioned(tmp_path: Path) -> None:
    _build_lake(tmp_path / "lake")
    (tmp_path / "lake" / "_commit.json").write_text("{}")
    out = io.StringIO()
    status.render_text(status.Status(status.lake_facts(str(tmp_path / "lake")), None), out)
    assert "interrupted commit" in out.getvalue()


def _end(file: str, pos: int, gtid: str, now_us: int) -> ServerEnd:
    files = (BinlogFile("b.000001", 1000), BinlogFile("b.000002", 500),
             BinlogFile("b.000003", 300))
    return ServerEnd("mariadb", now_us, gtid, BinlogPosition(file, pos), files)


def _position(end: ServerEnd) -> status.ServerPosition:
    assert end.position is not None
    return status.ServerPosition(reachable=True, flavor="mariadb", binlog_file=end.position.file,
                                 binlog_pos=end.position.pos, gtid=end.gtid, now_us=end.now_us)


def test_lag_arithmetic() -> None:
    checkpoint = {"binlog_file": "b.000002", "binlog_pos": 100, "commit_time_us": 1_000_000,
                  "gtid_state": "0-1-5"}
    end = _end("b.000003", 200, "0-1-9", 11_500_000)
    behind = _position(end)
    status._compare(behind, checkpoint, end)
    assert behind.caught_up is False
    assert behind.bytes_behind == 400 + 200
    assert behind.seconds_behind == 10.5
    end = _end("b.000002", 100, "0-1-5", 99_000_000)
    level = _position(end)
    status._compare(level, checkpoint, end)
    assert level.caught_up and level.seconds_behind == 0 and level.bytes_behind == 0
    # GTID state equal although the server wrote non-transaction events since
    end = _end("b.000003", 385, "0-1-5", 99_000_000)
    idle = _position(end)
    status._compare(idle, checkpoint, end)
    assert idle.caught_up and idle.seconds_behind == 0 and idle.bytes_behind == 0
    out = io.StringIO()
    lake = status.LakeFacts(path="/l", exists=True, checkpoint=checkpoint)
    status.render_text(status.Status(lake, behind), out, now=20.0)
    assert "lag             10.5 s behind, 600 B of binlog" in out.getvalue()


def test_snapshot_progress_from_the_checkpoint(tmp_path: Path) -> None:
    _build_lake(tmp_path / "lake")
    path = tmp_path / "lake" / "_checkpoint.json"
    checkpoint = json.loads(path.read_text())
    checkpoint["snapshot"] = {"tables": {
        "shop.users": {"database": "shop", "table": "users", "status": "running", "rows": 20,
                       "chunks": 2, "last_key": ["20"], "one_time": False},
        "shop.log": {"database": "shop", "table": "log", "status": "failed", "rows": 0,
                     "chunks": 0, "last_key": None, "message": "it changed"},
        "other.t": {"database": "other", "table": "t", "status": "done", "rows": 3,
                    "chunks": 1, "last_key": ["3"], "one_time": True}}}
    path.write_text(json.dumps(checkpoint))
    facts = status.Status(status.lake_facts(str(tmp_path / "lake")), None)
    out = io.StringIO()
    status.render_text(facts, out)
    lines = out.getvalue().splitlines()
    at = lines.index("  snapshots       3 tables: 1 running, 1 done, 1 failed")
    assert lines[at + 1:at + 4] == [
        "    other.t     done     3 rows in 1 chunk, last key 3 (one-time copy)",
        "    shop.log    failed   0 rows in 0 chunks: it changed",
        "    shop.users  running  20 rows in 2 chunks, last key 20"]
    assert status.as_json(facts)["snapshots"][2] == {
        "table": "shop.users", "status": "running", "rows": 20, "chunks": 2,
        "last_key": ["20"], "one_time": False, "message": None, "reason": None,
        "condition": None}
