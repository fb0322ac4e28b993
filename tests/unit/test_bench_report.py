"""bench/targets.py and bench/report.py on a hand-made run: the verdicts and the README table
the coordinator pastes are computed from the JSON exactly as written here (no server)."""

from __future__ import annotations

from typing import Any

from bench import report, targets


def _peer(rate: int, rss: float = 40.0) -> dict[str, Any]:
    return {"rows_per_s": rate, "rows_per_cpu_s": 2 * rate, "median_seconds": 1.0,
            "median_cpu_seconds": 1.0, "peak_rss_mib": rss, "runs": []}


def _results() -> dict[str, Any]:
    def workload(description: str, pmr: int, c: int, decode: int, run: int,
                 text: int = 0, op: int = 0, rss: float = 120.0) -> dict[str, Any]:
        peers = {"pmr": _peer(pmr), "mariadb-binlog": _peer(c), "binlake-fetch": _peer(c * 2),
                 "binlake-decode": _peer(decode), "binlake-run": _peer(run, rss)}
        if text:
            peers |= {"binlake-decode-text": _peer(text), "binlake-decode-open-protocol":
                      _peer(op), "baseline-decode-text": _peer(100_000),
                      "baseline-decode-open-protocol": _peer(100_000)}
        return {"rows": 1000, "description": description, "binlog_bytes": 10**6,
                "peers": peers}
    results = {
        "options": {"scale": 1.0, "repeats": 3},
        "source": {"commit": "abcdef1234567890", "uncommitted": []},
        "machine": {"loadavg_at_start": [1.25, 1.0, 1.0]},
        "baseline": {"rev": "514fb4f", "commit": "514fb4f4d005aaaa", "native": True},
        "workloads": {
            "a_bulk_insert": workload("(a) 600000 rows", 40_000, 800_000, 900_000, 420_000,
                                      text=310_000, op=290_000),
            "b_single_row": workload("(b) one-row", 6_000, 60_000, 50_000, 29_000, rss=160.0),
            "c_update": workload("(c) updates", 15_000, 400_000, 390_000, 100_000),
            "d_wide": workload("(d) wide", 6_000, 140_000, 150_000, 40_000),
        },
        "startup": {"median_seconds": 0.61, "median_cpu_seconds": 0.55, "peak_rss_mib": 98.0},
        "memory": {"big_transaction": {"rows": 2_000_000,
                                       "binlake-run": _peer(100_000, rss=250.0)}},
    }
    results["workloads"]["a_bulk_insert"]["peers"]["binlake-run-s3"] = _peer(300_000)
    return results


def test_targets_are_ratios_of_the_same_run() -> None:
    found = {t["name"]: (t["measured"], t["verdict"]) for t in targets.evaluate(_results())}
    assert found == {
        "run_a_vs_c": (0.525, "PASS"),
        "run_a_vs_peer": (10.5, "PASS"),
        "run_b_vs_peer": (4.833, "MISS"),
        "run_a_s3_vs_disk": (0.714, "PASS"),
        "decode_a_vs_c": (1.125, "PASS"),
        "decode_c_vs_c": (0.975, "MISS"),
        "decode_d_vs_c": (1.071, "PASS"),
        "run_rss": (160.0, "MISS"),
        "run_big_transaction_rss": (250.0, "PASS"),
    }


def test_a_target_not_measured_says_so() -> None:
    results = _results()
    del results["baseline"]
    for workload in results["workloads"].values():
        for peer in ("baseline-decode-text", "baseline-decode-open-protocol"):
            workload["peers"].pop(peer, None)
    del results["memory"]
    results["workloads"]["a_bulk_insert"]["peers"]["binlake-run"]["rows_mismatch"] = [999]
    verdicts = {t["name"]: t["verdict"] for t in targets.evaluate(results)}
    assert [name for name, v in verdicts.items() if v == "not measured"] == [
        "run_a_vs_c", "run_a_vs_peer", "run_a_s3_vs_disk", "run_big_transaction_rss"]


def test_readme_table_from_the_json() -> None:
    results = _results()
    results["targets"] = targets.evaluate(results)
    lines = report.readme(results).splitlines()
    assert lines[0].startswith("Measured at commit abcdef1 by `python -m bench` (scale 1.0, "
                               "median of 3, load average 1.2 at the start)")
    assert lines[4] == ("| (a) 600000 rows | 40k | 800k | 900k (22.5× peer, 1.12× C) | "
                        "420k (10.5× peer, 0.53× C) | 310k (7.8× peer, 0.39× C) | "
                        "290k (7.2× peer, 0.36× C) |")
    assert lines[5] == ("| (b) one-row | 6.0k | 60k | 50k (8.3× peer, 0.83× C) | "
                        "29k (4.8× peer, 0.48× C) | - | - |")
    assert "| binlake run end to end on (a) >= 10x python-mysql-replication | 10.50x | PASS | " \
        "10.50x |" in lines
    assert "| binlake run peak RSS on (a)-(d) <= 157 MiB | " \
        "160 MiB | MISS |  |" in lines
    assert lines[-3] == ("`binlake run` over an empty binlog range (interpreter start, connect, "
                         "stop) takes 0.61 s; it is part of every `binlake run` figure above.")
    assert lines[-1] == ("Peak RSS of `binlake run`: 120–160 MiB on (a)–(d); a 2,000,000-row "
                         "single transaction at 250 MiB.")


def _many() -> dict[str, Any]:
    def case(tables: int, seconds: float, files: int, rss: float) -> dict[str, Any]:
        return {"tables": tables, "rows": 100_000, "seconds": seconds, "cpu_seconds": seconds,
                "rows_per_s": round(100_000 / seconds), "peak_rss_mib": rss, "files": files,
                "files_per_table": round(files / tables, 2), "lake_bytes": 2_400_000}
    return {"started": "20261126T000000", "rows": 100_000, "rows_per_txn": 5, "repeats": 3,
            "loadavg_at_start": [2.0, 2.0, 2.0],
            "cases": [case(20, 5.0, 20, 229.0), case(2000, 9.0, 4100, 280.0)],
            "ratio_seconds": 1.8, "ratio_cpu_seconds": 1.6}


def test_many_tables_targets_and_table_join_the_readme() -> None:
    found = {t["name"]: (t["measured"], t["verdict"])
             for t in targets.evaluate_many_tables(_many())}
    assert found == {"many_tables_time": (1.8, "PASS"), "many_tables_files": (2.05, "MISS"),
                     "many_tables_rss": (280.0, "PASS")}
    results = _results()
    results["targets"] = targets.evaluate(results)
    lines = report.readme(results, _many()).splitlines()
    assert ("| 2,000 tables within 2x the time of 20 for the same rows from a backlog | 1.80x "
            "| PASS | 1.60x |") in lines
    assert "| at most ~2 Parquet files per table (2,000 tables) | 2.05 | MISS |  |" in lines
    assert lines[-1].startswith("Time ratio 2,000 / 20 tables: 1.8x (target <= 2x)")
    many = dict(_many(), lake_fs="a fresh ext4 with a journal, on a loop device")
    lines = report.readme(results, many).splitlines()
    assert lines[-2:] == [
        "Lakes on a fresh ext4 with a journal, on a loop device.",
        "Time ratio 2,000 / 20 tables: 1.8x (target <= 2x); CPU seconds 1.6x"]
    assert any(line.startswith("| 2,000 | 9.00 | 9.00 | 11,111 | 280 | 4,100 | 2.05 |")
               for line in lines)


def test_snapshot_tables_for_both_flavors_name_their_dump_tool() -> None:
    def snap(tool: str, rate: int, dump: int) -> dict[str, Any]:
        return {"rows": 1_000_000, "dump_tool": tool,
                "binlake-snapshot": {"seconds": 1e6 / rate, "rows_per_s": rate,
                                     "peak_rss_mib": 150.0},
                "mariadb-dump": {"seconds": 1e6 / dump, "rows_per_s": dump,
                                 "peak_rss_mib": 12.0},
                "vs_mariadb_dump": round(rate / dump, 2),
                "writer_during_snapshot": {"commits": 10, "median_ms": 1.0, "p99_ms": 2.0,
                                           "max_ms": 3.5}}
    results = {**_results(), "snapshot": snap("mariadb-dump", 300_000, 330_000),
               "snapshot_mysql": snap("mysqldump", 200_000, 250_000)}
    text = report.render(results)
    assert "snapshot on MariaDB of 1,000,000 rows" in text
    assert "snapshot on MySQL of 1,000,000 rows" in text
    assert "0.91x" in text and "0.80x" in text
    assert "mysqldump " in text and "mariadb-dump " in text
    missing = report.render({**_results(), "snapshot_mysql": {"error": "not built"}})
    assert "snapshot on MySQL: not built" in missing
