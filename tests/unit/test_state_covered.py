"""An unreadable ``_state/seq=S/_covered.json`` is not fatal but is said, once per file.

``read_current_state`` then reads every change file and filters by ``_seq``: the same rows,
slower. (Needs pyspark importable, not a Spark session.)
"""

from __future__ import annotations

import logging
import os

import pytest

from sinks.parquet import layout as L

state = pytest.importorskip("sinks.spark.state")


def _covered(lake: str, text: str) -> str:
    directory = os.path.join(lake, L.state_dir("shop", "users", 7))
    os.makedirs(directory)
    path = os.path.join(directory, L.STATE_COVERED)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


@pytest.mark.parametrize(("text", "detail"), [
    ('{"seq": 7, "files": ["schema_version=1/comm', "Unterminated string starting at: line 1 "
     "column 22 (char 21)"),
    ('{"seq": 7}', "no key 'files'"),
    ('{"seq": 7, "files": 3}', "'files' is not a list of names but int"),
])
def test_a_corrupt_covered_file_is_ignored_with_one_warning(tmp_path, caplog, text, detail):
    lake = str(tmp_path)
    path = _covered(lake, text)
    with caplog.at_level(logging.WARNING, logger="binlake.spark"):
        assert state.covered_files(lake, "shop", "users", 7) == frozenset()
        assert state.covered_files(lake, "shop", "users", 7) == frozenset()  # said once
    assert [r.getMessage() for r in caplog.records] == [
        f"ignoring the unreadable {path} ({detail}): shop.users's current state is read from "
        "its state as of _seq 7 plus every change file filtered by _seq, the same rows but "
        "slower (the next state `python -m sinks.spark.materialize` writes once the lake has "
        "moved past _seq 7 gets a new one)"]


def test_a_missing_or_good_covered_file_says_nothing(tmp_path, caplog):
    lake = str(tmp_path)
    with caplog.at_level(logging.WARNING, logger="binlake.spark"):
        assert state.covered_files(lake, "shop", "users", 7) == frozenset()
        _covered(lake, '{"seq": 7, "files": ["a.parquet"]}')
        assert state.covered_files(lake, "shop", "users", 7) == frozenset({"a.parquet"})
    assert caplog.records == []
