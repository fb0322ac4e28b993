"""Microbenchmark of the landing path alone: synthetic transaction items → ``ParquetSink``.

The server benchmark measures decode and land together; this one isolates what the sink costs
per row, so a change to ``sinks/parquet`` can be measured in seconds and profiled without a
server. The items are built up front with ``StreamBuilder`` (values of the types the row
decoder produces: ``int``, ``str``, ``Decimal``, ``datetime``, ``float``) and shaped like the
server benchmark's workloads:

``a``  the 8-column mixed table, one 1000-row INSERT per transaction, as ``a_bulk_insert``
``c``  UPDATEs of those rows with full before/after images, 1000 per event
``d``  a 50-column table, 500-row INSERTs
``b``  1-row transactions

One rows event per statement here, while a server splits a statement into ~8 KiB events (about
30 rows of (a), 14 UPDATE pairs of (c)), so per-event costs weigh more on a real stream.

Run from the repository root::

    python -m bench.land_micro                 # all shapes, 3 repeats, median rows/CPU-s
    python -m bench.land_micro --rows 50000 a  # one shape, smaller
    python -m bench.land_micro --profile a     # cProfile of one run, top functions
    python -m bench.land_micro --backlog 1     # peak RSS landing (a)-(d) as one catch-up
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

from protocol.binlog.coltypes import FieldType as T
from sinks.parquet import ParquetSink, SinkOptions, prefer_jemalloc
from sinks.parquet.testing import StreamBuilder, col

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_WORDS = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
          "incididunt ut labore et dolore magna aliqua").split()
_ENUM = ("new", "active", "suspended", "closed")
_EPOCH = _dt.datetime(2024, 1, 1)
UTF8MB4 = 45
_ZERO = Decimal(0)
_CENT = Decimal("0.01")


def _null(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.05 else value


def _mixed_row(rng: random.Random, row_id: int) -> tuple[Any, ...]:
    return (
        row_id,
        _null(rng, rng.randint(-(2**62), 2**62)),
        _null(rng, "".join(rng.choices(_ALNUM, k=rng.randint(8, 64)))),
        _null(rng, Decimal(rng.randint(-(10**11), 10**11)).scaleb(-2)),
        _null(rng, _EPOCH + _dt.timedelta(seconds=rng.randrange(63_072_000),
                                          microseconds=rng.randrange(1_000_000))),
        _null(rng, rng.uniform(-1e6, 1e6)),
        _null(rng, " ".join(rng.choices(_WORDS, k=rng.randint(3, 60)))),
        rng.choice(_ENUM),
    )


def _mixed_table(b: StreamBuilder, name: str) -> Any:
    return b.table("bench", name, [
        col(0, T.LONG, "id", pk=True), col(1, T.LONGLONG, "big"),
        col(2, T.VARCHAR, "name", charset=UTF8MB4), col(3, T.NEWDECIMAL, "amount",
                                                         precision=12, scale=2),
        col(4, T.DATETIME2, "ts"), col(5, T.DOUBLE, "ratio"), col(6, T.BLOB, "note",
                                                                   charset=UTF8MB4),
        col(7, T.ENUM, "state", nullable=False, enum_values=_ENUM),
    ])


_WIDE: tuple[tuple[int, dict[str, Any], Callable[[random.Random], Any]], ...] = (
    (T.LONG, {}, lambda r: r.randint(-(2**31), 2**31 - 1)),
    (T.LONGLONG, {}, lambda r: r.randint(-(2**63), 2**63 - 1)),
    (T.VARCHAR, {"charset": UTF8MB4}, lambda r: "".join(r.choices(_ALNUM, k=r.randint(1, 32)))),
    (T.NEWDECIMAL, {"precision": 10, "scale": 2},
     lambda r: Decimal(r.randint(-(10**9), 10**9)).scaleb(-2)),
    (T.DATETIME2, {}, lambda r: _EPOCH + _dt.timedelta(seconds=r.randrange(63_072_000),
                                                       microseconds=r.randrange(1_000_000))),
    (T.DOUBLE, {}, lambda r: r.uniform(-1e9, 1e9)),
    (T.NEWDATE, {}, lambda r: (_EPOCH + _dt.timedelta(days=r.randrange(3650))).date()),
    (T.SHORT, {"unsigned": True}, lambda r: r.randrange(65536)),
    (T.TINY, {}, lambda r: r.randint(-128, 127)),
    (T.STRING, {"charset": UTF8MB4}, lambda r: "".join(r.choices(_ALNUM, k=8))),
)


def shape_a(rows: int, per_event: int = 1000, update: bool = False,
            b: StreamBuilder | None = None, name: str = "mixed") -> Iterator[Any]:
    rng = random.Random(1)
    b = b or StreamBuilder()
    table = _mixed_table(b, name)
    for start in range(1, rows + 1, per_event):
        chunk = [_mixed_row(rng, i) for i in range(start, min(start + per_event, rows + 1))]
        yield b.begin()
        if update:
            pairs = [(row, (row[0], (row[1] or 0) // 2 + 1, (row[2] or "")[:60] + "-u",
                            ((row[3] or _ZERO) / 2 + _CENT).quantize(_CENT),
                            (row[4] or _EPOCH) + _dt.timedelta(seconds=1),
                            (row[5] or 0.0) * 0.5 + 1, row[6], "active")) for row in chunk]
            yield b.update(table, pairs)
        else:
            yield b.insert(table, chunk)
        yield b.commit()


def shape_b(rows: int, b: StreamBuilder | None = None) -> Iterator[Any]:
    return shape_a(rows, per_event=1, b=b, name="mixed_b")


def shape_c(rows: int, b: StreamBuilder | None = None) -> Iterator[Any]:
    return shape_a(rows, update=True, b=b)


def shape_d(rows: int, per_event: int = 500, b: StreamBuilder | None = None) -> Iterator[Any]:
    rng = random.Random(4)
    b = b or StreamBuilder()
    columns = [col(0, T.LONG, "id", pk=True)]
    for i in range(1, 50):
        code, kw, _ = _WIDE[(i - 1) % len(_WIDE)]
        columns.append(col(i, code, f"c{i:02d}", **kw))
    table = b.table("bench", "wide", columns)
    makers = [_WIDE[(i - 1) % len(_WIDE)][2] for i in range(1, 50)]
    for start in range(1, rows + 1, per_event):
        chunk = [(i, *(_null(rng, make(rng)) for make in makers))
                 for i in range(start, min(start + per_event, rows + 1))]
        yield from (b.begin(), b.insert(table, chunk), b.commit())


def backlog(scale: float) -> Iterator[Any]:
    """(a)–(d) one after the other in one stream, as the server benchmark's memory run."""
    b = StreamBuilder()
    rows = int(200_000 * scale)
    yield from shape_a(rows, b=b)
    yield from shape_b(rows, b=b)
    yield from shape_c(rows, b=b)
    yield from shape_d(int(50_000 * scale), b=b)


def peak_rss_mib() -> float:
    """``VmHWM`` of this process (see tests/unit/test_sink_memory.py for why not ru_maxrss)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


SHAPES: dict[str, tuple[Callable[[int], Iterator[Any]], int]] = {
    "a": (shape_a, 200_000), "b": (shape_b, 20_000), "c": (shape_c, 200_000),
    "d": (shape_d, 50_000),
}


def land(items: Iterable[Any], options: SinkOptions | None = None) -> tuple[float, float, int]:
    """Land ``items`` into a fresh lake; (CPU seconds, wall seconds, rows landed)."""
    lake = tempfile.mkdtemp(prefix="binlake-land-micro-")
    try:
        sink = ParquetSink(lake, options)
        sink.open()
        cpu, wall = time.process_time(), time.perf_counter()
        handle = sink.handle
        for item in items:
            handle(item)
        sink.close()
        return time.process_time() - cpu, time.perf_counter() - wall, sink.stats.rows
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    prefer_jemalloc()  # as the daemon does at start-up
    parser = argparse.ArgumentParser(prog="python -m bench.land_micro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="*", metavar="SHAPE", help="a, b, c, d (default: all)")
    parser.add_argument("--rows", type=int, help="rows per shape (default: per shape)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one run per shape")
    parser.add_argument("--backlog", type=float, metavar="SCALE",
                        help="instead: land (a)-(d) as one stream (generated on the fly, SCALE "
                             "1 = the server benchmark's sizes) and print the peak RSS")
    args = parser.parse_args(argv)
    unknown = set(args.shapes) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(sorted(unknown))}")
    args.shapes = args.shapes or list(SHAPES)
    if args.backlog:
        before = peak_rss_mib()
        cpu, _, rows = land(backlog(args.backlog))
        print(f"backlog: {rows} rows  cpu {cpu:.1f}s (incl. generating)  peak RSS "
              f"{peak_rss_mib():.0f} MiB (after imports {before:.0f} MiB)")
        return
    for name in args.shapes:
        make, default_rows = SHAPES[name]
        items = list(make(args.rows or default_rows))
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            land(items)
            profiler.disable()
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)
            continue
        runs = [land(items) for _ in range(args.repeats)]
        cpu = statistics.median(r[0] for r in runs)
        rows = runs[0][2]
        print(f"{name}: {rows} rows  cpu {cpu:.3f}s  {rows / cpu:,.0f} rows/CPU-s  "
              f"{cpu / rows * 1e6:.2f} us/row", flush=True)


if __name__ == "__main__":
    main()
