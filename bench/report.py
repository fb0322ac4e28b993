"""The results as text tables (throughput with ratios, the speed targets, memory, snapshot,
semi-sync latency), and as docs/benchmarks.md's Markdown table.

``python -m bench.report [RESULTS.json]`` prints a saved run's tables again;
``python -m bench.report --readme [RESULTS.json]`` prints docs/benchmarks.md's throughput table and
targets from it (default: the newest file in bench/results/), to paste with its commit, and the
newest ``python -m bench.many_tables`` run's table and targets when there is one
(``--many-tables FILE`` picks another, ``--many-tables none`` leaves it out).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import targets

__all__ = ["TITLES", "parser", "readme", "render", "save"]

_PEER_ORDER = ("pmr", "mariadb-binlog", "binlake-fetch", "binlake-decode", "binlake-run",
               "binlake-run-s3", "baseline-run", "binlake-decode-text",
               "binlake-decode-open-protocol", "baseline-decode-text",
               "baseline-decode-open-protocol")
TITLES = {
    "pmr": "python-mysql-replication",
    "mariadb-binlog": "mariadb-binlog -v (C, from the file)",
    "binlake-fetch": "binlake fetch only (wire; component)",
    "binlake-decode": "binlake decode only (wire; component)",
    "binlake-run": "binlake run (end to end)",
    "binlake-run-s3": "binlake run into S3 (Ceph RGW, loopback)",
    "baseline-run": "  baseline: binlake run",
    "binlake-decode-text": "binlake decode --format text",
    "binlake-decode-open-protocol": "binlake decode --format open-protocol",
    "baseline-decode-text": "  baseline: --format text",
    "baseline-decode-open-protocol": "  baseline: --format open-protocol",
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
    base = results.get("baseline")
    if base:
        native = "" if base.get("native") else " (its native decoder did not build)"
        out.append(f"baseline: binlake decode of {base['commit'][:12]}{native}")
    out.append("rows/s = rows / median seconds: process wall time, start-up included, for "
               "binlake run, binlake decode and mariadb-binlog; connect to end of stream for the "
               "Python programs (the peer, the wire components). rows/CPU-s likewise with CPU "
               "time (steadier on a shared machine). RSS = peak of the process.")
    for name, workload in results.get("workloads", {}).items():
        peers = workload["peers"]
        pmr = _rate(peers.get("pmr"))
        c = _rate(peers.get("mariadb-binlog"))
        pmr_cpu = _rate(peers.get("pmr"), "rows_per_cpu_s")
        c_cpu = _rate(peers.get("mariadb-binlog"), "rows_per_cpu_s")
        rows = []
        for peer in _PEER_ORDER:
            if peer not in peers:  # not measured in this run's mode (e.g. baseline-run)
                continue
            entry = peers[peer]
            if "skipped" in entry and peer.startswith("baseline"):
                continue
            if "error" in entry or "skipped" in entry:
                reason = "error" if "error" in entry else "skipped"
                rows.append([TITLES[peer], reason, "", "", "", "", "", "", "", ""])
                continue
            rate = _rate(entry)
            cpu_rate = _rate(entry, "rows_per_cpu_s")
            binlake = peer not in ("pmr", "mariadb-binlog")
            mismatch = " (rows!)" if "rows_mismatch" in entry else ""
            mismatch += " *" if "note" in entry else ""
            rows.append([
                TITLES[peer], f"{entry['median_seconds']:.3f}", f"{rate:,.0f}{mismatch}",
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
    start = results.get("startup")
    if start and "median_seconds" in start:
        out.append("")
        out.append(f"binlake run over an empty binlog range (start-up, connect, stop; part of "
                   f"every binlake run figure): {start['median_seconds']:.2f} s wall, "
                   f"{start['median_cpu_seconds']:.2f} s CPU, {start['peak_rss_mib']:.0f} MiB")
    goals = results.get("targets")
    if goals:
        out.append("")
        out.append("speed and memory targets (same-run ratios; reported, not asserted)")
        out.append(_table(["target", "measured", "threshold", "verdict", "by CPU time"],
                          [[t["goal"], _measured(t), f"{t['threshold']:g}", t["verdict"],
                            _measured(t, "measured_cpu")] for t in goals]))
    memory = results.get("memory")
    if memory:
        rows = []
        for name, entry in memory.items():
            for mode in ("binlake-decode", "binlake-run"):
                m = entry.get(mode, {})
                if not m:
                    continue
                if "error" in m:
                    rows.append([f"{name} ({mode})", f"{entry['rows']:,}", "error", "", ""])
                    continue
                rows.append([f"{name} ({mode})", f"{entry['rows']:,}",
                             f"{m['median_seconds']:.1f}", f"{m['rows_per_s']:,}",
                             f"{m['peak_rss_mib']:.0f}"])
        out.append("")
        out.append("memory (peak RSS of the binlake process: decode only, the daemon)")
        out.append(_table(["run", "rows", "seconds", "rows/s", "RSS MiB"], rows))
    for key, flavor in (("snapshot", "MariaDB"), ("snapshot_mysql", "MySQL")):
        out += _snapshot_lines(results.get(key), flavor)
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


def _measured(target: dict[str, Any], key: str = "measured") -> str:
    value = target.get(key)
    if value is None:
        return "-" if key == "measured" else ""
    if target["name"].endswith("_files"):
        return f"{value:.2f}"
    return f"{value:.0f} MiB" if "rss" in target["name"] else f"{value:.2f}x"


_README_COLUMNS = ("pmr", "mariadb-binlog", "binlake-decode", "binlake-run", "binlake-decode-text",
                   "binlake-decode-open-protocol")
_README_TITLES = ("python-mysql-replication", "mariadb-binlog -v (C, from the file)",
                  "binlake decode only (wire)", "`binlake run` end to end",
                  "`binlake decode --format text`", "`--format open-protocol`")


def _k(rate: float | None) -> str:
    if rate is None:
        return "-"
    return f"{rate / 1000:.0f}k" if rate >= 10_000 else f"{rate / 1000:.1f}k"


def readme(results: dict[str, Any], many: dict[str, Any] | None = None) -> str:
    """docs/benchmarks.md's throughput table (rows/s, wall; ratios vs the peer and vs C), the targets,
    and the peak RSS line, as Markdown; with ``many`` (a ``bench.many_tables`` run) its table,
    and its targets in the targets table."""
    src = results.get("source", {})
    opts = results.get("options", {})
    load = float(results.get("machine", {}).get("loadavg_at_start", [0.0])[0])
    dirty = " plus uncommitted changes" if src.get("uncommitted") else ""
    lines = [f"Measured at commit {src.get('commit', '?')[:7]}{dirty} by `python -m bench` "
             f"(scale {opts.get('scale')}, median of {opts.get('repeats')}, load average "
             f"{load:.1f} at the start), rows/s; ratios are to python-mysql-replication and to "
             "mariadb-binlog in the same run:", "",
             "| workload | " + " | ".join(_README_TITLES) + " |",
             "|---" * (len(_README_TITLES) + 1) + "|"]
    for workload in results.get("workloads", {}).values():
        peers = workload["peers"]
        pmr, c = _rate(peers.get("pmr")), _rate(peers.get("mariadb-binlog"))
        cells = []
        for peer in _README_COLUMNS:
            rate = _rate(peers.get(peer))
            cell = _k(rate)
            if rate and peer not in ("pmr", "mariadb-binlog"):
                ratios = [f"{rate / pmr:.1f}× peer" if pmr else "",
                          f"{rate / c:.2f}× C" if c else ""]
                cell += f" ({', '.join(r for r in ratios if r)})"
            cells.append(cell)
        lines.append(f"| {workload['description']} | " + " | ".join(cells) + " |")
    base = results.get("baseline")
    goals = list(results.get("targets") or [])
    if many is not None:
        goals += targets.evaluate_many_tables(many)
    if goals:
        lines += ["", "| target | measured (wall) | | by CPU time |",
                  "|---|---|---|---|"]
        lines += [f"| {t['goal']} | {_measured(t)} | {t['verdict']} | "
                  f"{_measured(t, 'measured_cpu')} |" for t in goals]
    if base:
        lines += ["", f"The baseline `binlake decode` figures are commit "
                      f"{base['commit'][:7]}'s, measured in the same run (no target: a "
                      "debugging command's output)."]
    rss = [w["peers"]["binlake-run"]["peak_rss_mib"] for w in results.get("workloads", {}).values()
           if "peak_rss_mib" in w["peers"].get("binlake-run", {})]
    memory = results.get("memory", {})
    extra = []
    for name, label in (("big_transaction", "a {rows:,}-row single transaction"),
                        ("backlog", "a {rows:,}-row backlog of all four")):
        entry = memory.get(name, {})
        if "peak_rss_mib" in entry.get("binlake-run", {}):
            extra.append(f"{label.format(rows=entry['rows'])} at "
                         f"{entry['binlake-run']['peak_rss_mib']:.0f} MiB")
    start = results.get("startup", {})
    if "median_seconds" in start:
        lines += ["", f"`binlake run` over an empty binlog range (interpreter start, connect, "
                      f"stop) takes {start['median_seconds']:.2f} s; it is part of every "
                      "`binlake run` figure above."]
    if rss:
        lines += ["", f"Peak RSS of `binlake run`: {min(rss):.0f}–{max(rss):.0f} MiB on (a)–(d)"
                      + ("; " + ", ".join(extra) if extra else "") + "."]
    if many is not None:
        from .many_tables import render as render_many  # noqa: PLC0415 - its own server code

        lines += ["", f"Many tables, `python -m bench.many_tables` (its own run, started "
                      f"{many.get('started', '?')}, load average "
                      f"{float(many.get('loadavg_at_start', [0.0])[0]):.1f} at the start):", "",
                  render_many(many)]
    return "\n".join(lines)


def parser(prog: str, doc: str | None, what: str) -> argparse.ArgumentParser:
    """A step's command line with the options every step has: ``--repeats`` (runs per
    ``what``, the median), ``--seed``, ``--results-dir``."""
    out = argparse.ArgumentParser(prog=prog, description=doc,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--repeats", type=int, default=3, help=f"runs per {what}, median (3)")
    out.add_argument("--seed", type=int, default=20241121)
    out.add_argument("--results-dir", type=Path,
                     default=Path(__file__).resolve().parent / "results")
    return out


def save(results_dir: Path, step: str, results: dict[str, Any], table: str) -> Path:
    """Write a step's results as ``results_dir/STEP-<started>.json`` and print its table and
    where the JSON went (``bench.many_tables``, ``bench.side_by_side``)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{step}-{results['started']}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(table)
    print(f"JSON: {path}")
    return path


def _newest(results_dir: Path, pattern: str = "[0-9]*T[0-9]*.json") -> Path | None:
    found = sorted(results_dir.glob(pattern))
    return found[-1] if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report",
                                     description="print a saved benchmark run")
    parser.add_argument("results", nargs="?", type=Path,
                        help="results JSON (default: the newest in bench/results/)")
    parser.add_argument("--readme", action="store_true",
                        help="docs/benchmarks.md's Markdown tables and targets instead of the text tables")
    parser.add_argument("--many-tables", default=None,
                        help="with --readme: a bench.many_tables JSON to include (default: the "
                             "newest many_tables-*.json beside the results; 'none' skips)")
    args = parser.parse_args(argv)
    results_dir = Path(__file__).resolve().parent / "results"
    path = args.results or _newest(results_dir)
    if path is None:
        raise SystemExit(f"no results in {results_dir}; run `python -m bench` first")
    results = json.loads(path.read_text())
    if not args.readme:
        print(render(results))
        return 0
    many_path: Path | None = None
    if args.many_tables is None:
        many_path = _newest(path.parent, "many_tables-*.json")
    elif args.many_tables.lower() != "none":
        many_path = Path(args.many_tables)
    many = json.loads(many_path.read_text()) if many_path is not None else None
    print(readme(results, many))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _snapshot_lines(snap: dict[str, Any] | None, flavor: str) -> list[str]:
    """The snapshot step's tables: binlake beside the flavor's dump tool, and the writer."""
    out: list[str] = []
    if snap is None:
        return out
    if "error" in snap and "rows" not in snap:
        return ["", f"snapshot on {flavor}: {snap['error']}"]
    if snap:
        rows = []
        tool = snap.get("dump_tool", "mariadb-dump")
        for name in ("binlake-snapshot", "binlake-snapshot-with-writer", "mariadb-dump"):
            entry = snap.get(name)
            if entry is None:
                continue
            if "error" in entry:
                rows.append([name, "error", "", "", ""])
                continue
            mismatch = f" (rows {entry['rows_mismatch']}!)" if "rows_mismatch" in entry else ""
            label = tool if name == "mariadb-dump" else name
            rows.append([label + mismatch, f"{entry.get('seconds', 0):.2f}",
                         f"{entry.get('rows_per_s', 0):,}", f"{entry.get('peak_rss_mib', 0)}",
                         f"{snap['vs_mariadb_dump']:.2f}x" if name == "binlake-snapshot"
                         and "vs_mariadb_dump" in snap else ""])
        out.append("")
        out.append(f"snapshot on {flavor} of {snap['rows']:,} rows of workload (a)'s shape: the "
                   "readers "
                   "alone, then binlake with a writer updating rows (it lands them too)")
        out.append(_table(["reader", "seconds", "rows/s", "RSS MiB", "vs dump"], rows))
        lat = []
        for name in ("writer_alone", "writer_during_snapshot"):
            entry = snap.get(name, {})
            if "max_ms" in entry:
                lat.append([name, f"{entry['commits']}", f"{entry['median_ms']:.3f}",
                            f"{entry['p99_ms']:.3f}", f"{entry['max_ms']:.3f}"])
        if lat:
            out.append(_table(["writer", "commits", "median ms", "p99 ms", "worst ms"], lat))
    return out
