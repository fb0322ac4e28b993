"""docs/lake-format.md is complete enough to read a lake without binlake: a reader written from it
alone (``lake_spec_reader``: pyarrow and the standard library) reproduces ``read_current_state``
on the type matrix that the daemon landed from a real MariaDB 10.11, and both hold exactly the
keys ``SELECT`` returns."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sinks.spark.state import read_current_state
from tests.servers.handle import ServerHandle

from . import lake_spec_reader as spec
from .daemon_process import binlog_end, catch_up, catch_up_config
from .test_type_matrix import families, run_family

pytestmark = [pytest.mark.server, pytest.mark.spark]

READER = Path(spec.__file__)


def test_the_reader_imports_nothing_of_binlake() -> None:
    tree = ast.parse(READER.read_text(encoding="utf-8"))
    modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    modules |= {node.module.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module}
    assert modules <= {"__future__", "json", "os", "re", "collections", "typing", "pyarrow"}


def test_dir_name_as_specified() -> None:
    assert spec.dir_name("_audit") == "%5Faudit"
    assert spec.dir_name("a/b%c") == "a%2Fb%25c"
    assert spec.dir_name("shop") == "shop"
    assert spec.dir_name("") == "%00"


def test_a_higher_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / "_checkpoint.json").write_text('{"format": 2, "seq": 1}')
    with pytest.raises(spec.FormatError, match="format 2; this reader implements up to 1"):
        spec.checkpoint(str(tmp_path))


async def test_spec_reader_reproduces_read_current_state(mariadb_10_11: ServerHandle,
                                                         tmp_path: Path, spark: Any) -> None:
    server = mariadb_10_11
    db = f"spec_{uuid.uuid4().hex[:10]}"
    start = binlog_end(server)
    server.sql(f"CREATE DATABASE `{db}`")
    fams = families(mysql=False)
    for name, (cols, statements) in fams.items():
        run_family(server, db, name, cols, statements)
    try:
        lake = tmp_path / "lake"
        await catch_up(catch_up_config(server, lake, start, include=(db,)))
        for name in fams:
            ids = sorted(int(r[0]) for r in server.sql(f"SELECT id FROM `{db}`.`{name}`"))
            out = tmp_path / f"state_{name}"
            read_current_state(spark, str(lake), db, name).write.parquet(str(out))
            binlake = sorted(pq.read_table(out).to_pylist(), key=lambda r: r["id"])
            ours = spec.current_state(str(lake), db, name)
            assert [r["id"] for r in ours] == ids, name
            assert [r["id"] for r in binlake] == ids, name
            assert list(ours[0]) == list(binlake[0]), name  # the same columns, in order
            for mine, theirs in zip(ours, binlake, strict=True):
                assert mine == theirs, f"{name} id={mine['id']}"
    finally:
        server.sql(f"DROP DATABASE `{db}`")
