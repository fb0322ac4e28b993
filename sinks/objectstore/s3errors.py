"""What an S3 failure means for the lake: retry it, or stop with a fix (one place decides).

Both S3 clients binlake uses fail in their own way — botocore raises ``ClientError`` (with the
store's error code and HTTP status) or one of its connection errors; pyarrow raises ``OSError``
whose text carries the SDK's error name (``AWS Error ACCESS_DENIED during PutObject``) and the
HTTP status. :func:`classify` turns either into the sinks' hierarchy, at the boundary that knows
which bucket and operation were involved:

* :class:`~sinks.errors.StoreUnavailable` — a retry can cure it: the network (refused, reset,
  timed out), any 5xx, ``SlowDown``/throttling, a 409 conflict of racing conditional writes.
  The caller retries with backoff and keeps its position.
* :class:`~sinks.errors.StoreRefused` — no retry can: a 403 (``AccessDenied``,
  ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``, a quota), ``NoSuchBucket``, a wrong region,
  missing credentials, an untrusted TLS certificate, and any other 4xx. The daemon stops (exit 4)
  with :attr:`~sinks.errors.StoreRefused.fix`, which names the bucket and what to do.
* :class:`~sinks.errors.ObjectMissing` — a read of a key that is not there (the caller decides).

No message or fix ever holds a credential: the store's own text is reduced to its error code and
status, and the key id is never quoted.
"""

from __future__ import annotations

import re

from ..errors import ObjectMissing, StoreError, StoreRefused, StoreUnavailable

__all__ = ["classify", "classify_code", "refusal_fix"]

#: Error codes a retry can cure (S3's names, and the SDK's names pyarrow prints).
_TRANSIENT_CODES = frozenset({
    "SlowDown", "SLOW_DOWN", "Throttling", "THROTTLING", "ThrottlingException",
    "RequestLimitExceeded", "TooManyRequests", "InternalError", "INTERNAL_FAILURE",
    "ServiceUnavailable", "SERVICE_UNAVAILABLE", "RequestTimeout", "REQUEST_TIMEOUT",
    "NETWORK_CONNECTION", "ConditionalRequestConflict", "OperationAborted",
})
_MISSING_CODES = frozenset({"NoSuchKey", "NO_SUCH_KEY", "RESOURCE_NOT_FOUND", "NotFound",
                            "NoSuchUpload"})
_NO_BUCKET = frozenset({"NoSuchBucket", "NO_SUCH_BUCKET"})
_BAD_KEY_ID = frozenset({"InvalidAccessKeyId", "INVALID_ACCESS_KEY_ID"})
_BAD_SECRET = frozenset({"SignatureDoesNotMatch", "SIGNATURE_DOES_NOT_MATCH"})
_QUOTA = frozenset({"QuotaExceeded", "QUOTA_EXCEEDED"})
_EXPIRED = frozenset({"ExpiredToken", "EXPIRED_TOKEN", "InvalidToken", "INVALID_TOKEN"})
_WRONG_REGION = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed",
                           "IllegalLocationConstraintException"})
_SKEWED = frozenset({"RequestTimeTooSkewed", "REQUEST_TIME_TOO_SKEWED"})

_RESUME = "then start binlake again: it resumes from the lake's last commit"

_AWS_ERROR = re.compile(r"AWS Error ([A-Z_]+)")
_HTTP_STATUS = re.compile(r"HTTP (?:response code|status)[: ]*(\d{3})")
_S3_CODE = re.compile(r"(?:Error code|Code)[: ]+\"?([A-Za-z]+)")


def refusal_fix(code: str, status: int | None, bucket: str) -> str:
    """What to do about a refusal (``code``, ``status``) on ``bucket``: one line, no secret."""
    if code in _NO_BUCKET:
        return (f"the bucket {bucket} does not exist at this endpoint: create it (binlake never "
                f"creates buckets) or correct lake.path / lake.s3.endpoint, {_RESUME}")
    if code in _BAD_KEY_ID:
        return ("the store does not know the access key id: set AWS_ACCESS_KEY_ID (or "
                f"lake.s3.access_key_id_file) to a key of a user with access to {bucket}, "
                f"{_RESUME}")
    if code in _BAD_SECRET:
        return ("the request signature did not match: the secret key does not belong to the "
                "access key id; set AWS_SECRET_ACCESS_KEY (or lake.s3.secret_access_key_file) "
                f"to the key pair's secret, {_RESUME}")
    if code in _QUOTA:
        return (f"a quota of the bucket {bucket} or of its user is exhausted: raise it or free "
                f"space in the bucket, {_RESUME}")
    if code in _EXPIRED:
        return (f"the session token has expired or is invalid: give fresh credentials "
                f"(AWS_SESSION_TOKEN or lake.s3.session_token_file), {_RESUME}")
    if code in _WRONG_REGION:
        return (f"the bucket {bucket} lives in another region: set lake.s3.region to the "
                f"bucket's region, {_RESUME}")
    if code in _SKEWED:
        return f"this machine's clock is off by more than the store allows: sync it (NTP), {_RESUME}"
    if code == "NoCredentials":
        return ("no S3 credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "(or lake.s3.access_key_id_file and lake.s3.secret_access_key_file), or give "
                f"the machine an instance role, {_RESUME}")
    if code == "TLS":
        return ("the store's TLS certificate is not trusted: set lake.s3.tls_ca to the CA "
                f"bundle (PEM) that signed it, {_RESUME}")
    if code in ("AccessDenied", "ACCESS_DENIED") or status == 403:
        return (f"the credentials may not do this on the bucket {bucket}: grant their user "
                f"s3:ListBucket on it and s3:GetObject, s3:PutObject, s3:DeleteObject and "
                f"s3:AbortMultipartUpload under lake.path's prefix, {_RESUME}")
    return (f"the store refused the request on the bucket {bucket} ({code or status}): fix the "
            f"cause it names, {_RESUME}")


def classify_code(code: str, status: int | None, operation: str, url: str,
                  bucket: str) -> StoreError:
    """The error for a store answer with error ``code`` (S3's or the SDK's name; may be empty)
    and HTTP ``status`` (None when the request got no answer)."""
    detail = " ".join(part for part in (str(status) if status else "", code) if part)
    if code in _MISSING_CODES or (status == 404 and code not in _NO_BUCKET and not code):
        return ObjectMissing(operation, url, detail or "no such object")
    if code in _TRANSIENT_CODES or status is None or status >= 500 or status in (409, 429):
        return StoreUnavailable(operation, url, detail or "no answer")
    return StoreRefused(operation, url, detail, refusal_fix(code, status, bucket))


def classify(exc: BaseException, operation: str, url: str, bucket: str) -> StoreError:
    """``exc`` (from botocore or pyarrow, raised by ``operation`` on ``url``) as a StoreError."""
    if isinstance(exc, StoreError):
        return exc
    botocore_error = _classify_botocore(exc, operation, url, bucket)
    if botocore_error is not None:
        return botocore_error
    if isinstance(exc, FileNotFoundError):
        return ObjectMissing(operation, url, "no such object")
    if isinstance(exc, TimeoutError | ConnectionError):
        return StoreUnavailable(operation, url, type(exc).__name__)
    text = str(exc)
    found = _AWS_ERROR.search(text)
    status_match = _HTTP_STATUS.search(text)
    status = int(status_match.group(1)) if status_match else None
    code = found.group(1) if found else ""
    if code in ("UNKNOWN", "") and status is not None:
        named = _S3_CODE.search(text)
        code = named.group(1) if named else ""
    if code == "NETWORK_CONNECTION" or (found is None and "curl" in text.lower()):
        return StoreUnavailable(operation, url, "NETWORK_CONNECTION")
    if found is None and status is None:
        # Not the store's answer at all (a local failure in the client): say what it was.
        return StoreRefused(operation, url, f"{type(exc).__name__}: {_first_line(text)}",
                            refusal_fix("", None, bucket))
    if status is None and code not in _TRANSIENT_CODES:
        status = 403 if code in (_BAD_KEY_ID | _BAD_SECRET | {"ACCESS_DENIED"}) else 400
    return classify_code(code, status, operation, url, bucket)


def _classify_botocore(exc: BaseException, operation: str, url: str,
                       bucket: str) -> StoreError | None:
    try:
        from botocore import exceptions as boto
    except ImportError:  # pragma: no cover - botocore is a declared dependency
        return None
    if isinstance(exc, boto.ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code = str(error.get("Code", "") or "")
        status = meta.get("HTTPStatusCode")
        if code.isdigit() and status is None:
            status = int(code)
        if code.isdigit():
            code = ""
        return classify_code(code, int(status) if status else None, operation, url, bucket)
    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        return StoreRefused(operation, url, "no credentials",
                            refusal_fix("NoCredentials", None, bucket))
    if isinstance(exc, boto.SSLError):
        return StoreRefused(operation, url, "TLS certificate not trusted",
                            refusal_fix("TLS", None, bucket))
    if isinstance(exc, boto.EndpointConnectionError | boto.ConnectionClosedError
                  | boto.ReadTimeoutError | boto.ConnectTimeoutError | boto.HTTPClientError):
        return StoreUnavailable(operation, url, type(exc).__name__)
    return None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"
