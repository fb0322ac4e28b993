"""Real MariaDB and MySQL → ``binlake run`` → lake → Spark ``current_state`` == ``SELECT *``, cell for cell.

The seeded workload (inserts, updates incl. primary-key moves, deletes, multi-statement
transactions, rollbacks, three tables, every type family) runs with an ADD COLUMN and a DROP
COLUMN in the middle, so the lake holds several schema versions per table. Spark reduces the
change log to the current state (``read_current_state``), writes it as Parquet, and the test
compares that with the server, through the same text forms the pyarrow check uses.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sinks.spark.readers import read_changes
from sinks.spark.state import read_current_state
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess
from .test_daemon_flavors import trusted_tls
from .test_daemon_lifecycle import STOP_TIMEOUT, daemon_settings, unique_db
from .workload import (
    _lake_cells,
    _normalized,
    _source_rows,
    check_exactly_once,
    read_lake,
    wait_for_lake,
)

pytestmark = [pytest.mark.server, pytest.mark.spark]

#: What Spark must see for each type family the workload and the ``wide`` table land.
SPARK_TYPES = {
    "c_tiny": "tinyint", "c_small_u": "int", "c_medium": "int", "c_int": "int",
    "c_int_u": "bigint", "c_big": "bigint", "c_big_u": "decimal(20,0)", "c_year": "smallint",
    "c_bit": "bigint", "c_dec": "decimal(10,2)", "c_dec_wide": "decimal(30,8)",
    "c_double": "double", "c_float": "float", "c_date": "date", "c_datetime": "timestamp_ntz",
    "c_ts": "timestamp", "c_time": "bigint", "c_varchar": "string", "c_char": "string",
    "c_text": "string", "c_varbinary": "binary", "c_blob": "binary", "c_enum": "string",
    "c_set": "string", "c_json": "string", "d50": "string", "g": "binary",
    "_op": "string", "_seq": "bigint", "_row": "bigint", "_commit_ts": "timestamp",
    "commit_date": "date", "schema_version": "int",
}


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mysql_9_7"])
def test_spark_current_state_equals_the_source(flavor: str, request: pytest.FixtureRequest,
                                               tmp_path: Path, spark) -> None:  # noqa: F811
    from tests.integration.workload import Workload

    server: ServerHandle = request.getfixturevalue(flavor)
    password = server.users["repl"].password
    database = unique_db("e2e_spark")
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, database, overrides={"server": trusted_tls(server)})
    daemon = DaemonProcess(tmp_path, settings, password=password)
    workload = Workload(server, database, seed=6)
    workload.create_tables()
    daemon.start()
    try:
        daemon.wait_for(r"streaming from")
        workload.run(80)
        workload.sql("ALTER TABLE numbers ADD COLUMN extra INT NULL")
        workload.run(80)
        workload.sql("ALTER TABLE numbers DROP COLUMN extra")
        workload.sql("ALTER TABLE texts ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'n/a'")
        workload.run(80)
        wait_for_lake(lake, workload, timeout=90, alive=daemon.check_alive)
        # types the workload lacks: a decimal wider than Spark's 38 digits, geometry
        workload.sql("CREATE TABLE wide (id INT PRIMARY KEY, d50 DECIMAL(50,10), g POINT); "
                     "INSERT INTO wide VALUES (1, 1234567890123456789012345678901234567890.5, "
                     "ST_GeomFromText('POINT(1 2)'))")
        deadline = time.monotonic() + 30
        while not list((lake / database / "wide").glob("schema_version=*/*/*.parquet")):
            daemon.check_alive()
            assert time.monotonic() < deadline, "the wide table did not land"
            time.sleep(0.25)
    finally:
        code, _ = daemon.terminate(timeout=STOP_TIMEOUT + 5)
    assert code == 0, daemon.run_stderr()
    changes = read_lake(lake, database)  # exactly once, by pyarrow
    check_exactly_once(changes)
    assert {t: c for t, c in changes.counts().items() if c and t != "wide"} == {
        t: c for t, c in workload.expected.items() if c}

    got = {}
    for table in ("numbers", "texts", "times", "wide"):
        got.update({f.name: f.dataType.simpleString()
                    for f in read_changes(spark, str(lake), database, table).schema.fields})
    assert {name: got[name] for name in SPARK_TYPES} == SPARK_TYPES
    wide = read_changes(spark, str(lake), database, "wide").collect()[0]
    assert wide["d50"] == "1234567890123456789012345678901234567890.5000000000"
    assert len(wide["g"]) == 25  # SRID + WKB point

    versions = sorted(p.name for p in (lake / database / "numbers").glob("schema_version=*"))
    assert len(versions) >= 2, versions
    for name, model in workload.tables.items():
        spec = model.spec
        state = read_current_state(spark, str(lake), database, name)
        out = tmp_path / f"state_{name}"
        state.write.mode("overwrite").parquet(str(out))
        rows = [r for f in sorted(out.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        lake_state = {tuple(r[k] for k in spec.key_names): r for r in rows}
        source = _source_rows(server, database, spec)
        assert sorted(lake_state) == sorted(source), name
        for key, source_cells in source.items():
            lake_cells = _lake_cells(spec, lake_state[key])
            assert _normalized(spec, lake_cells) == _normalized(spec, source_cells), (name, key)
        if name == "numbers":
            assert "extra" not in state.columns
        if name == "texts":  # older rows got the DEFAULT without a row event
            notes = {r[1] for r in server.sql(f"SELECT id, note FROM {database}.texts")}
            assert notes == {"n/a"}
            assert {r["note"] for r in rows} == notes
    assert workload.rollbacks > 0
