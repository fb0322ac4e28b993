"""A SIGTERM that arrives before the daemon is listening for it still means "stop cleanly".

``docker stop`` right after ``docker start`` sends SIGTERM while binlake is still importing
trio and pyarrow or loading its configuration; Python's default action would kill it with
status 143. :func:`install` replaces that with a handler that only records the request; the
daemon checks :func:`requested` when it installs its own signal receiver and then stops at once,
landing nothing half-done and exiting 0.

The handler must be in place before anything slow happens, so :mod:`replica.cli` calls
:func:`install_when_launched` as its very first statement — before its own imports, which take
a few hundred milliseconds (trio alone is most of it). This module therefore imports nothing
but the standard library's ``signal``, ``os`` and ``sys``. What remains unprotected is the
interpreter's own start-up before binlake's first line runs, a small fraction of the time the
imports take.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

__all__ = ["install", "install_when_launched", "launched", "requested", "chosen_command", "STOPPABLE"]

#: Commands for which an early SIGTERM means "stop cleanly, exit 0".
STOPPABLE = frozenset({"run"})

_requested = False


def _record(signum: int, frame: object) -> None:
    global _requested
    _requested = True


def install() -> None:
    signal.signal(signal.SIGTERM, _record)


def requested() -> bool:
    return _requested


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand in ``argv`` (the first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def launched(module_name: str) -> bool:
    """Whether this process is the ``binlake`` command itself (the console script, or
    ``python -m replica.cli``), not a program that merely imports the CLI module."""
    main = sys.modules.get("__main__")
    script = os.path.basename(getattr(main, "__file__", None) or "")
    return module_name == "__main__" or script == "binlake"


def install_when_launched(module_name: str) -> None:
    """Install the handler if this process is ``binlake run`` itself — never in a program that
    merely imports the CLI module."""
    if launched(module_name) and chosen_command(sys.argv[1:]) in STOPPABLE:
        install()
