"""bench/commands.py runs another tree's ``binlake`` from that tree: the baseline commit's
``binlake decode`` must execute the baseline's code, not the checkout's (``python -m`` puts the
working directory before ``PYTHONPATH`` on ``sys.path``, which once made every baseline figure
the checkout's own)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import commands

ROOT = Path(__file__).resolve().parents[2]


def test_a_tree_runs_its_own_code_whatever_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "other"
    (tree / "replica").mkdir(parents=True)
    (tree / "replica" / "__init__.py").write_text("")
    (tree / "replica" / "cli.py").write_text(
        "import os, sys\n"
        "open(os.environ['MARK'], 'w').write(__file__ + ' ' + ' '.join(sys.argv[1:]))\n")
    mark = tmp_path / "mark"
    monkeypatch.chdir(ROOT)  # where `python -m bench` runs: the checkout, with its replica/
    env = dict(os.environ, MARK=os.fspath(mark))
    commands.measure_decode(commands.Tree(tree, label="other"), env, "text", ["f1", "f2"])
    assert mark.read_text() == f"{tree / 'replica' / 'cli.py'} decode --format text f1 f2"
