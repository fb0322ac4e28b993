"""Reproducible workloads: seeded rows, the SQL that loads them, and how many rows each logs.

Everything is generated from ``random.Random(seed)``, so two runs with the same seed and scale
write byte-identical statements (the binlog differs only in timestamps and GTIDs). Values are
ASCII so the stock client's connection charset cannot change them; about 5% of the nullable
cells are NULL, as in real tables.

Workloads (sizes at ``--scale 1``):

``a_bulk_insert``   600k rows of the 8-column mixed table in 1000-row INSERTs
``b_single_row``    the first 200k of those rows, one autocommit INSERT (= one transaction) each
``c_update``        UPDATEs of (a)'s first 200k rows, 1000 per statement, full before/after
                    images
``d_wide``          50k rows of a 50-column table in 500-row INSERTs
``big_transaction`` 2M rows in ONE transaction (INSERT … SELECT from the sequence engine), for
                    the memory figure (``$BINLAKE_BENCH_BIG_ROWS`` sets another size)
"""

from __future__ import annotations

import datetime as _dt
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["DATABASE", "MIXED_COLUMNS", "Workload", "big_transaction", "standard_workloads"]

DATABASE = "bench"
_ENUM = ("new", "active", "suspended", "closed")
_WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris "
    "nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse "
    "cillum fugiat nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui "
    "officia deserunt mollit anim id est laborum"
).split()
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_EPOCH = _dt.datetime(2024, 1, 1)
_EPOCH_SECONDS = 1_704_067_200  # 2024-01-01T00:00:00Z

MIXED_COLUMNS = (
    "id INT NOT NULL PRIMARY KEY, big BIGINT, name VARCHAR(64), amount DECIMAL(12,2), "
    "ts DATETIME(6), ratio DOUBLE, note TEXT, "
    "state ENUM('new','active','suspended','closed') NOT NULL"
)


@dataclass(frozen=True)
class Workload:
    """One workload: how to create its tables, the statements that load it, and the number of
    row changes those statements write to the binlog (every peer must report this many)."""

    name: str
    description: str
    setup: str
    rows: int
    statements: tuple[str, ...]  # each one is sent as a separate chunk of client input


def _maybe_null(rng: random.Random, text: str) -> str:
    return "NULL" if rng.random() < 0.05 else text


def _decimal(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"


def _datetime(rng: random.Random) -> str:
    seconds = _EPOCH_SECONDS + rng.randrange(2 * 365 * 86400)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
    return f"'{stamp}.{rng.randrange(1_000_000):06d}'"


def mixed_rows(seed: int, count: int) -> Iterator[str]:
    """``count`` rows of the mixed table as SQL value tuples, ids 1..count."""
    rng = random.Random(seed)
    for row_id in range(1, count + 1):
        name = "".join(rng.choices(_ALNUM, k=rng.randint(8, 64)))
        note = " ".join(rng.choices(_WORDS, k=rng.randint(3, 60)))
        yield (
            f"({row_id},"
            f"{_maybe_null(rng, str(rng.randint(-(2**62), 2**62)))},"
            f"{_maybe_null(rng, repr(name))},"
            f"{_maybe_null(rng, _decimal(rng.randint(-(10**11), 10**11)))},"
            f"{_maybe_null(rng, _datetime(rng))},"
            f"{_maybe_null(rng, repr(rng.uniform(-1e6, 1e6)))},"
            f"{_maybe_null(rng, repr(note))},"
            f"'{rng.choice(_ENUM)}')"
        )


def _chunks(rows: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# Wide table: 49 columns after the key, cycling through common types.
_WIDE_TYPES = (
    ("INT", lambda r: str(r.randint(-(2**31), 2**31 - 1))),
    ("BIGINT", lambda r: str(r.randint(-(2**63), 2**63 - 1))),
    ("VARCHAR(32)", lambda r: repr("".join(r.choices(_ALNUM, k=r.randint(1, 32))))),
    ("DECIMAL(10,2)", lambda r: _decimal(r.randint(-(10**9), 10**9))),
    ("DATETIME(6)", _datetime),
    ("DOUBLE", lambda r: repr(r.uniform(-1e9, 1e9))),
    ("DATE", lambda r: (_EPOCH + _dt.timedelta(days=r.randrange(3650))).strftime("'%Y-%m-%d'")),
    ("SMALLINT UNSIGNED", lambda r: str(r.randrange(65536))),
    ("TINYINT", lambda r: str(r.randint(-128, 127))),
    ("CHAR(8)", lambda r: repr("".join(r.choices(_ALNUM, k=8)))),
)
WIDE_COLUMN_COUNT = 50


def _wide_setup() -> str:
    columns = ["id INT NOT NULL PRIMARY KEY"]
    for i in range(1, WIDE_COLUMN_COUNT):
        sql_type, _ = _WIDE_TYPES[(i - 1) % len(_WIDE_TYPES)]
        columns.append(f"c{i:02d} {sql_type}")
    return f"CREATE TABLE {DATABASE}.wide ({', '.join(columns)}) ENGINE=InnoDB;"


def _wide_rows(seed: int, count: int) -> Iterator[str]:
    rng = random.Random(seed + 4)
    for row_id in range(1, count + 1):
        cells = [str(row_id)]
        for i in range(1, WIDE_COLUMN_COUNT):
            _, make = _WIDE_TYPES[(i - 1) % len(_WIDE_TYPES)]
            cells.append(_maybe_null(rng, make(rng)))
        yield "(" + ",".join(cells) + ")"


def standard_workloads(scale: float, seed: int) -> list[Workload]:
    """Workloads (a)–(d) at ``scale`` (1.0: 600k rows, 200k, 200k updates, 50k wide rows)."""
    n = max(10, int(200_000 * scale))
    n_a = 3 * n
    n_wide = max(10, int(50_000 * scale))
    mixed = list(mixed_rows(seed, n_a))  # (b) logs the first n of (a)'s rows
    a = tuple(
        f"INSERT INTO {DATABASE}.mixed VALUES {','.join(chunk)};"
        for chunk in _chunks(iter(mixed), 1000)
    )
    b = tuple(f"INSERT INTO {DATABASE}.mixed_b VALUES {row};" for row in mixed[:n])
    c = tuple(
        f"UPDATE {DATABASE}.mixed SET big = IFNULL(big, 0) DIV 2 + 1, "
        f"amount = IFNULL(amount, 0) / 2 + 0.01, ratio = IFNULL(ratio, 0) * 0.5 + 1, "
        f"ts = IFNULL(ts, '2024-01-01') + INTERVAL 1 SECOND, state = 'active', "
        f"name = CONCAT(LEFT(IFNULL(name, ''), 60), '-u') "
        f"WHERE id BETWEEN {lo} AND {min(lo + 999, n)};"
        for lo in range(1, n + 1, 1000)
    )
    d = tuple(
        f"INSERT INTO {DATABASE}.wide VALUES {','.join(chunk)};"
        for chunk in _chunks(_wide_rows(seed, n_wide), 500)
    )
    return [
        Workload("a_bulk_insert", f"(a) {n_a:,} rows, 8 mixed columns, 1000-row INSERTs",
                 f"CREATE TABLE {DATABASE}.mixed ({MIXED_COLUMNS}) ENGINE=InnoDB;", n_a, a),
        Workload("b_single_row", f"(b) {n:,} one-row transactions",
                 f"CREATE TABLE {DATABASE}.mixed_b ({MIXED_COLUMNS}) ENGINE=InnoDB;", n, b),
        Workload("c_update", f"(c) {n:,} rows UPDATEd, 1000 per statement, full before/after images",
                 "", n, c),
        Workload("d_wide", f"(d) {n_wide:,} rows of a {WIDE_COLUMN_COUNT}-column table, "
                 "500-row INSERTs", _wide_setup(), n_wide, d),
    ]


def big_transaction(scale: float, rows: int | None = None) -> Workload:
    """2M rows (at scale 1; ``rows`` if given) of the mixed table in one INSERT … SELECT: one
    transaction."""
    n = rows if rows is not None else max(10, int(2_000_000 * scale))
    select = (
        "SELECT seq, seq * 7919, CONCAT('name-', seq), (seq MOD 1000000) / 100, "
        "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq * 1234 MICROSECOND, seq / 7, "
        "REPEAT('lorem ipsum ', 1 + seq MOD 20), ELT(1 + seq MOD 4, 'new', 'active', "
        f"'suspended', 'closed') FROM {DATABASE}.seq_1_to_{n}"
    )
    return Workload(
        "big_transaction", f"{n:,} rows in one transaction (INSERT ... SELECT)",
        f"CREATE TABLE {DATABASE}.big_txn ({MIXED_COLUMNS}) ENGINE=InnoDB;", n,
        (f"INSERT INTO {DATABASE}.big_txn {select};",),
    )
