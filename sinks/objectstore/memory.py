"""``MemoryStore``: an in-memory object store keeping the seam's promises, with faults to inject.

It is the model the commit protocol is crashed against (every promise of
:class:`~sinks.objectstore.store.ObjectStore` kept).

It is what a unit test needs to replay a commit cut off after each of its store operations
(``crash_after``), to make a store refuse or fail transiently (``reject``), to slow it down
(``slow``) or to run code between two operations (``before``: a second writer racing, a lease
expiring). Several threads (and several simulated daemons) may share one: every operation holds
one lock, so each is atomic and they are totally ordered, as a strongly consistent store's are.

ETags are the quoted MD5 of the content, as S3's are for a single PUT: two writes of the same
bytes share an ETag here too, so a caller relying on ETags for exclusion is tested as it would
run.
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from ..errors import ObjectMissing, StoreError
from .store import Fetched, ObjectInfo, Upload

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MemoryStore", "StoreCrashed"]


class StoreCrashed(BaseException):  # noqa: N818 - a simulated process death, not an error
    """The simulated process died at this operation: it did not happen, nor does anything the
    caller would have done after it. A ``BaseException`` so that no ``except Exception`` in the
    code under test mistakes it for a failure to handle."""


class MemoryStore:
    """See the module docstring. ``name`` appears in URLs (``mem://name/key``)."""

    def __init__(self, name: str = "lake") -> None:
        self.name = name
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._uploads: dict[str, str] = {}  # upload id -> key, of streams not closed yet
        self._upload_count = 0
        self._lock = threading.RLock()
        self._crash_at: int | None = None
        self._rejections: list[tuple[str, str, StoreError]] = []
        self._delay = 0.0
        self._before: Callable[[str, str], None] | None = None
        #: Every operation carried out, in order: (operation, key). Streamed uploads count once,
        #: at their close (when the object appears).
        self.operations: list[tuple[str, str]] = []

    # --- fault injection ------------------------------------------------------------------------

    def crash_after(self, count: int | None) -> None:
        """Let ``count`` more operations happen, then raise :class:`StoreCrashed` at the next
        one (and every one after it, as a dead process does nothing more). None: never."""
        with self._lock:
            self._crash_at = None if count is None else len(self.operations) + count

    def reject(self, operation: str, key_prefix: str, error: StoreError) -> None:
        """Raise ``error`` from every ``operation`` (``"put_if_absent"``, ``"get"``, … or
        ``"*"``) on a key starting with ``key_prefix``, until :meth:`heal`."""
        with self._lock:
            self._rejections.append((operation, key_prefix, error))

    def heal(self) -> None:
        """Forget every injected fault."""
        with self._lock:
            self._rejections.clear()
            self._crash_at = None
            self._delay = 0.0
            self._before = None

    def slow(self, seconds: float) -> None:
        """Make every operation take at least ``seconds`` (outside the store's lock)."""
        self._delay = seconds

    def before(self, hook: Callable[[str, str], None] | None) -> None:
        """Call ``hook(operation, key)`` before every operation (outside the store's lock)."""
        self._before = hook

    # --- inspection (tests) ---------------------------------------------------------------------

    def keys(self) -> list[str]:
        """Every key, sorted."""
        with self._lock:
            return sorted(self._objects)

    def snapshot(self) -> dict[str, bytes]:
        """A copy of every object's content."""
        with self._lock:
            return {key: data for key, (data, _) in self._objects.items()}

    @classmethod
    def restored(cls, objects: dict[str, bytes], name: str = "lake") -> MemoryStore:
        """A store holding exactly ``objects`` (the state a crash left, replayed)."""
        store = cls(name)
        store._objects = {key: (data, _etag(data)) for key, data in objects.items()}
        return store

    # --- the seam -------------------------------------------------------------------------------

    def url(self, key: str = "") -> str:
        return f"mem://{self.name}/{key}"

    def put(self, key: str, data: bytes) -> str:
        with self._operation("put", key):
            etag = _etag(data)
            self._objects[key] = (bytes(data), etag)
            return etag

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        with self._operation("put_if_absent", key):
            if key in self._objects:
                return None
            etag = _etag(data)
            self._objects[key] = (bytes(data), etag)
            return etag

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        with self._operation("put_if_match", key):
            held = self._objects.get(key)
            if held is None or held[1] != etag:
                return None
            new = _etag(data)
            self._objects[key] = (bytes(data), new)
            return new

    def open_output(self, key: str) -> pa.NativeFile:
        import pyarrow as pa

        with self._lock:
            self._upload_count += 1
            upload_id = f"upload-{self._upload_count}"
            self._uploads[upload_id] = key
        return pa.PythonFile(_Upload(self, key, upload_id), mode="w")

    def delete(self, key: str) -> None:
        with self._operation("delete", key):
            self._objects.pop(key, None)

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def uploads(self, prefix: str) -> Iterator[Upload]:
        with self._operation("uploads", prefix):
            found = [Upload(key, upload_id) for upload_id, key in self._uploads.items()
                     if key.startswith(prefix)]
        return iter(sorted(found, key=lambda upload: (upload.key, upload.upload_id)))

    def abort_upload(self, upload: Upload) -> None:
        with self._operation("abort_upload", upload.key):
            self._uploads.pop(upload.upload_id, None)

    def get(self, key: str) -> Fetched:
        with self._operation("get", key):
            held = self._objects.get(key)
            if held is None:
                raise ObjectMissing("GET", self.url(key), "no such object")
            return Fetched(held[0], held[1])

    def head(self, key: str) -> ObjectInfo | None:
        with self._operation("head", key):
            held = self._objects.get(key)
            return None if held is None else ObjectInfo(key, len(held[0]), held[1])

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        with self._operation("list", prefix):
            found = [ObjectInfo(key, len(data), etag)
                     for key, (data, etag) in self._objects.items()
                     if key.startswith(prefix) and key > start_after]
        found.sort(key=lambda info: info.key.encode())
        return iter(found)

    def open_input(self, key: str) -> pa.NativeFile:
        import pyarrow as pa

        return pa.BufferReader(self.get(key).data)

    # --- internals ------------------------------------------------------------------------------

    def _operation(self, operation: str, key: str) -> _Operation:
        if self._before is not None:
            self._before(operation, key)
        if self._delay:
            time.sleep(self._delay)
        return _Operation(self, operation, key)

    def _complete_upload(self, key: str, data: bytes, upload_id: str) -> None:
        with self._operation("complete_upload", key):
            self._objects[key] = (data, _etag(data))
            self._uploads.pop(upload_id, None)


class _Operation:
    """One operation under the store's lock: faults first, then the log entry once it ran."""

    __slots__ = ("_key", "_operation", "_store")

    def __init__(self, store: MemoryStore, operation: str, key: str) -> None:
        self._store, self._operation, self._key = store, operation, key

    def __enter__(self) -> None:
        store = self._store
        store._lock.acquire()
        try:
            if store._crash_at is not None and len(store.operations) >= store._crash_at:
                raise StoreCrashed(f"{self._operation} {self._key}")
            for operation, prefix, error in store._rejections:
                if operation in ("*", self._operation) and self._key.startswith(prefix):
                    raise error
        except BaseException:
            store._lock.release()
            raise

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        try:
            if kind is None or isinstance(value, ObjectMissing):
                self._store.operations.append((self._operation, self._key))
        finally:
            self._store._lock.release()


class _Upload(io.RawIOBase):
    """A streamed upload: bytes gather in memory and become the object at :meth:`close`."""

    def __init__(self, store: MemoryStore, key: str, upload_id: str) -> None:
        super().__init__()
        self._store = store
        self._key = key
        self._upload_id = upload_id
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        chunk = bytes(data)
        self._parts.append(chunk)
        return len(chunk)

    def close(self) -> None:
        if not self.closed:
            parts, self._parts = self._parts, []
            super().close()
            self._store._complete_upload(self._key, b"".join(parts), self._upload_id)


def _etag(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'
