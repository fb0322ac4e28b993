"""The results as text tables: throughput with ratios, memory, semi-sync latency."""

from __future__ import annotations

from typing import Any

__all__ = ["render"]

_PEER_ORDER = ("pmr", "mariadb-binlog", "binlake-fetch", "binlake-decode", "binlake-land")
_TITLES = {
    "pmr": "python-mysql-replication",
    "mariadb-binlog": "mariadb-binlog -v (C)",
    "binlake-fetch": "binlake fetch (no decode)",
    "binlake-decode": "binlake decode",
    "binlake-land": "binlake end to end",
}


def _rate(entry: dict[str, Any] | None, key: str = "rows_per_s") -> float | None:
    if not entry or not entry.get(key):
        return None
    return float(entry[key])


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}x" if a and b else "     -"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                        enumerate(zip(r, widths, strict=True))) for r in rows]
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    out: list[str] = []
    opts = results.get("options", {})
    out.append(f"binlake benchmark  {results.get('started', '')}  scale={opts.get('scale')} "
               f"repeats={opts.get('repeats')} seed={opts.get('seed')}  "
               f"server {results.get('server', {}).get('version', '?')}  "
               f"python-mysql-replication {results.get('peers', {}).get('pmr') or 'n/a'}")
    src = results.get("source", {})
    if src:
        dirty = f" + uncommitted {len(src['uncommitted'])} file(s)" if src.get("uncommitted") else ""
        out.append(f"source {src.get('commit', '?')[:12]}{dirty}; * = fewer rounds (slow run)")
    out.append("rows/s = rows / median stream seconds (Python peers: connect to end of stream; "
               "mariadb-binlog: process wall); rows/CPU-s likewise with CPU time (steadier on a "
               "shared machine). RSS = peak of the process.")
    for name, workload in results.get("workloads", {}).items():
        peers = workload["peers"]
        pmr = _rate(peers.get("pmr"))
        c = _rate(peers.get("mariadb-binlog"))
        pmr_cpu = _rate(peers.get("pmr"), "rows_per_cpu_s")
        c_cpu = _rate(peers.get("mariadb-binlog"), "rows_per_cpu_s")
        rows = []
        for peer in _PEER_ORDER:
            entry = peers.get(peer, {})
            if "error" in entry or "skipped" in entry:
                reason = "error" if "error" in entry else "skipped"
                rows.append([_TITLES[peer], reason, "", "", "", "", "", "", "", ""])
                continue
            rate = _rate(entry)
            cpu_rate = _rate(entry, "rows_per_cpu_s")
            binlake = peer.startswith("binlake")
            mismatch = " (rows!)" if "rows_mismatch" in entry else ""
            mismatch += " *" if "note" in entry else ""
            rows.append([
                _TITLES[peer], f"{entry['median_seconds']:.3f}", f"{rate:,.0f}{mismatch}",
                _ratio(rate, pmr) if binlake else "", _ratio(rate, c) if binlake else "",
                f"{entry.get('median_cpu_seconds', 0):.3f}", f"{cpu_rate or 0:,.0f}",
                _ratio(cpu_rate, pmr_cpu) if binlake else "",
                _ratio(cpu_rate, c_cpu) if binlake else "",
                f"{entry['peak_rss_mib']:.0f}",
            ])
        out.append("")
        out.append(f"{name}: {workload['description']}; binlog "
                   f"{workload['binlog_bytes'] / 1e6:.1f} MB")
        out.append(_table(["peer", "seconds", "rows/s", "vs pmr", "vs C", "CPU s", "rows/CPU-s",
                           "vs pmr", "vs C", "RSS MiB"], rows))
    memory = results.get("memory")
    if memory:
        rows = []
        for name, entry in memory.items():
            for mode in ("binlake-decode", "binlake-land"):
                m = entry.get(mode, {})
                if "error" in m:
                    rows.append([f"{name} ({mode})", f"{entry['rows']:,}", "error", "", ""])
                    continue
                rows.append([f"{name} ({mode})", f"{entry['rows']:,}",
                             f"{m['median_seconds']:.1f}", f"{m['rows_per_s']:,}",
                             f"{m['peak_rss_mib']:.0f}"])
        out.append("")
        out.append("memory (peak RSS of the binlake process)")
        out.append(_table(["run", "rows", "seconds", "rows/s", "RSS MiB"], rows))
    snap = results.get("snapshot")
    if snap:
        rows = []
        for name in ("binlake-snapshot", "mariadb-dump"):
            entry = snap.get(name, {})
            if "error" in entry:
                rows.append([name, "error", "", "", ""])
                continue
            mismatch = f" (rows {entry['rows_mismatch']}!)" if "rows_mismatch" in entry else ""
            rows.append([name + mismatch, f"{entry.get('seconds', 0):.2f}",
                         f"{entry.get('rows_per_s', 0):,}", f"{entry.get('peak_rss_mib', 0)}",
                         f"{snap['vs_mariadb_dump']:.2f}x" if name == "binlake-snapshot"
                         and "vs_mariadb_dump" in snap else ""])
        out.append("")
        out.append(f"snapshot of {snap['rows']:,} rows of workload (a)'s shape, a writer "
                   "updating rows throughout")
        out.append(_table(["reader", "seconds", "rows/s", "RSS MiB", "vs dump"], rows))
        lat = []
        for name in ("writer_alone", "writer_during_snapshot"):
            entry = snap.get(name, {})
            if "max_ms" in entry:
                lat.append([name, f"{entry['commits']}", f"{entry['median_ms']:.3f}",
                            f"{entry['p99_ms']:.3f}", f"{entry['max_ms']:.3f}"])
        if lat:
            out.append(_table(["writer", "commits", "median ms", "p99 ms", "worst ms"], lat))
    semi = results.get("semisync")
    if semi:
        ref = semi.get("mariadb-replica", {}).get("median_ms")
        rows = []
        for name in ("mariadb-replica", "binlake-ack-on-receive", "binlake-ack-on-receive-raw",
                     "binlake-ack-after-land", "async"):
            entry = semi.get(name, {})
            if "median_ms" not in entry:
                continue
            note = entry.get("warning", "")
            rows.append([name, f"{entry['commits']}", f"{entry['median_ms']:.3f}",
                         f"{entry['p99_ms']:.3f}",
                         f"{entry['median_ms'] / ref:.2f}x" if ref else "-", note])
        out.append("")
        out.append(f"semi-sync commit latency (autocommit INSERT, wait point "
                   f"{semi.get('wait_point')}, {semi.get('rounds')} rounds)")
        out.append(_table(["replica", "commits", "median ms", "p99 ms", "vs MariaDB", ""], rows))
    if results.get("profile"):
        out.append("")
        out.append(f"profile of binlake decode on a_bulk_insert: {results['profile']}")
    return "\n".join(out)
