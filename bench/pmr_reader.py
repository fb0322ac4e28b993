"""The python-mysql-replication peer: stream a binlog range and decode every row's values.

Run by the benchmark with the peer's own venv interpreter, so it imports nothing from binlake.
File/position mode (its MariaDB GTID mode never finishes a large dump). It reads
from ``--file``/pos 4 with BINLOG_DUMP_NON_BLOCK until the server's end of binlog, touches
every decoded value, and prints one JSON line: rows, stream seconds, its peak RSS.

The password comes from ``$BENCH_PASSWORD`` (never argv).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent


def _vm_hwm_kib() -> int:
    """Peak RSS of this process since its exec (ru_maxrss would include the parent's image)."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--server-id", type=int, required=True)
    parser.add_argument("--file", required=True)
    args = parser.parse_args()

    settings = {"host": args.host, "port": args.port, "user": args.user,
                "passwd": os.environ.get("BENCH_PASSWORD", "")}
    started = time.perf_counter()
    cpu_started = time.process_time()
    stream = BinLogStreamReader(
        connection_settings=settings, server_id=args.server_id, blocking=False,
        resume_stream=True, log_file=args.file, log_pos=4,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )
    rows = values = 0
    try:
        for event in stream:
            for row in event.rows:  # decoding happens here
                rows += 1
                if "values" in row:
                    values += len(row["values"])
                else:
                    values += len(row["before_values"]) + len(row["after_values"])
    finally:
        stream.close()
    seconds = time.perf_counter() - started
    peak_kib = _vm_hwm_kib()
    cpu_seconds = time.process_time() - cpu_started
    print(json.dumps({"rows": rows, "values": values, "seconds": seconds,
                      "cpu_seconds": cpu_seconds,
                      "self_vmhwm_kib": peak_kib}))


if __name__ == "__main__":
    main()
