"""Snapshot signals (replica.core.signals): which rows of the signal table ask for what."""

from __future__ import annotations

from protocol.binlog.coltypes import FieldType as T
from replica.core.signals import Signal, signals_in
from sinks.parquet.testing import StreamBuilder, col


def test_signal_rows_and_what_is_not_one() -> None:
    b = StreamBuilder()
    signals = b.table("ops", "signals", [col(0, T.VARCHAR, "id", pk=True, charset=45),
                                         col(1, T.VARCHAR, "type", charset=45),
                                         col(2, T.BLOB, "data", charset=45)])
    event = b.insert(signals, [
        ("s1", "snapshot", '{"tables": ["shop.orders", "shop.items"]}'),
        ("s2", "log", "{}"),
        ("s3", "snapshot", '{"tables": ["orders"]}'),
        ("s4", "snapshot", '{"tables": ["shop.orders"], "condition": "id > 5"}'),
        ("s5", "snapshot", "not json"),
    ])
    found, problems = signals_in(event, "0-1-7")
    assert found == [Signal("s1", (("shop", "orders"), ("shop", "items")), "signal s1 at 0-1-7")]
    assert [p.split(":")[0] for p in problems] == ["signal 's2'", "signal 's3'", "signal 's4'",
                                                   "signal 's5'"]
    assert "type 'log' is not one binlake knows" in problems[0]


def test_a_signal_table_without_column_names_is_said() -> None:
    b = StreamBuilder()
    signals = b.table("ops", "signals", [col(0, T.VARCHAR, "id", pk=True, charset=45),
                                         col(1, T.VARCHAR, "type", charset=45),
                                         col(2, T.BLOB, "data", charset=45)],
                      full_metadata=False)
    found, problems = signals_in(b.insert(signals, [("s1", "snapshot", "{}")]), "x")
    assert found == [] and "names no columns" in problems[0]
