"""The object-store seam: what a lake on object storage needs from its store, each with its promise.

A lake on disk rests on POSIX (``sinks/storage.py``: rename, fsync, flock). An object store
offers none of these; what it offers instead — and all the object-store commit protocol
(``sinks/objectstore/log.py``) relies on — is written down here, one promise per operation,
so that an implementation (``s3.py`` on S3 or a compatible gateway; ``memory.py``, the model the
unit tests crash at every step) knows exactly what to keep, and a store that cannot keep one
is refused at start rather than trusted.

Keys are relative to the lake's root (the ``PREFIX`` of ``s3://BUCKET/PREFIX``), ``/``-separated,
never starting with ``/``; :meth:`ObjectStore.url` names one for messages.

The promises (what S3 gives since December 2020, and Ceph's RADOS Gateway):

* **Whole objects.** An object appears complete or not at all: a PUT, or a streamed upload
  (:meth:`ObjectStore.open_output`, a multipart upload) once closed. A writer that dies before
  the close leaves no object (an incomplete multipart upload is invisible; the next writer's
  start aborts it, :meth:`ObjectStore.abort_upload`). Objects are never appended to; the protocol never overwrites a data object.
* **Read-after-write.** Once a call that created, replaced or deleted an object has returned,
  every later GET, HEAD and listing, from any process, sees the change.
* **Consistent listing.** :meth:`ObjectStore.list` returns every key under the prefix that
  existed throughout the call and none deleted before it began, in ascending UTF-8 byte order.
* **Conditional create.** :meth:`ObjectStore.put_if_absent` (``If-None-Match: *``) creates the
  object only if no object has the key; of two racing creators exactly one succeeds, the other
  learns it lost (412). This is the one primitive the commit log is built on.
* **Conditional replace.** :meth:`ObjectStore.put_if_match` (``If-Match: <etag>``) replaces the
  object only if its ETag is still the one given. An ETag names *content*, not a write: two PUTs
  of the same bytes may carry the same ETag (S3: the MD5), so a caller that uses it for mutual
  exclusion makes every write's bytes unique (the lease carries a counter and a token).
* **Idempotent deletion.** Deleting a key that does not exist succeeds.

Errors are :class:`~sinks.errors.StoreError`: :class:`~sinks.errors.StoreUnavailable` when a
retry can cure it (timeouts, 5xx, ``SlowDown``), :class:`~sinks.errors.StoreRefused` when it
cannot (403, a missing bucket, a quota), :class:`~sinks.errors.ObjectMissing` for a read of an
absent key. A failed call may or may not have taken effect (a timeout after the store acted):
every caller either repeats it safely or reads back what happened.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Fetched", "ObjectInfo", "ObjectStore", "Upload"]


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object as a HEAD or a listing shows it."""

    key: str
    size: int
    etag: str


@dataclass(frozen=True, slots=True)
class Fetched:
    """An object's whole content and the ETag of that content (for a later ``put_if_match``)."""

    data: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class Upload:
    """A multipart upload begun and neither completed nor aborted: ``key`` (under the store's
    prefix) and the store's id for it."""

    key: str
    upload_id: str


class ObjectStore(Protocol):
    """See the module docstring: the operations, and what each promises."""

    def url(self, key: str = "") -> str:
        """``key`` as a URL for messages (``s3://bucket/prefix/key``); never a credential."""
        ...

    # --- writes ---------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        """Create or replace ``key`` with exactly ``data``; the new content's ETag. Visible
        whole to every reader once it returns."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        """Create ``key`` with ``data`` only if no object has that key (``If-None-Match: *``):
        the new ETag, or None when an object was there (412). Of racing creators exactly one
        gets an ETag."""
        ...

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        """Replace ``key`` with ``data`` only if its ETag is still ``etag`` (``If-Match``): the
        new ETag, or None when the object changed or is gone (412, or 404)."""
        ...

    def open_output(self, key: str) -> pa.NativeFile:
        """A stream to write ``key`` through (a multipart upload: memory bounded by one part,
        whatever the object's size); Parquet and Arrow IPC writers write into it. The object
        appears whole when the stream is closed, and not at all if the writer dies first."""
        ...

    def delete(self, key: str) -> None:
        """Delete ``key``; nothing if it is absent."""
        ...

    def delete_many(self, keys: Iterable[str]) -> None:
        """:meth:`delete` each of ``keys`` (S3: batches of up to 1,000 per request). Each
        deletion is atomic, the set is not: a crash may leave any subset done."""
        ...

    def uploads(self, prefix: str) -> Iterator[Upload]:
        """Every multipart upload under ``prefix`` begun and neither completed nor aborted: a
        writer that died while streaming (:meth:`open_output`) leaves one, invisible to reads
        and listings, but its parts stay stored (and billed) until it is aborted."""
        ...

    def abort_upload(self, upload: Upload) -> None:
        """Abort ``upload``, freeing its parts; nothing if it is already gone."""
        ...

    # --- reads ----------------------------------------------------------------------------------

    def get(self, key: str) -> Fetched:
        """The whole of ``key`` and its ETag (:class:`~sinks.errors.ObjectMissing` if absent)."""
        ...

    def head(self, key: str) -> ObjectInfo | None:
        """``key``'s size and ETag, or None if there is no such object."""
        ...

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (and sorts after ``start_after``, if
        given), in ascending key order; a consistent listing (module docstring). Paged lazily:
        a caller that stops early pays for the pages it read."""
        ...

    def open_input(self, key: str) -> pa.NativeFile:
        """``key`` to read with random access (a Parquet footer is read first, then its column
        chunks by range); :class:`~sinks.errors.ObjectMissing` if absent."""
        ...
