"""Parquet row groups encoded on a background thread, so encoding overlaps decoding.

Encoding and compressing a row group (dictionary and zstd) and writing it was about a fifth of
``binlake run``'s CPU on the benchmark's bulk inserts, all of it in C++ code that releases
the GIL. Done on one background thread, it runs on a second core while the daemon's thread
decodes and converts the next events, instead of stopping them.

What stays the same: one job at a time, first in first out (:meth:`RowGroupEncoder.start`
waits for the job in flight before it starts another), so a file's row groups are written in
order and no Parquet writer is ever used by two threads; the rows of the job in flight still
count in the sink's memory budget (:attr:`RowGroupEncoder.busy_bytes`) until they are written.
Durability does not move: the sink waits for the job in flight (:meth:`RowGroupEncoder.finish`)
before it closes, fsyncs and commits files (commit.py), and a write's error is raised there —
by the sink call that waits for it — as it would have been raised by the write itself.

When the sink learns a row group's outcome (the file's new size, which may close the file and
call for a flush) does not depend on the thread's speed: where it must wait anyway (before it
starts the next row group, at a flush) and at a commit whose row group may fill its file, judged
from sizes already known (``ParquetSink._may_fill``). A row group written in the foreground
(:meth:`RowGroupEncoder.run`) is accounted for at the same points, so both land the same lake.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["RowGroupEncoder", "RowGroupJob"]


@dataclass(frozen=True, slots=True)
class RowGroupJob:
    """A row group being written: ``future`` gives the file's size once it is written."""

    future: Future[int]
    owner: Any  # what the sink wrote it for (its buffer of the file)
    path: str  # the staged file (named by a LakeError)
    nbytes: int  # Arrow bytes of its rows, in the memory budget until written


class RowGroupEncoder:
    """One background thread writing one row group at a time (see the module docstring)."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._job: RowGroupJob | None = None

    @property
    def busy_bytes(self) -> int:
        """Arrow bytes of the row group in flight (0 when none)."""
        job = self._job
        return job.nbytes if job is not None else 0

    @property
    def idle(self) -> bool:
        return self._job is None

    @property
    def job(self) -> RowGroupJob | None:
        """The job in flight, if any."""
        return self._job

    def start(self, write: Callable[[], int], owner: Any, path: str, nbytes: int) -> None:
        """Run ``write`` (writes a row group, returns the file's size) in the background.
        Only when no job is in flight: the caller finishes the previous one first."""
        if self._job is not None:
            raise RuntimeError("a row group is already being written")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="binlake-row-groups")
        self._job = RowGroupJob(self._executor.submit(write), owner, path, nbytes)

    def run(self, write: Callable[[], int], owner: Any, path: str, nbytes: int) -> None:
        """Run ``write`` now, in the caller's thread, as a job already done: it is accounted
        for by :meth:`finish` where a background one would be (its error is raised there)."""
        if self._job is not None:
            raise RuntimeError("a row group is already being written")
        future: Future[int] = Future()
        try:
            future.set_result(write())
        except Exception as exc:
            future.set_exception(exc)
        self._job = RowGroupJob(future, owner, path, nbytes)

    def finish(self) -> RowGroupJob | None:
        """The job in flight, once it is done (None without one): its error, if any, is
        raised by ``job.future.result()``; either way it is no longer in flight."""
        job = self._job
        if job is None:
            return None
        try:
            job.future.exception()  # waits; the caller asks result() for the error
        finally:
            self._job = None
        return job

    def shutdown(self) -> None:
        """Wait for the job in flight (ignoring its outcome) and stop the thread."""
        job, self._job = self._job, None
        if job is not None:
            job.future.exception()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
