"""A 2-million-row single transaction lands with bounded memory (peak RSS under 300 MB).

The writer runs in a fresh subprocess so that the peak RSS is the sink's and not the test
runner's. It reads ``VmHWM`` from ``/proc/self/status``: the peak of the address space made by
``execve``. (``ru_maxrss`` is kept across ``execve``, so it would report the forked pytest
process's resident pages — hundreds of MB late in a run.) Run as a script, this module is that
writer.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import glob
import json
import os
import resource
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col

ROWS = 2_000_000
PER_EVENT = 1_000
RSS_LIMIT_MB = 300


def write_big_transaction(lake: str, rows: int,
                          sink: ParquetSink | None = None) -> dict[str, int]:
    """Land one ``rows``-row transaction into ``lake`` (or through ``sink``, a sink of another
    kind of lake, not open yet); the sink's counters."""
    b = StreamBuilder()
    table = b.table("big", "facts", [
        col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "label", charset=45),
        col(2, T.LONG, "qty"), col(3, T.DOUBLE, "price"), col(4, T.DATETIME2, "at"),
    ])
    sink = sink or ParquetSink(lake)
    sink.open()
    sink.handle(b.begin())
    base = dt.datetime(2024, 1, 1)
    second = dt.timedelta(seconds=1)
    for start in range(0, rows, PER_EVENT):
        ids = list(range(start, start + PER_EVENT))
        values = [(i, f"label-{i:09d}", i % 1000, i * 0.25, base + second * (i % 86400))
                  for i in ids]
        sink.handle(b.insert(table, values))
    sink.handle(b.commit())
    sink.close()
    return dataclasses.asdict(sink.stats)


@pytest.mark.slow
def test_two_million_row_transaction_stays_under_300_mb(tmp_path):
    lake = str(tmp_path / "lake")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    # the writer stands in for `binlake run`, whose start-up (sinks.parquet.prefer_jemalloc)
    # chooses Arrow's allocator before pyarrow's first import
    env.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    out = subprocess.run([sys.executable, __file__, lake, str(ROWS)], env=env, check=True,
                         capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["rows"] == ROWS
    assert report["spilled_batches"] > 0
    assert report["peak_rss_mb"] < RSS_LIMIT_MB, report
    files = glob.glob(os.path.join(lake, "big", "facts", "*", "*", "*.parquet"))
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == ROWS
    seqs = {s for f in files for s in pq.read_table(f, columns=["_seq"]).column(0).unique()
            .to_pylist()}
    assert seqs == {1}


def peak_rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: best effort


if __name__ == "__main__":
    stats = write_big_transaction(sys.argv[1], int(sys.argv[2]))
    stats["peak_rss_mb"] = peak_rss_kib() // 1024
    print(json.dumps(stats))
