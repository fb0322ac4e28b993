"""The one exception hierarchy of ``sinks/``.

Everything a sink raises on purpose derives from :class:`SinkError`. Errors say which table,
column or file is involved, never anything about the connection that fed the sink.
"""

from __future__ import annotations

import errno as _errno
import os as _os


class SinkError(Exception):
    """Root of every error raised by ``sinks/``."""


class UnsupportedValue(SinkError):
    """A decoded value that cannot be landed in its column's Arrow type."""

    def __init__(self, table: str, column: str, value_type: str, arrow_type: str) -> None:
        super().__init__(
            f"{table}.{column}: cannot land a {value_type} value as {arrow_type}"
        )
        self.table = table
        self.column = column
        self.value_type = value_type
        self.arrow_type = arrow_type


class TransformRefused(SinkError):
    """A column rule cannot be applied to the column it matches (a type whose text form cannot
    be hashed reproducibly, an excluded key column): a configuration error, found when the
    table is first seen. ``fix`` says what rule would work."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


class ValueOutOfRange(TransformRefused):
    """A value the lake's ``[types]`` choice cannot hold (a BIGINT UNSIGNED past 2^63-1 where
    it lands as int64): never wrapped; the daemon stops (exit 2) with ``fix``."""


class TypeOptionsChanged(TransformRefused):
    """The daemon's ``[types]`` differ from those the lake was created with (exit 2)."""


class LakeCorrupted(SinkError):
    """The lake's on-disk state contradicts itself (a commit record names a file that is gone)."""


class SinkStateError(SinkError):
    """The item stream broke the sink's protocol (rows outside a transaction, use after close)."""


class LakeError(SinkError):
    """The lake's filesystem refused an operation: disk full, I/O error, read-only, permission.

    No retry can fix these (the same write fails the same way), and a sink whose write failed
    half-way must not go on: its buffers no longer match what is on disk. So the sink marks
    itself broken, the daemon stops with its own exit code, and a restart — once the cause is
    fixed — recovers from the last durable checkpoint. ``fix`` says what to do, by errno.
    """

    def __init__(self, path: str, errno_: int | None, strerror: str, operation: str) -> None:
        name = _errno.errorcode.get(errno_, f"errno {errno_}") if errno_ is not None else "?"
        super().__init__(f"{operation}: {name} (errno {errno_}, {strerror}) at {path}")
        self.path = path
        self.errno = errno_
        self.errno_name = name
        self.strerror = strerror
        self.operation = operation

    @classmethod
    def from_os_error(cls, exc: OSError, path: str, operation: str) -> LakeError:
        """``exc`` with the path it names itself (if any), else ``path``."""
        named = exc.filename if isinstance(exc.filename, str) else path
        strerror = exc.strerror or str(exc)
        if "Detail: [errno" in strerror:  # pyarrow: "Error writing bytes to file. Detail: ..."
            strerror = _os.strerror(exc.errno) if exc.errno else strerror
        return cls(named, exc.errno, strerror, operation)

    @property
    def fix(self) -> str:
        resume = "then start binlake again: it resumes from the lake's last checkpoint"
        if self.errno in (_errno.ENOSPC, _errno.EDQUOT):
            return f"free space (or raise the quota) on the lake's filesystem, {resume}"
        if self.errno in (_errno.EACCES, _errno.EPERM):
            return (f"check permissions: the daemon's user must be able to create, write and "
                    f"rename files in every directory of the lake, {resume}")
        if self.errno == _errno.EROFS:
            return f"the lake's filesystem is read-only: remount it read-write, {resume}"
        if self.errno == _errno.EIO:
            return f"the lake's disk reported an I/O error: check the device and its logs, {resume}"
        return f"fix the lake's filesystem, {resume}"


class StoreError(SinkError):
    """An object store (``sinks/objectstore/``) failed an operation. It names the operation and
    the object's URL (``s3://bucket/key``), never a credential. The subclasses say whether a
    retry can help."""

    def __init__(self, operation: str, url: str, detail: str) -> None:
        super().__init__(f"{operation} {url}: {detail}")
        self.operation = operation
        self.url = url
        self.detail = detail


class StoreUnavailable(StoreError):
    """A failure a retry can cure: a timeout, a refused or reset connection, a 5xx, ``SlowDown``.
    The caller retries with backoff; the store promises the operation either happened whole or
    not at all, so a retried conditional create may find its own earlier attempt (the commit
    log reads such a record back before deciding it lost)."""


class StoreRefused(StoreError):
    """A refusal no retry can cure (403, ``NoSuchBucket``, ``InvalidAccessKeyId``, a quota):
    the daemon stops with exit 4 and :attr:`fix`."""

    def __init__(self, operation: str, url: str, detail: str, fix: str) -> None:
        super().__init__(operation, url, detail)
        self.fix = fix


class StoreAbandoned(StoreError):
    """A call the store kept failing transiently (:class:`StoreUnavailable`) was given up
    because the daemon is stopping and its stop budget (``replica.stop_timeout``) is spent: an
    unreachable store must not keep a stopping daemon alive. A flush given up before its
    commit record commits nothing: no record names its objects, the lake is as of its last
    record, and the next start removes them and streams those transactions again (a record's
    own create given up may have happened, its answer lost: the next start finds it and
    resumes after it). Not a :class:`StoreUnavailable`: nothing retries it. ``what``: the
    operation given up."""

    def __init__(self, what: str, last: StoreUnavailable) -> None:
        super().__init__(last.operation, last.url,
                         f"{last.detail} (the object store was unreachable while stopping: "
                         f"{what} was given up once the stop budget was spent)")
        self.what = what
        self.last = last

    @property
    def fix(self) -> str:
        return ("nothing is lost or landed twice: the next start resumes after the lake's "
                "last commit record (it removes what an abandoned flush uploaded and streams "
                "that flush's transactions again); once the store is reachable (check "
                "lake.s3.endpoint and the network to it), start binlake again")


class ObjectMissing(StoreError):
    """The object read does not exist (a GET or an open for reading of an absent key)."""


class LakeFormatTooNew(SinkError):
    """The lake was written by a newer binlake, in a lake format this one does not know: it is
    refused before anything is read or written, never misread or "recovered" into damage."""

    def __init__(self, lake: str, found: int, supported: int) -> None:
        super().__init__(f"the lake {lake} has lake format {found}, newer than this binlake's "
                         f"{supported}: it was written by a newer binlake")
        self.lake = lake
        self.found = found
        self.supported = supported

    @property
    def fix(self) -> str:
        return (f"run a binlake that writes lake format {self.found} on this lake (upgrade "
                "this one), or point lake.path at another lake")


class LakeLocked(SinkError):
    """Another process holds the lake's writer lock (``<lake>/_lock``): one writer per lake."""

    def __init__(self, lake: str, lock_path: str, holder_pid: int | None) -> None:
        who = f"pid {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(f"the lake {lake} is in use by another writer ({who} holds {lock_path})")
        self.lake = lake
        self.lock_path = lock_path
        self.holder_pid = holder_pid

    @property
    def fix(self) -> str:
        who = f" (pid {self.holder_pid})" if self.holder_pid is not None else ""
        return (f"stop the other `binlake run`{who} on this lake first, or give this one its "
                "own lake.path; readers (binlake status, Spark) need no lock")


class LakeLeased(LakeLocked):
    """A lake on object storage is held by another writer that keeps renewing its lease
    (``sinks/objectstore/lease.py``): one writer per lake."""

    def __init__(self, lake: str, lease_url: str, holder: str, waited_s: float) -> None:
        SinkError.__init__(self, f"the lake {lake} is in use by another writer ({holder} renewed "
                           f"its lease {lease_url} within the {waited_s:g} s watched)")
        self.lake = lake
        self.lock_path = lease_url
        self.holder_pid = None
        self.holder = holder

    @property
    def fix(self) -> str:
        return (f"stop the other `binlake run` on this lake first ({self.holder}), or give this "
                "one its own lake.path; a writer that died is taken over once its lease runs "
                "out; readers (binlake status, Spark) need no lease")


class LakeFenced(LakeLocked):
    """Another writer committed to this lake since this one last did (it took the lake over
    while this one was paused or cut off): this writer may never commit again."""

    def __init__(self, lake: str, url: str, *, lease: bool = False) -> None:
        """``url``: the other writer's record found at this one's next number, or (``lease``)
        the lease this writer's renewal found replaced by the other's."""
        evidence = (f"its lease {url} replaced this writer's" if lease
                    else f"its commit record {url} exists")
        SinkError.__init__(self, f"the lake {lake} was taken over by another writer: {evidence}, "
                           "so this writer stops without committing")
        self.lake = lake
        self.lock_path = url
        self.holder_pid = None

    @property
    def fix(self) -> str:
        return ("another `binlake run` now writes this lake: stop one of the two (each "
                "needs its own lake.path); nothing this writer had not committed is lost, "
                "the other resumes from the lake's last commit")


class StreamBehindRetention(SinkError):
    """A streaming query on a lake on disk had not read rows that retention has since removed
    from the change log: going on would skip them in silence, so its batch fails instead."""
