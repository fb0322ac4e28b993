"""Row images without a full before/after, on real servers.

* A primary-key change under ``binlog_row_image=MINIMAL``/``NOBLOB`` lands as D(old key) +
  I(new key, ``_before`` = the old row): Spark's ``read_current_state`` carries the columns the
  new key's image left out over from the old key (also along a chain of moves, and with the old
  key reused), equal to ``SELECT``; Open Protocol keeps such a move one ``u`` with ``p``.
* MySQL ``binlog_row_value_options=PARTIAL_JSON`` with MINIMAL images: the JSON diff has no
  before value; ``binlake decode`` (both formats) and ``binlake run`` (subprocess) do not crash,
  the column is absent (``_missing``) with the operations in ``_json_diff`` / ``"jd"``, and
  Spark's current state applies them: equal to ``SELECT``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sinks.spark.readers import read_changes
from sinks.spark.state import read_current_state
from tests.servers.handle import ServerHandle

from .daemon_process import (
    DaemonProcess,
    binlog_end,
    catch_up,
    catch_up_config,
    daemon_settings,
    trusted_tls,
    unique_db,
)
from .test_decode_edges_servers import binlake_decode, open_protocol_rows

pytestmark = [pytest.mark.server, pytest.mark.spark]

KEY_MOVES = """
CREATE TABLE t (id INT PRIMARY KEY, a INT, s VARCHAR(20), b BLOB);
INSERT INTO t VALUES (1, 1, 'one', 'b1'), (2, 2, 'two', 'b2'), (3, 3, 'three', 'b3'),
                     (4, 4, 'four', 'b4');
UPDATE t SET a = 11 WHERE id = 1;
UPDATE t SET id = 10 WHERE id = 2;
UPDATE t SET id = 20, s = 'moved' WHERE id = 3;
UPDATE t SET id = 30 WHERE id = 10;
DELETE FROM t WHERE id = 4;
INSERT INTO t VALUES (2, 22, 'two again', 'b22');
UPDATE t SET b = 'b20' WHERE id = 20;
"""


def _select(server: ServerHandle, db: str) -> list[tuple[Any, ...]]:
    rows = server.sql(f"SELECT id, a, s, HEX(b) FROM {db}.t ORDER BY id")
    return [(int(r[0] or 0), int(r[1] or 0), r[2], bytes.fromhex(r[3] or "")) for r in rows]


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mysql_9_7"])
async def test_key_change_keeps_the_unchanged_columns(flavor: str, tmp_path: Path,
                                                      request: pytest.FixtureRequest,
                                                      spark: Any) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    dbs = {image: unique_db(f"pk_{image.lower()}") for image in ("MINIMAL", "NOBLOB")}
    start = binlog_end(server)
    for image, db in dbs.items():
        server.sql(f"CREATE DATABASE {db}; USE {db}; SET SESSION binlog_row_image={image};"
                   + KEY_MOVES)
    try:
        expected = [(1, 11, "one", b"b1"), (2, 22, "two again", b"b22"),
                    (20, 3, "moved", b"b20"), (30, 2, "two", b"b2")]
        lake = tmp_path / "lake"
        await catch_up(catch_up_config(server, lake, start, include=tuple(dbs.values())))
        proc = binlake_decode(server, "--format", "open-protocol",
                              *[a for db in dbs.values() for a in ("--database", db)])
        for image, db in dbs.items():
            assert _select(server, db) == expected
            changes = read_changes(spark, str(lake), db, "t")
            moved_in = changes.where("_op = 'I' AND _before IS NOT NULL").collect()
            # the new rows name the key they left
            assert sorted((r["id"], r["_before"]["id"]) for r in moved_in) == [
                (10, 2), (20, 3), (30, 10)]
            missing = {r["id"]: sorted(r["_missing"] or []) for r in moved_in}
            assert missing == ({10: ["a", "b", "s"], 20: ["a", "b"], 30: ["a", "b", "s"]}
                               if image == "MINIMAL" else {10: ["b"], 20: ["b"], 30: ["b"]})

            state = read_current_state(spark, str(lake), db, "t").collect()
            got = sorted((r["id"], r["a"], r["s"], bytes(r["b"])) for r in state)
            assert got == expected, image

            # Open Protocol: with a partial after image a move stays one "u" with its old "p"
            values = open_protocol_rows(proc.stdout, db)
            moved = [(v["u"]["id"]["v"], v["p"]["id"]["v"]) for v in values
                     if "p" in v and "id" in v["u"] and v["u"]["id"]["v"] != v["p"]["id"]["v"]]
            assert moved == [(10, 2), (20, 3), (30, 10)], image
            assert sum("d" in v for v in values) == 1, image  # only the real DELETE
    finally:
        for db in dbs.values():
            server.sql(f"DROP DATABASE {db}")


PARTIAL_JSON = """
CREATE TABLE t (id INT PRIMARY KEY, j JSON, n INT);
INSERT INTO t VALUES (1, '{"a": 1, "b": [1, 2], "c": "x"}', 0), (2, '{"x": "y", "k": 1}', 0);
UPDATE t SET j = JSON_SET(j, '$.a', 2) WHERE id = 1;
UPDATE t SET j = JSON_REPLACE(j, '$.x', 'z'), n = 5 WHERE id = 2;
UPDATE t SET j = JSON_REMOVE(j, '$.b[0]') WHERE id = 1;
"""


def test_partial_json_without_before_image(server_factory: Any, tmp_path: Path,
                                           spark: Any) -> None:
    server: ServerHandle = server_factory.start(
        "mysql-9.7", ["--binlog-row-image=MINIMAL", "--binlog-row-value-options=PARTIAL_JSON"],
        name="mysql-minimal-partial-json")
    db = unique_db("pjson")
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, db, overrides={
        "server": trusted_tls(server), "replica": {"stop_at_end": True}})
    server.sql(f"CREATE DATABASE {db}; USE {db};" + PARTIAL_JSON)
    selected = {int(r[0] or 0): r[1] for r in server.sql(f"SELECT id, j FROM {db}.t")}
    assert selected == {1: '{"a": 2, "b": [2], "c": "x"}', 2: '{"k": 1, "x": "z"}'}

    ops_a = '[{"op": "REPLACE", "path": "$.a", "value": 2}]'
    ops_x = '[{"op": "REPLACE", "path": "$.x", "value": "z"}]'
    ops_b = '[{"op": "REMOVE", "path": "$.b[0]"}]'

    # binlake decode, open-protocol: no crash; j left out of "u", its operations in "jd"
    proc = binlake_decode(server, "--format", "open-protocol", "--database", db)
    updates = [v for v in open_protocol_rows(proc.stdout, db) if "p" in v]
    assert [({k: c["v"] for k, c in v["u"].items()}, {k: c["v"] for k, c in v["p"].items()},
             v["jd"]) for v in updates] == [
        ({}, {"id": 1}, {"j": ops_a}),
        ({"n": 5}, {"id": 2}, {"j": ops_x}),
        ({}, {"id": 1}, {"j": ops_b}),
    ]
    # and text
    proc = binlake_decode(server, "--database", db)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("### UPDATE")]
    assert lines == [
        f"### UPDATE {db}.t WHERE id=1 SET j=JSON_DIFF(REPLACE $.a 2)",
        f"### UPDATE {db}.t WHERE id=2 SET j=JSON_DIFF(REPLACE $.x \"z\"), n=5",
        f"### UPDATE {db}.t WHERE id=1 SET j=JSON_DIFF(REMOVE $.b[0])",
    ]

    # binlake run (a subprocess, to the binlog's end): no crash, the diffs land
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    assert daemon.wait(timeout=120) == 0, daemon.run_stderr()
    assert daemon.run_stderr().count("partial JSON updates without a before image") == 1
    rows = [r for f in sorted(lake.glob(f"{db}/t/*/*/*.parquet"))
            for r in pq.read_table(f).to_pylist()]
    rows.sort(key=lambda r: (r["_seq"], r["_row"]))
    assert [(r["_op"], r["id"], r["j"], r["n"], r["_missing"] and sorted(r["_missing"]),
             r["_json_diff"]) for r in rows] == [
        ("I", 1, '{"a": 1, "b": [1, 2], "c": "x"}', 0, None, None),
        ("I", 2, '{"k": 1, "x": "y"}', 0, None, None),
        ("U", None, None, None, ["id", "j", "n"], '{"j": ' + ops_a + "}"),
        ("U", None, None, 5, ["id", "j"], '{"j": ' + ops_x + "}"),
        ("U", None, None, None, ["id", "j", "n"], '{"j": ' + ops_b + "}"),
    ]
    state = read_current_state(spark, str(lake), db, "t").collect()
    assert {r["id"]: r["j"] for r in state} == selected
    assert {r["id"]: r["n"] for r in state} == {1: 0, 2: 5}
