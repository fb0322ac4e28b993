"""Snapshot signals (replica.core.signals): which rows of the signal table ask for what."""

from __future__ import annotations

import pytest

from protocol.binlog.coltypes import FieldType as T
from replica.core.signals import MAX_CONDITION, Signal, condition_problem, signals_in
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
    assert found == [Signal("s1", (("shop", "orders"), ("shop", "items")), "signal s1 at 0-1-7"),
                     Signal("s4", (("shop", "orders"),), "signal s4 at 0-1-7", "id > 5")]
    assert [p.split(":")[0] for p in problems] == ["signal 's2'", "signal 's3'", "signal 's5'"]
    assert "type 'log' is not one binlake knows" in problems[0]


@pytest.mark.parametrize(("condition", "problem"), [
    ("id > 5 AND note = 'a;b' AND `we;ird` = \"x)\"", None),
    ("note = 'it''s' OR note = 'back\\'slash'", None),
    ("(a = 1 OR b = 2) AND c IN (1, 2)", None),
    ("", "is empty"),
    ("1; DROP TABLE t", "holds a ';' (one condition, not statements)"),
    ("1 -- ", "holds a comment, which would hide the rest of the query"),
    ("1 # x", "holds a comment, which would hide the rest of the query"),
    ("1 /* x */", "holds a comment, which would hide the rest of the query"),
    ("1) OR (1", "closes a parenthesis it did not open"),
    ("(1", "leaves a parenthesis open"),
    ("note = 'x", "leaves a ' quote open"),
    ("x" * (MAX_CONDITION + 1), f"is longer than {MAX_CONDITION} characters"),
])
def test_a_condition_stays_one_where_condition(condition: str, problem: str | None) -> None:
    assert condition_problem(condition) == problem


def test_a_signal_with_a_bad_condition_is_not_one() -> None:
    b = StreamBuilder()
    signals = b.table("ops", "signals", [col(0, T.VARCHAR, "id", pk=True, charset=45),
                                         col(1, T.VARCHAR, "type", charset=45),
                                         col(2, T.BLOB, "data", charset=45)])
    found, problems = signals_in(b.insert(signals, [
        ("s1", "snapshot", '{"tables": ["shop.orders"], "condition": "1; DROP TABLE t"}'),
        ("s2", "snapshot", '{"tables": ["shop.orders"], "condition": 5}'),
    ]), "x")
    assert found == []
    assert problems[0] == ("signal 's1': its condition '1; DROP TABLE t' holds a ';' (one "
                           "condition, not statements)")
    assert problems[1].startswith("signal 's2': data must be")


def test_a_signal_table_without_column_names_is_said() -> None:
    b = StreamBuilder()
    signals = b.table("ops", "signals", [col(0, T.VARCHAR, "id", pk=True, charset=45),
                                         col(1, T.VARCHAR, "type", charset=45),
                                         col(2, T.BLOB, "data", charset=45)],
                      full_metadata=False)
    found, problems = signals_in(b.insert(signals, [("s1", "snapshot", "{}")]), "x")
    assert found == [] and "names no columns" in problems[0]
