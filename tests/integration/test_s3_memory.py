"""A 2-million-row single transaction lands on the test bed's Ceph gateway within the same
memory bound as on disk (peak RSS under ``RSS_LIMIT_MB``, see ``tests/unit/test_sink_memory.py``):
the sink spills to its local spool as on disk, and each file goes to the store as a streamed
multipart upload, never whole in memory.

Run as a script (``python tests/integration/test_s3_memory.py URL SPOOL ROWS``), this module is
the writer: a fresh process, so its peak RSS (``VmHWM``) is the sink's; the gateway's address and
keys come from ``BINLAKE_LAKE_S3_ENDPOINT`` and the standard ``AWS_*`` variables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.s3
@pytest.mark.slow
def test_two_million_row_transaction_on_s3_stays_under_the_disk_bound(
        ceph_gateway: object, s3_bucket: str, tmp_path: Path) -> None:
    from sinks.objectstore.commit import CommitLog, live_objects
    from sinks.objectstore.s3 import S3Settings, open_store
    from sinks.objectstore.view import layout_name
    from tests.servers.ceph import CephGateway
    from tests.unit.test_sink_memory import ROWS, RSS_LIMIT_MB

    assert isinstance(ceph_gateway, CephGateway)
    url = f"s3://{s3_bucket}/lake"
    env = dict(os.environ, PYTHONPATH=str(ROOT), BINLAKE_LAKE_S3_ENDPOINT=ceph_gateway.endpoint,
               **ceph_gateway.s3_env())
    env.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")  # as `binlake run` chooses it
    out = subprocess.run([sys.executable, __file__, url, str(tmp_path / "spool"), str(ROWS)],
                         env=env, check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert report["rows"] == ROWS
    assert report["spilled_batches"] > 0
    assert report["peak_rss_mb"] < RSS_LIMIT_MB, report
    store = open_store(url, S3Settings(endpoint=ceph_gateway.endpoint,
                                       access_key_id=ceph_gateway.access_key,
                                       secret_access_key=ceph_gateway.secret_key))
    keys = [key for key in live_objects(CommitLog(store).records())
            if layout_name(key).startswith("big/facts/") and key.endswith(".parquet")]
    assert sum(pq.ParquetFile(store.open_input(key)).metadata.num_rows for key in keys) == ROWS
    seqs = {s for key in keys
            for s in pq.read_table(store.open_input(key), columns=["_seq"]).column(0).unique()
            .to_pylist()}
    assert seqs == {1}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from sinks.factory import build_sink
    from sinks.objectstore.s3 import S3Settings
    from sinks.parquet.options import SinkOptions
    from tests.unit.test_sink_memory import peak_rss_kib, write_big_transaction

    defaults = SinkOptions()
    sink = build_sink(
        sys.argv[1], file_size_bytes=defaults.file_size_bytes, flush_rows=defaults.flush_rows,
        flush_interval_s=defaults.flush_interval_s,
        catch_up_interval_s=defaults.catch_up_interval_s, compression=defaults.compression,
        spool=sys.argv[2],
        s3=S3Settings(endpoint=os.environ["BINLAKE_LAKE_S3_ENDPOINT"],
                      access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                      secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"]))
    stats = write_big_transaction(sys.argv[1], int(sys.argv[3]), sink=sink)
    stats["peak_rss_mb"] = peak_rss_kib() // 1024
    print(json.dumps(stats))
