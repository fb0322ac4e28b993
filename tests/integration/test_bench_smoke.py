"""The benchmark's CI smoke run: ``python -m bench --smoke`` end to end, so it never rots.

Tiny sizes, one repeat, no thresholds: this checks that every peer runs and agrees on the row
counts, not how fast anything is (speed targets live in the benchmark, never in tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke(tmp_path: Path) -> None:
    if not os.path.exists("/usr/sbin/mariadbd"):
        pytest.skip("MariaDB is not installed on this machine")
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--results-dir", os.fspath(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())

    assert set(results["workloads"]) == {"a_bulk_insert", "b_single_row", "c_update", "d_wide"}
    for name, workload in results["workloads"].items():
        peers = workload["peers"]
        for peer in ("mariadb-binlog", "binlake-fetch", "binlake-decode", "binlake-land"):
            assert "error" not in peers[peer], (name, peer, peers[peer])
            assert peers[peer]["rows_per_s"] > 0
        for peer in ("binlake-decode", "binlake-land"):
            assert "rows_mismatch" not in peers[peer], (name, peer)
            assert peers[peer]["runs"][0]["rows"] == workload["rows"]
        pmr = peers["pmr"]  # only when its venv is cached: the smoke run installs nothing
        assert "error" not in pmr, (name, pmr)
        if "skipped" not in pmr:
            assert "rows_mismatch" not in pmr and pmr["runs"][0]["rows"] == workload["rows"]
    for entry in results["memory"].values():
        assert entry["binlake-land"]["peak_rss_mib"] > 0
    snap = results["snapshot"]  # binlake snapshot beside mariadb-dump, a writer throughout
    assert "error" not in snap["mariadb-dump"] and "error" not in snap["binlake-snapshot"], snap
    assert snap["binlake-snapshot"]["rows_in_lake"] == snap["rows"] == 4000
    assert "rows_mismatch" not in snap["binlake-snapshot"]
    for writer in ("writer_alone", "writer_during_snapshot"):
        assert "error" not in snap[writer] and snap[writer]["commits"] > 0, snap[writer]
    semi = results["semisync"]
    for config in ("mariadb-replica", "binlake-ack-on-receive", "binlake-ack-after-land"):
        assert semi[config]["commits"] > 0
        assert all(r["no_tx"] == 0 and r["yes_tx"] > 0 for r in semi[config]["rounds"]), config
    assert "binlake decode" in result.stdout  # the table was printed
