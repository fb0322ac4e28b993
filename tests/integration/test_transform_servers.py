"""Column rules ([[transform.column]]) against real servers.

1. The text form a hash is taken of is the server's own: every hashable type's landed hash ==
   HMAC-SHA-256 of ``CAST(col AS CHAR)`` (``HEX`` of the bytes, so nothing is re-encoded on the
   way), or of the raw bytes of a binary column, on MariaDB 10.11, 11.8 and MySQL 9.7.
2. A compliance review's proof, on MariaDB 10.11 and MySQL 9.7: a TEXT column excluded, an email
   that is a unique key hashed, a card number masked, a note truncated, in rows that arrive by a
   snapshot (a keyless table's by staged pieces too), streamed INSERT/UPDATE/DELETE (before
   images) and an XA transaction; no clear value
   of a ruled column is in any byte of the lake, the daemon's debug log, or ``binlake decode``'s
   text and Open Protocol output of the server's binlogs; the hashes equal HMAC computed here;
   the lake's state == SELECT with the same rules applied.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from replica.config import Secret, TransformConfig
from sinks.transform import ColumnRule
from tests.servers.handle import ServerHandle

from .daemon_process import REPO, DaemonProcess, binlog_end, catch_up, catch_up_config, unique_db
from .snapshot_check import (
    replay,
    snapshot_settings,
    wait_caught_up,
    wait_snapshots_done,
)

pytestmark = pytest.mark.server

KEY = "a test key, not a secret"


def _hmac(value: bytes) -> str:
    return hmac.new(KEY.encode(), value, hashlib.sha256).hexdigest()


def _rows(lake: Path, database: str, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted((lake / database / table).rglob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return sorted(rows, key=lambda r: (r["_seq"], r["_row"]))


# --- 1. the text form of every hashable type ----------------------------------------------------

_TYPES = (
    ("c_tiny", "TINYINT", ("-128", "127", "0")),
    ("c_small", "SMALLINT UNSIGNED", ("65535", "0", "7")),
    ("c_medium", "MEDIUMINT", ("-8388608", "8388607", "1")),
    ("c_int", "INT", ("-2147483648", "2147483647", "-1")),
    ("c_big", "BIGINT UNSIGNED", ("18446744073709551615", "0", "42")),
    ("c_year", "YEAR", ("1901", "2155", "0")),
    ("c_dec", "DECIMAL(12,3)", ("-123456789.5", "0", "0.001")),
    ("c_dec0", "DECIMAL(5,0)", ("-99999", "0", "12")),
    ("c_wide", "DECIMAL(65,30)", ("-12345678901234567890.123", "0", "1e-30")),
    ("c_date", "DATE", ("'0999-01-02'", "'2024-02-29'", "'0000-00-00'")),
    ("c_dt", "DATETIME", ("'2024-01-02 03:04:05'", "'1000-01-01 00:00:00'",
                          "'0000-00-00 00:00:00'")),
    ("c_dt3", "DATETIME(3)", ("'2024-01-02 03:04:05.120'", "'2024-01-02 03:04:05'",
                              "'9999-12-31 23:59:59.999'")),
    ("c_dt6", "DATETIME(6)", ("'2024-01-02 03:04:05.000001'", "'2024-01-02 03:04:05.5'",
                              "'1970-01-01 00:00:00'")),
    ("c_time", "TIME", ("'-838:59:59'", "'838:59:59'", "'00:00:00'")),
    ("c_time2", "TIME(2)", ("'-00:00:01.5'", "'12:34:56.78'", "'-838:59:59.99'")),
    ("c_char", "CHAR(8) CHARACTER SET utf8mb4", ("'ab  '", "''", "'çé ü'")),
    ("c_latin", "VARCHAR(20) CHARACTER SET latin1", ("'café'", "'a\\tb'", "' x '")),
    ("c_utf", "VARCHAR(20) CHARACTER SET utf8mb4", ("'日本 😀'", "'line\\nbreak'", "'q''uote'")),
    ("c_text", "TEXT CHARACTER SET utf8mb4", ("'long text ü'", "''", "'\\\\'")),
    ("c_vbin", "VARBINARY(10)", ("X'00FF10'", "''", "X'000000'")),
    ("c_blob", "BLOB", ("X'DEADBEEF00'", "X''", "X'41'")),
    ("c_enum", "ENUM('a','bé','c')", ("'bé'", "'a'", "''")),
    ("c_set", "SET('x','y','z')", ("'x,z'", "''", "'y'")),
)


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
async def test_hashes_are_the_hmac_of_the_servers_text(flavor: str, request: pytest.FixtureRequest,
                                                      tmp_path: Path) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    db = unique_db("hashtext")
    columns = ", ".join(f"{name} {ddl} NULL" for name, ddl, _ in _TYPES)
    start = binlog_end(server)
    rows = [", ".join(values[i] for _, _, values in _TYPES) for i in range(3)]
    server.sql(
        "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION';"
        f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, {columns});"
        f"INSERT INTO {db}.t VALUES (1, {rows[0]}), (2, {rows[1]}), (3, {rows[2]}),"
        f"(4, {', '.join('NULL' for _ in _TYPES)})")
    config = catch_up_config(server, tmp_path / "lake", start, include=(f"{db}.*",))
    config = dataclasses.replace(
        config, transform=TransformConfig(hash_key=Secret(KEY)),
        transform_rules=(ColumnRule(f"{db}.t.c_*", "hash"),))
    await catch_up(config)

    landed = {r["id"]: r for r in _rows(tmp_path / "lake", db, "t")}
    assert sorted(landed) == [1, 2, 3, 4]
    binary = {"c_vbin", "c_blob"}
    selects = ", ".join(
        f"HEX({name})" if name in binary else
        f"HEX(CONVERT(CAST({name} AS CHAR) USING utf8mb4))" for name, _, _ in _TYPES)
    for row in server.sql(f"SELECT id, {selects} FROM {db}.t ORDER BY id"):
        got = landed[int(row[0] or 0)]
        for (name, _, _), text in zip(_TYPES, row[1:], strict=True):
            expected = None if text is None else _hmac(bytes.fromhex(text))
            assert got[name] == expected, (flavor, row[0], name, text)


# --- 2. a compliance review's proof ---------------------------------------------------------------


def _rules(db: str) -> str:
    return f"""
[transform]
hash_key_file = "{{key_file}}"

[[transform.column]]
match = "{db}.customers.bio"
action = "exclude"

[[transform.column]]
match = "{db}.*.email"
action = "hash"

[[transform.column]]
match = "{db}.customers.card"
action = "mask"
mask = "****"

[[transform.column]]
match = "{db}.*.note"
action = "truncate"
length = 4
"""


def _secret(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


class _Values:
    """Every clear value a ruled column ever held, each unique, to look for afterwards."""

    def __init__(self) -> None:
        self.clear: list[str] = []

    def new(self, kind: str) -> str:
        value = _secret(kind)
        self.clear.append(value)
        return value


def _customer(values: _Values, n: int) -> str:
    return (f"({n}, '{values.new('mail')}@example.com', '{values.new('bio')}', "
            f"'{values.new('card')}', 'NOTE{values.new('note')}')")


def _select_ruled(server: ServerHandle, db: str) -> dict[str, dict[int, tuple[Any, ...]]]:
    """SELECT of both tables, with the rules applied here (the test's own HMAC)."""
    customers = {
        int(r[0] or 0): (_hmac((r[1] or "").encode()), "****" if r[2] is not None else None,
                         None if r[3] is None else r[3][:4])
        for r in server.sql(f"SELECT id, email, card, note FROM {db}.customers")}
    orders = {int(r[0] or 0): (_hmac((r[1] or "").encode()), None if r[2] is None else r[2][:4],
                               int(r[3] or 0))
              for r in server.sql(f"SELECT id, email, note, amount FROM {db}.orders")}
    return {"customers": customers, "orders": orders}


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mysql_9_7"])
def test_ruled_columns_never_land_in_clear(flavor: str, request: pytest.FixtureRequest,
                                           tmp_path: Path) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    db = unique_db("rules")
    values = _Values()
    first_binlog = Path(server.binlog_files()[-1]).name
    server.sql(
        f"CREATE DATABASE {db};"
        f"CREATE TABLE {db}.customers (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL UNIQUE, "
        "bio TEXT, card VARCHAR(64), note VARCHAR(100));"
        f"CREATE TABLE {db}.orders (id INT PRIMARY KEY, email VARCHAR(100), note VARCHAR(100), "
        "amount INT);"
        f"CREATE TABLE {db}.ticks (id INT AUTO_INCREMENT PRIMARY KEY);"
        # no key: snapshotted by one read, staged in pieces of snapshot.chunk_rows rows
        f"CREATE TABLE {db}.contacts (email VARCHAR(100), note VARCHAR(100));"
        # rows already there: they reach the lake only by the snapshot
        f"INSERT INTO {db}.customers VALUES {_customer(values, 1)}, {_customer(values, 2)};"
        f"INSERT INTO {db}.orders VALUES (1, '{values.new('omail')}', "
        f"'NOTE{values.new('onote')}', 10);"
        f"INSERT INTO {db}.contacts VALUES " + ", ".join(
            f"('{values.new('cmail')}', 'NOTE{values.new('cnote')}')" for _ in range(5)))
    lake = tmp_path / "lake"
    key_file = tmp_path / "hash.key"
    key_file.write_text(KEY + "\n")
    settings = snapshot_settings(server, lake, db, overrides={
        "start": {"from": "snapshot"}, "log": {"level": "debug"}, "snapshot": {"chunk_rows": 2}})
    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.config_path.write_text(daemon.config_path.read_text()
                                  + _rules(db).replace("{key_file}", str(key_file)))
    daemon.start()

    def alive_and_ticking() -> None:
        # MySQL: a chunk lands once the stream passed the binlog end read after it; an idle
        # server's stream has nothing to pass, so a tick of an unruled table moves it
        daemon.check_alive()
        server.sql(f"INSERT INTO {db}.ticks VALUES ()")

    try:
        wait_snapshots_done(lake, {f"{db}.customers", f"{db}.orders", f"{db}.ticks",
                                   f"{db}.contacts"}, 120, alive_and_ticking)
        # streamed rows, with before images (UPDATE of every ruled column, DELETE)
        server.sql(
            f"INSERT INTO {db}.customers VALUES {_customer(values, 3)}, {_customer(values, 4)};"
            f"UPDATE {db}.customers SET email = '{values.new('mail')}', "
            f"bio = '{values.new('bio')}', card = '{values.new('card')}', "
            f"note = 'NOTE{values.new('note')}' WHERE id = 1;"
            f"DELETE FROM {db}.customers WHERE id = 2;"
            f"INSERT INTO {db}.orders VALUES (2, '{values.new('omail')}', "
            f"'NOTE{values.new('onote')}', 20);"
            # an XA transaction's parts
            "XA START 'rules-xa';"
            f"INSERT INTO {db}.customers VALUES {_customer(values, 5)};"
            f"UPDATE {db}.orders SET email = '{values.new('omail')}', amount = 11 WHERE id = 1;"
            "XA END 'rules-xa'; XA PREPARE 'rules-xa'; XA COMMIT 'rules-xa'")
        wait_caught_up(server, lake, 60, daemon.check_alive)
    finally:
        code, _ = daemon.terminate(30)
    assert code == 0, daemon.stderr()[-4000:]

    # hashes, masks and truncations are exact; the lake's state == SELECT with the rules
    expected = _select_ruled(server, db)
    landed = {}
    for table, key_columns in (("customers", ("email", "card", "note")),
                               ("orders", ("email", "note", "amount"))):
        rows = _rows(lake, db, table)
        assert {r["_op"] for r in rows} >= ({"R", "I", "U"} if table == "orders"
                                            else {"R", "I", "U", "D"})
        assert all("bio" not in r and ("bio" not in (r["_before"] or {})) for r in rows)
        state = replay(table, ("id",), rows)
        landed[table] = {key[0]: tuple(r[c] for c in key_columns) for key, r in state.items()}
    assert landed == expected
    # the keyless table's snapshot: one commit of its staged pieces (2 + 2 + 1 rows), ruled
    contacts = _rows(lake, db, "contacts")
    assert {r["_op"] for r in contacts} == {"R"}
    assert sorted((r["email"], r["note"]) for r in contacts) == sorted(
        (_hmac((email or "").encode()), (note or "")[:4])
        for email, note in server.sql(f"SELECT email, note FROM {db}.contacts"))
    assert f"snapshot of {db}.contacts: read by one SELECT, its 5 rows landed in one commit of " \
           "3 pieces" in daemon.stderr()

    # the decode of the server's binlogs, text and Open Protocol, under the same config
    files = [f for f in server.binlog_files() if Path(f).name >= first_binlog]
    outputs = []
    for output_format in ("text", "open-protocol"):
        done = subprocess.run(
            [sys.executable, "-m", "replica.cli", "decode", "--config", str(daemon.config_path),
             "--format", output_format, *files],
            env=daemon._env(), cwd=REPO, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        # the rows are printed, ruled: customer 1's hashed email, as the lake holds it
        assert expected["customers"][1][0].encode() in done.stdout
        outputs.append(done.stdout + done.stderr)
    assert b"XA COMMIT" in outputs[0]

    # no clear value anywhere: every byte of every file of the lake, the debug log, decode
    haystacks = [(str(p), p.read_bytes()) for p in lake.rglob("*") if p.is_file()]
    # and every value of every Parquet file as read back (a compressed page hides its bytes)
    haystacks += [(f"{p} (read)", repr((pq.read_table(p).to_pylist(), pq.read_schema(p)))
                   .encode()) for p in lake.rglob("*.parquet")]
    haystacks += [("daemon log", Path(daemon.stderr_path).read_bytes()),
                  ("daemon stdout", Path(daemon.stdout_path).read_bytes())]
    haystacks += [("decode text", outputs[0]), ("decode open-protocol", outputs[1])]
    assert any(b" DEBUG " in text for name, text in haystacks if name == "daemon log")
    assert len(values.clear) == 39  # 5 customers x 4, an UPDATE of 4, 5 in orders, 5 contacts x 2
    for name, data in haystacks:
        for value in values.clear:
            # a truncated note keeps its first 4 characters ("NOTE"), nothing of the secret
            assert value.encode() not in data, f"{value} in {name}"
            assert value.split("-", 1)[1].encode() not in data, f"{value} in {name}"
