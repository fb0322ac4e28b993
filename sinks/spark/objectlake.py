"""Spark's side of a lake on object storage: which store to read the log from, where Spark reads the objects.

A lake on object storage is read through its commit log (``sinks/objectstore/view.py``):
binlake reads the records and hands Spark the exact committed files. Spark reads those files
at ``spark_root`` + the object's key: in production the ``s3a://`` form of the lake's URL
(Hadoop's S3A connector, configured with ``spark.hadoop.fs.s3a.*``); anywhere else the same
objects are reachable — e.g. a FUSE mount of the bucket — another root. Only the prefix
differs; which files are read is decided by the log either way.

The store the log is read from is the ``[lake.s3]`` store the daemon writes to, configured
for a reader by the same environment — every ``BINLAKE_LAKE_S3_<KEY>`` form, credentials by
the daemon's own rule (``*_FILE``, then ``BINLAKE_LAKE_S3_*``, then ``AWS_*``, then the AWS
default chain): :meth:`~sinks.objectstore.s3.S3Settings.from_environment`, the one place that
rule lives — or given as an object.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..objectstore.s3 import S3Settings, open_store
from ..objectstore.view import LakeView, read_view

if TYPE_CHECKING:
    from ..objectstore.store import ObjectStore

__all__ = ["default_spark_root", "object_view", "store_from_environment", "store_opener"]


def default_spark_root(url: str) -> str:
    """Where Spark reads the objects of the lake at ``url`` by default: ``s3a://BUCKET/PREFIX``
    (Hadoop's S3A connector)."""
    return "s3a://" + url[len("s3://"):].rstrip("/")


def store_opener(url: str) -> Callable[[], ObjectStore]:
    """A picklable function that opens the store of the lake at ``url``, configured from this
    process's environment (module docstring), resolved here — credentials included, so Spark's
    workers, whose environment (and files) may lack them, open the same store (the settings
    never print them). ValueError if a variable is malformed."""
    opener: Callable[[], ObjectStore] = functools.partial(open_store, url,
                                                          S3Settings.from_environment())
    return opener


def store_from_environment(url: str) -> ObjectStore:
    """The store of the lake at ``url``, configured from the environment (module docstring)."""
    return store_opener(url)()


@contextlib.contextmanager
def object_view(url: str, spark_root: str | None = None,
                store: ObjectStore | None = None) -> Iterator[LakeView]:
    """The lake at ``url`` as its log says now (:class:`~sinks.objectstore.view.LakeView`), its
    local bookkeeping copy removed on exit."""
    view = read_view(store or store_from_environment(url), url,
                     spark_root or default_spark_root(url))
    try:
        yield view
    finally:
        view.close()
