"""Passwords in account-management statements never reach the lake or Open Protocol output."""

from __future__ import annotations

import pytest

from protocol.binlog.ddl import redact_secrets
from protocol.binlog.model import BinlogPosition
from protocol.binlog.transactions import Statement, TransactionBegin, TransactionCommit
from sinks.openprotocol import OpenProtocolEncoder


@pytest.mark.parametrize(("query", "expected"), [
    ("CREATE USER 'repl'@'%' IDENTIFIED BY 'pw'",
     "CREATE USER 'repl'@'%' IDENTIFIED BY '<redacted>'"),
    ("create user u identified via ed25519 using password('s3cr''et')",
     "create user u identified via ed25519 using password('<redacted>')"),
    ("CREATE USER u IDENTIFIED VIA ed25519 USING 'pkb64' OR unix_socket",
     "CREATE USER u IDENTIFIED VIA ed25519 USING '<redacted>' OR unix_socket"),
    ("ALTER USER 'a'@'b' IDENTIFIED WITH 'caching_sha2_password' AS '$A$005$x\\'y'",
     "ALTER USER 'a'@'b' IDENTIFIED WITH 'caching_sha2_password' AS '<redacted>'"),
    ("CREATE USER v IDENTIFIED WITH mysql_native_password BY \"p w\"",
     "CREATE USER v IDENTIFIED WITH mysql_native_password BY '<redacted>'"),
    ("GRANT ALL ON *.* TO u IDENTIFIED BY PASSWORD '*94BDCEBE'",
     "GRANT ALL ON *.* TO u IDENTIFIED BY PASSWORD '<redacted>'"),
    ("SET PASSWORD FOR u = PASSWORD('x')", "SET PASSWORD FOR u = PASSWORD('<redacted>')"),
    ("SET PASSWORD FOR 'u'@'h' = '*ABC'", "SET PASSWORD FOR 'u'@'h' = '<redacted>'"),
    ("CHANGE MASTER TO MASTER_PASSWORD = 'x'", "CHANGE MASTER TO MASTER_PASSWORD = '<redacted>'"),
])
def test_password_literals_are_redacted(query: str, expected: str) -> None:
    assert redact_secrets(query) == expected


@pytest.mark.parametrize("query", [
    "CREATE TABLE t (password VARCHAR(64), identified INT)",
    "INSERT INTO t VALUES ('identified by nobody')",
    "ALTER TABLE t ADD COLUMN c INT",
])
def test_other_statements_are_untouched(query: str) -> None:
    assert redact_secrets(query) == query


def test_open_protocol_ddl_event_is_redacted() -> None:
    pos = BinlogPosition("mysql-bin.000001", 4)
    encoder = OpenProtocolEncoder()
    items = [TransactionBegin(None, pos, 1, 1),
             Statement("", "CREATE USER 'x'@'%' IDENTIFIED BY 'hunter2'", True, pos, 1),
             TransactionCommit(None, pos, pos, 0, 1)]
    out = [o for item in items for o in encoder.encode(item)]
    assert "hunter2" not in repr(out)
    assert out[0]["value"]["q"] == "CREATE USER 'x'@'%' IDENTIFIED BY '<redacted>'"
