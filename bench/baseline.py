"""Another commit's binlake, to measure a reference rate beside the checkout in the same run.

``python -m bench --baseline-rev REV`` exports REV's tree (``git archive``, so the checkout and
its worktree are untouched) into the run's scratch directory and builds its native row decoder
in place (``setup.py build_ext --inplace``, as a checkout used without installing does), so the
baseline decodes as that commit did when installed. Its ``binlake decode`` then runs next to
the checkout's on the same binlog files, with the same machine load, so the ratio between the
two compares the code alone. A commit whose extension does not build is
measured with the pure-Python decoder, and that is said in the results (``native: false``).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from .commands import Tree

__all__ = ["BaselineError", "DEFAULT_REV", "prepare"]

#: The fixed reference commit the baseline figures are measured against.
DEFAULT_REV = "514fb4f"
_ROOT = Path(__file__).resolve().parent.parent


class BaselineError(Exception):
    """The baseline commit could not be exported."""


def prepare(rev: str, into: Path) -> tuple[Tree, dict[str, Any]]:
    """Export ``rev`` under ``into`` and build its extension; returns the tree and what to
    record about it (the full commit, whether the native decoder was built)."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=_ROOT,
                            capture_output=True, text=True)
    if commit.returncode != 0:
        raise BaselineError(f"--baseline-rev {rev}: {commit.stderr.strip()}")
    sha = commit.stdout.strip()
    archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=_ROOT,
                             capture_output=True)
    if archive.returncode != 0:
        raise BaselineError(f"git archive {sha}: {archive.stderr.decode(errors='replace')}")
    root = into / f"baseline-{sha[:12]}"
    root.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(root, filter="data")
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=root, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.fspath(root)))
    native = built.returncode == 0 and any((root / "protocol" / "binlog").glob("_native_rows*"))
    tree = Tree(root, label=f"baseline {sha[:12]}")
    tree.compile()  # as the checkout's: start-up without compiling from source
    return tree, {"rev": rev, "commit": sha, "native": native}
