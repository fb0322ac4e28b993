"""``DirectoryStore``: the object-store seam over a local directory, for tests whose store must
be reached from other processes (Spark's Python workers) — the in-memory model cannot be.

Each object is a file at its key under ``root``, written whole by a rename; ``put_if_absent``
creates with ``O_EXCL``. Not a model of a store's races (``put_if_match`` is not atomic): the
commit protocol's races are proven on ``MemoryStore`` and on the real gateway.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from sinks.errors import ObjectMissing
from sinks.objectstore.store import Fetched, ObjectInfo, Upload


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'  # noqa: S324 - S3's ETag, not security


class DirectoryStore:
    """See the module docstring."""

    def __init__(self, root: str) -> None:
        self.root = root

    def __reduce__(self) -> tuple[Any, ...]:
        return (DirectoryStore, (self.root,))

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def url(self, key: str = "") -> str:
        return f"dir://{self.root}/{key}"

    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".put-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return _etag(data)

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".put-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)  # fails if present: an atomic create of the whole content
        except FileExistsError:
            return None
        finally:
            os.remove(tmp)
        return _etag(data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        info = self.head(key)
        if info is None or info.etag != etag:
            return None
        return self.put(key, data)

    def open_output(self, key: str) -> pa.NativeFile:
        raise NotImplementedError("DirectoryStore takes whole PUTs only")

    def uploads(self, prefix: str) -> Iterator[Upload]:
        return iter(())  # whole PUTs only: never a multipart upload

    def abort_upload(self, upload: Upload) -> None:
        pass

    def delete(self, key: str) -> None:
        try:
            os.remove(self._path(key))
        except FileNotFoundError:
            pass

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def get(self, key: str) -> Fetched:
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ObjectMissing("get", self.url(key), "no such object") from None
        return Fetched(data, _etag(data))

    def head(self, key: str) -> ObjectInfo | None:
        try:
            data = self.get(key).data
        except ObjectMissing:
            return None
        return ObjectInfo(key, len(data), _etag(data))

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        keys = []
        for directory, _, names in os.walk(self.root):
            for name in names:
                key = os.path.relpath(os.path.join(directory, name), self.root).replace(os.sep, "/")
                if not name.startswith(".put-") and key.startswith(prefix) and key > start_after:
                    keys.append(key)
        for key in sorted(keys):
            info = self.head(key)
            if info is not None:
                yield info

    def open_input(self, key: str) -> pa.NativeFile:
        if not os.path.exists(self._path(key)):
            raise ObjectMissing("open_input", self.url(key), "no such object")
        return pa.OSFile(self._path(key), "rb")
