"""Passwords in SQL statements never reach the lake, Open Protocol output or `binlake decode`."""

from __future__ import annotations

import pytest

from protocol.binlog.ddl import redact_secrets
from protocol.binlog.model import BinlogPosition
from protocol.binlog.transactions import Statement, TransactionBegin, TransactionCommit
from sinks.openprotocol import OpenProtocolEncoder

R = "'<redacted>'"
#: (statement, what it must become): the password-bearing statements of MariaDB and MySQL, as
#: written by a user and as the servers rewrite them into the binlog.
CASES = [
    # IDENTIFIED BY, both quote styles, escapes, several users, comments
    ("CREATE USER 'repl'@'%' IDENTIFIED BY 'pw'", f"CREATE USER 'repl'@'%' IDENTIFIED BY {R}"),
    ("CREATE USER v IDENTIFIED WITH mysql_native_password BY \"p w\"",
     "CREATE USER v IDENTIFIED WITH mysql_native_password BY \"<redacted>\""),
    ("CREATE USER a IDENTIFIED BY 'it''s', b IDENTIFIED BY 'x\\'y', c@'%' IDENTIFIED BY \"q\"\"r\"",
     f"CREATE USER a IDENTIFIED BY {R}, b IDENTIFIED BY {R}, c@'%' IDENTIFIED BY \"<redacted>\""),
    ("CREATE USER u IDENTIFIED /* why */ BY /*!80000 */ 'c1'",
     f"CREATE USER u IDENTIFIED /* why */ BY /*!80000 */ {R}"),
    ("create user u identified\n  by\t'nl'", f"create user u identified\n  by\t{R}"),
    ("CREATE OR REPLACE USER u IDENTIFIED BY 'x' PASSWORD EXPIRE NEVER",
     f"CREATE OR REPLACE USER u IDENTIFIED BY {R} PASSWORD EXPIRE NEVER"),
    ("/*!80001 CREATE USER u IDENTIFIED BY 'exec' */", f"/*!80001 CREATE USER u IDENTIFIED BY {R} */"),
    # sql_mode NO_BACKSLASH_ESCAPES: 'nbe\' is a whole literal ending in a backslash
    ("CREATE USER u IDENTIFIED BY 'nbe\\'", f"CREATE USER u IDENTIFIED BY {R}"),
    ("CREATE USER u IDENTIFIED BY 'nbe\\', v IDENTIFIED BY 'w2'",
     f"CREATE USER u IDENTIFIED BY {R}"),  # both readings' secrets, merged
    # IDENTIFIED VIA … USING (MariaDB), with alternatives
    ("create user u identified via ed25519 using password('s3cr''et')",
     f"create user u identified via ed25519 using password({R})"),
    ("CREATE USER u IDENTIFIED VIA ed25519 USING 'pkb64' OR unix_socket",
     f"CREATE USER u IDENTIFIED VIA ed25519 USING {R} OR unix_socket"),
    ("ALTER USER u IDENTIFIED VIA mysql_native_password USING '*AB12' OR ed25519 USING 'k2'",
     f"ALTER USER u IDENTIFIED VIA mysql_native_password USING {R} OR ed25519 USING {R}"),
    ("CREATE USER u IDENTIFIED VIA parsec USING PASSWORD ( 'p9' )",
     f"CREATE USER u IDENTIFIED VIA parsec USING PASSWORD ( {R} )"),
    # IDENTIFIED WITH … AS / BY (MySQL, and MySQL's binlog rewrite), hex and introducers
    ("ALTER USER 'a'@'b' IDENTIFIED WITH 'caching_sha2_password' AS '$A$005$x\\'y'",
     f"ALTER USER 'a'@'b' IDENTIFIED WITH 'caching_sha2_password' AS {R}"),
    ("CREATE USER u IDENTIFIED WITH caching_sha2_password AS 0x244124303035245E",
     f"CREATE USER u IDENTIFIED WITH caching_sha2_password AS {R}"),
    ("CREATE USER u IDENTIFIED WITH sha256_password AS _binary'$5$salt$h'",
     f"CREATE USER u IDENTIFIED WITH sha256_password AS {R}"),
    ("CREATE USER u IDENTIFIED WITH caching_sha2_password AS X'2441'",
     f"CREATE USER u IDENTIFIED WITH caching_sha2_password AS {R}"),
    ("CREATE USER u IDENTIFIED BY 'f1' AND IDENTIFIED WITH authentication_ldap_simple BY 'f2'",
     f"CREATE USER u IDENTIFIED BY {R} AND IDENTIFIED WITH authentication_ldap_simple BY {R}"),
    ("ALTER USER u ADD 2FACTOR IDENTIFIED WITH authentication_ldap_sasl BY 'f3'",
     f"ALTER USER u ADD 2FACTOR IDENTIFIED WITH authentication_ldap_sasl BY {R}"),
    ("CREATE USER u IDENTIFIED WITH authentication_fido INITIAL AUTHENTICATION IDENTIFIED BY 'i1'",
     f"CREATE USER u IDENTIFIED WITH authentication_fido INITIAL AUTHENTICATION IDENTIFIED BY {R}"),
    # … REPLACE 'current password' (MySQL password verification)
    ("ALTER USER u IDENTIFIED BY 'new1' REPLACE 'old1'",
     f"ALTER USER u IDENTIFIED BY {R} REPLACE {R}"),
    ("SET PASSWORD = 'n2' REPLACE 'o2' RETAIN CURRENT PASSWORD",
     f"SET PASSWORD = {R} REPLACE {R} RETAIN CURRENT PASSWORD"),
    # GRANT … IDENTIFIED BY (MariaDB), hashes after PASSWORD
    ("GRANT ALL ON *.* TO u IDENTIFIED BY PASSWORD '*94BDCEBE'",
     f"GRANT ALL ON *.* TO u IDENTIFIED BY PASSWORD {R}"),
    ("GRANT SELECT ON db.* TO 'g'@'%' IDENTIFIED BY 'g1' WITH GRANT OPTION",
     f"GRANT SELECT ON db.* TO 'g'@'%' IDENTIFIED BY {R} WITH GRANT OPTION"),
    # PASSWORD() and SET PASSWORD [FOR]
    ("SET PASSWORD FOR u = PASSWORD('x')", f"SET PASSWORD FOR u = PASSWORD({R})"),
    ("SET PASSWORD FOR 'u'@'h' = '*ABC'", f"SET PASSWORD FOR 'u'@'h' = {R}"),
    ("SET PASSWORD = OLD_PASSWORD('legacy')", f"SET PASSWORD = OLD_PASSWORD({R})"),
    ("SELECT PASSWORD('inline')", f"SELECT PASSWORD({R})"),
    ("UPDATE mysql.user SET authentication_string = PASSWORD('sbr') WHERE user = 'u'",
     f"UPDATE mysql.user SET authentication_string = PASSWORD({R}) WHERE user = 'u'"),
    # CREATE/ALTER SERVER … OPTIONS (PASSWORD …)
    ("CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'u', PASSWORD 'sv1', HOST 'h')",
     f"CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'u', PASSWORD {R}, HOST 'h')"),
    ("ALTER SERVER s OPTIONS (PASSWORD \"sv2\")", "ALTER SERVER s OPTIONS (PASSWORD \"<redacted>\")"),
    # CHANGE MASTER / CHANGE REPLICATION SOURCE, START SLAVE/REPLICA … PASSWORD=
    ("CHANGE MASTER TO MASTER_PASSWORD = 'x'", f"CHANGE MASTER TO MASTER_PASSWORD = {R}"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_USER='r', SOURCE_PASSWORD='s1'",
     f"CHANGE REPLICATION SOURCE TO SOURCE_USER='r', SOURCE_PASSWORD={R}"),
    ("START SLAVE USER='r' PASSWORD='st1'", f"START SLAVE USER='r' PASSWORD={R}"),
    ("START REPLICA USER = 'r' PASSWORD = 'st2' DEFAULT_AUTH = 'x'",
     f"START REPLICA USER = 'r' PASSWORD = {R} DEFAULT_AUTH = 'x'"),
    # passwords in table options: FEDERATED/CONNECT URLs, Spider option strings
    ("CREATE TABLE f (a INT) ENGINE=FEDERATED CONNECTION='mysql://usr:url1@h:3306/db/t'",
     "CREATE TABLE f (a INT) ENGINE=FEDERATED CONNECTION='mysql://usr:<redacted>@h:3306/db/t'"),
    ("CREATE TABLE s (a INT) ENGINE=SPIDER COMMENT='wrapper \"mysql\", password \"sp1\"'",
     "CREATE TABLE s (a INT) ENGINE=SPIDER COMMENT='wrapper \"mysql\", password \"<redacted>\"'"),
]


@pytest.mark.parametrize(("query", "expected"), CASES)
def test_password_literals_are_redacted(query: str, expected: str) -> None:
    assert redact_secrets(query) == expected


@pytest.mark.parametrize("query", [
    "CREATE TABLE t (password VARCHAR(64), identified INT)",
    "INSERT INTO t VALUES ('identified by nobody')",
    "ALTER TABLE t ADD COLUMN c INT",
    "REPLACE INTO t VALUES (1, 'password')",
    "SELECT REPLACE(name, 'a', 'b') FROM t",
    "ALTER USER u PASSWORD EXPIRE INTERVAL 90 DAY PASSWORD HISTORY 5",
    "CREATE USER u IDENTIFIED BY RANDOM PASSWORD",
    "CREATE TABLE t (a INT) COMMENT 'see https://example.com/a:b'",
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


def test_decode_text_statement_is_redacted() -> None:
    from replica.commands.decode import _statement

    assert _statement("GRANT ALL ON *.* TO u IDENTIFIED BY 'dc1'\n") == \
        f"GRANT ALL ON *.* TO u IDENTIFIED BY {R}\\n"
