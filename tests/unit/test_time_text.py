"""protocol.binlog.values.time_text: the one TIME formatter (decode, Open Protocol and JSON
opaque values all print through it)."""

from __future__ import annotations

import datetime as dt

import pytest

from protocol.binlog.values import time_text


@pytest.mark.parametrize(("value", "fsp", "text"), [
    (dt.timedelta(0), None, "00:00:00"),
    (dt.timedelta(hours=838, minutes=59, seconds=59), None, "838:59:59"),
    (-dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999), None,
     "-838:59:59.999999"),
    (dt.timedelta(seconds=1, microseconds=500000), None, "00:00:01.500000"),
    (-dt.timedelta(microseconds=1500), None, "-00:00:00.001500"),
    (dt.timedelta(hours=25), 0, "25:00:00"),
    (dt.timedelta(seconds=1, microseconds=500000), 3, "00:00:01.500"),
    (dt.timedelta(hours=12), 6, "12:00:00.000000"),
])
def test_time_text(value: dt.timedelta, fsp: int | None, text: str) -> None:
    assert time_text(value, fsp) == text
