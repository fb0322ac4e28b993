"""The README's main-job command, `binlake demo`, run as a new user would (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.server, pytest.mark.spark]


def test_demo_lands_the_workload_and_spark_agrees_with_the_server(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    result = subprocess.run(
        [sys.executable, "-m", "replica.cli", "demo", "--lake", os.fspath(lake), "--rows", "120"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # the rows that existed before binlake started landed as snapshot rows (its binlog was
    # reset): 50 customers, 30 products and the first two 50-order batches of 120
    for table, snapshot_rows in (("customers", 50), ("products", 30), ("orders", 100)):
        assert f"shop.{table}: change log R={snapshot_rows} " in out, out
    assert out.count("— matches SELECT COUNT(*)") == 3, out
    assert (lake / "_checkpoint.json").exists()
    assert "DIFFERS" not in out


def test_demo_refuses_a_directory_that_is_not_a_lake(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    result = subprocess.run(
        [sys.executable, "-m", "replica.cli", "demo", "--lake", os.fspath(tmp_path), "--no-spark"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "was not made by binlake demo; nothing was changed" in result.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"
