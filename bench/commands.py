"""binlake's own commands as measured subprocesses: ``binlake run`` and ``binlake decode``.

What a user gets is what is measured: the daemon with its pipeline, metrics endpoint, filters
and ticker, started as a process (``python -m replica.cli``, the same entry point as the
``binlake`` script) and timed from process start to exit, interpreter start-up included.

``binlake run`` gets a TOML file for a fresh lake: ``start.from = "file"`` at the workload's
first binlog file, ``replica.stop_at_end = true`` (exit 0 once the server's end of binlog is
reached, everything before it committed), the metrics endpoint on a free loopback port (so it
is served, as in production, without colliding with anything else on the machine), the password
in ``BINLAKE_SERVER_PASSWORD``. After it exits the lake's visible Parquet files must hold
exactly the workload's rows (from the files' footers), else the run counts as failed: a fast
daemon that lands nothing is not a result.

``binlake decode --format text|open-protocol FILES > /dev/null`` reads the binlog files from
disk, like ``mariadb-binlog``. A ``Tree`` other than the checkout (``--baseline-rev``, see
bench/baseline.py) runs the same commands from another commit's code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from .measure import MeasureError, Measurement, run_measured

__all__ = ["DaemonTarget", "Tree", "landed_rows", "measure_decode", "measure_run", "run_config"]


@dataclass(frozen=True)
class Tree:
    """Where binlake's code comes from: ``root`` goes first on ``PYTHONPATH``."""

    root: Path
    label: str = "checkout"

    def env(self, base: dict[str, str]) -> dict[str, str]:
        path = os.fspath(self.root)
        rest = base.get("PYTHONPATH", "")
        return dict(base, PYTHONPATH=f"{path}{os.pathsep}{rest}" if rest else path)

    def argv(self, *args: str) -> list[str]:
        """The command line of ``binlake ARGS``; run it in :attr:`root` (``cwd``): ``python -m``
        puts the working directory before ``PYTHONPATH`` on ``sys.path``, so from the checkout a
        baseline tree would run the checkout's code (as it did until the decode speed work
        found it: the baseline's figures were the checkout's)."""
        return [sys.executable, "-m", "replica.cli", *args]

    def compile(self) -> None:
        """Write the tree's bytecode up front, as ``pip install`` does for an installed binlake.
        Otherwise, with ``PYTHONDONTWRITEBYTECODE`` set (this project's machines and image set
        it), every measured start-up would compile each of binlake's modules from source again:
        about 0.2 s of CPU per process, charged to no user."""
        packages = [os.fspath(self.root / name) for name in ("protocol", "replica", "sinks")]
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *packages],
                       check=True, stdout=subprocess.DEVNULL)


@dataclass(frozen=True)
class DaemonTarget:
    """The server and account ``binlake run`` replicates from."""

    port: int
    user: str
    password: str
    database: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_config(target: DaemonTarget, lake: Path | str, first: str, server_id: int,
               extra: str = "") -> str:
    """The TOML of a measured ``binlake run`` into ``lake`` (a directory or an ``s3://`` URL)."""
    return extra + (
        "[server]\n"
        f'host = "127.0.0.1"\nport = {target.port}\nuser = "{target.user}"\n'
        'tls_mode = "disabled"\n'
        f"[replica]\nserver_id = {server_id}\nstop_at_end = true\n"
        f'[start]\nfrom = "file"\nfile = "{first}"\npos = 4\n'
        f'[filter]\ninclude = ["{target.database}.*"]\n'
        f'[lake]\npath = "{lake}"\n'
        f'[metrics]\naddress = "127.0.0.1:{_free_port()}"\n'
        '[log]\nlevel = "warning"\n')


def landed_rows(lake: Path) -> int:
    """Rows in the lake's visible Parquet files (``_``/``.`` directories hold staging, states
    and other bookkeeping that a reader never sees), from the footers alone."""
    total = 0
    for path in lake.rglob("*.parquet"):
        if any(part[0] in "_." for part in path.relative_to(lake).parts):
            continue
        total += pq.ParquetFile(path).metadata.num_rows
    return total


def measure_run(tree: Tree, env: dict[str, str], target: DaemonTarget, first: str,
                lake: Path, server_id: int, expected_rows: int, extra: str = "") -> Measurement:
    """``binlake run`` from ``first``/4 to the end of binlog into the empty ``lake``;
    ``extra``: TOML put before the configuration's tables (column rules, ``[types]``)."""
    lake.mkdir(parents=True, exist_ok=True)
    config = lake.parent / f"{lake.name}.toml"
    config.write_text(run_config(target, lake, first, server_id, extra))
    run_env = dict(tree.env(env), BINLAKE_SERVER_PASSWORD=target.password)
    try:
        measurement = run_measured(tree.argv("run", "--config", os.fspath(config)),
                                   env=run_env, stdout_to_devnull=True, cwd=tree.root)
    finally:
        config.unlink(missing_ok=True)
    landed = landed_rows(lake)
    measurement.report["rows"] = landed
    measurement.report["lake_bytes"] = sum(
        f.stat().st_size for f in lake.rglob("*") if f.is_file())
    measurement.report["files"] = sum(1 for _ in lake.rglob("*.parquet"))
    if landed != expected_rows:
        raise MeasureError(f"binlake run landed {landed} rows, the workload logged "
                           f"{expected_rows}")
    return measurement


def measure_decode(tree: Tree, env: dict[str, str], output_format: str,
                   files: list[str]) -> Measurement:
    """``binlake decode --format FORMAT FILES > /dev/null``: process wall time and peak RSS."""
    return run_measured(tree.argv("decode", "--format", output_format, *files),
                        env=tree.env(env), stdout_to_devnull=True, cwd=tree.root)
