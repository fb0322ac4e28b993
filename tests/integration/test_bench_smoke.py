"""The benchmark's CI smoke run: ``python -m bench --smoke`` end to end, so it never rots.

Tiny sizes, one repeat, no thresholds: this checks that every peer runs (the daemon ``binlake
run`` into a lake holding exactly the workload's rows, ``binlake decode`` of the checkout and of
a baseline commit) and that the README table generates, not how fast anything is (speed targets
live in the benchmark's PASS/MISS table, never in tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.chroot import CEPH, ready_chroot

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, *args: str, timeout: float = 300) -> str:
    """``python -m ARGS --results-dir tmp_path`` from the checkout; its stdout (exit 0)."""
    result = subprocess.run([sys.executable, "-m", *args, "--results-dir", os.fspath(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_bench_smoke(tmp_path: Path) -> None:
    if not os.path.exists("/usr/sbin/mariadbd"):
        pytest.skip("MariaDB is not installed on this machine")
    # The baseline commit is this checkout's own HEAD: the step (export, build, decode) is what
    # is checked here, not a speed.
    baseline = ["--baseline-rev", "HEAD"] if (ROOT / ".git").exists() else []
    stdout = _bench(tmp_path, "bench", "--smoke", *baseline)
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())

    # --smoke is scale 0.002: (a) 1,200 rows, (b) and (c) 400, (d) 100.
    assert {name: w["rows"] for name, w in results["workloads"].items()} == {
        "a_bulk_insert": 1200, "b_single_row": 400, "c_update": 400, "d_wide": 100}
    decoders = ["binlake-decode-text", "binlake-decode-open-protocol"]
    if baseline:
        assert results["baseline"]["native"] is True
        decoders += ["baseline-decode-text", "baseline-decode-open-protocol"]
    for name, workload in results["workloads"].items():
        peers = workload["peers"]
        for peer in ("mariadb-binlog", "binlake-fetch", "binlake-decode", "binlake-run",
                     *decoders):
            assert "error" not in peers[peer], (name, peer, peers[peer])
            assert len(peers[peer]["runs"]) == 1, (name, peer)
        # Decode only counts the rows it decoded; the daemon's are the rows in its lake.
        for peer in ("binlake-decode", "binlake-run"):
            assert "rows_mismatch" not in peers[peer], (name, peer)
            assert peers[peer]["runs"][0]["rows"] == workload["rows"]
        assert peers["binlake-run"]["runs"][0]["files"] >= 1
        pmr = peers["pmr"]  # only when its venv is cached: the smoke run installs nothing
        assert "error" not in pmr, (name, pmr)
        if "skipped" not in pmr:
            assert "rows_mismatch" not in pmr and pmr["runs"][0]["rows"] == workload["rows"]
    # The daemon into S3 (the test bed's Ceph gateway, which the bench starts) on (a) only.
    s3 = results["workloads"]["a_bulk_insert"]["peers"]["binlake-run-s3"]
    if ready_chroot(CEPH) is not None and os.geteuid() == 0:
        assert "error" not in s3 and s3["runs"][0]["rows"] == 1200, s3
    assert results["workloads"]["c_update"]["peers"]["binlake-run-s3"] == {
        "skipped": "workload (a) only"}
    assert results["startup"]["peak_rss_mib"] > 0, results["startup"]  # ran, landed 0 rows
    memory = results["memory"]
    assert memory["backlog"]["binlake-run"]["runs"][0]["rows"] == 2100
    assert memory["big_transaction"]["binlake-run"]["runs"][0]["rows"] == 4000
    verdicts = {t["name"]: t["verdict"] for t in results["targets"]}
    assert set(verdicts) == {  # binlake decode's figures have no target
        "run_a_vs_c", "run_a_vs_peer", "run_b_vs_peer", "run_a_s3_vs_disk", "decode_a_vs_c",
        "decode_c_vs_c", "decode_d_vs_c", "run_rss", "run_big_transaction_rss"}
    assert set(verdicts.values()) <= {"PASS", "MISS", "not measured"}
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
    assert "binlake run (end to end)" in stdout  # the tables were printed
    assert "speed and memory targets" in stdout

    readme = subprocess.run([sys.executable, "-m", "bench.report", "--readme", os.fspath(path)],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for workload in results["workloads"].values():
        assert f"| {workload['description']} |" in readme


def test_bench_decode_only(tmp_path: Path) -> None:
    """``--decode-only``: the four ``binlake decode`` runs on workload (a), nothing else."""
    if not os.path.exists("/usr/sbin/mariadbd"):
        pytest.skip("MariaDB is not installed on this machine")
    if not (ROOT / ".git").exists():
        pytest.skip("no git checkout to take a baseline commit from")
    _bench(tmp_path, "bench", "--smoke", "--decode-only", "--baseline-rev", "HEAD")
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())
    assert {name: w["rows"] for name, w in results["workloads"].items()} == {
        "a_bulk_insert": 1200}
    peers = results["workloads"]["a_bulk_insert"]["peers"]
    measured = {"binlake-decode-text", "binlake-decode-open-protocol", "baseline-decode-text",
                "baseline-decode-open-protocol"}
    for peer, summary in peers.items():
        if peer in measured:
            assert len(summary["runs"]) == 1 and "error" not in summary, (peer, summary)
        else:
            assert summary == {"skipped": "--decode-only"}, peer
    assert set(peers) >= measured
    assert not {"startup", "memory", "snapshot", "semisync"} & set(results)
    # binlake decode has no speed target (a debugging command's output): none is measured here.
    assert {t["verdict"] for t in results["targets"]} == {"not measured"}


def test_bench_side_by_side(tmp_path: Path) -> None:
    """``bench.side_by_side``: every step runs for the checkout and for another commit (here
    HEAD: the steps are checked, not a speed), each run's lake holding exactly its rows."""
    if not os.path.exists("/usr/sbin/mariadbd"):
        pytest.skip("MariaDB is not installed on this machine")
    if not (ROOT / ".git").exists():
        pytest.skip("no git checkout to take a baseline commit from")
    stdout = _bench(tmp_path, "bench.side_by_side", "--baseline-rev", "HEAD", "--scale", "0.005",
                    "--repeats", "1", "--tables", "20", timeout=600)
    (path,) = tmp_path.glob("side_by_side-*.json")
    results = json.loads(path.read_text())
    # scale 0.005: (a) 3,000 rows, (b) 1,000 transactions, 1,000 rows over 20 tables, and the
    # snapshot's table at its floor of 10,000 rows.
    assert {name: step["rows"] for name, step in results["steps"].items()} == {
        "end_to_end": 3000, "one_row": 1000, "many_tables": 1000, "snapshot": 10000}
    for step in results["steps"].values():
        assert step["checkout"]["runs"] == step["baseline"]["runs"] == 1
        assert step["ratio_seconds"] > 0 and step["ratio_cpu_seconds"] > 0
    table = stdout.splitlines()
    assert table[0].startswith("| step | rows | checkout s (range) |")
    assert [line.split(" | ")[0] for line in table[2:6]] == [
        "| end_to_end", "| one_row", "| many_tables", "| snapshot"]
