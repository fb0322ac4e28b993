"""Run one measured subprocess: wall time, exit status and *its own* peak RSS.

Peak RSS is ``VmHWM`` from ``/proc/<pid>/status``, polled while the program runs, and the
``self_vmhwm_kib`` the program reports itself at its end when it does (the Python readers), the
larger of the two. Not ``ru_maxrss``: Linux carries the high-water mark of the address space a
process had *before* ``exec`` into it, which for a child of this (large) benchmark process is the
benchmark's own RSS at fork time — it made the C decoder look like a 35 MiB program.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Measurement", "MeasureError", "run_measured", "vm_hwm_kib"]


class MeasureError(Exception):
    """A measured program failed; carries the tail of its stderr."""


@dataclass
class Measurement:
    wall_seconds: float  # the whole process, start to exit
    peak_rss_kib: int  # VmHWM of the process (KiB), see the module docstring
    cpu_seconds: float  # user + system CPU of the whole process
    report: dict[str, Any] = field(default_factory=dict)  # its JSON line, if it printed one


def run_measured(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 stdout_to_devnull: bool = False, timeout: float = 3600.0,
                 cwd: str | os.PathLike[str] | None = None) -> Measurement:
    """Run ``argv`` (in ``cwd``) to completion; parse the last line of its stdout as JSON unless
    ``stdout_to_devnull``. Raises MeasureError on a non-zero exit or a timeout."""
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(argv), env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL,
            cwd=cwd,
            stdout=subprocess.DEVNULL if stdout_to_devnull else out, stderr=err,
        )
        deadline = started + timeout
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, vm_hwm_kib(proc.pid))
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                raise MeasureError(f"{argv[0]} timed out after {timeout:.0f} s")
            time.sleep(0.002)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        if proc.returncode != 0:
            raise MeasureError(
                f"{' '.join(argv[:3])} … exited with {proc.returncode}:\n{stderr.strip()[-3000:]}")
        report: dict[str, Any] = {}
        if not stdout_to_devnull:
            out.seek(0)
            lines = out.read().decode(errors="replace").strip().splitlines()
            if lines:
                report = json.loads(lines[-1])
        peak = max(peak, int(report.get("self_vmhwm_kib", 0)))
        return Measurement(wall, peak, usage.ru_utime + usage.ru_stime, report)


def vm_hwm_kib(pid: int | str = "self") -> int:
    """The peak resident set size of a running process (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
