"""The lake format version: a lake written by a newer binlake is refused by ``binlake run``,
``status`` and ``compact`` (exit 2, both versions named, a fix line) before anything in it is
touched; the checkpoint document is read and written by one typed record, byte for byte."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from protocol.binlog.coltypes import FieldType as T
from replica import cli
from sinks.errors import LakeCorrupted, LakeFormatTooNew
from sinks.parquet import ParquetSink
from sinks.parquet import state as S
from sinks.parquet.commit import dumps
from sinks.parquet.testing import StreamBuilder, col
from sinks.spark.schema import load_versions

XID = "X'31',X'',1"


@pytest.fixture(autouse=True)
def only_the_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The commands see no configuration but their flags (and a server id)."""
    monkeypatch.setattr(os, "environ", {"BINLAKE_REPLICA_SERVER_ID": "11", **{
        k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}})
    monkeypatch.setattr("replica.config.DEFAULT_CONFIG_PATH", str(tmp_path / "absent.toml"))


def _landed_lake(lake: Path) -> None:
    """A lake with every part of the checkpoint: rows, a pending DDL, an XA in doubt."""
    b = StreamBuilder()
    t = b.table("shop", "t", [col(0, T.LONG, "id", pk=True), col(1, T.VARCHAR, "v")])
    sink = ParquetSink(str(lake))
    sink.open()
    for item in [b.begin(), b.insert(t, [(1, "one")]), b.commit(),
                 b.begin(), b.ddl("shop", "ALTER TABLE t ADD COLUMN w INT"), b.commit(),
                 b.begin(), b.insert(t, [(2, "two")]), b.prepare(XID)]:
        sink.handle(item)
    sink.close()


def _tree(lake: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lake)): p.read_bytes() for p in sorted(lake.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock") and p.name != "_lock"}


def test_the_checkpoint_round_trips_byte_for_byte(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    _landed_lake(lake)
    written = (lake / "_checkpoint.json").read_bytes()
    doc = json.loads(written)
    assert doc["format"] == S.LAKE_FORMAT == 1
    assert [d["query"] for d in doc["pending_ddl"]] == ["ALTER TABLE t ADD COLUMN w INT"]
    assert [x["xid"] for x in doc["xa_prepared"]] == [XID]
    state = S.read_state(str(lake))
    assert state is not None
    assert (state.checkpoint.seq, state.pending_ddl[0].seq, state.xa_prepared[0].seq) == (3, 2, 3)
    assert dumps(state.to_json()) == written
    assert dumps(S.LakeState.from_json(dict(doc), str(lake)).to_json()) == written


def test_a_checkpoint_without_a_format_reads_as_the_first(tmp_path: Path) -> None:
    doc = {"seq": 7, "binlog_file": "mysql-bin.000001", "binlog_pos": 4}
    state = S.LakeState.from_json(doc, str(tmp_path))
    assert (state.checkpoint.seq, state.pending_ddl, state.xa_prepared) == (7, (), ())
    for bad in ("2", 0, None, True):
        with pytest.raises(LakeCorrupted, match="lake format is"):
            S.LakeState.from_json({**doc, "format": bad}, str(tmp_path))


def _from_the_future(lake: Path) -> dict[str, bytes]:
    """Make ``lake`` look written by a binlake of lake format 2 (with a half-done commit and a
    staged file recovery would otherwise act on); what it holds, to compare after."""
    doc = json.loads((lake / "_checkpoint.json").read_bytes())
    doc["format"] = 2
    (lake / "_checkpoint.json").write_bytes(dumps(doc))
    (lake / "_staging" / "in-flight.parquet").write_bytes(b"a newer writer's staged file")
    return _tree(lake)


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = cli.run(argv)
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE == 2, err
    return err


@pytest.mark.parametrize("command", [
    ["run", "--host", "127.0.0.1", "--port", "1"],
    ["status", "--no-server"],
    ["compact"],
])
def test_a_lake_of_a_newer_binlake_is_refused_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    lake = tmp_path / "lake"
    _landed_lake(lake)
    before = _from_the_future(lake)
    err = _refused(capsys, [*command, "--set", f"lake.path={lake}"])
    assert err.splitlines()[:2] == [
        f"binlake: error: LakeFormatTooNew: the lake {lake} has lake format 2, newer than this "
        "binlake's 1: it was written by a newer binlake",
        "  fix: run a binlake that writes lake format 2 on this lake (upgrade this one), or "
        "point lake.path at another lake"]
    assert _tree(lake) == before


def test_a_half_done_commit_of_a_newer_binlake_is_not_recovered(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = tmp_path / "lake"
    _landed_lake(lake)
    doc: dict[str, Any] = json.loads((lake / "_checkpoint.json").read_bytes())
    (lake / "_commit.json").write_bytes(dumps({"renames": [], "checkpoint": {**doc, "format": 3},
                                               "deletes": []}))
    before = _tree(lake)
    err = _refused(capsys, ["run", "--host", "127.0.0.1", "--port", "1",
                            "--set", f"lake.path={lake}"])
    assert "has lake format 3, newer than this binlake's 1" in err
    assert _tree(lake) == before


def test_the_spark_readers_refuse_a_lake_of_a_newer_binlake(tmp_path: Path) -> None:
    """read_changes, stream_changes and read_current_state start from load_versions."""
    lake = tmp_path / "lake"
    _landed_lake(lake)
    assert list(load_versions(str(lake), "shop", "t")) == [1]
    schema_file = lake / "shop" / "t" / "_schema" / "v1.json"
    written = schema_file.read_bytes()
    schema_file.write_bytes(written.replace(b'"format":1', b'"format":4'))
    with pytest.raises(LakeFormatTooNew, match="has lake format 4, newer than this binlake's 1"):
        load_versions(str(lake), "shop", "t")  # a schema file of a newer format, on its own
    schema_file.write_bytes(written)
    _from_the_future(lake)
    with pytest.raises(LakeFormatTooNew, match="has lake format 2, newer than this binlake's 1"):
        load_versions(str(lake), "shop", "t")


def test_check_fails_its_lake_line_for_a_lake_of_a_newer_binlake(tmp_path: Path) -> None:
    from replica.commands.check import Status, _read_checkpoint

    lake = tmp_path / "lake"
    _landed_lake(lake)
    doc, problem = _read_checkpoint(str(lake))
    assert doc is not None and doc["seq"] == 3 and problem is None
    _from_the_future(lake)
    doc, problem = _read_checkpoint(str(lake))
    assert doc is None and problem is not None
    assert (problem.name, problem.status) == ("lake", Status.FAIL)
    assert problem.detail == (f"the lake {lake} has lake format 2, newer than this binlake's 1: "
                              "it was written by a newer binlake")
    assert problem.fix is not None and problem.fix.startswith("run a binlake that writes")
