"""The python-mysql-replication peer lives in its own venv, so its dependencies (and its pinned
PyMySQL) never meet binlake's. The venv is cached between runs under the bench cache directory.
What it installs is the project's ``bench-peer`` extra (pyproject.toml), the one list of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

__all__ = ["PMR_PACKAGES", "cache_dir", "ensure_pmr_venv", "pmr_python", "pmr_version"]

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
#: What the peer needs: pyproject.toml's ``bench-peer`` extra (versions are recorded in results).
PMR_PACKAGES = tuple(tomllib.loads(_PYPROJECT.read_text())["project"]["optional-dependencies"]
                     ["bench-peer"])


def cache_dir() -> Path:
    """``$BINLAKE_BENCH_CACHE``, else ``$XDG_CACHE_HOME/binlake-bench``, else ``~/.cache/...``."""
    explicit = os.environ.get("BINLAKE_BENCH_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "binlake-bench"


def pmr_python() -> Path:
    return cache_dir() / "pmr-venv" / "bin" / "python"


def pmr_version() -> str | None:
    """The installed mysql-replication version, or None when the venv is not ready."""
    python = pmr_python()
    if not python.exists():
        return None
    result = subprocess.run(
        [os.fspath(python), "-c",
         "import importlib.metadata as m; print(m.version('mysql-replication'), "
         "m.version('pymysql'))"],
        capture_output=True, text=True,
    )  # fmt: skip
    return result.stdout.strip() or None if result.returncode == 0 else None


def _pinned() -> str:
    """The versions pmr_version() reports when the venv holds exactly the extra's pins."""
    return " ".join(spec.partition("==")[2] for spec in PMR_PACKAGES)


def ensure_pmr_venv(*, install: bool = True) -> Path | None:
    """Return the venv's python, creating the venv and installing the peer if needed.

    With ``install=False`` (the smoke mode: no network in CI) only an existing venv is used.
    Returns None when the peer is unavailable; the reason is printed to stderr.
    """
    python = pmr_python()
    installed = pmr_version()
    if installed is not None and (installed == _pinned() or not install):
        return python
    if not install:
        print("bench: python-mysql-replication venv not cached; skipping that peer "
              "(run `python -m bench --setup` once)", file=sys.stderr)
        return None
    venv = python.parent.parent
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [sys.executable, "-m", "venv", "--clear", os.fspath(venv)],
        [os.fspath(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         *PMR_PACKAGES],
    ]
    for argv in steps:
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            print(f"bench: {' '.join(argv[:4])} failed; skipping python-mysql-replication:\n"
                  f"{result.stderr.strip()[-2000:]}", file=sys.stderr)
            return None
    # py-spy for --profile; optional (a binary wheel), so a failure only loses that profile.
    subprocess.run([os.fspath(python), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "py-spy"], capture_output=True)
    return python if pmr_version() is not None else None
