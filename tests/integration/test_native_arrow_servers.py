"""``binlake run`` lands the same lake from the native decoder's Arrow chunks as from its Python
values (``BINLAKE_NATIVE_ARROW=0``): the workload's tables (every column kind, NULLs, UPDATEs
that change keys, DELETEs) caught up twice from the same binlog, once each way — the same
Arrow schemas, the same change rows cell for cell, and the lake equals SELECT."""

from __future__ import annotations

import copy
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from protocol.binlog import native
from tests.servers.handle import ServerHandle

from .daemon_process import DaemonProcess, daemon_settings, trusted_tls, unique_db
from .workload import Workload, _data_files, compare_lake, read_lake

pytestmark = pytest.mark.server


@pytest.fixture(params=["mariadb_10_11", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def test_arrow_chunks_and_python_values_land_the_same_lake(server: ServerHandle,
                                                           tmp_path: Path) -> None:
    if not native.ARROW:  # the daemon below runs this tree's extension
        pytest.skip("the native decoder's Arrow path is not built here: nothing to compare")
    database = unique_db("arrow")
    base = daemon_settings(server, tmp_path / "unused", database,
                           overrides={"server": trusted_tls(server)})
    workload = Workload(server, database, seed=17)
    workload.create_tables()
    workload.run(60)
    lakes: dict[str, Path] = {}
    for mode in ("1", "0"):
        settings = copy.deepcopy(base)
        settings["lake"]["path"] = str(tmp_path / f"lake{mode}")
        daemon = DaemonProcess(tmp_path / f"daemon{mode}", settings,
                               password=server.users["repl"].password,
                               env={"BINLAKE_NATIVE_ARROW": mode,
                                    "BINLAKE_REPLICA_STOP_AT_END": "true"})
        assert daemon.start().wait(timeout=120) == 0, daemon.run_stderr()
        lakes[mode] = Path(settings["lake"]["path"])
    compare_lake(server, lakes["1"], workload)
    arrow, values = read_lake(lakes["1"], database), read_lake(lakes["0"], database)
    assert sorted(arrow.rows) == sorted(workload.tables) == sorted(values.rows)
    for table in arrow.rows:
        assert len(arrow.rows[table]) == len(values.rows[table]) == sum(
            workload.expected[table].values())
        assert arrow.rows[table] == values.rows[table], table
    schemas = {mode: {table: {pq.read_schema(path) for path in paths}
                      for table, paths in _data_files(lake, database).items()}
               for mode, lake in lakes.items()}
    assert schemas["1"] == schemas["0"]
