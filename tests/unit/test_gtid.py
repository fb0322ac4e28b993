"""GTIDs, MariaDB GTID positions and MySQL Gtid_sets: text, binary and set algebra."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import GtidError, ProtocolError
from protocol.gtid import MAX_GNO, GtidPosition, GtidSet, MariadbGtid, MysqlGtid, Tsid

U1 = uuid.UUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")
U2 = uuid.UUID("aaaaaaaa-71ca-11e1-9e33-c80aa9429562")

# --- MariaDB -----------------------------------------------------------------------------------


def test_mariadb_gtid_text():
    g = MariadbGtid.parse(" 0-10201-9868 ")
    assert (g.domain, g.server_id, g.seq) == (0, 10201, 9868)
    assert str(g) == "0-10201-9868"
    assert MariadbGtid.parse("4294967295-4294967295-18446744073709551615").seq == 2**64 - 1


@pytest.mark.parametrize("text", ["", "1-2", "1-2-3-4", "a-1-2", "1--2", "-1-2-3", "1-2-3x",
                                  "4294967296-1-1", "1-1-18446744073709551616", "1-2-٣"])
def test_mariadb_gtid_bad_text(text):
    with pytest.raises(GtidError):
        MariadbGtid.parse(text)


def test_gtid_position_parse_format_and_advance():
    p = GtidPosition.parse(" 1-2-7 ,0-1-5,, ")
    assert str(p) == "0-1-5,1-2-7"
    assert repr(p) == "GtidPosition('0-1-5,1-2-7')"
    assert p.domains == (0, 1)
    assert p.get(1) == MariadbGtid(1, 2, 7)
    assert p.get(9) is None
    assert MariadbGtid(0, 1, 5) in p and MariadbGtid(0, 1, 4) not in p
    q = p.advance(MariadbGtid(0, 3, 6))
    assert str(q) == "0-3-6,1-2-7"
    assert str(p) == "0-1-5,1-2-7"  # immutable
    assert str(p.advance(MariadbGtid(5, 1, 1))) == "0-1-5,1-2-7,5-1-1"
    assert GtidPosition.parse("") == GtidPosition() and not GtidPosition()
    assert hash(GtidPosition.parse("0-1-5,1-2-7")) == hash(p)


def test_gtid_position_duplicate_domain():
    with pytest.raises(GtidError, match="domain 0"):
        GtidPosition.parse("0-1-5,0-2-6")
    # a binlog state (GTID_LIST) may list several server ids per domain: last one wins
    state = GtidPosition.from_binlog_state([MariadbGtid(0, 1, 5), MariadbGtid(0, 2, 6)])
    assert str(state) == "0-2-6"


def test_gtid_position_compare_and_merge():
    a = GtidPosition.parse("0-1-5,1-1-3")
    b = GtidPosition.parse("0-1-6,1-1-3,2-1-1")
    assert a <= b and a < b and b >= a and b > a
    assert not (b <= a)
    c = GtidPosition.parse("0-1-9")
    assert not (a <= c) and not (c <= a)  # partial order
    assert str(a.merge(c)) == "0-1-9,1-1-3"
    assert str(c.merge(b)) == "0-1-9,1-1-3,2-1-1"


# --- MySQL: Tsid, Gtid ---------------------------------------------------------------------------


def test_mysql_gtid_text():
    g = MysqlGtid.parse("3E11FA47-71CA-11E1-9E33-C80AA9429562:23")
    assert g == MysqlGtid(Tsid(U1), 23)
    assert str(g) == "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
    t = MysqlGtid.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:My_Tag:7")
    assert t.tsid == Tsid(U1, "my_tag")
    assert str(t) == "3e11fa47-71ca-11e1-9e33-c80aa9429562:my_tag:7"
    assert Tsid(U1) < Tsid(U1, "a") < Tsid(U2)


@pytest.mark.parametrize("text", ["3e11fa47-71ca-11e1-9e33-c80aa9429562", "nope:1",
                                  "3e11fa47-71ca-11e1-9e33-c80aa9429562:0",
                                  f"3e11fa47-71ca-11e1-9e33-c80aa9429562:{MAX_GNO + 1}",
                                  "3e11fa47-71ca-11e1-9e33-c80aa9429562:1tag:5",
                                  "3e11fa47-71ca-11e1-9e33-c80aa9429562:" + "t" * 33 + ":5"])
def test_mysql_gtid_bad_text(text):
    with pytest.raises(GtidError):
        MysqlGtid.parse(text)


# --- MySQL: GtidSet text ---------------------------------------------------------------------------


def test_gtid_set_tolerant_parse_canonical_format():
    s = GtidSet.parse(
        " ,aaaaaaaa-71ca-11e1-9e33-c80aa9429562 : TAG1 : 3 - 4 : 1 ,, "
        "3E11FA47-71CA-11E1-9E33-C80AA9429562:7:1-5,\n"
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:6:x:9,"
    )
    assert str(s) == (
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7:x:9,\n"
        "aaaaaaaa-71ca-11e1-9e33-c80aa9429562:tag1:1:3-4"
    )
    assert s.to_text(",") == str(s).replace("\n", "")
    assert s.count() == 7 + 1 + 3
    assert GtidSet.parse(str(s)) == s
    assert str(GtidSet.parse("")) == "" and not GtidSet.parse(" , ")
    # an interval whose end is below its start is empty, as in MySQL's parser
    assert not GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:5-3")


@pytest.mark.parametrize("text", ["x:1", "3e11fa47-71ca-11e1-9e33-c80aa9429562::1",
                                  "3e11fa47-71ca-11e1-9e33-c80aa9429562:0-3",
                                  "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-x",
                                  "3e11fa47-71ca-11e1-9e33-c80aa9429562:-1",
                                  "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-2-3"])
def test_gtid_set_bad_text(text):
    with pytest.raises(GtidError):
        GtidSet.parse(text)


def test_gtid_set_add_and_contains():
    s = GtidSet()
    tsid = Tsid(U1)
    for gno in (5, 1, 3, 2, 4, 10, 6, 8):
        s.add(MysqlGtid(tsid, gno))
    assert s.to_text(",") == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-6:8:10"
    assert MysqlGtid(tsid, 6) in s and MysqlGtid(tsid, 7) not in s
    assert MysqlGtid(Tsid(U1, "t"), 1) not in s and "x" not in s
    s.add(MysqlGtid(tsid, 9))
    s.add(MysqlGtid(tsid, 7))
    assert s.to_text(",") == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10"
    assert list(s.intervals()) == [(tsid, 1, 11)]


# --- MySQL: GtidSet binary ------------------------------------------------------------------------

V0_1_5 = bytes.fromhex(
    "0100000000000000" "3e11fa4771ca11e19e33c80aa9429562" "0100000000000000"
    "0100000000000000" "0600000000000000"
)


def test_gtid_set_binary_v0_vector():
    s = GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    assert s.encode() == V0_1_5  # end is exclusive: 1-5 -> (1, 6)
    assert GtidSet.decode(V0_1_5) == s
    assert GtidSet().encode() == bytes(8)
    assert GtidSet.decode(bytes(8)) == GtidSet()


def test_gtid_set_binary_v1_and_v2_vectors():
    s = GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7:x:9")
    v1 = s.encode()
    assert v1[:8] == bytes.fromhex("0102000000000001")
    # the tag is a varint length (len << 1 for short tags) and the lowercase text
    assert bytes.fromhex("3e11fa4771ca11e19e33c80aa9429562" "0278") in v1
    assert GtidSet.decode(v1) == s
    v2 = s.encode(2)
    assert v2 == bytes.fromhex(
        "0202000000000002"  # header: version 2, 2 sources
        "04" "00" "0278"  # 2 tags: "", "x"
        "02" "3e11fa4771ca11e19e33c80aa9429562" "02" "0c"  # new uuid, tag 0; [1, 8): first omitted
        "04" "04" "0e" "00"  # same uuid, tag 1; [9, 10) as deltas 9-2, 10-10
    )
    assert GtidSet.decode(v2) == s
    assert GtidSet().encode(2) == bytes.fromhex("0200000000000002")
    with pytest.raises(GtidError):
        s.encode(0)


def _all_encodings(s: GtidSet) -> list[bytes]:
    versions = [1, 2] if s.has_tags() else [0, 1, 2]
    return [s.encode(v) for v in versions]


def test_gtid_set_binary_truncated_trailing_and_byte_by_byte():
    s = GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7:9:tg:3,"
                      "aaaaaaaa-71ca-11e1-9e33-c80aa9429562:100-200")
    for data in _all_encodings(s):
        for cut in range(len(data)):
            with pytest.raises(GtidError):
                GtidSet.decode(data[:cut])
        with pytest.raises(GtidError, match="trailing"):
            GtidSet.decode(data + b"\x00")
        decoded, end = GtidSet.decode_from(b"xx" + data + b"tail", 2)
        assert decoded == s and end == 2 + len(data)
        assert GtidSet.decode(memoryview(bytearray(data))) == s


@pytest.mark.parametrize("data", [
    bytes.fromhex("0000000000000003"),  # unknown version
    bytes.fromhex("0100000000000002"),  # version bytes disagree
    bytes.fromhex("ffffffffffff0000"),  # absurd source count
    # v0, interval with stop <= start
    bytes.fromhex("0100000000000000" "3e11fa4771ca11e19e33c80aa9429562" "0100000000000000"
                  "0500000000000000" "0500000000000000"),
    # v0, intervals out of order
    bytes.fromhex("0100000000000000" "3e11fa4771ca11e19e33c80aa9429562" "0200000000000000"
                  "0500000000000000" "0600000000000000" "0100000000000000" "0200000000000000"),
    # v0, start 0
    bytes.fromhex("0100000000000000" "3e11fa4771ca11e19e33c80aa9429562" "0100000000000000"
                  "0000000000000000" "0200000000000000"),
    # v1, invalid tag characters
    bytes.fromhex("0101000000000001" "3e11fa4771ca11e19e33c80aa9429562" "042d2d"
                  "0100000000000000" "0100000000000000" "0200000000000000"),
    # v2, first source without uuid
    bytes.fromhex("0201000000000002" "0200" "00" "0200"),
    # v2, tag index out of range
    bytes.fromhex("0201000000000002" "0200" "03" "3e11fa4771ca11e19e33c80aa9429562" "0200"),
])
def test_gtid_set_binary_corrupt(data):
    with pytest.raises(GtidError) as info:
        GtidSet.decode(data)
    assert isinstance(info.value, ProtocolError)


# --- property tests ----------------------------------------------------------------------------

UUIDS = [U1, U2, uuid.UUID("00000000-0000-0000-0000-000000000001")]
TAGS = ["", "a", "zz_9"]
gtids = st.builds(
    MysqlGtid,
    st.builds(Tsid, st.sampled_from(UUIDS), st.sampled_from(TAGS)),
    st.integers(min_value=1, max_value=24),
)
gtid_lists = st.lists(gtids, max_size=40)


def _py(s: GtidSet) -> set[MysqlGtid]:
    return set(s.gtids())


@settings(max_examples=200)
@given(gtid_lists, gtid_lists)
def test_gtid_set_behaves_like_a_set(xs, ys):
    a, b = GtidSet(xs), GtidSet(ys)
    pa, pb = set(xs), set(ys)
    assert _py(a) == pa and a.count() == len(pa)
    assert _py(a | b) == pa | pb
    assert _py(a & b) == pa & pb
    assert _py(a - b) == pa - pb
    assert _py(a ^ b) == pa ^ pb
    assert (a <= b) == (pa <= pb) and (a < b) == (pa < pb)
    assert (a >= b) == (pa >= pb) and (a > b) == (pa > pb)
    assert (a == b) == (pa == pb)
    for g in ys:
        assert (g in a) == (g in pa)
    c = a.copy()
    c |= b
    assert _py(c) == pa | pb and _py(a) == pa
    d = a.copy()
    for tsid, start, stop in b.intervals():
        d.add_interval(tsid, start, stop)
    assert d == c


@settings(max_examples=200)
@given(gtid_lists)
def test_gtid_set_text_and_binary_round_trip(xs):
    s = GtidSet(xs)
    assert GtidSet.parse(str(s)) == s
    assert GtidSet.parse(s.to_text(" , ")) == s
    for data in _all_encodings(s):
        assert GtidSet.decode(data) == s
    # every interval boundary of the canonical text is disjoint and non-adjacent
    previous = None
    for tsid, start, stop in s.intervals():
        if previous is not None and previous[0] == tsid:
            assert start > previous[1]
        previous = (tsid, stop)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(TAGS), st.integers(1, 2**63 - 2),
                          st.integers(0, 2**40)), max_size=6))
def test_gtid_set_binary_round_trip_large_numbers(ranges):
    s = GtidSet()
    for tag, start, length in ranges:
        s.add_interval(Tsid(U1, tag), start, min(start + length + 1, 2**63 - 1))
    for data in _all_encodings(s):
        assert GtidSet.decode(data) == s
    assert GtidSet.parse(str(s)) == s


@given(st.lists(st.builds(MariadbGtid, st.integers(0, 3), st.integers(0, 2**32 - 1),
                          st.integers(0, 2**64 - 1)), max_size=8))
def test_gtid_position_round_trip(gs):
    p = GtidPosition.from_binlog_state(gs)
    assert GtidPosition.parse(str(p)) == p
    q = GtidPosition()
    for g in gs:
        q = q.advance(g)
    assert q == p
    assert p <= p.merge(q) and p.merge(q) == p
