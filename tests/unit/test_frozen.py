"""protocol.frozen.fast_init: the rewritten __init__ builds exactly what the dataclass's did."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from protocol.binlog.events import MariadbGtidEvent, XidEvent
from protocol.binlog.model import BinlogPosition, EventHeader
from protocol.binlog.transactions import TransactionCommit
from protocol.errors import GtidError
from protocol.frozen import fast_init
from protocol.gtid import MariadbGtid


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: str = "x"
    c: frozenset[int] = frozenset()


_Fast = fast_init(dataclasses.make_dataclass(
    "_Fast", [("a", int), ("b", str, dataclasses.field(default="x")),
              ("c", frozenset, dataclasses.field(default=frozenset()))],
    frozen=True, slots=True))


def test_same_fields_defaults_and_signature() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(_Fast)] == [
        (f.name, f.default) for f in dataclasses.fields(_Plain)]
    assert str(inspect.signature(_Fast)) == "(a, b='x', c=frozenset())"
    assert dataclasses.astuple(_Fast(1)) == dataclasses.astuple(_Plain(1)) == (1, "x", frozenset())
    assert dataclasses.astuple(_Fast(2, c=frozenset({3}), b="y")) == (2, "y", frozenset({3}))
    with pytest.raises(TypeError):
        _Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Fast(1, d=2)  # type: ignore[call-arg]


def test_still_frozen_equal_hashable_replaceable_picklable() -> None:
    header = EventHeader(1, 2, 3, 4, 5, 6, "f", 7, 8)
    assert type(header).__init__.__qualname__ == "EventHeader.__init__"
    with pytest.raises(dataclasses.FrozenInstanceError):
        header.file = "g"  # type: ignore[misc]
    assert header == EventHeader(1, 2, 3, 4, 5, 6, "f", 7, 8)
    assert hash(header) == hash(EventHeader(1, 2, 3, 4, 5, 6, "f", 7, 8))
    assert dataclasses.replace(header, file="g").file == "g"
    assert pickle.loads(pickle.dumps(header)) == header
    assert EventHeader(1, 2, 3, 4, 5, 6).next_position == 0
    xid = XidEvent(header, 9)  # a field of the base class's slot
    assert (xid.header, xid.xid) == (header, 9)
    gtid_event = MariadbGtidEvent(header, 0, 3, 5, 0)  # defaults of a subclass
    assert (gtid_event.seq_no, gtid_event.commit_id, gtid_event.flags_extra) == (5, None, 0)
    commit = TransactionCommit(None, BinlogPosition("f", 4), BinlogPosition("f", 9), 1, 2, None)
    assert commit.xa is None and BinlogPosition("f", 4) < BinlogPosition("f", 9)


def test_post_init_still_runs() -> None:
    assert str(MariadbGtid(0, 1, 2)) == "0-1-2"
    with pytest.raises(GtidError):
        MariadbGtid(-1, 0, 0)


def test_refuses_what_it_cannot_rewrite_exactly() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class KwOnly:
        a: int

    for cls in (NoSlots, NotFrozen, Factory, KwOnly, int):
        with pytest.raises(TypeError):
            fast_init(cls)
