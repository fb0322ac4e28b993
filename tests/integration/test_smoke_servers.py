"""Smoke tests of the test bed itself: each flavor starts, takes a write, logs it to a ROW binlog
with the settings binlake relies on, and lets every session account log in with the stock client.

If these fail, every other server test is suspect; they use only the servers' own tools.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.servers.handle import ServerHandle
from tests.servers.plugin import ServerFactory, user_or_skip

pytestmark = pytest.mark.server

FLAVOR_FIXTURES = ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"]


@pytest.fixture(params=FLAVOR_FIXTURES)
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _binlog_status(server: ServerHandle) -> tuple[str, int]:
    statement = "SHOW MASTER STATUS" if server.is_mariadb else "SHOW BINARY LOG STATUS"
    rows = server.sql(statement)
    assert len(rows) == 1, rows
    file, position = rows[0][0], rows[0][1]
    assert file is not None and position is not None
    return file, int(position)


def test_handle_describes_the_server(server: ServerHandle) -> None:
    expected = {"mariadb-10.11": "10.11.", "mariadb-11.8": "11.8.", "mysql-9.7": "9.7."}
    assert server.version.startswith(expected[server.flavor])
    assert server.host == "127.0.0.1"
    assert server.sql("SELECT @@server_id, @@port") == [(str(server.server_id), str(server.port))]
    variables = dict(
        server.sql(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
            "'binlog_row_metadata', 'binlog_checksum', 'gtid_mode')"
        )
    )
    assert variables["log_bin"] == "ON"
    assert variables["binlog_format"] == "ROW"
    assert variables["binlog_row_metadata"] == "FULL"
    assert variables["binlog_checksum"] == "CRC32"
    if not server.is_mariadb:
        assert variables["gtid_mode"] == "ON"
    assert (server.tls_ca is not None) == (server.flavor == "mariadb-10.11")


def test_write_lands_in_the_binlog(server: ServerHandle) -> None:
    database, table = _unique("smoke"), "t"
    file_before, position_before = _binlog_status(server)
    server.sql(
        f"CREATE DATABASE {database};"
        f"CREATE TABLE {database}.{table} (id INT PRIMARY KEY, note VARCHAR(20));"
        f"INSERT INTO {database}.{table} VALUES (1, 'hello'), (2, NULL);"
    )
    assert server.sql(f"SELECT id, note FROM {database}.{table} ORDER BY id") == [
        ("1", "hello"),
        ("2", None),
    ]
    file_after, position_after = _binlog_status(server)
    assert (file_after, position_after) > (file_before, position_before)

    events = server.sql(f"SHOW BINLOG EVENTS IN '{file_after}'")
    kinds = [row[2] for row in events]
    infos = "\n".join(row[5] or "" for row in events)
    assert "Table_map" in kinds
    assert "Write_rows" in kinds or "Write_rows_v1" in kinds
    assert f"({database}.{table})" in infos  # the Table_map names our table
    assert any(kind == "Gtid" for kind in kinds)

    # The binlog files are where the handle says, and the flavor's own tool decodes them.
    files = server.binlog_files()
    assert files and files[-1].endswith(file_after)
    decoded = subprocess.run(
        server.binlog_tool_argv("--base64-output=decode-rows", "--verbose", files[-1]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"INSERT INTO `{database}`.`{table}`" in decoded


def _session_roles(server: ServerHandle) -> list[str]:
    if server.flavor == "mariadb-10.11":
        return ["root", "repl", "native", "ed25519"]
    if server.flavor == "mariadb-11.8":
        return ["root", "repl", "native", "ed25519", "parsec"]
    return ["root", "repl", "caching_sha2", "sha256"]


@pytest.mark.parametrize("tcp", [False, True], ids=["socket", "tcp"])
def test_every_account_logs_in(server: ServerHandle, tcp: bool) -> None:
    roles = _session_roles(server)
    expected_plugins = {
        "native": "mysql_native_password",
        "ed25519": "ed25519",
        "parsec": "parsec",
        "caching_sha2": "caching_sha2_password",
        "sha256": "sha256_password",
    }
    for role in roles:
        if role not in server.users:
            assert role in server.missing_users, f"{role} neither created nor explained"
            continue
        user = server.users[role]
        if role in expected_plugins:
            assert user.plugin == expected_plugins[role]
        if role != "root":
            assert user.password and user.password not in repr(user)
        ((current,),) = server.sql("SELECT CURRENT_USER()", user=role, tcp=tcp)
        host = ("127.0.0.1" if tcp else "localhost") if role == "root" else "%"
        assert current == f"{role}@{host}"
    # A replication account can ask for the binlog position (BINLOG MONITOR / REPLICATION CLIENT).
    statement = "SHOW MASTER STATUS" if server.is_mariadb else "SHOW BINARY LOG STATUS"
    assert len(server.sql(statement, user="repl", tcp=tcp)) == 1


def test_sha256_account_or_reason(mysql_9_7: ServerHandle) -> None:
    user = user_or_skip(mysql_9_7, "sha256")
    assert user.plugin == "sha256_password"


def test_tls_over_tcp(server: ServerHandle) -> None:
    if server.tls_ca is not None:
        # Our own CA: the stock client verifies the server certificate against it.
        client_args = [
            "--ssl",
            "--ssl-verify-server-cert",
            f"--ssl-ca={server.inside(server.tls_ca)}",
        ]
    else:
        client_args = []  # 11.8 and 9.7 clients use TLS by default against zero-config servers
    rows = server.sql("SHOW SESSION STATUS LIKE 'Ssl_version'", tcp=True, client_args=client_args)
    assert rows and (rows[0][1] or "").startswith("TLSv1."), rows


def test_factory_gives_a_separate_server_with_options(
    server_factory: ServerFactory, mariadb_10_11: ServerHandle
) -> None:
    special = server_factory.start(
        "mariadb-10.11", extra_args=["--binlog-format=STATEMENT"], name="smoke-statement"
    )
    assert special.port != mariadb_10_11.port and special.server_id != mariadb_10_11.server_id
    assert (
        server_factory.start(
            "mariadb-10.11", extra_args=["--binlog-format=STATEMENT"], name="smoke-statement"
        )
        is special
    )
    assert special.sql("SELECT @@binlog_format") == [("STATEMENT",)]
    database = _unique("smoke")
    special.sql(f"CREATE DATABASE {database}; CREATE TABLE {database}.t (id INT PRIMARY KEY)")

    # restart keeps datadir, port and TLS; new options replace the test's, not the flavor's.
    port = special.port
    special.restart([])
    assert special.port == port
    assert special.sql("SELECT @@binlog_format, @@have_ssl") == [("ROW", "YES")]
    assert special.sql(f"SHOW TABLES IN {database}") == [("t",)]
    special.stop()
    special.start()
    assert special.sql("SELECT 1", user="repl", tcp=True) == [("1",)]
