"""protocol.frozen.positional_maker: the C slot filler builds the very instances the class
would (equal, hashed, pickled, replaced, frozen alike), refuses what it cannot build, holds
no reference too many or too few, and steps aside for classes it cannot build exactly."""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass

import pytest

from protocol.binlog.events import AnnotateRowsEvent, MariadbGtidEvent, XidEvent
from protocol.binlog.model import BinlogPosition, EventHeader, RowsEvent, RowsKind, TableMapEvent
from protocol.binlog.transactions import TransactionBegin, TransactionCommit
from protocol.frozen import fast_init, positional_maker
from protocol.gtid import MariadbGtid

native = pytest.importorskip("protocol._native_slots")

HEADER = EventHeader(1_700_000_000, 162, 7, 42, 4242, 8, "bin.000001", 4200, 4242)
VALUES: dict[type, tuple[object, ...]] = {
    EventHeader: dataclasses.astuple(HEADER),
    BinlogPosition: ("bin.000001", 4242),
    TableMapEvent: (HEADER, 70, 1, "db", "t", (), (0,), True, frozenset({1}), None, ()),
    MariadbGtidEvent: (HEADER, 0, 7, 99, 8, None, None, 0, None, None, None),
    XidEvent: (HEADER, 12345),
    AnnotateRowsEvent: (HEADER, b"INSERT INTO t VALUES (1)"),
    RowsEvent: (HEADER, RowsKind.INSERT, TableMapEvent(HEADER, 70, 1, "db", "t", ()), 1, 1, (),
                (0,), None, ((1,),), b"", (None, ("chunk",))),
    TransactionBegin: (MariadbGtid(0, 7, 99), BinlogPosition("bin.000001", 4200),
                       1_700_000_000, 7, False, False),
    TransactionCommit: (None, BinlogPosition("b", 4), BinlogPosition("b", 9), 10**15, 7, 5,
                        "X'01',X'',1"),
}


@pytest.mark.parametrize("cls", list(VALUES), ids=lambda c: c.__name__)
def test_the_maker_builds_what_the_class_builds(cls: type) -> None:
    make = positional_maker(cls)
    assert type(make) is not type  # the native maker, not the class
    values = VALUES[cls]
    made, built = make(*values), cls(*values)
    assert type(made) is cls
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    assert pickle.loads(pickle.dumps(made)) == built
    first = dataclasses.fields(cls)[0].name
    assert dataclasses.replace(made, **{first: values[0]}) == built
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, first, values[0])


def test_wrong_calls_are_type_errors_and_references_balance() -> None:
    make = positional_maker(EventHeader)
    values = VALUES[EventHeader]
    with pytest.raises(TypeError, match="takes 9 arguments, got 8"):
        make(*values[:-1])
    with pytest.raises(TypeError, match="positional arguments only"):
        make(*values[:-1], next_position=1)
    name = "".join(["bin.", "0" * 6, "42"])  # an object of its own, counted exactly
    before = sys.getrefcount(name)
    headers = [make(1, 2, 3, 4, 5, 6, name, 7, 8) for _ in range(1000)]
    assert sys.getrefcount(name) == before + 1000
    del headers
    gc.collect()
    assert sys.getrefcount(name) == before


def test_what_the_maker_refuses() -> None:
    with pytest.raises(AttributeError):
        native.maker(EventHeader, ("timestamp", "no_such_field"))
    with pytest.raises(TypeError, match="not an object slot"):
        native.maker(EventHeader, ("__init__",))
    with pytest.raises(TypeError):
        native.maker("EventHeader", ())
    with pytest.raises(ValueError, match="at most 32"):
        native.maker(EventHeader, ("timestamp",) * 33)


@fast_init
@dataclass(frozen=True, slots=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclass(frozen=True, slots=True)
class _KeywordOnly:
    value: int = dataclasses.field(kw_only=True)


@dataclass(frozen=True)
class _NoSlots:
    value: int


def test_classes_it_cannot_build_exactly_get_the_class() -> None:
    for cls in (_Checked, _KeywordOnly, _NoSlots, MariadbGtid):  # MariadbGtid validates
        assert positional_maker(cls) is cls


def test_a_validating_class_is_built_natively_only_when_the_caller_checks() -> None:
    make = positional_maker(MariadbGtid, checked_by_caller=True)
    assert type(make) is not type
    made, built = make(0, 7, 2**64 - 1), MariadbGtid(0, 7, 2**64 - 1)
    assert type(made) is MariadbGtid
    assert made == built and hash(made) == hash(built) and str(made) == "0-7-18446744073709551615"
    assert pickle.loads(pickle.dumps(made)) == built and made < MariadbGtid(0, 8, 0)
    assert positional_maker(_Checked, checked_by_caller=True)(-1).value == -1  # not checked
    with pytest.raises(ValueError, match="negative"):
        _Checked(-1)


def test_native_off_gives_the_class() -> None:
    code = ("from protocol.frozen import positional_maker; "
            "from protocol.binlog.model import EventHeader; "
            "from protocol.gtid import MariadbGtid; "
            "assert positional_maker(EventHeader) is EventHeader; "
            "assert positional_maker(MariadbGtid, checked_by_caller=True) is MariadbGtid")
    subprocess.run([sys.executable, "-c", code], check=True, env={
        **os.environ, "BINLAKE_NATIVE": "0"})
