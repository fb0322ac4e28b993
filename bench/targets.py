"""The benchmark's speed and memory targets, checked against one run's results: PASS, MISS or not measured.

Reported, never asserted: on a shared machine a speed figure is evidence, not a test. Every
ratio compares two peers measured in the same run on the same binlog, so machine load weighs on
both sides. Rates are rows / median seconds (see bench/README.md for what each peer's seconds
include: ``binlake run`` and every ``*decode`` command are process wall time, start-up included).

``binlake decode``'s text is a debugging command's output, not the daemon's path: its figures
(and the baseline commit's beside them) are reported in the tables, but it has no speed target.
The product promises what it prints (docs/decoding.md), not how fast.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Target", "evaluate", "evaluate_many_tables"]

#: The peak RSS landing (a)–(d) must stay within (MiB, the README's 147–157 MB).
LANDING_RSS_MIB = 157.0
BIG_TRANSACTION_RSS_MIB = 300.0


@dataclass(frozen=True)
class Target:
    name: str
    goal: str  # the target in words
    threshold: float
    measured: float | None  # the ratio or MiB; None when the run did not measure it
    higher_is_better: bool = True
    #: The same ratio of rows per CPU-second (a shared machine's load weighs less on it);
    #: informative, the verdict is on wall time, as the targets are stated.
    measured_cpu: float | None = None

    @property
    def verdict(self) -> str:
        if self.measured is None:
            return "not measured"
        ok = (self.measured >= self.threshold if self.higher_is_better
              else self.measured <= self.threshold)
        return "PASS" if ok else "MISS"


def _rate(results: dict[str, Any], workload: str, peer: str,
          key: str = "rows_per_s") -> float | None:
    entry = results.get("workloads", {}).get(workload, {}).get("peers", {}).get(peer) or {}
    if "rows_mismatch" in entry or not entry.get(key):
        return None
    return float(entry[key])


def _ratio(results: dict[str, Any], workload: str, peer: str, reference: str,
           key: str = "rows_per_s") -> float | None:
    a, b = _rate(results, workload, peer, key), _rate(results, workload, reference, key)
    return round(a / b, 3) if a and b else None


def _speed(name: str, goal: str, threshold: float, results: dict[str, Any], workload: str,
           peer: str, reference: str) -> Target:
    return Target(name, goal, threshold, _ratio(results, workload, peer, reference),
                  measured_cpu=_ratio(results, workload, peer, reference, "rows_per_cpu_s"))


def _rss(entry: dict[str, Any] | None) -> float | None:
    return float(entry["peak_rss_mib"]) if entry and "peak_rss_mib" in entry else None


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets as JSON-ready dicts (name, goal, threshold, measured, verdict)."""
    found: list[Target] = [
        _speed("run_a_vs_c", "binlake run end to end on (a) >= 0.5x mariadb-binlog --verbose",
               0.5, results, "a_bulk_insert", "binlake-run", "mariadb-binlog"),
        _speed("run_a_vs_peer", "binlake run end to end on (a) >= 10x python-mysql-replication",
               10.0, results, "a_bulk_insert", "binlake-run", "pmr"),
        _speed("run_b_vs_peer", "binlake run on (b) one-row transactions >= 5x the peer",
               5.0, results, "b_single_row", "binlake-run", "pmr"),
        _speed("run_a_s3_vs_disk", "binlake run on (a) into S3 (a Ceph gateway on loopback) "
               ">= 0.5x into a local directory", 0.5, results, "a_bulk_insert",
               "binlake-run-s3", "binlake-run"),
    ]
    for workload, label in (("a_bulk_insert", "a"), ("c_update", "c"), ("d_wide", "d")):
        found.append(_speed(f"decode_{label}_vs_c",
                            f"decode only (wire) on ({label}) >= 1x mariadb-binlog --verbose",
                            1.0, results, workload, "binlake-decode", "mariadb-binlog"))
    landing = [_rss(w.get("peers", {}).get("binlake-run"))
               for w in results.get("workloads", {}).values()]
    measured = [r for r in landing if r is not None]
    found.append(Target("run_rss", f"binlake run peak RSS on (a)-(d) <= {LANDING_RSS_MIB:.0f} "
                        "MiB", LANDING_RSS_MIB,
                        max(measured) if measured else None, higher_is_better=False))
    big = results.get("memory", {}).get("big_transaction", {})
    found.append(Target("run_big_transaction_rss",
                        f"binlake run peak RSS on the {big.get('rows', 0):,}-row transaction "
                        f"<= {BIG_TRANSACTION_RSS_MIB:.0f} MiB", BIG_TRANSACTION_RSS_MIB,
                        _rss(big.get("binlake-run")), higher_is_better=False))
    return [dict(asdict(t), verdict=t.verdict) for t in found]


def evaluate_many_tables(many: dict[str, Any]) -> list[dict[str, Any]]:
    """The many-tables targets from a ``python -m bench.many_tables`` run (its own server and
    JSON): the most tables vs the fewest for the same rows, files per table, peak RSS."""
    cases = many.get("cases") or []
    if len(cases) < 2:
        return []
    few, most = cases[0], cases[-1]
    found = [
        Target("many_tables_time", f"{most['tables']:,} tables within 2x the time of "
               f"{few['tables']:,} for the same rows from a backlog", 2.0,
               many.get("ratio_seconds"), higher_is_better=False,
               measured_cpu=many.get("ratio_cpu_seconds")),
        Target("many_tables_files", f"at most ~2 Parquet files per table ({most['tables']:,} "
               "tables)", 2.0, most.get("files_per_table"), higher_is_better=False),
        Target("many_tables_rss", f"peak RSS < {BIG_TRANSACTION_RSS_MIB:.0f} MiB landing "
               "many tables", BIG_TRANSACTION_RSS_MIB,
               max(float(c["peak_rss_mib"]) for c in cases), higher_is_better=False),
    ]
    return [dict(asdict(t), verdict=t.verdict) for t in found]
