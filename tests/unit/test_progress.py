"""The catch-up progress line (replica.observe.progress): bytes behind across files, formatting, and the
state that reports the end once."""

from __future__ import annotations

from protocol.binlog.model import BinlogPosition
from replica.observe.progress import (
    BinlogFile,
    CatchUpProgress,
    bytes_behind,
    format_bytes,
    format_duration,
    format_progress,
)

FILES = [BinlogFile("mysql-bin.000001", 1000), BinlogFile("mysql-bin.000002", 5000),
         BinlogFile("mysql-bin.000003", 300)]


def test_bytes_behind_spans_files() -> None:
    assert bytes_behind(FILES, BinlogPosition("mysql-bin.000001", 4)) == 996 + 5000 + 300
    assert bytes_behind(FILES, BinlogPosition("mysql-bin.000002", 1000)) == 4000 + 300
    assert bytes_behind(FILES, BinlogPosition("mysql-bin.000003", 300)) == 0
    # past the end seen at connect (the server kept writing): nothing behind, not negative
    assert bytes_behind(FILES, BinlogPosition("mysql-bin.000003", 900)) == 0
    assert bytes_behind(FILES, BinlogPosition("mysql-bin.000009", 4)) is None
    assert bytes_behind([], BinlogPosition("mysql-bin.000001", 4)) is None


def test_format_units() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(2048) == "2.0 KiB"
    assert format_bytes(3.5 * 1024 * 1024) == "3.5 MiB"
    assert format_bytes(5 * 1024**4) == "5120.0 GiB"
    assert format_duration(4.4) == "4 s"
    assert format_duration(125) == "2 min 05 s"
    assert format_duration(3 * 3600 + 7 * 60) == "3 h 07 min"


def test_format_progress_line() -> None:
    line = format_progress(BinlogPosition("mysql-bin.000002", 4096),
                           BinlogPosition("mysql-bin.000003", 1000), behind=2 * 1024 * 1024,
                           total=8 * 1024 * 1024, rate=1024 * 1024)
    assert line == ("catching up: mysql-bin.000002:4096 of mysql-bin.000003:1000 "
                    "(75.0%, 2.0 MiB behind, 1.0 MiB/s, ~2 s left)")
    # no rate yet: no estimate; a zero total is done
    assert format_progress(BinlogPosition("f.1", 4), BinlogPosition("f.1", 4), 0, 0, None) == (
        "catching up: f.1:4 of f.1:4 (100.0%, 0 B behind)")


def test_catch_up_progress_reports_until_the_end_then_once_more() -> None:
    progress = CatchUpProgress(FILES)
    assert progress.end == BinlogPosition("mysql-bin.000003", 300)
    first = progress.update(0.0, BinlogPosition("mysql-bin.000001", 300))
    assert first == ("catching up: mysql-bin.000001:300 of mysql-bin.000003:300 "
                     "(0.0%, 5.9 KiB behind)")
    second = progress.update(2.0, BinlogPosition("mysql-bin.000002", 2000))
    # 6000 bytes to go at first, 3300 now, 2700 done in 2 s
    assert second == ("catching up: mysql-bin.000002:2000 of mysql-bin.000003:300 "
                      "(45.0%, 3.2 KiB behind, 1.3 KiB/s, ~2 s left)")
    assert progress.update(3.0, BinlogPosition("other.000001", 4)) is None  # unknown file
    assert progress.update(4.0, BinlogPosition("mysql-bin.000003", 300)) == (
        "caught up with the binlog end seen at connect (mysql-bin.000003:300)")
    assert progress.done
    assert progress.update(5.0, BinlogPosition("mysql-bin.000003", 400)) is None


def test_no_files_means_no_progress() -> None:
    progress = CatchUpProgress([])
    assert progress.done
    assert progress.update(0.0, BinlogPosition("mysql-bin.000001", 4)) is None
