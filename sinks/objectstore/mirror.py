"""``ObjectLake``: the Parquet sink landing on object storage through a local spool directory.

The sink (``sinks/parquet/``) writes, stages and commits in a local directory as on disk; this
module makes that directory a *spool* of the lake on the store, and the store's commit log
(``commit.py``) the lake's truth:

* **At open** (:meth:`ObjectLake.restore`, before the sink recovers its directory): the writer
  takes the lake (lease, takeover record, orphan sweep: ``commit.ObjectCommitter.open``), the
  spool is emptied, and the lake's live bookkeeping objects — schema files, the DDL log, XA
  parts in doubt, the ``[types]`` record, every key with a component starting with ``_`` —
  are downloaded to their names without the epoch tag, with ``_checkpoint.json`` written from
  the newest record. Data objects are not downloaded: the sink never reads them back. What
  the spool held before is never trusted: a local commit a crash left unpublished is dropped
  with it, and its transactions are streamed and landed again.
* **At each flush** (:meth:`ObjectLake.publish`, after the sink's local commit): every file
  the flush made visible in the spool is PUT at its final key with the writer's epoch tag
  (streamed as a multipart upload when large: memory stays bounded by one part, whatever the
  file's size), then one commit record names them, the XA parts the flush retired and the
  checkpoint. The data files are then removed from the spool (disk stays bounded by one
  flush); bookkeeping files stay, as the sink reads them.
* **At close** (:meth:`ObjectLake.close`): the lease is released.

So the local commit is only a step of staging: a crash anywhere before the record exists
leaves the lake as it was (the spool is rebuilt at the next start, the uploaded objects are
orphans the next start sweeps), and after it the transactions are in the lake once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from ..parquet import commit as C
from ..parquet.layout import LOCK, TYPES_RECORD
from .commit import ObjectCommitter, Retry, layout_name
from .lease import Lease
from .store import ObjectStore

__all__ = ["ObjectLake", "spool_for"]

#: Files up to this size are PUT whole; larger ones are streamed (a multipart upload).
PUT_WHOLE_BYTES = 8 * 1024 * 1024
#: Bytes read from the spool per write into a streamed upload.
STREAM_CHUNK = 8 * 1024 * 1024


def spool_for(lake_url: str) -> str:
    """The spool of the lake at ``lake_url``: one directory per lake URL under the system's
    temporary directory (its content is rebuilt from the lake at every start)."""
    digest = hashlib.sha256(lake_url.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"binlake-spool-{digest}")


def _hidden(name: str) -> bool:
    return any(part[:1] in "_." for part in name.split("/"))


class ObjectLake:
    """See the module docstring. ``url`` names the lake in messages; ``spool`` is the local
    directory the sink writes in (its lock file is kept while the rest is emptied)."""

    def __init__(self, store: ObjectStore, url: str, spool: str, *,
                 lease_duration_s: float = 30.0, lease: Lease | None = None,
                 retry: Retry | None = None,
                 probe: Callable[[ObjectStore], None] | None = None,
                 log_snapshot_records: int = 100) -> None:
        self.store = store
        self._probe = probe
        self.url = url
        self.spool = os.path.abspath(spool)
        self._retry = retry or Retry()
        self.lease = lease or Lease(store, url, duration_s=lease_duration_s)
        self.committer = ObjectCommitter(store, url, self.lease, self._retry,
                                         snapshot_every=log_snapshot_records)
        self._keys: dict[str, str] = {}  # spool name -> key, for every live object

    # --- open -----------------------------------------------------------------------------------

    def restore(self) -> None:
        """Take the lake and rebuild the spool from it (module docstring). A store that
        ignores conditional writes is refused first (``probe``): the log's safety rests on
        them."""
        probe = self._probe
        if probe is not None:
            self._retry.call("probing conditional writes", lambda: probe(self.store))
        checkpoint = self.committer.open()
        try:
            self._keys = {layout_name(key): key for key in self.committer.live}
            self._empty_spool()
            for name, key in sorted(self._keys.items()):
                if _hidden(name):
                    self._download(key, os.path.join(self.spool, name))
            if checkpoint is not None:
                C.write_checkpoint(self.spool, checkpoint)
        except BaseException:
            self.committer.close()
            raise

    def _download(self, key: str, path: str) -> None:
        fetched = self._retry.call(f"reading {key}", lambda: self.store.get(key))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(fetched.data)

    def _empty_spool(self) -> None:
        os.makedirs(self.spool, exist_ok=True)
        for name in os.listdir(self.spool):
            if name == LOCK:
                continue
            path = os.path.join(self.spool, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)

    # --- flush ----------------------------------------------------------------------------------

    def publish(self, renames: Iterable[tuple[str, str]], deletes: Iterable[str],
                checkpoint: dict[str, Any]) -> None:
        """Upload what the sink's local commit made visible, then commit it on the store with
        ``checkpoint`` (``renames``: the commit's (staged, final) names, relative to the
        spool; ``deletes``: the names it removed)."""
        names = self._committed_files(dst for _, dst in renames)
        if TYPES_RECORD not in self._keys and os.path.exists(os.path.join(self.spool,
                                                                          TYPES_RECORD)):
            names.append(TYPES_RECORD)
        uploaded = {name: self._upload(name) for name in names}
        doomed = [name for name in deletes if name in self._keys]
        self.committer.commit(list(uploaded.values()), [self._keys[name] for name in doomed],
                              checkpoint)
        for name in doomed:
            del self._keys[name]
        self._keys.update(uploaded)
        for name in names:
            if not _hidden(name):  # the sink never reads a data file back
                os.remove(os.path.join(self.spool, name))

    def _committed_files(self, destinations: Iterable[str]) -> list[str]:
        """Every file at or under each destination (a staged tree lands as one directory)."""
        found: list[str] = []
        for name in destinations:
            path = os.path.join(self.spool, name)
            if os.path.isdir(path):
                for root, _, files in os.walk(path):
                    for file in files:
                        found.append(os.path.relpath(os.path.join(root, file), self.spool))
            else:
                found.append(name)
        return sorted(found)

    def _upload(self, name: str) -> str:
        key = self.committer.fresh(name)
        path = os.path.join(self.spool, name)
        if os.path.getsize(path) <= PUT_WHOLE_BYTES:
            with open(path, "rb") as file:
                data = file.read()
            self._retry.call(f"uploading {key}", lambda: self.store.put(key, data))
        else:
            self._retry.call(f"uploading {key}", lambda: self._stream(path, key))
        return key

    def _stream(self, path: str, key: str) -> None:
        with open(path, "rb") as file, self.store.open_output(key) as out:
            while chunk := file.read(STREAM_CHUNK):
                out.write(chunk)

    # --- close ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the lake (a clean stop)."""
        self.committer.close()
