"""replica.observe.metrics: counters and readiness state, and the HTTP endpoint over real loopback HTTP."""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from replica.observe.lag import Lag
from replica.observe.metrics import Metrics, serve_http


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return value


def test_two_instances_do_not_collide() -> None:
    Metrics().count_rows("a", "b", "insert")
    assert sample(Metrics(), "binlake_rows_total", database="a", table="b", op="insert") is None


class FakeLag:
    def __init__(self) -> None:
        self.value: Lag | None = None

    def __call__(self) -> Lag | None:
        return self.value


def test_readiness_reads_the_one_lag() -> None:
    lag = FakeLag()
    metrics = Metrics(ready_max_lag=10, lag=lag)
    assert metrics.readiness() == (False, "not connected to the server")
    metrics.set_connected(True)
    assert not metrics.readiness()[0]  # connected, no lag known yet
    assert math.isnan(sample(metrics, "binlake_lag_seconds") or 0.0)
    lag.value = Lag(False, 2.0, 4096)
    assert metrics.readiness() == (True, "connected, 2.0 s behind the server")
    assert sample(metrics, "binlake_lag_seconds") == 2.0
    assert sample(metrics, "binlake_lag_bytes") == 4096
    assert sample(metrics, "binlake_ready") == 1
    lag.value = Lag(False, 11.0, None)
    ready, reason = metrics.readiness()
    assert not ready and "11.0 s behind" in reason
    assert math.isnan(sample(metrics, "binlake_lag_bytes") or 0.0)
    lag.value = Lag(True, 0.0, 0)
    assert metrics.readiness() == (True, "connected, caught up (0 s behind the server)")
    metrics.set_connected(False)
    assert not metrics.readiness()[0]
    assert sample(metrics, "binlake_connected") == 0
    assert sample(metrics, "binlake_ready") == 0


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[Metrics, str]]:
    metrics = Metrics(ready_max_lag=5, lag=FakeLag())
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_http, metrics, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        yield metrics, f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def get(url: str, headers: dict[str, str] | None = None,
              method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    def fetch() -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(url, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    return await trio.to_thread.run_sync(fetch)


async def test_metrics_endpoint_over_http(endpoint: tuple[Metrics, str]) -> None:
    metrics, base = endpoint
    metrics.count_rows("shop", "orders", "update", 7)
    metrics.set_connected(True)
    metrics.lag = lambda: Lag(False, 1.5, 100)
    status, headers, body = await get(base + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    rows = [s for s in families["binlake_rows"].samples if s.name == "binlake_rows_total"]
    assert rows[0].labels == {"database": "shop", "table": "orders", "op": "update"}
    assert rows[0].value == 7
    assert families["binlake_lag_seconds"].samples[0].value == 1.5
    assert families["binlake_connected"].samples[0].value == 1

    status, headers, body = await get(base + "/metrics",
                                      {"Accept": "application/openmetrics-text"})
    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


async def test_health_and_readiness_over_http(endpoint: tuple[Metrics, str]) -> None:
    metrics, base = endpoint
    assert (await get(base + "/healthz"))[:1] == (200,)
    status, _, body = await get(base + "/readyz")
    assert status == 503 and body.startswith(b"not ready: not connected")
    metrics.set_connected(True)
    metrics.lag = lambda: Lag(False, 0.5, 10)
    status, _, body = await get(base + "/readyz?verbose=1")
    assert status == 200 and body.startswith(b"ready")
    metrics.set_connected(False)  # the server went away
    assert (await get(base + "/readyz"))[0] == 503


async def test_http_errors(endpoint: tuple[Metrics, str]) -> None:
    _, base = endpoint
    assert (await get(base + "/nope"))[0] == 404
    assert (await get(base + "/metrics", method="POST"))[0] == 405
    status, headers, body = await get(base + "/healthz", method="HEAD")
    assert status == 200 and body == b"" and headers["Content-Length"] == "3"

    host, port = base.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(b"garbage\r\n\r\n")
    response = b""
    while chunk := await stream.receive_some():
        response += chunk
    assert response.startswith(b"HTTP/1.1 400")

    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(b"GET /" + b"x" * 20000)
    response = b""
    while chunk := await stream.receive_some():
        response += chunk
    assert response.startswith(b"HTTP/1.1 431")

    # a client that connects and leaves does not disturb the server
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.aclose()
    assert (await get(base + "/healthz"))[0] == 200
