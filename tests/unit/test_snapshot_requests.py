"""Snapshot requests a running daemon polls for: an unreadable one is said once, not every poll."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from replica.core.snapshot import REQUESTS_DIR, read_requests


def test_an_unreadable_request_is_warned_about_once(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    requests = tmp_path / REQUESTS_DIR
    requests.mkdir()
    (requests / "r1.json").write_text('{"id": "r1", "tables": [["shop", "orders"]]}')
    (requests / "broken.json").write_text('{"id": ')
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert read_requests(str(tmp_path)) == [("r1", [("shop", "orders")])]
    warnings = [r.getMessage() for r in caplog.records if "unreadable snapshot request" in r.message]
    assert len(warnings) == 1
    assert str(requests / "broken.json") in warnings[0]
