"""Pins: a reader's own names for the files it listed, so that compaction cannot take them away.

A Spark DataFrame is a plan over the files listed when it was made; its tasks open them when an
action runs — a moment or an hour later. Compaction exchanges a partition directory with a new
one, so the old files' paths disappear at that instant, and a plan made before it fails with
``FileNotFoundException``. No name in the live directory can stay openable without also being
listed (that would show a row twice), so binlake's readers give Spark other names: a *pin*,
``<lake>/_pins/<made>-<id>/<db>/<table>/…``, the table's partition directories rebuilt from hard
links (no data is copied). Each partition is pinned from one listing of it; if compaction
switched it between the listing and a link (the link finds no file), that partition is pinned
again from a fresh listing. So a pin holds exactly what one listing of each partition held —
never both a replaced file and its compacted replacement — and nothing the lake's writers do
afterwards changes it.

A pin lives :data:`PIN_LIFETIME` seconds: every new pin and every compaction deletes older ones
(a reader acting on a DataFrame later than that may fail again; make the DataFrame again).
A lake the reader may not write to cannot be pinned: the readers then read the live
directories, as a plain ``spark.read.parquet`` does (said once, in a warning). Pins are made
through the lake's :class:`~sinks.storage.Storage` (:meth:`~sinks.storage.Storage.link`).
"""

from __future__ import annotations

import errno
import logging
import os
import time
import uuid
from collections.abc import Callable, Collection

from ..errors import SinkError
from ..storage import Storage
from . import layout as L
from .commit import OS

log = logging.getLogger("binlake.pins")

__all__ = ["PIN_LIFETIME", "new_pin", "pin_partition", "pin_table", "purge_pins"]

#: Seconds a pin (so a DataFrame made by binlake's readers) stays readable.
PIN_LIFETIME = 3600.0
#: Listings of one partition in a row that compaction may switch before the pin gives up.
_ATTEMPTS = 50

_warned: set[str] = set()


def purge_pins(lake: str, max_age: float, now: float | None = None,
               storage: Storage = OS) -> int:
    """Delete pins made more than ``max_age`` seconds ago; returns how many."""
    root = os.path.join(lake, L.PINS_DIR)
    clock = time.time() if now is None else now
    purged = 0
    for name in storage.listdir(root) if storage.isdir(root) else []:
        made = name.split("-", 1)[0]
        if made.isdigit() and clock - int(made) >= max_age:
            try:
                storage.rmtree(os.path.join(root, name))
            except OSError:  # another reader or a compaction may purge it too
                pass
            purged += 1
    return purged


def new_pin(lake: str, storage: Storage = OS) -> str | None:
    """A new, empty pin directory; ``None`` when the lake is read-only to this reader (or
    not a local directory)."""
    if not storage.isdir(lake):
        return None
    now = time.time()
    try:
        purge_pins(lake, PIN_LIFETIME, now, storage)
        path = os.path.join(lake, L.PINS_DIR, f"{int(now)}-{uuid.uuid4().hex}")
        storage.makedirs(path)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        if lake not in _warned:
            _warned.add(lake)
            log.warning("cannot pin the files read in %s (%s): a compaction that switches a "
                        "partition while a DataFrame is acted on makes that action fail with "
                        "FileNotFoundException (never a wrong result); act on a new DataFrame "
                        "then", lake, exc.strerror)
        return None
    return path


def pin_partition(lake: str, pin: str, directory: str,
                  skip: Collection[str] = (), storage: Storage = OS) -> bool:
    """Hard-link the data files of ``<lake>/<directory>`` into ``<pin>/<directory>``, all from
    one listing, except the names in ``skip``; ``False`` if the directory is gone (retention
    retired it)."""
    live = os.path.join(lake, directory)
    target = os.path.join(pin, directory)
    for _ in range(_ATTEMPTS):
        try:
            names = [n for n in storage.listdir(live) if L.is_data_file(n) and n not in skip]
        except FileNotFoundError:
            return False
        storage.makedirs(target)
        try:
            for name in names:
                storage.link(os.path.join(live, name), os.path.join(target, name))
            return True
        except FileNotFoundError:  # switched between the listing and this link: list again
            storage.rmtree(target)
    raise SinkError(f"{live} was switched by compaction {_ATTEMPTS} times while it was being "
                    "read; read again")


def pin_table(lake: str, database: str, table: str, pin: str | None = None,
              skip: Collection[str] = (), storage: Storage = OS) -> str | None:
    """Pin every change-log partition of a table; returns the pinned table directory (laid out
    as the live one), or ``None`` when the lake cannot be pinned. ``skip``: files to leave out,
    as ``schema_version=N/commit_date=D/name`` (those a materialised state covers)."""
    pin = pin or new_pin(lake, storage)
    if pin is None:
        return None
    base = L.table_dir(database, table)
    for version in _subdirs(os.path.join(lake, base), L.is_version_dir, storage):
        for date in _subdirs(os.path.join(lake, base, version), L.is_date_dir, storage):
            prefix = f"{version}/{date}/"
            names = {n[len(prefix):] for n in skip if n.startswith(prefix)}
            pin_partition(lake, pin, "/".join((base, version, date)), names, storage)
    return os.path.join(pin, base)


def _subdirs(path: str, wanted: Callable[[str], bool], storage: Storage) -> list[str]:
    try:
        names = storage.listdir(path)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if wanted(n))
