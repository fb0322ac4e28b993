"""Spark over a lake landed with column rules and [types] from a real MariaDB 10.11:
``read_current_state`` == ``SELECT`` with the same rules applied (found by the hashed key), and
the types Spark reads are the ones the options say (bigint, string, boolean)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from pathlib import Path
from typing import Any

import pytest

from replica.config import Secret, TransformConfig, TypesConfig
from sinks.spark.state import read_current_state
from sinks.transform import ColumnRule
from tests.servers.handle import ServerHandle

from .daemon_process import binlog_end, catch_up, catch_up_config, unique_db

pytestmark = [pytest.mark.server, pytest.mark.spark]

KEY = "spark test key"


def _hmac(text: str) -> str:
    return hmac.new(KEY.encode(), text.encode(), hashlib.sha256).hexdigest()


async def test_current_state_with_rules_and_types_in_spark(mariadb_10_11: ServerHandle,
                                                           spark: Any, tmp_path: Path) -> None:
    server = mariadb_10_11
    db = unique_db("rulespark")
    start = binlog_end(server)
    server.sql(
        f"CREATE DATABASE {db};"
        f"CREATE TABLE {db}.users (email VARCHAR(100) PRIMARY KEY, bio TEXT, "
        "card VARCHAR(20), visits BIGINT UNSIGNED, born DATE, vip TINYINT(1));"
        f"INSERT INTO {db}.users VALUES ('ann@example.com', 'about ann', '4111', 3, "
        "'1990-01-02', 2), ('bob@example.com', 'about bob', NULL, 0, NULL, 0), "
        "('cy@example.com', 'about cy', '4222', 7, '2000-02-29', NULL);"
        f"UPDATE {db}.users SET visits = visits + 1, card = '4333' WHERE email = 'ann@example.com';"
        f"UPDATE {db}.users SET email = 'bo@example.com' WHERE email = 'bob@example.com';"
        f"DELETE FROM {db}.users WHERE email = 'cy@example.com'")
    lake = tmp_path / "lake"
    config = dataclasses.replace(
        catch_up_config(server, lake, start, include=(f"{db}.*",)),
        transform=TransformConfig(hash_key=Secret(KEY)),
        types=TypesConfig(bigint_unsigned="int64", zero_date="string", tinyint1_as_boolean=True),
        transform_rules=(ColumnRule(f"{db}.users.email", "hash"),
                         ColumnRule(f"{db}.users.bio", "exclude"),
                         ColumnRule(f"{db}.users.card", "mask", mask="****")))
    await catch_up(config)

    state = read_current_state(spark, str(lake), db, "users")
    assert state.columns == ["email", "card", "visits", "born", "vip"]
    assert {f.name: f.dataType.simpleString() for f in state.schema.fields} == {
        "email": "string", "card": "string", "visits": "bigint", "born": "string",
        "vip": "boolean"}
    got = sorted(tuple(r) for r in state.collect())
    expected = sorted(
        (_hmac(email or ""), None if card is None else "****", int(visits or 0), born,
         None if vip is None else vip != "0")
        for email, card, visits, born, vip in server.sql(
            f"SELECT email, card, visits, born, vip FROM {db}.users"))
    assert got == expected
    assert len(got) == 2
