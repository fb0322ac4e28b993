"""binlake's components as benchmark subjects: one process per measurement, so its peak RSS is
its own. The end-to-end figure is the real daemon, ``binlake run`` (bench/commands.py); these
modes isolate parts of it.

``python -m bench.binlake_reader MODE --port P --user U --server-id N [--file F]`` connects over
loopback TCP (no TLS: the sandbox has none, and the peers get none either), dumps from ``F``/4
with BINLOG_DUMP_NON_BLOCK to the server's end of binlog, and prints one JSON line. Modes:

``fetch``
    raw packets only: the wire ceiling (no event decoding at all).
``decode``
    ``EventStream`` (CRC32 checked, every row value decoded into what the landing path takes)
    + ``TransactionAssembler``: decode only, from the wire, each read's events as one batch
    as the daemon takes them (``ReplicationSession.buffered_events``).
``ack-on-receive`` / ``ack-after-land``
    a long-running semi-sync replica from the server's current end (blocking dump) for the
    commit-latency test: ACK on arrival, or land + flush the transaction and ACK its end.
    Prints ``{"ready": true}`` once registered, runs until SIGTERM. ``ack-on-receive-raw`` ACKs
    on arrival and decodes nothing: the session's own share of the latency.

The password comes from ``$BENCH_PASSWORD`` (never argv).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import sys
import time
from typing import Any

import trio

from protocol.binlog.model import BinlogPosition, RowsEvent
from protocol.binlog.stream import EventStream
from protocol.binlog.transactions import TransactionAssembler, TransactionCommit
from replica.core.connection import Connection, ConnectOptions
from replica.core.session import ReplicationSession, SemiSyncMode, SessionOptions, StartFrom

MODES = ("fetch", "decode", "ack-on-receive", "ack-on-receive-raw", "ack-after-land")


def _connect_options(args: argparse.Namespace) -> ConnectOptions:
    return ConnectOptions(host=args.host, port=args.port, user=args.user,
                          password=os.environ.get("BENCH_PASSWORD", ""), tls_mode="disabled",
                          read_timeout=None)


async def _session(args: argparse.Namespace, **options: Any) -> ReplicationSession:
    conn = await Connection.open(_connect_options(args))
    try:
        return await ReplicationSession.start(
            conn, SessionOptions(server_id=args.server_id, **options))
    except BaseException:
        await conn.close()
        raise


async def catch_up(args: argparse.Namespace) -> dict[str, Any]:
    """Dump ``args.file`` onwards to the end of binlog; count the rows (``decode``)."""
    mode = args.mode
    started = time.perf_counter()
    cpu_started = time.process_time()
    session = await _session(args, start=BinlogPosition(args.file, 4), non_blocking=True,
                             heartbeat_period=0)
    stream = landing_stream()
    assembler = TransactionAssembler()
    events = rows = values = nbytes = arrow_events = 0
    # decode takes each read's events as one batch, as the daemon does (Pipeline._read); a
    # tree from before batches (a --baseline-rev) takes them one at a time
    batches = getattr(session, "buffered_events", None) if mode == "decode" else None

    def count(decoded: list[Any]) -> None:
        nonlocal rows, values, arrow_events
        for event in decoded:
            if isinstance(event, RowsEvent):
                rows += event.row_count
                arrow_events += getattr(event, "arrow", None) is not None
                images = len(event.after_columns) + len(event.before_columns)
                values += images * event.row_count

    try:
        while True:
            batch = batches() if batches is not None else None
            if batch:
                events += len(batch)
                nbytes += sum(map(len, batch))
                decoded: list[Any] = []
                stream.feed_into(batch, decoded)
                count(decoded)
                assembler.feed_many(decoded)
                continue
            item = await session.next_event()
            if item is None:
                break
            events += 1
            nbytes += len(item.data)
            if mode == "fetch":
                continue
            decoded = stream.feed(item.data)
            count(decoded)
            for event in decoded:
                for _ in assembler.feed(event):
                    pass
    finally:
        await session.close()
    seconds = time.perf_counter() - started
    report: dict[str, Any] = {"events": events, "bytes": nbytes, "seconds": seconds,
                              "cpu_seconds": time.process_time() - cpu_started,
                              "self_vmhwm_kib": _peak_kib()}
    if mode != "fetch":  # fetch does not look inside events, so it has no row count
        report.update(rows=rows, values=values, arrow_events=arrow_events)
    return report


def landing_stream() -> EventStream:
    """An ``EventStream`` that decodes rows into what the landing path takes, as the daemon's
    pipeline builds it: with Arrow chunks (``arrow=True``) where this tree's stream has them.
    The report's ``arrow_events`` says how many rows events came out that way."""
    if "arrow" in inspect.signature(EventStream).parameters:
        return EventStream(arrow=True)  # type: ignore[call-arg, unused-ignore]
    return EventStream()


async def semi_sync_replica(args: argparse.Namespace) -> None:
    """ACK every flagged transaction until SIGTERM (see the module docstring)."""
    after_land = args.mode == "ack-after-land"
    raw = args.mode == "ack-on-receive-raw"
    mode = SemiSyncMode.ACK_AFTER_LAND if after_land else SemiSyncMode.ACK_ON_RECEIVE
    session = await _session(args, start=StartFrom.LATEST, semi_sync=mode)
    if not session.semi_sync:
        raise SystemExit("the server did not negotiate semi-sync (is it enabled on the master?)")
    print(json.dumps({"ready": True}), flush=True)
    stream = EventStream()
    assembler = TransactionAssembler()
    sink = None
    if after_land:
        from sinks.parquet import ParquetSink, SinkOptions  # noqa: PLC0415 - pyarrow: land only

        sink = ParquetSink(args.lake, SinkOptions())
        sink.open()
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            async def stop_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
            nursery.start_soon(stop_on_signal)
            async for item in session:
                if raw:
                    continue
                for event in stream.feed(item.data):
                    for txn_item in assembler.feed(event):
                        if sink is None:
                            continue
                        sink.handle(txn_item)
                        if isinstance(txn_item, TransactionCommit) and session.pending_acks:
                            sink.flush()  # durable and visible before the master hears of it
                            await session.ack(txn_item.end)
    if sink is not None:
        sink.close()
    print(json.dumps({"acks_sent": session.acks_sent, "self_vmhwm_kib": _peak_kib()}),
          flush=True)
    with trio.CancelScope(shield=True):
        await session.close()


def _peak_kib() -> int:
    """Peak RSS of this process since its exec (ru_maxrss would include the parent's image)."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1])
    return 0


def main(argv: list[str] | None = None) -> None:
    from sinks.parquet import prefer_jemalloc

    prefer_jemalloc()  # as the daemon does at start-up (pyarrow is imported later, if at all)
    parser = argparse.ArgumentParser(prog="python -m bench.binlake_reader")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--server-id", type=int, required=True)
    parser.add_argument("--file", help="binlog file to start from (catch-up modes)")
    parser.add_argument("--lake", help="lake directory (ack-after-land)")
    args = parser.parse_args(argv)
    if args.mode in ("fetch", "decode"):
        if not args.file:
            parser.error("catch-up modes need --file")
        print(json.dumps(trio.run(catch_up, args)), flush=True)
    else:
        if args.mode == "ack-after-land" and not args.lake:
            parser.error("ack-after-land needs --lake")
        trio.run(semi_sync_replica, args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
