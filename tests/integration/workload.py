"""A seeded random workload on a real server, and the check that the lake equals the source.

End-to-end tests need changes that look like production: inserts, updates (some moving a row
to a new primary key), deletes, multi-statement transactions, rollbacks, several tables and many
type families with NULLs. :class:`Workload` generates them from a seed (a failure replays with
the same seed) and runs them through the server's stock client in batches.

The workload keeps a model of which primary keys exist, so every statement touches rows it
names, and it knows exactly how many change rows each table must get in the lake: an insert is
one ``I``, an update one ``U`` (every update bumps ``rev``, so none is a no-op the server would
leave out of the binlog), an update that changes the key one ``D`` plus one ``I`` (how the sink
lands key moves), a delete one ``D``; rolled-back transactions contribute nothing.

:func:`compare_lake` reads the lake's change log with pyarrow (no Spark), checks exactly-once
(no ``(_seq, _row)`` or ``(_gtid, _row)`` twice, the exact row counts per operation), reduces it
to the current state per primary key by ``(_seq, _row)`` and compares that, cell by cell, with
``SELECT`` on the server. The server's side is selected through expressions whose text is
unambiguous (HEX for character and binary data, ``+0`` for BIT, UNIX_TIMESTAMP for TIMESTAMP)
and the lake's values are put into the same text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.servers.handle import ServerHandle

__all__ = ["ColumnKind", "TableSpec", "TABLES", "Workload", "LakeChanges", "read_lake",
           "compare_lake", "wait_for_lake", "UTF8"]

#: Client options for every statement: the workload's text is UTF-8.
UTF8 = ["--default-character-set=utf8mb4"]

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


# --- column kinds: how to make a value, write it in SQL, select it, and read it from the lake --


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _plain(value: Any) -> str:
    return str(value)


def _hex_text(value: Any) -> str:
    return value.encode("utf-8").hex().upper()


def _hex_bytes(value: Any) -> str:
    return bytes(value).hex().upper()


def _int_text(value: Any) -> str:
    return str(int(value))


def _decimal_text(value: Any) -> str:
    return f"{value:f}"  # never exponent notation: 5E-8 is a float literal in SQL


def _time_text(micros: Any) -> str:
    sign = "-" if micros < 0 else ""
    micros = abs(int(micros))
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def _unix_text(value: Any) -> str:
    """A UTC timestamp as UNIX_TIMESTAMP(TIMESTAMP(3)) prints it: seconds with 3 decimals."""
    micros = (value - EPOCH) // dt.timedelta(microseconds=1)
    return str(decimal.Decimal(micros).scaleb(-6).quantize(decimal.Decimal("0.001")))


def _json_from_hex(text: Any) -> Any:
    return json.loads(bytes.fromhex(text).decode("utf-8"))


_WORDS = ["alpha", "Beta", "gamma δ", "ünïcödé", "日本語", "emoji 🚀", "it's", "back\\slash",
          "tab\there", "", " padded ", "x" * 40]


def _word(rng: random.Random, limit: int) -> str:
    text = rng.choice(_WORDS) + (str(rng.randrange(1000)) if rng.random() < 0.5 else "")
    return text[:limit]


@dataclass(frozen=True)
class ColumnKind:
    """One column family of the workload's tables.

    Args:
        ddl: the column's type in CREATE TABLE (every non-key column is nullable).
        generate: a random Python value for it.
        literal: that value as an SQL literal.
        select: the SELECT expression for column ``c`` (``{c}`` is replaced).
        lake: the lake's value in the SELECT expression's text.
        normalize: applied to both sides before comparing (default: compare the text).
    """

    ddl: str
    generate: Callable[[random.Random], Any]
    literal: Callable[[Any], str] = _plain
    select: str = "{c}"
    lake: Callable[[Any], str] = _plain
    normalize: Callable[[Any], Any] | None = None


def _int_kind(ddl: str, low: int, high: int) -> ColumnKind:
    edges = [low, high, 0, 1, -1 if low < 0 else 2]
    return ColumnKind(ddl, lambda r: r.choice(edges) if r.random() < 0.3 else r.randint(low, high),
                      lake=_int_text)


def _date(rng: random.Random) -> dt.date:
    return dt.date(1000, 1, 1) + dt.timedelta(days=rng.randrange(3_000_000))


def _datetime(rng: random.Random) -> dt.datetime:
    return dt.datetime(1001, 1, 1) + dt.timedelta(seconds=rng.randrange(31_000_000_000),
                                                  microseconds=rng.randrange(1_000_000))


def _timestamp(rng: random.Random) -> dt.datetime:
    # TIMESTAMP's range is 1970..2038 UTC; the session runs in UTC (see Workload.PREAMBLE).
    return dt.datetime(1971, 1, 1) + dt.timedelta(seconds=rng.randrange(2_100_000_000),
                                                  microseconds=rng.randrange(0, 1_000_000, 1000))


def _time(rng: random.Random) -> int:
    if rng.random() < 0.2:
        return rng.choice([-(838 * 3600 + 59 * 60 + 59) * 1_000_000, 0,
                           (838 * 3600 + 59 * 60 + 59) * 1_000_000, -1])
    return rng.randrange(-838 * 3600 * 1_000_000, 838 * 3600 * 1_000_000)


ENUM_LABELS = ("small", "medium", "large", "x-large")
SET_LABELS = ("red", "green", "blue", "alpha")

KINDS: dict[str, ColumnKind] = {
    "c_tiny": _int_kind("TINYINT", -128, 127),
    "c_small_u": _int_kind("SMALLINT UNSIGNED", 0, 65535),
    "c_medium": _int_kind("MEDIUMINT", -8388608, 8388607),
    "c_int": _int_kind("INT", -2**31, 2**31 - 1),
    "c_int_u": _int_kind("INT UNSIGNED", 0, 2**32 - 1),
    "c_big": _int_kind("BIGINT", -2**63, 2**63 - 1),
    "c_big_u": _int_kind("BIGINT UNSIGNED", 0, 2**64 - 1),
    "c_year": ColumnKind("YEAR", lambda r: r.randint(1901, 2155), lake=_int_text),
    "c_bit": ColumnKind("BIT(10)", lambda r: r.randrange(1024), select="{c}+0", lake=_int_text),
    "c_dec": ColumnKind("DECIMAL(10,2)",
                        lambda r: decimal.Decimal(r.randrange(-10**10 + 1, 10**10)).scaleb(-2),
                        literal=_decimal_text, lake=_decimal_text, normalize=decimal.Decimal),
    "c_dec_wide": ColumnKind("DECIMAL(30,8)",
                             lambda r: decimal.Decimal(r.randrange(-10**30 + 1, 10**30)).scaleb(-8),
                             literal=_decimal_text, lake=_decimal_text,
                             normalize=decimal.Decimal),
    "c_double": ColumnKind("DOUBLE", lambda r: r.randrange(-10**9, 10**9) / 64,
                           literal=repr, lake=repr, normalize=float),
    # The client prints FLOAT rounded to 6 digits; as DOUBLE it is exact.
    "c_float": ColumnKind("FLOAT", lambda r: r.randrange(-10**5, 10**5) / 8, literal=repr,
                          select="CAST({c} AS DOUBLE)", lake=repr, normalize=float),
    "c_date": ColumnKind("DATE", _date, literal=lambda v: _quote(v.isoformat()),
                         lake=lambda v: v.isoformat()),
    "c_datetime": ColumnKind("DATETIME(6)", _datetime,
                             literal=lambda v: _quote(v.isoformat(sep=" ")),
                             lake=lambda v: v.strftime("%Y-%m-%d %H:%M:%S.%f").rjust(26, "0")),
    "c_ts": ColumnKind("TIMESTAMP(3) NULL", _timestamp,
                       literal=lambda v: _quote(v.isoformat(sep=" ", timespec="milliseconds")),
                       select="UNIX_TIMESTAMP({c})", lake=_unix_text),
    "c_time": ColumnKind("TIME(6)", _time, literal=lambda v: _quote(_time_text(v)),
                         lake=_time_text),
    "c_varchar": ColumnKind("VARCHAR(40) CHARACTER SET utf8mb4", lambda r: _word(r, 40),
                            literal=_quote, select="HEX(CONVERT({c} USING utf8mb4))",
                            lake=_hex_text),
    "c_char": ColumnKind("CHAR(6) CHARACTER SET latin1", lambda r: r.choice(["", "ab", "é", "xyz"]),
                         literal=_quote, select="HEX(CONVERT({c} USING utf8mb4))", lake=_hex_text),
    "c_text": ColumnKind("TEXT CHARACTER SET utf8mb4", lambda r: " ".join(
        _word(r, 40) for _ in range(r.randrange(1, 60))), literal=_quote,
        select="HEX(CONVERT({c} USING utf8mb4))", lake=_hex_text),
    "c_varbinary": ColumnKind("VARBINARY(16)", lambda r: r.randbytes(r.randrange(17)),
                              literal=lambda v: f"X'{v.hex()}'", select="HEX({c})",
                              lake=_hex_bytes),
    "c_blob": ColumnKind("BLOB", lambda r: r.randbytes(r.randrange(0, 3000)),
                         literal=lambda v: f"X'{v.hex()}'", select="HEX({c})", lake=_hex_bytes),
    "c_enum": ColumnKind("ENUM('small','medium','large','x-large')",
                         lambda r: r.choice(ENUM_LABELS), literal=_quote),
    "c_set": ColumnKind("SET('red','green','blue','alpha')",
                        lambda r: ",".join(s for s in SET_LABELS if r.random() < 0.5),
                        literal=_quote),
    "c_json": ColumnKind("JSON", lambda r: json.dumps(
        {"k": r.randrange(100), "s": _word(r, 10), "l": [r.random() < 0.5, None, 1.5]},
        ensure_ascii=False), literal=_quote, select="HEX(CONVERT({c} USING utf8mb4))",
        lake=_hex_text, normalize=_json_from_hex),
}


@dataclass(frozen=True)
class TableSpec:
    """A workload table: its key columns (integers, or an int plus a short ASCII string) and
    the column kinds it carries."""

    name: str
    key: tuple[tuple[str, str], ...]  # (column, "int" | "str")
    columns: tuple[str, ...]  # names in KINDS

    def create(self) -> str:
        keys = [f"{name} {'BIGINT' if kind == 'int' else 'VARCHAR(12)'} NOT NULL"
                for name, kind in self.key]
        cols = [f"{name} {KINDS[name].ddl}" for name in self.columns]
        return (f"CREATE TABLE {self.name} ({', '.join([*keys, 'rev INT NOT NULL', *cols])}, "
                f"PRIMARY KEY ({', '.join(n for n, _ in self.key)})) ENGINE=InnoDB")

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.key)


TABLES: tuple[TableSpec, ...] = (
    TableSpec("numbers", (("id", "int"),),
              ("c_tiny", "c_small_u", "c_medium", "c_int", "c_int_u", "c_big", "c_big_u",
               "c_year", "c_bit", "c_dec", "c_dec_wide", "c_double", "c_float")),
    TableSpec("texts", (("id", "int"),),
              ("c_varchar", "c_char", "c_text", "c_varbinary", "c_blob", "c_enum", "c_set",
               "c_json")),
    TableSpec("times", (("k1", "int"), ("k2", "str")),
              ("c_date", "c_datetime", "c_ts", "c_time", "c_dec", "c_varchar")),
    # Only types the native decoder covers: its rows land from Arrow chunks (the tables above
    # have a BIT, SET, JSON or TIME column, so theirs come from Python values).
    TableSpec("natives", (("id", "int"),),
              ("c_tiny", "c_small_u", "c_medium", "c_int_u", "c_big", "c_big_u", "c_year",
               "c_dec", "c_dec_wide", "c_double", "c_float", "c_date", "c_datetime", "c_ts",
               "c_varchar", "c_char", "c_text", "c_varbinary", "c_enum")),
)

Key = tuple[Any, ...]


@dataclass
class _TableModel:
    spec: TableSpec
    keys: list[Key] = field(default_factory=list)
    next_id: int = 1
    expected: Counter[str] = field(default_factory=Counter)  # op -> rows in the lake
    row_events: Counter[str] = field(default_factory=Counter)  # binlog rows by insert/update/delete


class Workload:
    """Seeded random transactions on ``database``; :attr:`expected` says what the lake gets.

    Usage::

        w = Workload(server, "e2e_ab12", seed=7)
        w.create_tables()
        w.run(transactions=200, batch=25)
        compare_lake(server, lake_path, w)
    """

    PREAMBLE = "SET time_zone = '+00:00'; SET sql_mode = 'STRICT_ALL_TABLES'"

    def __init__(self, server: ServerHandle, database: str, *, seed: int = 0,
                 tables: Sequence[TableSpec] = TABLES, null_rate: float = 0.15) -> None:
        self.server = server
        self.database = database
        self.seed = seed
        self.rng = random.Random(seed)
        self.tables = {spec.name: _TableModel(spec) for spec in tables}
        self.null_rate = null_rate
        self.transactions = 0
        self.rollbacks = 0

    # --- running ---------------------------------------------------------------------------------

    def sql(self, statements: str) -> list[tuple[str | None, ...]]:
        return self.server.sql(f"{self.PREAMBLE}; {statements}", database=self.database,
                               client_args=UTF8)

    def create_tables(self) -> None:
        self.server.sql(f"CREATE DATABASE {self.database}", client_args=UTF8)
        self.sql("; ".join(model.spec.create() for model in self.tables.values()))

    def run(self, transactions: int, *, batch: int = 25, pause: float = 0.0) -> None:
        """Run ``transactions`` random transactions, ``batch`` per client call."""
        done = 0
        while done < transactions:
            n = min(batch, transactions - done)
            self.sql("\n".join(self.transaction() for _ in range(n)))
            done += n
            if pause:
                time.sleep(pause)

    def run_for(self, seconds: float, *, batch: int = 10) -> int:
        """Run batches until ``seconds`` have passed; returns the number of transactions."""
        deadline = time.monotonic() + seconds
        count = 0
        while time.monotonic() < deadline:
            self.run(batch, batch=batch)
            count += batch
        return count

    # --- generating --------------------------------------------------------------------------------

    @property
    def expected(self) -> dict[str, Counter[str]]:
        """table -> {op: rows} the lake must hold for this workload, exactly."""
        return {name: Counter(model.expected) for name, model in self.tables.items()}

    @property
    def row_events(self) -> dict[str, Counter[str]]:
        """table -> {insert|update|delete: rows} as the binlog's rows events carry them (a key
        move is one updated row there, but D + I in the lake)."""
        return {name: Counter(model.row_events) for name, model in self.tables.items()}

    def transaction(self) -> str:
        """SQL text of one random transaction; the model is updated as if it commits."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.06:
            return self._rolled_back()
        self.transactions += 1
        if roll < 0.45:
            return self._statement(self._pick_table()) + ";"
        statements = [self._statement(self._pick_table()) for _ in range(rng.randrange(2, 6))]
        return "BEGIN; " + "; ".join(statements) + "; COMMIT;"

    def _rolled_back(self) -> str:
        """A transaction that changes rows and rolls back: the model must not see it."""
        self.rollbacks += 1
        saved = {name: (list(m.keys), Counter(m.expected), Counter(m.row_events))
                 for name, m in self.tables.items()}
        statements = [self._statement(self._pick_table()) for _ in range(self.rng.randrange(1, 4))]
        for name, (keys, expected, row_events) in saved.items():
            model = self.tables[name]
            # next_id stays: keys are never reused
            model.keys, model.expected, model.row_events = keys, expected, row_events
        return "BEGIN; " + "; ".join(statements) + "; ROLLBACK;"

    def _pick_table(self) -> _TableModel:
        return self.tables[self.rng.choice(sorted(self.tables))]

    def _statement(self, model: _TableModel) -> str:
        rng = self.rng
        roll = rng.random()
        if not model.keys or roll < 0.4:
            return self._insert(model, rng.randrange(1, 6))
        if roll < 0.75:
            return self._update(model, rng.sample(model.keys, min(len(model.keys),
                                                                  rng.randrange(1, 4))))
        if roll < 0.85:
            return self._move(model, rng.choice(model.keys))
        return self._delete(model, rng.sample(model.keys, min(len(model.keys),
                                                              rng.randrange(1, 3))))

    def _new_key(self, model: _TableModel) -> Key:
        n = model.next_id
        model.next_id += 1
        return tuple(n if kind == "int" else f"k{n % 7}-{self.rng.randrange(100)}"
                     for _name, kind in model.spec.key)

    def _value(self, name: str) -> str:
        if self.rng.random() < self.null_rate:
            return "NULL"
        kind = KINDS[name]
        return kind.literal(kind.generate(self.rng))

    def _where(self, spec: TableSpec, keys: Iterable[Key]) -> str:
        def one(key: Key) -> str:
            return " AND ".join(f"{name} = {_key_literal(v)}" for name, v in zip(
                spec.key_names, key, strict=True))

        return " OR ".join(f"({one(k)})" for k in keys)

    def _insert(self, model: _TableModel, n: int) -> str:
        spec = model.spec
        rows = []
        for _ in range(n):
            key = self._new_key(model)
            model.keys.append(key)
            values = [_key_literal(v) for v in key] + ["0"] + [self._value(c) for c in spec.columns]
            rows.append(f"({', '.join(values)})")
        model.expected["I"] += n
        model.row_events["insert"] += n
        names = [*spec.key_names, "rev", *spec.columns]
        return f"INSERT INTO {spec.name} ({', '.join(names)}) VALUES {', '.join(rows)}"

    def _update(self, model: _TableModel, keys: list[Key]) -> str:
        spec = model.spec
        chosen = self.rng.sample(spec.columns, self.rng.randrange(1, len(spec.columns) + 1))
        sets = ["rev = rev + 1", *(f"{c} = {self._value(c)}" for c in chosen)]
        model.expected["U"] += len(keys)
        model.row_events["update"] += len(keys)
        return f"UPDATE {spec.name} SET {', '.join(sets)} WHERE {self._where(spec, keys)}"

    def _move(self, model: _TableModel, key: Key) -> str:
        """An update that changes the primary key (lands as D + I)."""
        spec = model.spec
        new_key = self._new_key(model)
        model.keys[model.keys.index(key)] = new_key
        model.expected["D"] += 1
        model.expected["I"] += 1
        model.row_events["update"] += 1
        sets = ["rev = rev + 1", *(f"{name} = {_key_literal(v)}" for name, v in zip(
            spec.key_names, new_key, strict=True))]
        return f"UPDATE {spec.name} SET {', '.join(sets)} WHERE {self._where(spec, [key])}"

    def _delete(self, model: _TableModel, keys: list[Key]) -> str:
        spec = model.spec
        for key in keys:
            model.keys.remove(key)
        model.expected["D"] += len(keys)
        model.row_events["delete"] += len(keys)
        return f"DELETE FROM {spec.name} WHERE {self._where(spec, keys)}"


def _key_literal(value: Any) -> str:
    return str(value) if isinstance(value, int) else _quote(value)


# --- the lake side ---------------------------------------------------------------------------------


@dataclass
class LakeChanges:
    """Every change row of one database's tables in the lake, in (``_seq``, ``_row``) order."""

    rows: dict[str, list[dict[str, Any]]]

    def counts(self) -> dict[str, Counter[str]]:
        return {table: Counter(r["_op"] for r in rows) for table, rows in self.rows.items()}


def _data_files(lake: str | os.PathLike[str], database: str) -> dict[str, list[Path]]:
    """table -> its visible Parquet files (skipping ``_``/``.`` directories, as Spark does)."""
    root = Path(lake, database)
    tables: dict[str, list[Path]] = {}
    if not root.is_dir():
        return tables
    for table_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name[0] not in "_."):
        tables[table_dir.name] = [
            path for path in sorted(table_dir.rglob("*.parquet"))
            if not any(part[0] in "_." for part in path.relative_to(table_dir).parts)]
    return tables


def read_lake(lake: str | os.PathLike[str], database: str) -> LakeChanges:
    """Read ``<lake>/<database>/<table>/**/*.parquet`` with pyarrow, file by file (schema
    versions may differ)."""
    tables: dict[str, list[dict[str, Any]]] = {}
    for table, paths in _data_files(lake, database).items():
        rows: list[dict[str, Any]] = []
        for path in paths:
            rows.extend(pq.read_table(path).to_pylist())
        rows.sort(key=lambda r: (r["_seq"], r["_row"]))
        tables[table] = rows
    return LakeChanges(tables)


class OpCounter:
    """Change rows per table and ``_op``, counted incrementally: landed files are immutable, so
    each is read once (only its ``_op`` column)."""

    def __init__(self, lake: str | os.PathLike[str], database: str) -> None:
        self.lake = lake
        self.database = database
        self._files: dict[Path, Counter[str]] = {}

    def counts(self) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {}
        for table, paths in _data_files(self.lake, self.database).items():
            total: Counter[str] = Counter()
            for path in paths:
                counted = self._files.get(path)
                if counted is None:
                    ops = pq.read_table(path, columns=["_op"]).column("_op").to_pylist()
                    counted = self._files[path] = Counter(ops)
                total.update(counted)
            if total:
                out[table] = total
        return out


def check_exactly_once(changes: LakeChanges) -> None:
    """No change row twice: (``_seq``, ``_row``) and (``_gtid``, ``_row``) are unique lake-wide."""
    seq_rows: Counter[tuple[int, int]] = Counter()
    gtid_rows: Counter[tuple[str, int]] = Counter()
    for rows in changes.rows.values():
        for r in rows:
            seq_rows[(r["_seq"], r["_row"])] += 1
            if r["_gtid"] is not None:
                gtid_rows[(r["_gtid"], r["_row"])] += 1
    twice = [k for k, n in seq_rows.items() if n > 1]
    assert not twice, f"(_seq, _row) landed more than once: {twice[:10]}"
    twice_g = [k for k, n in gtid_rows.items() if n > 1]
    assert not twice_g, f"(_gtid, _row) landed more than once: {twice_g[:10]}"


def current_state(spec: TableSpec, rows: Iterable[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """The change log reduced to the latest row per primary key; deleted keys dropped.

    Replaying also checks the log against itself: an insert's key must be free, and the before
    image of an update or delete must equal the row as the log had it until then (a nullable
    column added by an ALTER since then counting as NULL there).
    """
    state: dict[Key, dict[str, Any]] = {}
    for r in rows:  # already in (_seq, _row) order
        key = tuple(r[name] for name in spec.key_names)
        op = r["_op"]
        if op == "I":
            assert key not in state, f"{spec.name}: insert of existing key {key} at {_where(r)}"
        else:
            assert key in state, f"{spec.name}: {op} of unknown key {key} at {_where(r)}"
            before = r["_before"]
            assert before is not None, f"{spec.name}: {op} without a before image at {_where(r)}"
            previous = state[key]
            # a column added since the key's last change is NULL in its earlier rows
            differ = [c for c, v in before.items() if previous.get(c) != v]
            assert not differ, f"{spec.name} {key}: before image differs in {differ} at {_where(r)}"
        if op == "D":
            del state[key]
        else:
            state[key] = r
    return state


def _where(row: dict[str, Any]) -> str:
    return f"_seq={row['_seq']} _row={row['_row']} gtid={row['_gtid']}"


def _source_rows(server: ServerHandle, database: str, spec: TableSpec) -> dict[Key, list[Any]]:
    exprs = [*spec.key_names, "rev",
             *(KINDS[c].select.format(c=c) for c in spec.columns)]
    rows = server.sql(f"SET time_zone = '+00:00'; SELECT {', '.join(exprs)} FROM "
                      f"{database}.{spec.name}", client_args=UTF8)
    out: dict[Key, list[Any]] = {}
    nkey = len(spec.key)
    for row in rows:
        key = tuple(int(v) if kind == "int" else v  # type: ignore[arg-type]
                    for v, (_n, kind) in zip(row[:nkey], spec.key, strict=True))
        out[key] = list(row[nkey:])
    return out


def _lake_cells(spec: TableSpec, row: dict[str, Any]) -> list[Any]:
    cells: list[Any] = [str(row["rev"])]
    for name in spec.columns:
        value = row[name]
        cells.append(None if value is None else KINDS[name].lake(value))
    return cells


def _normalized(spec: TableSpec, cells: list[Any]) -> list[Any]:
    out = [cells[0]]
    for name, cell in zip(spec.columns, cells[1:], strict=True):
        normalize = KINDS[name].normalize
        out.append(cell if cell is None or normalize is None else normalize(cell))
    return out


def compare_lake(server: ServerHandle, lake: str | os.PathLike[str],
                 workload: Workload) -> LakeChanges:
    """Assert the lake holds exactly the workload's changes and its current state equals SELECT.

    Returns the changes read, for further checks.
    """
    changes = read_lake(lake, workload.database)
    check_exactly_once(changes)
    counts = {t: c for t, c in changes.counts().items() if c}
    expected = {t: c for t, c in workload.expected.items() if c}
    assert counts == expected, f"change rows per table and op: lake {counts} != {expected}"
    for name, model in workload.tables.items():
        spec = model.spec
        lake_state = current_state(spec, changes.rows.get(name, []))
        source = assert_state_equals_select(server, workload.database, name, spec, lake_state)
        assert sorted(source) == sorted(model.keys), f"{name}: the workload's model drifted"
    return changes


def assert_state_equals_select(server: ServerHandle, database: str, name: str, spec: TableSpec,
                               lake_state: dict[Any, dict[str, Any]]) -> dict[Any, list[Any]]:
    """Assert a table's state replayed from the lake == SELECT, key for key and cell for cell.

    Returns the source rows by key, for further checks.
    """
    source = _source_rows(server, database, spec)
    assert sorted(lake_state) == sorted(source), (
        f"{name}: keys differ: only in lake {sorted(set(lake_state) - set(source))[:10]}, "
        f"only in source {sorted(set(source) - set(lake_state))[:10]}")
    for key, source_cells in source.items():
        lake_cells = _lake_cells(spec, lake_state[key])
        if _normalized(spec, lake_cells) != _normalized(spec, source_cells):
            diffs = [(col, s, lk) for col, s, lk in zip(
                ("rev", *spec.columns), source_cells, lake_cells, strict=True) if s != lk]
            raise AssertionError(f"{name} {key}: source != lake in {diffs}")
    return source


def wait_for_lake(lake: str | os.PathLike[str], workload: Workload, timeout: float = 30.0,
                  *, alive: Callable[[], None] | None = None) -> None:
    """Wait until the lake holds as many change rows as the workload made (never more).

    ``alive`` is called on every poll and may raise (say, the daemon exited).
    """
    expected = {t: c for t, c in workload.expected.items() if c}
    deadline = time.monotonic() + timeout
    counts: dict[str, Counter[str]] = {}
    counter = OpCounter(lake, workload.database)
    while True:
        counts = counter.counts()
        if counts == expected:
            return
        for table, ops in counts.items():
            for op, n in ops.items():
                assert n <= expected.get(table, Counter())[op], (
                    f"more {op} rows in {table} than the workload made: {counts} > {expected}")
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"the lake did not catch up in {timeout} s: {counts} != "
                                 f"{expected}")
        time.sleep(0.25)
