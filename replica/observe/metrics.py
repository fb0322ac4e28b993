"""Prometheus metrics, liveness and readiness, served over HTTP from the daemon's trio loop.

The daemon owns one :class:`Metrics`. It counts what flows (events, rows, bytes, time spent
decoding and landing), records where the lake stands (last landed GTID, lag), and keeps the
state ``/readyz`` answers from (connected, lag). :func:`serve_http` exposes it:

* ``/metrics`` — Prometheus text (or OpenMetrics when the scraper asks for it);
* ``/healthz`` — 200 while the process's event loop runs: the liveness probe;
* ``/readyz`` — 200 when connected to the server and less than ``ready_max_lag`` seconds behind,
  503 with the reason otherwise: the readiness probe and the thing to alert on.

The HTTP side is a deliberately tiny HTTP/1.0-style responder on trio (no threads, no framework):
read one request head, answer, close. It serves three fixed paths to scrapers and probes, so a
general HTTP implementation would only add surface.

Lag is not reported but read: ``/readyz`` and the ``binlake_lag_*`` gauges ask the daemon's
:class:`~replica.observe.lag.LagTracker` at the moment of the request, so they show the same
figure as each other and as ``binlake status`` (one definition, in :mod:`replica.observe.lag`).
Counters are fed by product code only: the pipeline counts events, decode time, rows and
transactions once they are durable, land durations, CRC failures and semi-sync ACKs; the daemon
counts reconnects.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import choose_encoder

from replica.observe.lag import Lag

__all__ = ["Metrics", "serve_http", "ROW_OPS"]

ROW_OPS = ("insert", "update", "delete")

#: Per-request time budget: a scraper that does not send its request in time is dropped.
REQUEST_TIMEOUT = 10.0
MAX_REQUEST_HEAD = 16 * 1024

_LAND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every metric binlake exports, plus the connection/lag state behind ``/readyz``.

    Args:
      ready_max_lag: seconds behind the server beyond which the daemon is not ready.
      registry: where the metrics are registered; a fresh one by default, so several daemons
        (or tests) in one process do not collide.
      lag: the daemon's lag now (:meth:`replica.observe.lag.LagTracker.measure`); None before
        anything is known.
    """

    def __init__(self, ready_max_lag: float = 300.0, registry: CollectorRegistry | None = None,
                 lag: Callable[[], Lag | None] | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.ready_max_lag = ready_max_lag
        self.lag: Callable[[], Lag | None] = lag if lag is not None else (lambda: None)
        r = self.registry
        self.events = Counter("binlake_events", "Binlog events received, by event type.",
                              ["type"], registry=r)
        self.rows = Counter("binlake_rows", "Row changes landed, by table and operation.",
                            ["database", "table", "op"], registry=r)
        self.transactions = Counter("binlake_transactions",
                                    "Source transactions landed (durable in the lake; a "
                                    "transaction filtered out whole counts too: the checkpoint "
                                    "moved past it).", registry=r)
        self.received_bytes = Counter("binlake_received_bytes",
                                      "Bytes of binlog stream received from the server.",
                                      registry=r)
        self.decode_seconds = Counter("binlake_decode_seconds",
                                      "Time spent decoding binlog events.", registry=r)
        self.land_seconds = Histogram("binlake_land_duration_seconds",
                                      "Time to land one batch durably (write, fsync, commit).",
                                      buckets=_LAND_BUCKETS, registry=r)
        self.lag_seconds = Gauge("binlake_lag_seconds",
                                 "Seconds the lake is behind the server: 0 when caught up, else "
                                 "the server's clock minus the time up to which the lake is "
                                 "complete (NaN before it is known).", registry=r)
        self.lag_bytes = Gauge("binlake_lag_bytes",
                               "Bytes of binlog between the landed position and the server's "
                               "binlog end: 0 when caught up (NaN when unknown).", registry=r)
        self.lag_seconds.set_function(lambda: _value(self.lag(), "seconds"))
        self.lag_bytes.set_function(lambda: _value(self.lag(), "bytes"))
        self.last_landed = Info("binlake_last_landed",
                                "Position of the last landed transaction.", registry=r)
        self.last_landed_time = Gauge("binlake_last_landed_commit_timestamp_seconds",
                                      "Server commit time of the last landed transaction "
                                      "(Unix seconds).", registry=r)
        self.reconnects = Counter("binlake_reconnects",
                                  "Reconnections to the server, by the error that caused them.",
                                  ["reason"], registry=r)
        self.crc_failures = Counter("binlake_crc_failures",
                                    "Events whose CRC32 checksum did not match.", registry=r)
        self.semi_sync_acks = Counter("binlake_semi_sync_acks",
                                      "Semi-sync ACKs sent to the server.", registry=r)
        self.connected_gauge = Gauge("binlake_connected",
                                     "1 while a replication session is streaming.", registry=r)
        self.ready_gauge = Gauge("binlake_ready", "1 while /readyz answers 200.", registry=r)
        self.ready_gauge.set_function(lambda: 1.0 if self.readiness()[0] else 0.0)
        self.server = Info("binlake_server",
                           "The server streamed from: its address (one of server.host's "
                           "candidates) and identity.", registry=r)
        #: Said by /readyz when server.host lists several candidates: which one is followed.
        self.following: str | None = None
        self._row_children: dict[tuple[str, str, str], Any] = {}
        self._event_children: dict[str, Any] = {}
        self._connected = False

    # --- counting (hot path: children are cached, label lookups happen once per key) -------

    def count_event(self, event_type: str, size: int) -> None:
        child = self._event_children.get(event_type)
        if child is None:
            child = self._event_children[event_type] = self.events.labels(event_type)
        child.inc()
        self.received_bytes.inc(size)

    def count_events(self, counts: dict[str, int], size: int) -> None:
        """:meth:`count_event` for many events at once: the pipeline sums them between its
        ticks (two locked counter increments per event were 6% of a one-row transaction)."""
        for event_type, n in counts.items():
            child = self._event_children.get(event_type)
            if child is None:
                child = self._event_children[event_type] = self.events.labels(event_type)
            child.inc(n)
        if size:
            self.received_bytes.inc(size)

    def count_rows(self, database: str, table: str, op: str, n: int = 1) -> None:
        key = (database, table, op)
        child = self._row_children.get(key)
        if child is None:
            if op not in ROW_OPS:
                raise ValueError(f"op must be one of {ROW_OPS}, got {op!r}")
            child = self._row_children[key] = self.rows.labels(database, table, op)
        child.inc(n)

    def landed(self, *, gtid: str | None, file: str, position: int,
               commit_time: float | None = None, transactions: int = 1,
               seconds: float | None = None) -> None:
        """Record that everything up to this position is durably in the lake: ``transactions``
        more source transactions, in a flush that took ``seconds``."""
        self.transactions.inc(transactions)
        if seconds is not None:
            self.land_seconds.observe(seconds)
        self.last_landed.info({"gtid": gtid or "", "file": file, "position": str(position)})
        if commit_time is not None:
            self.last_landed_time.set(commit_time)

    def count_crc_failure(self) -> None:
        self.crc_failures.inc()

    def count_ack(self) -> None:
        self.semi_sync_acks.inc()

    def count_decode_seconds(self, seconds: float) -> None:
        self.decode_seconds.inc(seconds)

    def count_reconnect(self, reason: BaseException | str) -> None:
        name = reason if isinstance(reason, str) else type(reason).__name__
        self.reconnects.labels(name).inc()

    # --- state for /readyz -------------------------------------------------------------------

    def set_connected(self, connected: bool) -> None:
        self._connected = connected
        self.connected_gauge.set(1 if connected else 0)

    def follow(self, address: str, server_id: int, server_uuid: str | None, *,
               say_in_readiness: bool) -> None:
        """The server streamed from now (``say_in_readiness``: /readyz names it too)."""
        self.server.info({"address": address, "server_id": str(server_id),
                          "server_uuid": server_uuid or ""})
        self.following = address if say_in_readiness else None

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason) as ``/readyz`` reports it."""
        ready, reason = self._readiness()
        if self.following is not None and self._connected:
            reason = f"{reason}; following {self.following}"
        return ready, reason

    def _readiness(self) -> tuple[bool, str]:
        if not self._connected:
            return False, "not connected to the server"
        lag = self.lag()
        if lag is None or lag.seconds is None:
            return False, "connected, the lag is not known yet (no landing, heartbeat or end read)"
        if lag.caught_up:
            return True, "connected, caught up (0 s behind the server)"
        if lag.seconds > self.ready_max_lag:
            return False, (f"{lag.seconds:.1f} s behind the server "
                           f"(threshold {self.ready_max_lag:g} s)")
        return True, f"connected, {lag.seconds:.1f} s behind the server"


def _value(lag: Lag | None, field: str) -> float:
    value = None if lag is None else getattr(lag, field)
    return float("nan") if value is None else float(value)


# --- HTTP ------------------------------------------------------------------------------------


async def serve_http(metrics: Metrics, host: str, port: int, *,
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve /metrics, /healthz and /readyz on ``host:port`` until cancelled.

    ``task_status.started()`` receives the listeners, so ``await nursery.start(...)`` with port
    0 learns the port that was bound (``listeners[0].socket.getsockname()[1]``).
    """
    try:
        listeners = await trio.open_tcp_listeners(port, host=host or None)
    except OSError as exc:
        # One line naming the address and the key, not a bare "[Errno 98] Address already in
        # use": another process (often a second binlake) holds the port.
        from replica.config import ConfigError

        where = f"[{host}]:{port}" if ":" in (host or "") else f"{host or '*'}:{port}"
        raise ConfigError(f"cannot listen on {where} for /metrics: {exc.strerror or exc}",
                          key="metrics.address",
                          hint="another process listens there (a second binlake?): give this "
                               "one its own metrics.address (BINLAKE_METRICS_ADDRESS, "
                               "--metrics-address), or an empty one to turn the endpoint off"
                          ) from None
    task_status.started(listeners)
    await trio.serve_listeners(partial(_handle_connection, metrics), listeners)


async def _handle_connection(metrics: Metrics, stream: trio.abc.Stream) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT):
            head = await _read_request_head(stream)
            if head is not None:
                await stream.send_all(_respond(metrics, head))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away; nothing to answer
    finally:
        await trio.aclose_forcefully(stream)


async def _read_request_head(stream: trio.abc.Stream) -> bytes | None:
    buffer = bytearray()
    while b"\r\n\r\n" not in buffer and b"\n\n" not in buffer:
        if len(buffer) > MAX_REQUEST_HEAD:
            return b""  # answered with 431
        chunk = await stream.receive_some(4096)
        if not chunk:
            return bytes(buffer) if buffer else None
        buffer += chunk
    return bytes(buffer)


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def _respond(metrics: Metrics, head: bytes) -> bytes:
    if not head:
        return _response(431, b"request head too large\n")
    lines = head.decode("latin-1").splitlines()
    parts = lines[0].split() if lines else []
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response(400, b"bad request\n")
    method, target, _version = parts
    if method not in ("GET", "HEAD"):
        return _response(405, b"only GET and HEAD\n", extra=[("Allow", "GET, HEAD")])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    path = target.split("?", 1)[0]
    include_body = method == "GET"
    if path == "/metrics":
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        return _response(200, encoder(metrics.registry), content_type, include_body=include_body)
    if path == "/healthz":
        return _response(200, b"ok\n", include_body=include_body)
    if path == "/readyz":
        ready, reason = metrics.readiness()
        body = (("ready: " if ready else "not ready: ") + reason + "\n").encode()
        return _response(200 if ready else 503, body, include_body=include_body)
    if path == "/":
        return _response(200, b"binlake: /metrics /healthz /readyz\n", include_body=include_body)
    return _response(404, b"not found: try /metrics, /healthz or /readyz\n",
                     include_body=include_body)


def _response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", *,
              include_body: bool = True, extra: list[tuple[str, str]] | None = None) -> bytes:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body))),
               ("Cache-Control", "no-store"), ("Connection", "close"), *(extra or [])]
    head = f"HTTP/1.1 {status} {_REASONS[status]}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers) + "\r\n"
    return head.encode("latin-1") + (body if include_body else b"")
