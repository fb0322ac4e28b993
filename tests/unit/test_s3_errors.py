"""What an S3 failure means (``sinks/objectstore/s3errors.py``) for answers the real gateway
cannot be made to give (a 500; the test bed's Ceph gives the others for real, see
``tests/integration/test_s3_store.py``), and the start-time probe against stores that ignore
conditional writes."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.errors import ObjectMissing, StoreRefused, StoreUnavailable
from sinks.objectstore.memory import MemoryStore
from sinks.objectstore.probe import probe_conditional_writes
from sinks.objectstore.s3 import S3Settings, S3Store, is_store_url, open_store, split_url
from sinks.objectstore.s3errors import classify, classify_code


@pytest.mark.parametrize(("code", "status", "kind"), [
    ("SlowDown", 503, StoreUnavailable),
    ("InternalError", 500, StoreUnavailable),
    ("", 502, StoreUnavailable),
    ("ConditionalRequestConflict", 409, StoreUnavailable),
    ("RequestTimeout", 400, StoreUnavailable),
    ("", None, StoreUnavailable),
    ("AccessDenied", 403, StoreRefused),
    ("InvalidAccessKeyId", 403, StoreRefused),
    ("SignatureDoesNotMatch", 403, StoreRefused),
    ("QuotaExceeded", 403, StoreRefused),
    ("NoSuchBucket", 404, StoreRefused),
    ("PermanentRedirect", 301, StoreRefused),
    ("PreconditionFailed", 412, StoreRefused),
    ("NoSuchKey", 404, ObjectMissing),
])
def test_codes_and_statuses(code: str, status: int | None, kind: type) -> None:
    error = classify_code(code, status, "PUT", "s3://b/p/k", "b")
    assert type(error) is kind
    if isinstance(error, StoreRefused):
        assert "b" in error.fix.split(":")[0] or code in ("InvalidAccessKeyId",
                                                           "SignatureDoesNotMatch")


def test_pyarrow_messages() -> None:
    def kind(text: str) -> type:
        return type(classify(OSError(text), "GET", "s3://b/k", "b"))

    assert kind("When reading information for key 'k' in bucket 'b': AWS Error "
                "NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Couldn't connect "
                "to server") is StoreUnavailable
    assert kind("AWS Error SLOW_DOWN during PutObject operation: Please reduce your request "
                "rate.") is StoreUnavailable
    assert kind("AWS Error UNKNOWN (HTTP status 503) during HeadObject operation: No response "
                "body.") is StoreUnavailable
    assert kind("AWS Error ACCESS_DENIED during HeadObject operation: No response body."
                ) is StoreRefused
    assert kind("AWS Error NO_SUCH_BUCKET during CreateMultipartUpload operation: The "
                "specified bucket does not exist") is StoreRefused
    assert kind("Path does not exist 'b/k'") is StoreRefused
    assert type(classify(FileNotFoundError("b/k"), "GET", "s3://b/k", "b")) is ObjectMissing


def test_urls() -> None:
    assert split_url("s3://bucket/a/b/") == ("bucket", "a/b/")
    assert split_url("s3://bucket") == ("bucket", "")
    assert is_store_url("s3://bucket/x") and not is_store_url("/var/lib/binlake")
    for bad in ("s3:///x", "http://b/x", "s3://b/x?y=1"):
        with pytest.raises(ValueError):
            split_url(bad)


def test_settings_repr_holds_no_credential() -> None:
    settings = S3Settings(access_key_id="AKIDSECRETLOOKING", secret_access_key="s3cr3t-value",
                          session_token="tok3n-value")
    text = repr(settings) + repr(open_store("s3://b/p", settings))
    for secret in ("AKIDSECRETLOOKING", "s3cr3t-value", "tok3n-value"):
        assert secret not in text


class _Failing(http.server.BaseHTTPRequestHandler):
    """A store that answers every request with a 500 InternalError."""

    def _fail(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
                b"<Message>We encountered an internal error.</Message></Error>")
        self.send_response(500)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _fail

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def failing_endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_500_is_transient_on_every_path(failing_endpoint: str) -> None:
    store = S3Store("b", "p/", S3Settings(endpoint=failing_endpoint, access_key_id="a",
                                          secret_access_key="s", max_attempts=1))
    with pytest.raises(StoreUnavailable, match=r"^PUT If-None-Match s3://b/p/k: 500 InternalError$"):
        store.put_if_absent("k", b"x")
    with pytest.raises(StoreUnavailable, match="500"):
        store.head("k")
    with pytest.raises(StoreUnavailable, match="500"):
        list(store.list(""))
    with pytest.raises(StoreUnavailable):
        pq.write_table(pa.table({"a": [1]}), store.open_output("t/x.parquet"))


class _IgnoresIfNoneMatch(MemoryStore):
    def put_if_absent(self, key: str, data: bytes) -> str | None:
        return self.put(key, data)


class _IgnoresIfMatch(MemoryStore):
    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        return self.put(key, data)


def test_the_probe_refuses_a_store_that_ignores_conditions() -> None:
    probe_conditional_writes(MemoryStore())
    for store in (_IgnoresIfNoneMatch(), _IgnoresIfMatch()):
        with pytest.raises(StoreRefused) as refused:
            probe_conditional_writes(store)
        assert "ignored If-" in str(refused.value)
        assert "conditional writes" in refused.value.fix
        assert store.keys() == []  # the probe object is removed either way


def test_the_command_line_stops_with_4_on_a_refusal_and_1_when_retries_ran_out() -> None:
    from replica.cli import EXIT_FAILURE, EXIT_LAKE, exit_code_for, hint_for

    refused = classify_code("NoSuchBucket", 404, "PUT If-None-Match", "s3://shop-lake/p/_log/1",
                            "shop-lake")
    assert exit_code_for(refused) == EXIT_LAKE == 4
    assert hint_for(refused) == refused.fix  # type: ignore[union-attr]
    assert "the bucket shop-lake does not exist" in (hint_for(refused) or "")
    unavailable = classify_code("SlowDown", 503, "PUT", "s3://shop-lake/p/x", "shop-lake")
    assert exit_code_for(unavailable) == EXIT_FAILURE
    assert "lake.s3.endpoint" in (hint_for(unavailable) or "")
