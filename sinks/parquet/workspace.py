"""``Workspace``: what the Parquet sink's parts share about the lake they are writing.

The sink is split by role (buffering, schema registry, XA store, part writer, committer, …);
each role keeps its own state, and this is the little they have in common: the lake's root and
the options, the storage it lives on (every part's I/O goes through it), the Arrow bytes
buffered against the one memory budget, the counters
(``sinks.stats.SinkStats``, copied out as ``ParquetSink.stats``), the staging names handed out
(each used once per sink), warnings said once, and the path being worked on — the one a :class:`~sinks.errors.LakeError` names when an
operation fails without naming a file itself (pyarrow's writers do not).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..stats import SinkStats
from ..storage import Storage
from .options import SinkOptions

__all__ = ["LakeMirror", "Workspace"]


class LakeMirror(Protocol):
    """Where the lake's truth lives when the sink's directory is only its spool (a lake on
    object storage: ``sinks/objectstore/mirror.py``). The sink calls :meth:`restore` once it
    holds its directory's lock and before it recovers it, :meth:`publish` after each local
    commit, and :meth:`close` when it closes."""

    def restore(self) -> None:
        """Take the lake and rebuild the sink's directory from it."""
        ...

    def publish(self, renames: Iterable[tuple[str, str]], deletes: Iterable[str],
                checkpoint: dict[str, Any]) -> None:
        """Make the local commit of ``renames`` (staged, final: relative names), ``deletes``
        and ``checkpoint`` the lake's; it is not committed until this returns."""
        ...

    def close(self) -> None:
        """Let the lake go (a clean stop)."""
        ...


@dataclass(slots=True, eq=False)
class Workspace:
    """See the module docstring. ``lake`` is absolute; ``storage`` is where it lives, the one
    every part reads and writes it through."""

    lake: str
    options: SinkOptions
    storage: Storage
    stats: SinkStats = field(default_factory=SinkStats)
    buffered: int = 0  # Arrow bytes held in transaction and part buffers, and being written
    io_path: str = ""  # what the sink was writing (named by a LakeError)
    staged_count: int = 0
    warned: set[str] = field(default_factory=set)
    #: None: the directory is the lake. Else the lake lives elsewhere and each commit is
    #: published to it.
    mirror: LakeMirror | None = None

    def path(self, relative: str) -> str:
        """An absolute path in the lake."""
        return os.path.join(self.lake, relative)

    def staged_name(self, name: Callable[[int], str]) -> str:
        """A staging name used once: ``name(n)`` for the next ``n``."""
        self.staged_count += 1
        return name(self.staged_count)

    def first_time(self, key: str) -> bool:
        """True the first time ``key`` is asked: a warning said once per sink."""
        if key in self.warned:
            return False
        self.warned.add(key)
        return True
