"""``S3Store``: the object-store seam on S3 and S3-compatible gateways (Ceph RGW, MinIO).

Two clients, each for what it does best, both from one :class:`S3Settings`:

* **pyarrow's ``S3FileSystem``** carries the bulk data: :meth:`S3Store.open_output` streams a
  Parquet file as a multipart upload (memory bounded by a part, each part uploaded by the write
  that fills it, no GIL), :meth:`S3Store.open_input` reads one with ranged GETs (a footer
  first, then column chunks).
* **boto3**, the field's standard S3 client, does the small requests whose answers the seam
  needs and ``pyarrow.fs`` does not give: conditional writes (``If-None-Match: *``,
  ``If-Match``), the ETag of a PUT, GET or HEAD, and listings with ETags in key order.

Keys are relative to the lake's root: ``s3://BUCKET/PREFIX`` maps key ``a/b`` to the object
``PREFIX/a/b``. Every failure leaves as a :class:`~sinks.errors.StoreError` decided once, in
``s3errors.py``; streams translate their failures too, so a Parquet writer that fails mid-file
raises the same hierarchy. Credentials live only in the two clients and in :class:`S3Settings`
(whose ``repr`` omits them); URLs and messages never hold one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import ObjectMissing, StoreError
from .s3errors import classify
from .store import Fetched, ObjectInfo, Upload

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ADDRESSING", "AWS_CREDENTIALS", "DEFAULT_REGION", "ENV_PREFIX", "S3Settings",
           "S3Store", "is_store_url", "open_store", "read_secret_file", "resolve_credential",
           "split_url"]

#: ``auto``: virtual-hosted on AWS, path-style with an endpoint (what gateways expect).
ADDRESSING = ("auto", "path", "virtual")
#: The region requests are signed for when none is set.
DEFAULT_REGION = "us-east-1"
#: The environment form of the ``[lake.s3]`` keys: ``BINLAKE_LAKE_S3_<KEY>``.
ENV_PREFIX = "BINLAKE_LAKE_S3_"
#: Each credential of :class:`S3Settings` and the standard AWS variable behind it.
AWS_CREDENTIALS = {"access_key_id": "AWS_ACCESS_KEY_ID",
                   "secret_access_key": "AWS_SECRET_ACCESS_KEY",
                   "session_token": "AWS_SESSION_TOKEN"}
#: The most keys one DeleteObjects request takes.
_DELETE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class S3Settings:
    """How to reach the store: the ``[lake.s3]`` settings, resolved. Credentials left None are
    found by the clients' own default chain (``~/.aws/credentials``, an instance role)."""

    endpoint: str | None = None
    region: str = DEFAULT_REGION
    addressing: str = "auto"
    tls_ca: str | None = None
    connect_timeout: float = 10.0
    request_timeout: float = 60.0
    max_attempts: int = 3
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @property
    def path_style(self) -> bool:
        return self.addressing == "path" or (self.addressing == "auto" and bool(self.endpoint))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> S3Settings:
        """The settings a process's environment gives (``os.environ`` when None): the
        ``BINLAKE_LAKE_S3_<KEY>`` forms of the keys that say where the store is and who
        asks — ``endpoint``, ``region``, ``addressing``, ``tls_ca`` and the credentials,
        resolved by :func:`resolve_credential` — what a reader of the lake (Spark's side)
        uses, by the rules the daemon's configuration uses. Timeouts and attempts keep their
        defaults. ValueError naming the variable (never a credential's value) if one is
        malformed."""
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            return env.get(ENV_PREFIX + name.upper()) or None

        addressing = text("addressing") or "auto"
        if addressing not in ADDRESSING:
            raise ValueError(f"{ENV_PREFIX}ADDRESSING: one of {', '.join(ADDRESSING)}, got "
                             f"{addressing!r}")
        key_id, secret, token = (resolve_credential(name, text(name), text(f"{name}_file"), env)[0]
                                 for name in AWS_CREDENTIALS)
        if (key_id is None) != (secret is None):
            raise ValueError("the S3 access key id and secret access key go together: give "
                             "both (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the two "
                             f"{ENV_PREFIX}*_FILE variables) or neither (the AWS default chain)")
        return cls(endpoint=text("endpoint"), region=text("region") or DEFAULT_REGION,
                   addressing=addressing, tls_ca=text("tls_ca"), access_key_id=key_id,
                   secret_access_key=secret, session_token=token)


def read_secret_file(path: str) -> str:
    """A secret held in a file, one trailing newline (``\n`` or ``\r\n``) ignored.
    OSError, or UnicodeDecodeError if it is not UTF-8 text."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def resolve_credential(name: str, own: str | None, own_file: str | None,
                       environ: Mapping[str, str],
                       read: Callable[[str], str] = read_secret_file) -> tuple[str | None, str]:
    """The credential ``name`` (``access_key_id``, ``secret_access_key``, ``session_token``)
    and where it came from — ``"file"``, ``"key"`` or the AWS variable's name, ``""`` for
    none — by the one rule: binlake's own ``*_file``, else its own key, else the standard
    AWS variable, else nothing (the AWS SDK's default chain). Giving both the key and its
    file is a ValueError; ``read`` reads the file (:func:`read_secret_file`: an unreadable
    one is an OSError or a UnicodeDecodeError)."""
    if own is not None and own_file is not None:
        raise ValueError(f"both {name} and {name}_file are set")
    if own_file is not None:
        return read(own_file), "file"
    if own is not None:
        return own, "key"
    variable = AWS_CREDENTIALS[name]
    if environ.get(variable):
        return environ[variable], variable
    return None, ""


def is_store_url(path: str) -> bool:
    """Whether ``lake.path`` names a lake on object storage (``s3://``) rather than a directory."""
    return path.startswith("s3://")


def split_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` → (``bucket``, ``some/prefix/``); the prefix ends with ``/``
    unless empty. ValueError if it is not an ``s3://`` URL with a bucket."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"{url!r} is not s3://BUCKET[/PREFIX]")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: an s3:// lake path takes no query or fragment")
    prefix = parts.path.strip("/")
    return parts.netloc, f"{prefix}/" if prefix else ""


def open_store(url: str, settings: S3Settings) -> S3Store:
    """The store of the lake at ``url`` (``s3://BUCKET/PREFIX``). Makes no request."""
    bucket, prefix = split_url(url)
    return S3Store(bucket, prefix, settings)


class S3Store:
    """See the module docstring; implements :class:`~sinks.objectstore.store.ObjectStore`."""

    def __init__(self, bucket: str, prefix: str, settings: S3Settings,
                 page_size: int = 1000) -> None:
        self.bucket = bucket
        self.page_size = page_size  # keys per LIST request (S3 answers at most 1,000)
        self.prefix = prefix
        self.settings = settings
        self._local = threading.local()  # a boto3 client is not to be shared across threads
        self._filesystem: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<S3Store {self.url()} endpoint={self.settings.endpoint or 'AWS'}>"

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"

    # --- the two clients ------------------------------------------------------------------------

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            import boto3
            from botocore.config import Config

            s = self.settings
            client = boto3.session.Session().client(
                "s3", endpoint_url=s.endpoint, region_name=s.region,
                aws_access_key_id=s.access_key_id, aws_secret_access_key=s.secret_access_key,
                aws_session_token=s.session_token,
                verify=s.tls_ca if s.tls_ca else None,
                config=Config(
                    s3={"addressing_style": "path" if s.path_style else "virtual"},
                    connect_timeout=s.connect_timeout, read_timeout=s.request_timeout,
                    retries={"mode": "standard", "max_attempts": s.max_attempts},
                    # Gateways that predate the SDK's default checksums refuse them (411);
                    # S3 itself accepts either.
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                ),
            )  # fmt: skip
            self._local.client = client
        return client

    def _fs(self) -> Any:
        with self._lock:
            if self._filesystem is None:
                from pyarrow import fs

                s = self.settings
                endpoint = urlsplit(s.endpoint) if s.endpoint else None
                kwargs: dict[str, Any] = {
                    "region": s.region,
                    "connect_timeout": s.connect_timeout,
                    "request_timeout": s.request_timeout,
                    "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=s.max_attempts),
                    "force_virtual_addressing": not s.path_style and bool(endpoint),
                    "check_directory_existence_before_creation": False,
                    # A part is uploaded by the write that fills it. In the background, parts
                    # pile up in memory whenever the store is slower than the spool is read
                    # (up to the IO pool's size), so a large file's memory would depend on the
                    # store's speed instead of being one part.
                    "background_writes": False,
                }
                if endpoint is not None:
                    kwargs["endpoint_override"] = endpoint.netloc
                    kwargs["scheme"] = endpoint.scheme or "https"
                if s.tls_ca:
                    kwargs["tls_ca_file_path"] = s.tls_ca
                if s.access_key_id is not None:
                    kwargs["access_key"] = s.access_key_id
                    kwargs["secret_key"] = s.secret_access_key
                    kwargs["session_token"] = s.session_token
                self._filesystem = fs.S3FileSystem(**kwargs)
            return self._filesystem

    def _call(self, operation: str, key: str, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client(), method)(Bucket=self.bucket, **kwargs)
        except Exception as exc:
            raise classify(exc, operation, self.url(key), self.bucket) from None

    # --- writes ---------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        answer = self._call("PUT", key, "put_object", Key=self.prefix + key, Body=data)
        return str(answer["ETag"])

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        try:
            answer = self._call("PUT If-None-Match", key, "put_object", Key=self.prefix + key,
                                Body=data, IfNoneMatch="*")
        except StoreError as exc:
            if _lost_the_race(exc):
                return None
            raise
        return str(answer["ETag"])

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        try:
            answer = self._call("PUT If-Match", key, "put_object", Key=self.prefix + key,
                                Body=data, IfMatch=etag)
        except ObjectMissing:
            return None
        except StoreError as exc:
            if _lost_the_race(exc):
                return None
            raise
        return str(answer["ETag"])

    def open_output(self, key: str) -> pa.NativeFile:
        import pyarrow as pa

        url = self.url(key)
        try:
            stream = self._fs().open_output_stream(f"{self.bucket}/{self.prefix}{key}",
                                                   metadata={})
        except Exception as exc:
            raise classify(exc, "upload", url, self.bucket) from None
        return pa.PythonFile(_Translating(stream, "upload", url, self.bucket), mode="w")

    def delete(self, key: str) -> None:
        self._call("DELETE", key, "delete_object", Key=self.prefix + key)

    def delete_many(self, keys: Iterable[str]) -> None:
        batch: list[str] = []
        for key in keys:
            batch.append(key)
            if len(batch) == _DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: list[str]) -> None:
        answer = self._call("DELETE", keys[0], "delete_objects", Delete={
            "Objects": [{"Key": self.prefix + key} for key in keys], "Quiet": True})
        for failed in answer.get("Errors", []):
            key = str(failed.get("Key", ""))[len(self.prefix):]
            error = classify(_ClientAnswer(failed), "DELETE", self.url(key), self.bucket)
            if not isinstance(error, ObjectMissing):
                raise error

    def uploads(self, prefix: str) -> Iterator[Upload]:
        kwargs: dict[str, Any] = {"Prefix": self.prefix + prefix}
        skip = len(self.prefix)
        while True:
            page = self._call("LIST uploads", prefix, "list_multipart_uploads", **kwargs)
            for item in page.get("Uploads", []):
                yield Upload(str(item["Key"])[skip:], str(item["UploadId"]))
            if not page.get("IsTruncated"):
                return
            kwargs["KeyMarker"] = page.get("NextKeyMarker", "")
            kwargs["UploadIdMarker"] = page.get("NextUploadIdMarker", "")

    def abort_upload(self, upload: Upload) -> None:
        try:
            self._call("ABORT upload", upload.key, "abort_multipart_upload",
                       Key=self.prefix + upload.key, UploadId=upload.upload_id)
        except ObjectMissing:  # NoSuchUpload: completed or aborted meanwhile
            pass

    # --- reads ----------------------------------------------------------------------------------

    def get(self, key: str) -> Fetched:
        answer = self._call("GET", key, "get_object", Key=self.prefix + key)
        try:
            data = answer["Body"].read()
        except Exception as exc:
            raise classify(exc, "GET", self.url(key), self.bucket) from None
        return Fetched(data, str(answer["ETag"]))

    def head(self, key: str) -> ObjectInfo | None:
        try:
            answer = self._call("HEAD", key, "head_object", Key=self.prefix + key)
        except ObjectMissing:
            return None
        return ObjectInfo(key, int(answer["ContentLength"]), str(answer["ETag"]))

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        kwargs: dict[str, Any] = {"Prefix": self.prefix + prefix, "MaxKeys": self.page_size}
        if start_after:
            kwargs["StartAfter"] = self.prefix + start_after
        skip = len(self.prefix)
        while True:
            page = self._call("LIST", prefix, "list_objects_v2", **kwargs)
            for item in page.get("Contents", []):
                yield ObjectInfo(str(item["Key"])[skip:], int(item["Size"]), str(item["ETag"]))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            kwargs["ContinuationToken"] = token

    def open_input(self, key: str) -> pa.NativeFile:
        import pyarrow as pa

        url = self.url(key)
        try:
            stream = self._fs().open_input_file(f"{self.bucket}/{self.prefix}{key}")
        except Exception as exc:
            raise classify(exc, "GET", url, self.bucket) from None
        return pa.PythonFile(_Translating(stream, "GET", url, self.bucket), mode="r")


def _lost_the_race(exc: StoreError) -> bool:
    """A 412: the condition did not hold (the object exists, or its ETag moved on)."""
    return exc.detail.split(" ")[0] == "412" or "PreconditionFailed" in exc.detail


class _ClientAnswer(Exception):
    """One failed key of a DeleteObjects answer, shaped as botocore's ClientError response."""

    def __init__(self, failed: dict[str, Any]) -> None:
        super().__init__(failed.get("Code", ""))
        self.response = {"Error": {"Code": failed.get("Code", "")}, "ResponseMetadata": {}}


class _Translating:
    """A pyarrow stream whose failures leave as StoreErrors (for ``pa.PythonFile``, which
    passes a Python exception through the Parquet writer or reader unchanged)."""

    def __init__(self, stream: Any, operation: str, url: str, bucket: str) -> None:
        self._stream = stream
        self._operation = operation
        self._url = url
        self._bucket = bucket

    def _do(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._stream, method)(*args)
        except Exception as exc:
            raise classify(exc, self._operation, self._url, self._bucket) from None

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)

    def readable(self) -> bool:
        return bool(self._stream.readable())

    def writable(self) -> bool:
        return bool(self._stream.writable())

    def seekable(self) -> bool:
        return bool(self._stream.seekable())

    def write(self, data: Any) -> int:
        return int(self._do("write", data))

    def flush(self) -> None:
        self._do("flush")

    def close(self) -> None:
        self._do("close")

    def read(self, size: int = -1) -> bytes:
        return bytes(self._do("read", None if size is None or size < 0 else size))

    def read_at(self, size: int, offset: int) -> bytes:
        return bytes(self._do("read_at", size, offset))

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._do("seek", offset, whence))

    def tell(self) -> int:
        return int(self._do("tell"))

    def size(self) -> int:
        return int(self._do("size"))
