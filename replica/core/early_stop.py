"""A SIGTERM that arrives before the daemon is listening for it still means "stop cleanly".

``docker stop`` right after ``docker start`` sends SIGTERM while binlake is still importing
pyarrow or loading its configuration; Python's default action would kill it with status 143.
:func:`install` (called by the CLI for ``binlake run``) replaces that with a handler that only
records the request; the daemon checks :func:`requested` when it installs its own signal
receiver and then stops at once, landing nothing half-done and exiting 0.
"""

from __future__ import annotations

import signal

_requested = False


def _record(signum: int, frame: object) -> None:
    global _requested
    _requested = True


def install() -> None:
    signal.signal(signal.SIGTERM, _record)


def requested() -> bool:
    return _requested
