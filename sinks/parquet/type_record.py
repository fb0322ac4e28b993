"""``<lake>/_types.json``: the ``[types]`` choices a lake was created with.

A lake's columns keep their Arrow types for its whole life (a reader merging schema versions
cannot reconcile ``decimal(20,0)`` with ``bigint`` in one column), so the choices are made once,
when the lake is created, and recorded; a daemon started later with other choices is refused
(:class:`~sinks.errors.TypeOptionsChanged`, exit 2) naming both, rather than land a second
mapping beside the first. A lake without the record was made with the defaults (the record is
written only for other choices, so a lake that never chose stays as it always was).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import TypeOptionsChanged
from ..storage import Storage
from ..transform import TypeOptions
from .commit import OS
from .layout import TYPES_RECORD

__all__ = ["check_types"]


def _describe(choices: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {json.dumps(v)}" for k, v in sorted(choices.items()))


def check_types(lake: str, options: TypeOptions, *, new_lake: bool,
                storage: Storage = OS) -> None:
    """Check ``options`` against the lake's record (none: the defaults, unless the lake is
    new); record them in a new lake when they are not the defaults. The record's rename is
    made durable by the lake's first commit (its checkpoint's rename fsyncs the lake)."""
    path = os.path.join(lake, TYPES_RECORD)
    wanted = options.to_json()
    try:
        recorded: dict[str, Any] | None = json.loads(storage.read(path).decode("utf-8"))
    except FileNotFoundError:
        recorded = None if new_lake else TypeOptions().to_json()
    if recorded is not None and {**TypeOptions().to_json(), **recorded} != wanted:
        raise TypeOptionsChanged(
            f"the lake {lake} was created with [types] {_describe(recorded)}; this daemon "
            f"asks for {_describe(wanted)}",
            fix="start the daemon with the lake's [types] settings, or land into a new lake "
                "to change them")
    if recorded is None and not options.is_default:  # no record: the defaults, unwritten
        storage.write(path + ".tmp", (json.dumps(wanted, sort_keys=True) + "\n").encode())
        storage.fsync(path + ".tmp")
        storage.replace(path + ".tmp", path)
