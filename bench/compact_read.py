"""Spark read time of a lake of 5-second flushes, before and after compaction, with a state.

    python -m bench.compact_read [--flushes N] [--rows-per-flush R] [--smoke]

One table (``bench.events``: id, counter, label) gets one flush every 5 simulated seconds —
``--flushes 17280`` is one day, the default; each flush is one transaction of
``--rows-per-flush`` changes (inserts and updates over a growing key space) and one file,
as the daemon writes under steady traffic. No server is needed: the lake is landed by
``ParquetSink`` from a synthetic stream. Measured, warm (best of ``--repeats`` after one
unmeasured run), on one local[2] SparkSession:

* ``read_changes(...).count()`` and ``read_current_state(..., use_state=False).count()``
  (the whole history replayed) on the raw lake;
* ``materialize_state`` of the raw lake (its wall time), one more minute of flushes (12), then
  ``read_current_state`` from that state, the lake still not compacted;
* ``compact_lake`` (its wall time), the two reads again on the compacted lake, then — as
  production schedules it — a new state after the compaction, one more minute of flushes, and
  ``read_current_state`` from that state, next to the full replay of that same lake.

Ratios are against the raw lake's reads: compaction alone, the state alone, both.

Prints the times and ratios and writes JSON to ``bench/results/compact-read-<time>.json``.
The SparkSession is left running (a test calls :func:`main` in its own session).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from protocol.binlog.coltypes import FieldType as T
from sinks.parquet import ParquetSink, SinkOptions
from sinks.parquet.compact import CompactOptions, compact_lake
from sinks.parquet.testing import StreamBuilder, col

DAY_FLUSHES = 17_280  # 86,400 s / 5 s


def land(lake: str, flushes: int, rows_per_flush: int, *, first_key: int = 0,
         gtid_seq: int = 1) -> tuple[int, int]:
    """Land ``flushes`` one-transaction flushes — one INSERT of a new key and
    ``rows_per_flush - 1`` UPDATEs of earlier keys each, so history outgrows the live rows as
    it does in an OLTP table; returns the next free key and the change rows landed."""
    b = StreamBuilder(first_gtid_seq=gtid_seq, start_time_us=1_767_225_600_000_000
                      + (gtid_seq - 1) * 5_000_000)
    events = b.table("bench", "events", [col(0, T.LONGLONG, "id", pk=True),
                                         col(1, T.LONG, "counter"),
                                         col(2, T.VARCHAR, "label", charset=45)])
    sink = ParquetSink(lake, SinkOptions(flush_rows=1))
    sink.open()
    rng = random.Random(gtid_seq)
    counters: dict[int, int] = {k: 0 for k in range(first_key)}
    key = first_key
    landed = 0
    for _ in range(flushes):
        sink.handle(b.begin())
        sink.handle(b.insert(events, [(key, 0, f"e{key}")]))
        counters[key] = 0
        key += 1
        changed = sorted({rng.randrange(key) for _ in range(rows_per_flush - 1)})
        pairs = []
        for k in changed:
            pairs.append(((k, counters[k], f"e{k}"), (k, counters[k] + 1, f"e{k}")))
            counters[k] += 1
        sink.handle(b.update(events, pairs))
        landed += 1 + len(pairs)
        sink.handle(b.commit(advance_us=5_000_000))
    sink.flush()
    sink.close()
    return key, landed


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    fn()  # warm: JIT, caches, file system
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def files(lake: str) -> int:
    return sum(len([f for f in fs if f.endswith(".parquet")])
               for root, _d, fs in os.walk(os.path.join(lake, "bench", "events"))
               if "/_" not in root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compact_read", description=__doc__)
    parser.add_argument("--flushes", type=int, default=DAY_FLUSHES,
                        help="5-second flushes to land (17280 = one day)")
    parser.add_argument("--rows-per-flush", type=int, default=10,
                        help="changes per flush: one INSERT, the rest UPDATEs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="CI: 60 flushes, 1 repeat")
    parser.add_argument("--results-dir", type=Path,
                        default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    if args.smoke:
        args.flushes, args.repeats = 60, 1

    from sinks.spark import read_changes, spark_session
    from sinks.spark.state import materialize_state, read_current_state

    work = tempfile.mkdtemp(prefix="binlake-compact-bench-")
    lake = os.path.join(work, "lake")
    try:
        start = time.perf_counter()
        next_key, _landed = land(lake, args.flushes, args.rows_per_flush)
        land_s = time.perf_counter() - start
        spark = spark_session("binlake compact bench")

        def changes() -> int:
            return int(read_changes(spark, lake, "bench", "events").count())

        def state(use_state: bool = False) -> int:
            return int(read_current_state(spark, lake, "bench", "events",
                                          use_state=use_state).count())

        result: dict[str, Any] = {"flushes": args.flushes, "rows_per_flush": args.rows_per_flush,
                                  "land_s": round(land_s, 2), "files_before": files(lake)}
        result["changes_before_s"], rows = timed(changes, args.repeats)
        result["state_before_s"], live = timed(state, args.repeats)
        flushed = args.flushes

        def state_then_a_minute(label: str) -> int:
            """A state of the lake now, then one more minute of flushes (12) after it; returns
            the change rows those landed."""
            nonlocal next_key, flushed
            start = time.perf_counter()
            materialize_state(spark, lake, "bench", "events")
            result[f"materialize_{label}_s"] = round(time.perf_counter() - start, 2)
            next_key, landed = land(lake, 12, args.rows_per_flush, first_key=next_key,
                                    gtid_seq=flushed + 1)
            flushed += 12
            return landed

        minute = state_then_a_minute("before")
        result["state_from_state_before_s"], live_state_before = timed(
            lambda: state(True), args.repeats)
        start = time.perf_counter()
        compact_lake(lake, CompactOptions(min_age=0, grace=0))
        result["compact_s"] = round(time.perf_counter() - start, 2)
        result["files_after"] = files(lake)
        result["changes_after_s"], rows_after = timed(changes, args.repeats)
        result["state_after_s"], live_after = timed(state, args.repeats)
        # as scheduled in production: compact, then materialise, then new flushes arrive
        state_then_a_minute("after")
        result["state_from_state_after_s"], live_state_after = timed(
            lambda: state(True), args.repeats)
        result["state_replay_all_after_s"], live_all = timed(state, args.repeats)  # same lake
        assert rows_after == rows + minute, "compaction changed the rows"
        assert live_after == live_state_before == live + 12, \
            "state + replay differs from the full replay"
        assert live_state_after == live_all == live + 24, (live_state_after, live_all)
        result["rows"], result["live_keys"] = rows, live
        for key in list(result):
            if key.endswith("_s"):
                result[key] = round(result[key], 3)

        def ratio(slow: str, fast: str) -> float:
            return round(result[slow] / result[fast], 2) if result[fast] else float("inf")

        result["ratio_changes"] = ratio("changes_before_s", "changes_after_s")
        result["ratio_state_compacted"] = ratio("state_before_s", "state_after_s")
        result["ratio_state_materialised"] = ratio("state_before_s", "state_from_state_before_s")
        result["ratio_state_both"] = ratio("state_before_s", "state_from_state_after_s")
        result["ratio_state_vs_compacted_replay"] = ratio("state_replay_all_after_s",
                                                          "state_from_state_after_s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.flushes} flushes ({result['rows']} change rows, {result['live_keys']} live "
          f"keys): {result['files_before']} files -> {result['files_after']} "
          f"(compact {result['compact_s']} s)")
    print(f"read_changes count:  {result['changes_before_s']:.2f} s -> "
          f"{result['changes_after_s']:.2f} s  ({result['ratio_changes']}x)")
    print(f"read_current_state:  {result['state_before_s']:.2f} s replaying everything; "
          f"{result['state_after_s']:.2f} s compacted ({result['ratio_state_compacted']}x); "
          f"{result['state_from_state_before_s']:.2f} s from a state, not compacted "
          f"({result['ratio_state_materialised']}x); {result['state_from_state_after_s']:.2f} s "
          f"from a state, compacted ({result['ratio_state_both']}x; the full replay of that "
          f"same compacted lake {result['state_replay_all_after_s']:.2f} s)")
    print(f"materialise: {result['materialize_before_s']:.2f} s (raw lake), "
          f"{result['materialize_after_s']:.2f} s (compacted, from the first state)")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.results_dir / f"compact-read-{stamp}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
