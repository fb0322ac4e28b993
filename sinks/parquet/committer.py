"""``Committer``: a flush — every staged file made durable, then committed with the checkpoint.

Step 1 of the commit protocol (``commit.py``) for all of the flush's files at once: the Parquet
files, the new schema versions and DDL logs are written side by side (``files.py``) and
fsync-ed together (``FileSystem.fsync_many``), not one after another; new directories come as
staged trees, made ahead with the files in them (``trees.py``). Then the checkpoint document is
assembled (``state.LakeState``: the stream position, the pending DDL, the snapshot progress and
the XA parts in doubt) and steps 2-5 make the files visible and the checkpoint current as one step. Only once
that is durable do the buffers that fed the flush go.
"""

from __future__ import annotations

from . import commit as C
from . import files as F
from . import layout as L
from . import state as S
from .ddllog import DdlLog
from .parts import PartWriter
from .progress import StreamProgress
from .registry import SchemaRegistry
from .snapshot_progress import SnapshotProgress
from .workspace import Workspace
from .xastore import XaStore

__all__ = ["Committer"]

class Committer:
    """See the module docstring."""

    def __init__(self, workspace: Workspace, parts: PartWriter, registry: SchemaRegistry,
                 ddl: DdlLog, xa: XaStore, progress: StreamProgress) -> None:
        self._workspace = workspace
        self._parts = parts
        self._registry = registry
        self._ddl = ddl
        self._xa = xa
        self._progress = progress

    def flush(self, snapshot: SnapshotProgress) -> C.Checkpoint:
        """Commit every part, new version, DDL log entry and XA file with the checkpoint of
        every transaction numbered so far (and ``snapshot``, the snapshot progress)."""
        workspace, parts, xa = self._workspace, self._parts, self._xa
        lake = workspace.lake
        workspace.io_path = workspace.path(L.STAGING)
        documents, renames = parts.version_documents(self._registry.new_versions)
        ddl_documents, ddl_renames = self._ddl.documents()
        documents += ddl_documents
        storage = workspace.storage
        F.run_all(parts.file_jobs(), documents, storage)
        parts.close_all()
        renames = parts.renames() + xa.renames() + renames + ddl_renames + parts.trees.renames()
        storage.fsync_many(parts.durable() + [path for path, _ in documents]
                           + parts.trees.directories())
        checkpoint = self._progress.checkpoint()
        doc = S.LakeState(checkpoint, self._ddl.pending(), snapshot, xa.records()).to_json()
        workspace.io_path = lake
        if renames or xa.deletes:
            C.commit(lake, renames, doc, parts.trees.known, xa.deletes, storage)
        else:
            C.write_checkpoint(lake, doc, storage)
        if workspace.mirror is not None:  # the lake lives elsewhere: commit it there too
            workspace.mirror.publish(renames, xa.deletes, doc)
        # Only now, with the commit durable, do the buffers that fed it go.
        xa.committed()
        workspace.stats.files += parts.committed()
        workspace.stats.flushes += 1
        self._registry.new_versions.clear()
        self._ddl.committed()
        return checkpoint
