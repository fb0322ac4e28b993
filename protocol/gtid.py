"""Global transaction ids of both server families, and the sets and positions built from them.

MariaDB and MySQL number transactions differently, and a replica resumes from a different kind of
object on each:

* **MariaDB** writes ``domain-server_id-seq``. Sequence numbers grow per *replication domain*, so
  "how far have I got" is one GTID per domain: a :class:`GtidPosition` (what
  ``@slave_connect_state`` takes). Advancing it replaces the GTID of one domain.
* **MySQL** writes ``uuid:n`` (8.3+: ``uuid:tag:n``). Transactions of one source may arrive out of
  order with parallel appliers, so the state is a *set* of GTIDs, kept as intervals per
  :class:`Tsid`: a :class:`GtidSet` (what ``COM_BINLOG_DUMP_GTID`` takes, in a binary encoding).

The MySQL text and binary formats follow MySQL's GTID library documentation (seed 003): the text
parser is tolerant (whitespace, case, unordered and overlapping intervals, repeated entries,
redundant commas), the formatter canonical. Binary v0 (no tags), v1 (tags) and v2 (compact,
varints and deltas) are all decoded; the encoder picks v0 when there are no tags and v1
otherwise, exactly as the server does, and v2 on request.

Everything here raises :class:`~protocol.errors.GtidError` on input that does not parse.
"""

from __future__ import annotations

import bisect
import re
import struct
import uuid as _uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from .errors import GtidError
from .frozen import fast_init

__all__ = [
    "MariadbGtid",
    "GtidPosition",
    "Tsid",
    "MysqlGtid",
    "GtidSet",
    "MAX_GNO",
]

# --- MariaDB -------------------------------------------------------------------------------------

_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
_DIGITS = re.compile(r"[0-9]+")


def _parse_uint(text: str, limit: int, what: str, source: str) -> int:
    text = text.strip()
    if not _DIGITS.fullmatch(text):
        raise GtidError(f"{what} {text!r} in {source!r} is not a decimal number")
    value = int(text)
    if value > limit:
        raise GtidError(f"{what} {value} in {source!r} is out of range (max {limit})")
    return value


@fast_init
@dataclass(frozen=True, slots=True, order=True)
class MariadbGtid:
    """A MariaDB GTID: replication domain, originating server id, sequence number.

    Ordering is by (domain, server_id, seq); it is only meaningful for sorting. Within a domain,
    compare ``seq``: that is the order the domain's transactions were binlogged in.
    """

    domain: int
    server_id: int
    seq: int

    def __post_init__(self) -> None:
        if not (0 <= self.domain <= _U32_MAX and 0 <= self.server_id <= _U32_MAX
                and 0 <= self.seq <= _U64_MAX):
            raise GtidError(f"GTID {self.domain}-{self.server_id}-{self.seq} is out of range")

    def __str__(self) -> str:
        return f"{self.domain}-{self.server_id}-{self.seq}"

    @classmethod
    def parse(cls, text: str) -> MariadbGtid:
        """Parse ``"D-S-N"`` (surrounding whitespace allowed)."""
        parts = text.split("-")
        if len(parts) != 3:
            raise GtidError(f"{text!r} is not a MariaDB GTID (domain-server_id-sequence)")
        return cls(
            _parse_uint(parts[0], _U32_MAX, "domain id", text),
            _parse_uint(parts[1], _U32_MAX, "server id", text),
            _parse_uint(parts[2], _U64_MAX, "sequence number", text),
        )


class GtidPosition:
    """A MariaDB replication position: at most one GTID per domain, immutable.

    This is the value of ``@@gtid_slave_pos`` / ``@@gtid_binlog_pos`` and what a replica sends as
    ``@slave_connect_state``. ``str()`` gives the canonical form, sorted by domain
    (``"0-1-5,1-2-7"``). Positions compare per domain: ``a <= b`` when every domain of ``a`` is in
    ``b`` with a sequence number at least as high (a partial order, like sets).
    """

    __slots__ = ("_by_domain",)

    _by_domain: dict[int, MariadbGtid]

    def __init__(self, gtids: Iterable[MariadbGtid] = ()) -> None:
        by_domain: dict[int, MariadbGtid] = {}
        for gtid in gtids:
            if gtid.domain in by_domain:
                raise GtidError(
                    f"GTID position has two GTIDs for domain {gtid.domain}: "
                    f"{by_domain[gtid.domain]} and {gtid}"
                )
            by_domain[gtid.domain] = gtid
        self._by_domain = by_domain

    @classmethod
    def _from_dict(cls, by_domain: dict[int, MariadbGtid]) -> GtidPosition:
        position = cls.__new__(cls)
        position._by_domain = by_domain
        return position

    @classmethod
    def parse(cls, text: str) -> GtidPosition:
        """Parse ``"D-S-N,D-S-N"``; whitespace and empty entries are ignored, ``""`` is empty.

        Two GTIDs for one domain are an error (the server refuses them too, with 1943).
        """
        return cls(MariadbGtid.parse(part) for part in text.split(",") if part.strip())

    @classmethod
    def from_binlog_state(cls, gtids: Iterable[MariadbGtid]) -> GtidPosition:
        """Build a position from a binlog *state* (e.g. a GTID_LIST event): several GTIDs may
        share a domain (one per server id); the last one listed for a domain is the newest."""
        by_domain: dict[int, MariadbGtid] = {}
        for gtid in gtids:
            by_domain[gtid.domain] = gtid
        return cls._from_dict(by_domain)

    def advance(self, gtid: MariadbGtid) -> GtidPosition:
        """Return a new position with ``gtid`` as the GTID of its domain (O(domains))."""
        by_domain = dict(self._by_domain)
        by_domain[gtid.domain] = gtid
        return self._from_dict(by_domain)

    def merge(self, other: GtidPosition) -> GtidPosition:
        """Per domain, the GTID with the higher sequence number of the two positions."""
        by_domain = dict(self._by_domain)
        for domain, gtid in other._by_domain.items():
            mine = by_domain.get(domain)
            if mine is None or gtid.seq > mine.seq:
                by_domain[domain] = gtid
        return self._from_dict(by_domain)

    def get(self, domain: int) -> MariadbGtid | None:
        return self._by_domain.get(domain)

    @property
    def domains(self) -> tuple[int, ...]:
        return tuple(sorted(self._by_domain))

    def __iter__(self) -> Iterator[MariadbGtid]:
        return iter([self._by_domain[d] for d in sorted(self._by_domain)])

    def __len__(self) -> int:
        return len(self._by_domain)

    def __bool__(self) -> bool:
        return bool(self._by_domain)

    def __contains__(self, gtid: object) -> bool:
        """True if this exact GTID is the position of its domain."""
        return isinstance(gtid, MariadbGtid) and self._by_domain.get(gtid.domain) == gtid

    def __str__(self) -> str:
        return ",".join(str(g) for g in self)

    def __repr__(self) -> str:
        return f"GtidPosition({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GtidPosition):
            return NotImplemented
        return self._by_domain == other._by_domain

    def __hash__(self) -> int:
        return hash(frozenset(self._by_domain.values()))

    def __le__(self, other: GtidPosition) -> bool:
        theirs = other._by_domain
        for domain, gtid in self._by_domain.items():
            their = theirs.get(domain)
            if their is None or their.seq < gtid.seq:
                return False
        return True

    def __ge__(self, other: GtidPosition) -> bool:
        return other.__le__(self)

    def __lt__(self, other: GtidPosition) -> bool:
        return self.__le__(other) and self != other

    def __gt__(self, other: GtidPosition) -> bool:
        return other.__lt__(self)


# --- MySQL: Tsid and Gtid ------------------------------------------------------------------------

#: Largest MySQL GTID number: 1 .. 2**63-2, so that an interval's exclusive end fits an int64.
MAX_GNO = (1 << 63) - 2
_GNO_END = MAX_GNO + 1  # exclusive upper bound of an interval

_TAG_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


def _normalize_tag(tag: str) -> str:
    if tag and not _TAG_RE.fullmatch(tag):
        raise GtidError(
            f"invalid GTID tag {tag!r}: 1-32 characters of letters, digits and '_', "
            "not starting with a digit"
        )
    return tag.lower()


def _parse_uuid(text: str) -> _uuid.UUID:
    try:
        return _uuid.UUID(text.strip())
    except ValueError:
        raise GtidError(f"{text.strip()!r} is not a UUID") from None


@fast_init
@dataclass(frozen=True, slots=True, order=True)
class Tsid:
    """A transaction source id: the source server's UUID and an optional tag (MySQL 8.3+).

    Tags are case-insensitive and kept lowercase. ``str()`` is ``"uuid"`` or ``"uuid:tag"``.
    Ordering (UUID, then tag with the untagged first) is the order of MySQL's formatter.
    """

    uuid: _uuid.UUID
    tag: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.uuid, _uuid.UUID):
            raise GtidError(f"Tsid uuid must be a uuid.UUID, got {self.uuid!r}")
        normalized = _normalize_tag(self.tag)
        if normalized != self.tag:
            object.__setattr__(self, "tag", normalized)

    def __str__(self) -> str:
        return f"{self.uuid}:{self.tag}" if self.tag else str(self.uuid)

    @classmethod
    def parse(cls, text: str) -> Tsid:
        """Parse ``"uuid"`` or ``"uuid:tag"``."""
        uuid_text, sep, tag = text.partition(":")
        return cls(_parse_uuid(uuid_text), tag.strip() if sep else "")


@fast_init
@dataclass(frozen=True, slots=True, order=True)
class MysqlGtid:
    """A MySQL GTID: ``uuid:n`` or ``uuid:tag:n``."""

    tsid: Tsid
    gno: int

    def __post_init__(self) -> None:
        if not 1 <= self.gno <= MAX_GNO:
            raise GtidError(f"GTID number {self.gno} is out of range (1..{MAX_GNO})")

    def __str__(self) -> str:
        return f"{self.tsid}:{self.gno}"

    @classmethod
    def parse(cls, text: str) -> MysqlGtid:
        """Parse ``"uuid:n"`` or ``"uuid:tag:n"`` (whitespace around tokens allowed)."""
        head, sep, number = text.rpartition(":")
        if not sep:
            raise GtidError(f"{text!r} is not a MySQL GTID (uuid[:tag]:number)")
        return cls(Tsid.parse(head), _parse_gno(number, text))


def _parse_gno(text: str, source: str) -> int:
    value = _parse_uint(text, MAX_GNO, "GTID number", source)
    if value < 1:
        raise GtidError(f"GTID number 0 in {source!r}: numbers start at 1")
    return value


# --- MySQL: GtidSet --------------------------------------------------------------------------------
#
# Per Tsid the set is a flat, sorted list of interval boundaries [s0, e0, s1, e1, ...] with
# exclusive ends, disjoint and never adjacent (e_i < s_{i+1}). ``bisect`` on that list tells in
# O(log n) whether a number is inside (odd insertion index) or in a gap; adding the next number of
# a source — by far the most common update — only bumps the last boundary.

_Boundaries = list[int]


def _combine(a: _Boundaries, b: _Boundaries, keep: Callable[[bool, bool], bool]) -> _Boundaries:
    """Sweep both boundary lists; emit a boundary wherever ``keep(in_a, in_b)`` changes."""
    out: _Boundaries = []
    i = j = 0
    in_a = in_b = inside = False
    len_a, len_b = len(a), len(b)
    while i < len_a or j < len_b:
        if j >= len_b or (i < len_a and a[i] <= b[j]):
            x = a[i]
        else:
            x = b[j]
        if i < len_a and a[i] == x:
            in_a = not in_a
            i += 1
        if j < len_b and b[j] == x:
            in_b = not in_b
            j += 1
        now = keep(in_a, in_b)
        if now != inside:
            out.append(x)
            inside = now
    return out


def _union(a: bool, b: bool) -> bool:
    return a or b


def _intersection(a: bool, b: bool) -> bool:
    return a and b


def _difference(a: bool, b: bool) -> bool:
    return a and not b


def _symmetric_difference(a: bool, b: bool) -> bool:
    return a != b


def _add_range(bounds: _Boundaries, start: int, stop: int) -> None:
    """Add the numbers ``start <= n < stop`` to ``bounds`` in place."""
    if start >= stop:
        return
    if not bounds or start > bounds[-1]:
        bounds.extend((start, stop))
        return
    if start == bounds[-1]:
        bounds[-1] = max(stop, bounds[-1])
        return
    bounds[:] = _combine(bounds, [start, stop], _union)


class GtidSet:
    """A mutable set of MySQL GTIDs, stored as intervals per :class:`Tsid`.

    Behaves like a Python ``set`` of :class:`MysqlGtid`: ``add``, ``in``, ``|``, ``&``, ``-``,
    ``^``, ``<=``, ``==``, ``update``/``|=``, ``copy``. It deliberately has no ``__iter__``/``len``
    (a server's set easily holds billions of GTIDs): use :meth:`intervals`, :meth:`gtids` and
    :meth:`count`.

    Text: :meth:`parse` / ``str()`` (MySQL's canonical format, a newline after each comma;
    :meth:`to_text` takes another separator). Binary: :meth:`decode` / :meth:`encode`.
    """

    __slots__ = ("_sets",)

    _sets: dict[Tsid, _Boundaries]

    def __init__(self, gtids: Iterable[MysqlGtid] = ()) -> None:
        self._sets = {}
        for gtid in gtids:
            self.add(gtid)

    # -- building

    def add(self, gtid: MysqlGtid) -> None:
        """Add one GTID in place (O(1) when it extends the last interval of its source)."""
        bounds = self._sets.get(gtid.tsid)
        gno = gtid.gno
        if bounds is None:
            self._sets[gtid.tsid] = [gno, gno + 1]
            return
        if bounds[-1] == gno:  # the next transaction of this source: the common case
            bounds[-1] = gno + 1
            return
        i = bisect.bisect_right(bounds, gno)
        if i & 1:  # inside [bounds[i-1], bounds[i])
            return
        joins_left = i > 0 and bounds[i - 1] == gno
        joins_right = i < len(bounds) and bounds[i] == gno + 1
        if joins_left and joins_right:
            del bounds[i - 1:i + 1]
        elif joins_left:
            bounds[i - 1] = gno + 1
        elif joins_right:
            bounds[i] = gno
        else:
            bounds[i:i] = [gno, gno + 1]

    def add_interval(self, tsid: Tsid, start: int, stop: int) -> None:
        """Add GTIDs ``tsid:start`` .. ``tsid:stop-1`` (``stop`` exclusive, like ``range``)."""
        if start < 1 or stop > _GNO_END:
            raise GtidError(f"GTID interval {start}..{stop - 1} is out of range (1..{MAX_GNO})")
        if start >= stop:
            return
        bounds = self._sets.get(tsid)
        if bounds is None:
            self._sets[tsid] = [start, stop]
        else:
            _add_range(bounds, start, stop)

    def update(self, other: GtidSet) -> None:
        """Add every GTID of ``other`` in place."""
        for tsid, theirs in other._sets.items():
            mine = self._sets.get(tsid)
            self._sets[tsid] = list(theirs) if mine is None else _combine(mine, theirs, _union)

    def copy(self) -> GtidSet:
        new = GtidSet()
        new._sets = {tsid: list(bounds) for tsid, bounds in self._sets.items()}
        return new

    # -- queries

    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, MysqlGtid):
            return False
        bounds = self._sets.get(gtid.tsid)
        return bounds is not None and bool(bisect.bisect_right(bounds, gtid.gno) & 1)

    def __bool__(self) -> bool:
        return bool(self._sets)

    def count(self) -> int:
        """The number of GTIDs in the set."""
        return sum(b[k + 1] - b[k] for b in self._sets.values() for k in range(0, len(b), 2))

    def tsids(self) -> list[Tsid]:
        return sorted(self._sets)

    def has_tags(self) -> bool:
        return any(tsid.tag for tsid in self._sets)

    def intervals(self) -> Iterator[tuple[Tsid, int, int]]:
        """``(tsid, start, stop)`` per interval in canonical order; ``stop`` is exclusive."""
        for tsid in sorted(self._sets):
            bounds = self._sets[tsid]
            for k in range(0, len(bounds), 2):
                yield tsid, bounds[k], bounds[k + 1]

    def gtids(self) -> Iterator[MysqlGtid]:
        """Every GTID, in canonical order (beware: may be very many)."""
        for tsid, start, stop in self.intervals():
            for gno in range(start, stop):
                yield MysqlGtid(tsid, gno)

    # -- set algebra

    def _binary(self, other: GtidSet, keep: Callable[[bool, bool], bool]) -> GtidSet:
        result = GtidSet()
        empty: _Boundaries = []
        for tsid in self._sets.keys() | other._sets.keys():
            bounds = _combine(self._sets.get(tsid, empty), other._sets.get(tsid, empty), keep)
            if bounds:
                result._sets[tsid] = bounds
        return result

    def union(self, other: GtidSet) -> GtidSet:
        return self._binary(other, _union)

    def intersection(self, other: GtidSet) -> GtidSet:
        return self._binary(other, _intersection)

    def difference(self, other: GtidSet) -> GtidSet:
        return self._binary(other, _difference)

    def symmetric_difference(self, other: GtidSet) -> GtidSet:
        return self._binary(other, _symmetric_difference)

    def issubset(self, other: GtidSet) -> bool:
        return not self.difference(other)

    def issuperset(self, other: GtidSet) -> bool:
        return other.issubset(self)

    def __or__(self, other: GtidSet) -> GtidSet:
        return self.union(other)

    def __and__(self, other: GtidSet) -> GtidSet:
        return self.intersection(other)

    def __sub__(self, other: GtidSet) -> GtidSet:
        return self.difference(other)

    def __xor__(self, other: GtidSet) -> GtidSet:
        return self.symmetric_difference(other)

    def __ior__(self, other: GtidSet) -> GtidSet:
        self.update(other)
        return self

    def __le__(self, other: GtidSet) -> bool:
        return self.issubset(other)

    def __ge__(self, other: GtidSet) -> bool:
        return other.issubset(self)

    def __lt__(self, other: GtidSet) -> bool:
        return self.issubset(other) and self != other

    def __gt__(self, other: GtidSet) -> bool:
        return other.__lt__(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GtidSet):
            return NotImplemented
        return self._sets == other._sets

    __hash__ = None  # type: ignore[assignment]  # mutable, like set

    # -- text

    @classmethod
    def parse(cls, text: str) -> GtidSet:
        """Parse MySQL's text format, tolerantly (see the module docstring).

        Each comma-separated entry is ``uuid`` followed by ``:``-separated items; an item
        starting with a digit is an interval (``n`` or ``a-b``, inclusive) of the current tag,
        any other item switches the current tag (``uuid:1-5:tag:1-3``). An interval whose end is
        below its start is empty, as in MySQL.
        """
        result = cls()
        for entry in text.split(","):
            if not entry.strip():
                continue
            tokens = entry.split(":")
            uuid = _parse_uuid(tokens[0])
            tsid = Tsid(uuid)
            for raw in tokens[1:]:
                token = raw.strip()
                if not token:
                    raise GtidError(f"empty item in GTID set entry {entry.strip()!r}")
                if token[0].isdigit():
                    first_text, dash, last_text = token.partition("-")
                    first = _parse_gno(first_text, entry.strip())
                    last = _parse_gno(last_text, entry.strip()) if dash else first
                    result.add_interval(tsid, first, last + 1)
                else:
                    tsid = Tsid(uuid, token)
        return result

    def to_text(self, separator: str = ",\n") -> str:
        """The canonical text: UUIDs and tags sorted, intervals merged and ordered."""
        entries: list[str] = []
        current: _uuid.UUID | None = None
        parts: list[str] = []
        for tsid in sorted(self._sets):
            if tsid.uuid != current:
                if parts:
                    entries.append(":".join(parts))
                current = tsid.uuid
                parts = [str(tsid.uuid)]
            if tsid.tag:
                parts.append(tsid.tag)
            bounds = self._sets[tsid]
            for k in range(0, len(bounds), 2):
                start, last = bounds[k], bounds[k + 1] - 1
                parts.append(str(start) if start == last else f"{start}-{last}")
        if parts:
            entries.append(":".join(parts))
        return separator.join(entries)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"GtidSet({self.to_text(',')!r})"

    # -- binary

    def encode(self, version: int | None = None) -> bytes:
        """Binary encoding, as in ``COM_BINLOG_DUMP_GTID``.

        Args:
            version: 0, 1 or 2; ``None`` picks what MySQL's encoder picks: v0 without tags,
                v1 with tags (servers before 8.3 understand only v0).
        Raises:
            GtidError: v0 requested for a set with tags.
        """
        if version is None:
            version = 1 if self.has_tags() else 0
        tsids = sorted(self._sets)
        if version == 0:
            if self.has_tags():
                raise GtidError("Binary v0 cannot encode tagged GTIDs; use v1")
            out = bytearray(_U64.pack(len(tsids)))
        elif version in (1, 2):
            out = bytearray(_U64.pack((version << 56) | (len(tsids) << 8) | version))
        else:
            raise GtidError(f"unknown Gtid_set binary format version {version}")
        if version == 2:
            _encode_v2_body(out, tsids, self._sets)
            return bytes(out)
        for tsid in tsids:
            out += tsid.uuid.bytes
            if version == 1:
                tag = tsid.tag.encode("ascii")
                out += _encode_varint(len(tag))
                out += tag
            bounds = self._sets[tsid]
            out += _U64.pack(len(bounds) // 2)
            out += struct.pack(f"<{len(bounds)}q", *bounds)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> GtidSet:
        """Decode a whole binary Gtid_set (v0, v1 or v2, detected from the header)."""
        result, end = cls.decode_from(data, 0)
        if end != len(data):
            raise GtidError(f"{len(data) - end} trailing bytes after a binary Gtid_set")
        return result

    @classmethod
    def decode_from(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> tuple[GtidSet, int]:
        """Decode a binary Gtid_set starting at ``offset``; return it and the offset after it."""
        reader = _Reader(memoryview(data), offset)
        header = reader.u64()
        version = header >> 56
        if version == 0:
            count = header & ((1 << 56) - 1)
        elif version in (1, 2):
            if header & 0xFF != version:
                raise GtidError("inconsistent version bytes in a binary Gtid_set header")
            count = (header >> 8) & ((1 << 48) - 1)
        else:
            raise GtidError(f"unknown Gtid_set binary format version {version}")
        min_size = 2 if version == 2 else 24  # bytes every source takes at the least
        if count > reader.remaining() // min_size:
            raise GtidError(f"binary Gtid_set claims {count} sources, more than its bytes hold")
        result = cls()
        if version == 2:
            _decode_v2_body(reader, count, result)
        else:
            for _ in range(count):
                uuid = _uuid.UUID(bytes=reader.take(16))
                tag = ""
                if version == 1:
                    tag = reader.take(reader.varint()).decode("ascii", "replace")
                tsid = Tsid(uuid, tag)
                n_intervals = reader.u64()
                if n_intervals > reader.remaining() // 16:
                    raise GtidError("binary Gtid_set claims more intervals than its bytes hold")
                previous_stop = 1
                for _ in range(n_intervals):
                    start, stop = reader.interval()
                    if start < previous_stop or stop <= start or stop > _GNO_END:
                        raise GtidError(
                            f"bad interval [{start}, {stop}) for {tsid} in a binary Gtid_set"
                        )
                    result.add_interval(tsid, start, stop)
                    previous_stop = stop
        return result, reader.offset


_U64 = struct.Struct("<Q")
_INTERVAL = struct.Struct("<qq")


class _Reader:
    """Bounds-checked little-endian reads over a memoryview; every overrun is a GtidError."""

    __slots__ = ("view", "offset")

    def __init__(self, view: memoryview, offset: int) -> None:
        self.view = view
        self.offset = offset

    def remaining(self) -> int:
        return len(self.view) - self.offset

    def take(self, n: int) -> bytes:
        end = self.offset + n
        if end > len(self.view):
            raise GtidError("binary Gtid_set is truncated")
        data = bytes(self.view[self.offset:end])
        self.offset = end
        return data

    def u64(self) -> int:
        if self.offset + 8 > len(self.view):
            raise GtidError("binary Gtid_set is truncated")
        (value,) = _U64.unpack_from(self.view, self.offset)
        self.offset += 8
        return int(value)

    def interval(self) -> tuple[int, int]:
        if self.offset + 16 > len(self.view):
            raise GtidError("binary Gtid_set is truncated")
        start, stop = _INTERVAL.unpack_from(self.view, self.offset)
        self.offset += 16
        return int(start), int(stop)

    def varint(self) -> int:
        """mysql::serialization's unsigned varint: the count of trailing one bits of the first
        byte is the number of extra bytes; the value follows the length bits, little-endian."""
        if self.offset >= len(self.view):
            raise GtidError("binary Gtid_set is truncated")
        first = self.view[self.offset]
        size = 1
        while size < 9 and first & (1 << (size - 1)):
            size += 1
        if self.offset + size > len(self.view):
            raise GtidError("binary Gtid_set is truncated")
        if size == 9:
            value = int.from_bytes(self.view[self.offset + 1:self.offset + 9], "little")
        else:
            rest = int.from_bytes(self.view[self.offset + 1:self.offset + size], "little")
            value = (first >> size) | (rest << (8 - size))
        self.offset += size
        return value


def _encode_varint(value: int) -> bytes:
    if value < 0 or value > _U64_MAX:
        raise GtidError(f"varint {value} is out of range")
    bits = value.bit_length()
    size = ((bits * 575) >> 12) + 1  # 7 bits per byte up to 8 bytes, 9 bytes for 64 bits
    if size == 9:
        return b"\xff" + value.to_bytes(8, "little")
    first = ((1 << (size - 1)) - 1) | ((value << size) & 0xFF)
    return bytes((first,)) + (value >> (8 - size)).to_bytes(size - 1, "little")


def _encode_v2_body(out: bytearray, tsids: list[Tsid], sets: Mapping[Tsid, _Boundaries]) -> None:
    if not tsids:
        return
    tags = sorted({tsid.tag for tsid in tsids})
    tag_index = {tag: i for i, tag in enumerate(tags)}
    out += _encode_varint(len(tags))
    for tag in tags:
        raw = tag.encode("ascii")
        out += _encode_varint(len(raw))
        out += raw
    previous: _uuid.UUID | None = None
    for tsid in tsids:
        new_uuid = tsid.uuid != previous
        out += _encode_varint((tag_index[tsid.tag] << 1) | int(new_uuid))
        if new_uuid:
            out += tsid.uuid.bytes
        previous = tsid.uuid
        bounds = sets[tsid]
        skip_first = bounds[0] == 1
        out += _encode_varint(len(bounds) - int(skip_first))
        next_min = 2
        for boundary in bounds[1:] if skip_first else bounds:
            out += _encode_varint(boundary - next_min)
            next_min = boundary + 1


def _decode_v2_body(reader: _Reader, count: int, result: GtidSet) -> None:
    if count == 0:
        return
    n_tags = reader.varint()
    if n_tags > reader.remaining():
        raise GtidError("binary Gtid_set claims more tags than its bytes hold")
    tags = [reader.take(reader.varint()).decode("ascii", "replace") for _ in range(n_tags)]
    uuid: _uuid.UUID | None = None
    for _ in range(count):
        code = reader.varint()
        if code >> 1 >= len(tags):
            raise GtidError("tag index out of range in a binary Gtid_set")
        if code & 1:
            uuid = _uuid.UUID(bytes=reader.take(16))
        elif uuid is None:
            raise GtidError("no UUID given for the first source of a binary Gtid_set")
        tsid = Tsid(uuid, tags[code >> 1])
        remaining = reader.varint()
        if remaining > reader.remaining():
            raise GtidError("binary Gtid_set claims more boundaries than its bytes hold")
        bounds: _Boundaries = []
        next_min = 2
        if remaining & 1:
            bounds.append(1)
        for _ in range(remaining):
            boundary = next_min + reader.varint()
            if boundary > _GNO_END:
                raise GtidError(f"GTID interval boundary {boundary} out of range")
            bounds.append(boundary)
            next_min = boundary + 1
        for k in range(0, len(bounds), 2):
            result.add_interval(tsid, bounds[k], bounds[k + 1])
