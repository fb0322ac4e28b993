"""The compaction read benchmark's CI smoke run (60 flushes), so it never rots.

No thresholds: the benchmark itself checks that Spark reads the same counts before and after
compaction and that state + replay equals the full replay; speed is reported, not asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import compact_read

pytestmark = pytest.mark.spark


def test_compact_read_smoke(spark, tmp_path: Path) -> None:  # noqa: ARG001 - one session
    assert compact_read.main(["--smoke", "--results-dir", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("compact-read-*.json")
    result = json.loads(path.read_text())
    assert result["files_before"] == 60 and result["files_after"] == 1
    assert result["live_keys"] == 60
