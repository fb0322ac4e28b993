"""``binlake decode`` prints the same bytes with the native row decoder as with the Python one
(``BINLAKE_NATIVE=0``), in both formats, over the type matrix's binlogs of MariaDB 10.11, 11.8
and MySQL 9.7 — every column type family with edge values, NULLs, charsets, zero dates,
DECIMAL(65), BIT, TIME, unsigned, JSON — plus MINIMAL images, a key-changing UPDATE and a
statement whose password must stay redacted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.binlog.model import RowsKind
from tests.servers.handle import ServerHandle

from .test_type_matrix import _db, decoded_rows, families, run_family

pytestmark = pytest.mark.server

FLAVOR_FIXTURES = ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"]


@pytest.fixture(params=FLAVOR_FIXTURES)
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def _decode(files: list[str], output_format: str, native: bool) -> str:
    env = dict(os.environ, BINLAKE_NATIVE="1" if native else "0")
    proc = subprocess.run([sys.executable, "-m", "replica.cli", "decode", "--format",
                           output_format, *files], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_native_and_python_formatters_print_the_same(server: ServerHandle) -> None:
    server.sql("FLUSH BINARY LOGS")
    first = Path(server.binlog_files()[-1]).name
    schema = _db("fmt")
    user = f"u_{schema[-10:]}"
    server.sql(f"CREATE DATABASE `{schema}`")
    for name, (cols, statements) in families(not server.is_mariadb).items():
        run_family(server, schema, name, cols, statements)
    server.sql(
        f"CREATE TABLE `{schema}`.k (id INT PRIMARY KEY, a INT, b VARCHAR(10));"
        f"INSERT INTO `{schema}`.k VALUES (1, 1, 'x'), (2, 2, 'y');"
        f"UPDATE `{schema}`.k SET id = id + 10;"  # key-changing, full images
        "SET SESSION binlog_row_image='MINIMAL';"
        f"UPDATE `{schema}`.k SET id = 20, b = 'z' WHERE id = 11;"
        f"DELETE FROM `{schema}`.k WHERE id = 12;"
        f"CREATE USER '{user}'@'localhost' IDENTIFIED BY 'hunter2-secret';"
        f"DROP USER '{user}'@'localhost'")
    events = decoded_rows(server, schema)  # flushes: the files below are closed
    files = [f for f in server.binlog_files()[:-1] if Path(f).name >= first]
    row_lines = sum(e.row_count for e in events)
    assert {e.kind for e in events} == {RowsKind.INSERT, RowsKind.UPDATE, RowsKind.DELETE}
    for output_format in ("text", "open-protocol"):
        native = _decode(files, output_format, native=True)
        reference = _decode(files, output_format, native=False)
        assert native == reference, output_format
        assert "hunter2-secret" not in native
        if output_format == "text":
            mine = [line for line in native.splitlines()
                    if line.startswith("### ") and f" {schema}." in line]
            assert len(mine) == row_lines
        else:
            mine = [line for line in native.splitlines() if f'"scm":"{schema}"' in line
                    and '"t":1},"value"' in line]
            # TiCDC's delete + insert for the two key-changing rows of the full-image UPDATE
            keyed = sum(e.row_count for e in events
                        if e.kind is RowsKind.UPDATE and e.table.table == "k"
                        and len(e.after_columns) == 3)
            assert keyed == 2
            assert len(mine) == row_lines + keyed
