"""Connecting and authenticating against real servers: every plugin x flavor, TLS modes.

The plugin x flavor matrix (each cell is a test below):

  plugin                 10.11            11.8                       9.7
  mysql_native_password  native           native, zero-config TLS    (removed in 9.x)
  client_ed25519         lengths 1..100   lengths 1..100, zero-conf  -
  parsec                 -                factors 0-3 (the server's  -
                                          range), zero-config TLS
  caching_sha2_password  -                -                          fast, RSA fetched/pinned,
                                                                     verified TLS, unverified
                                                                     loopback TLS, unix socket;
                                                                     the daemon across FLUSH
                                                                     PRIVILEGES and a restart
  sha256_password        -                -                          if the plugin exists
"""

from __future__ import annotations

import os
import re
import secrets
import string
from pathlib import Path

import pytest

from protocol.errors import AccessDenied, InsecureTransport, TlsError
from replica.core.connection import Connection, ConnectOptions
from tests.servers.handle import ServerHandle
from tests.servers.plugin import user_or_skip

from .daemon_process import DaemonProcess, daemon_settings, unique_db
from .workload import read_lake

pytestmark = pytest.mark.server

ALPHABET = string.ascii_letters + string.digits


def _options(server: ServerHandle, user: str, password: str, **kw: object) -> ConnectOptions:
    values: dict[str, object] = dict(host=server.host, port=server.port, user=user,
                                     password=password, connect_timeout=15)
    values.update(kw)
    return ConnectOptions(**values)  # type: ignore[arg-type]


async def _whoami(server: ServerHandle, user: str, password: str, **kw: object) -> Connection:
    conn = await Connection.open(_options(server, user, password, **kw))
    rows = await conn.query("SELECT CURRENT_USER()")
    assert rows[0][0] is not None and str(rows[0][0]).split("@")[0] == user
    return conn


def _fresh_user(server: ServerHandle, identified: str, password: str) -> str:
    name = "a" + secrets.token_hex(5)
    clause = identified.format(pw=password)
    server.sql(f"CREATE USER '{name}'@'%' {clause}")
    return name


def _mysql_ca(server: ServerHandle) -> str:
    """MySQL's auto-generated CA (datadir/ca.pem), which signed its self-made certificate."""
    path = os.path.join(server.datadir, "ca.pem")
    if not os.path.exists(path):
        pytest.skip(f"{server.flavor} has no auto-generated {path}")
    return path


# --- mysql_native_password ----------------------------------------------------------------------


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8"])
async def test_native(flavor: str, request: pytest.FixtureRequest) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    account = user_or_skip(server, "native")
    async with await _whoami(server, account.name, account.password,
                             tls_mode="disabled") as conn:
        assert conn.auth_plugin == "mysql_native_password" and conn.is_mariadb


# --- client_ed25519 -----------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 31, 32, 33, 100])
@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8"])
async def test_ed25519_password_lengths(flavor: str, length: int,
                                        request: pytest.FixtureRequest) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    user_or_skip(server, "ed25519")  # the plugin is installed
    password = "".join(secrets.choice(ALPHABET) for _ in range(length))
    name = _fresh_user(server, "IDENTIFIED VIA ed25519 USING PASSWORD('{pw}')", password)
    async with await _whoami(server, name, password, tls_mode="disabled") as conn:
        assert conn.auth_plugin == "client_ed25519"
    with pytest.raises(AccessDenied):
        await Connection.open(_options(server, name, password + "x", tls_mode="disabled"))


# --- parsec (11.8) ------------------------------------------------------------------------------


async def test_parsec(mariadb_11_8: ServerHandle) -> None:
    account = user_or_skip(mariadb_11_8, "parsec")
    async with await _whoami(mariadb_11_8, account.name, account.password,
                             tls_mode="disabled") as conn:
        assert conn.auth_plugin == "parsec"


def _parsec_auth_string(password: str, factor: int) -> str:
    """The authentication string the server stores for parsec ('P' + factor, ':', salt, ':',
    public key; base64 without padding), computed here without binlake's own code: PBKDF2-SHA512
    with 1024 << factor iterations gives the Ed25519 private key."""
    import base64
    import hashlib

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    salt = secrets.token_bytes(18)
    seed = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 1024 << factor, 32)
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        Encoding.Raw, PublicFormat.Raw)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode().rstrip("=")

    return f"P{factor}:{b64(salt)}:{b64(public)}"


async def test_parsec_iteration_factors_the_server_accepts(mariadb_11_8: ServerHandle) -> None:
    """Every iteration factor MariaDB 11.8 stores (0-3: 1,024 to 8,192 PBKDF2 rounds) logs in;
    the server refuses 4 and above, so those (up to 15) are proven by unit tests only."""
    user_or_skip(mariadb_11_8, "parsec")
    password = "p" + secrets.token_hex(8)
    accepted = []
    for factor in range(0, 6):
        name = "a" + secrets.token_hex(5)
        try:
            mariadb_11_8.sql(f"CREATE USER '{name}'@'%' IDENTIFIED VIA parsec USING "
                             f"'{_parsec_auth_string(password, factor)}'")
        except Exception:  # noqa: BLE001 - the server refuses the factor
            continue
        try:
            accepted.append(factor)
            async with await _whoami(mariadb_11_8, name, password, tls_mode="disabled") as conn:
                assert conn.auth_plugin == "parsec"
            with pytest.raises(AccessDenied):
                await Connection.open(_options(mariadb_11_8, name, password + "x",
                                               tls_mode="disabled"))
        finally:
            mariadb_11_8.sql(f"DROP USER '{name}'@'%'")
    assert accepted == [0, 1, 2, 3]


# --- zero-configuration TLS (11.8) ---------------------------------------------------------------


@pytest.mark.parametrize("role", ["native", "ed25519", "parsec"])
async def test_zero_config_tls(mariadb_11_8: ServerHandle, role: str) -> None:
    account = user_or_skip(mariadb_11_8, role)
    # trust_loopback=False: behave as for a remote host, so only the fingerprint can vouch.
    async with await _whoami(mariadb_11_8, account.name, account.password, tls_mode="required",
                             trust_loopback=False) as conn:
        assert conn.is_tls and conn.tls_trust == "fingerprint"
        rows = await conn.query("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert rows[0][1] and str(rows[0][1]).startswith("TLS")


async def test_zero_config_tls_needs_a_password(mariadb_11_8: ServerHandle) -> None:
    with pytest.raises(TlsError):
        await Connection.open(_options(mariadb_11_8, "root", "", tls_mode="required",
                                       trust_loopback=False))


async def test_default_on_loopback_accepts_unverified_but_checks_fingerprint(
        mariadb_11_8: ServerHandle) -> None:
    account = user_or_skip(mariadb_11_8, "native")
    async with await _whoami(mariadb_11_8, account.name, account.password) as conn:
        assert conn.tls_trust == "fingerprint"  # offered, so checked
    async with await _whoami(mariadb_11_8, "root", "") as conn:
        assert conn.tls_trust == "unverified-loopback"


# --- TLS with a CA (10.11) -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["verify-ca", "verify-identity"])
async def test_tls_verify_with_ca(mariadb_10_11: ServerHandle, mode: str) -> None:
    assert mariadb_10_11.tls_ca is not None
    account = user_or_skip(mariadb_10_11, "native")
    async with await _whoami(mariadb_10_11, account.name, account.password, tls_mode=mode,
                             tls_ca=mariadb_10_11.tls_ca) as conn:
        assert conn.tls_trust == "ca" and conn.is_secure


async def test_tls_verify_fails_without_the_ca(mariadb_10_11: ServerHandle) -> None:
    account = user_or_skip(mariadb_10_11, "native")
    with pytest.raises(TlsError):
        await Connection.open(_options(mariadb_10_11, account.name, account.password,
                                       tls_mode="verify-ca"))
    # 10.11 has no zero-config TLS: an unverifiable certificate off loopback is refused.
    with pytest.raises(TlsError):
        await Connection.open(_options(mariadb_10_11, account.name, account.password,
                                       tls_mode="required", trust_loopback=False))


async def test_tls_required_against_server_without_tls(server_factory) -> None:  # type: ignore[no-untyped-def]
    server: ServerHandle = server_factory.start("mariadb-10.11", extra_args=["--skip-ssl"],
                                                name="auth-no-tls")
    with pytest.raises(TlsError) as info:
        await Connection.open(_options(server, "root", "", tls_mode="required"))
    assert "does not offer TLS" in str(info.value)
    async with await _whoami(server, "root", "") as conn:  # preferred: plain TCP
        assert not conn.is_tls


# --- caching_sha2_password / sha256_password (MySQL 9.7) ------------------------------------------

SHA2 = "IDENTIFIED WITH caching_sha2_password BY '{pw}'"


async def test_caching_sha2_full_path_refused_on_plain_tcp(mysql_9_7: ServerHandle) -> None:
    password = "c" + secrets.token_hex(8)
    name = _fresh_user(mysql_9_7, SHA2, password)
    with pytest.raises(InsecureTransport):
        await Connection.open(_options(mysql_9_7, name, password, tls_mode="disabled"))


async def test_caching_sha2_rsa_fetched_then_fast_path(mysql_9_7: ServerHandle) -> None:
    password = "c" + secrets.token_hex(8)
    name = _fresh_user(mysql_9_7, SHA2, password)
    async with await _whoami(mysql_9_7, name, password, tls_mode="disabled",
                             get_server_public_key=True) as conn:
        assert conn.auth_plugin == "caching_sha2_password" and not conn.is_mariadb
    # Now cached: the fast path needs neither a key nor a safe channel.
    async with await _whoami(mysql_9_7, name, password, tls_mode="disabled"):
        pass


async def test_caching_sha2_rsa_pinned_key(mysql_9_7: ServerHandle) -> None:
    rows = mysql_9_7.sql("SHOW STATUS LIKE 'Caching_sha2_password_rsa_public_key'")
    pem = rows[0][1]
    assert pem and "BEGIN PUBLIC KEY" in pem
    password = "c" + secrets.token_hex(8)
    name = _fresh_user(mysql_9_7, SHA2, password)
    async with await _whoami(mysql_9_7, name, password, tls_mode="disabled",
                             rsa_public_key=(pem.strip() + "\n").encode()):
        pass


async def test_caching_sha2_over_verified_tls(mysql_9_7: ServerHandle) -> None:
    password = "c" + secrets.token_hex(8)
    name = _fresh_user(mysql_9_7, SHA2, password)
    async with await _whoami(mysql_9_7, name, password, tls_mode="verify-ca",
                             tls_ca=_mysql_ca(mysql_9_7)) as conn:
        assert conn.tls_trust == "ca"


@pytest.mark.parametrize("mode", [None, "preferred", "required"])
async def test_caching_sha2_full_path_over_unverified_loopback_tls(
        mysql_9_7: ServerHandle, mode: str | None) -> None:
    # A new account is not in the server's cache: the full path, the password in clear inside
    # TLS as MySQL expects (an RSA-encrypted one would get "Access denied").
    password = "c" + secrets.token_hex(8)
    name = _fresh_user(mysql_9_7, SHA2, password)
    async with await _whoami(mysql_9_7, name, password, tls_mode=mode) as conn:
        assert conn.is_tls and conn.tls_trust == "unverified-loopback"
    mysql_9_7.sql("FLUSH PRIVILEGES")  # empties the cache: the full path again
    async with await _whoami(mysql_9_7, name, password, tls_mode=mode,
                             rsa_public_key=b"not used inside TLS"):
        pass


async def test_caching_sha2_unverified_remote_tls_is_refused_before_any_password(
        mysql_9_7: ServerHandle) -> None:
    # As for a remote host: unverified TLS needs a zero-config fingerprint, which MySQL never
    # gives, so binlake stops at the plugin switch, before the password could be sent.
    password = "c" + secrets.token_hex(8)
    name = _fresh_user(mysql_9_7, SHA2, password)
    with pytest.raises(TlsError, match="configure a CA file"):
        await Connection.open(_options(mysql_9_7, name, password, tls_mode="required",
                                       trust_loopback=False))


async def test_caching_sha2_over_unix_socket(mysql_9_7: ServerHandle) -> None:
    password = "c" + secrets.token_hex(8)
    name = _fresh_user(mysql_9_7, SHA2, password)
    async with await _whoami(mysql_9_7, name, password,
                             unix_socket=mysql_9_7.socket) as conn:
        assert conn.is_unix_socket and not conn.is_tls and conn.is_secure


async def test_repl_account_over_unix_socket(mysql_9_7: ServerHandle) -> None:
    account = user_or_skip(mysql_9_7, "repl")
    async with await _whoami(mysql_9_7, account.name, account.password,
                             unix_socket=mysql_9_7.socket):
        pass


async def test_sha256_password(mysql_9_7: ServerHandle) -> None:
    account = user_or_skip(mysql_9_7, "sha256")
    async with await _whoami(mysql_9_7, account.name, account.password, tls_mode="verify-ca",
                             tls_ca=_mysql_ca(mysql_9_7)) as conn:
        assert conn.auth_plugin == "sha256_password"
    async with await _whoami(mysql_9_7, account.name, account.password, tls_mode="disabled",
                             get_server_public_key=True):
        pass
    # unverified loopback TLS (the default tls_mode): in clear inside TLS, as MySQL expects
    async with await _whoami(mysql_9_7, account.name, account.password) as conn:
        assert conn.tls_trust == "unverified-loopback"


# --- wrong password, typed values, on every flavor --------------------------------------------------

FLAVORS = ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"]


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_wrong_password(flavor: str, request: pytest.FixtureRequest) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    account = user_or_skip(server, "repl")
    with pytest.raises(AccessDenied) as info:
        await Connection.open(_options(server, account.name, account.password + "wrong",
                                       unix_socket=server.socket))
    assert info.value.code == 1045
    assert account.password not in str(info.value)


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_query_typed_values(flavor: str, request: pytest.FixtureRequest) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    account = user_or_skip(server, "repl")
    async with await Connection.open(_options(server, account.name, account.password,
                                              unix_socket=server.socket)) as conn:
        result = await conn.query_result(
            "SELECT 42 AS i, -1.5e3 AS d, CAST('12.30' AS DECIMAL(6,2)) AS n, 'héllo' AS s, "
            "NULL AS z, DATE '2024-02-29' AS dt, X'00FF' AS b, @@server_id AS sid")
        assert result.column_names == ["i", "d", "n", "s", "z", "dt", "b", "sid"]
        (row,) = result.rows
        assert row[0] == "42" and float(str(row[1])) == -1500.0 and row[2] == "12.30"
        assert row[3] == "héllo" and row[4] is None and row[5] == "2024-02-29"
        assert row[6] == b"\x00\xff" and row[7] == str(server.server_id)
        assert await conn.execute("DO 1") is not None
        await conn.ping()
        assert conn.server_version and conn.is_mariadb == flavor.startswith("mariadb")


async def test_tls_client_certificate(mariadb_10_11: ServerHandle) -> None:
    assert mariadb_10_11.tls_ca is not None
    tls_dir = os.path.dirname(mariadb_10_11.tls_ca)
    password = "x" + secrets.token_hex(8)
    name = _fresh_user(mariadb_10_11, "IDENTIFIED BY '{pw}' REQUIRE X509", password)
    common: dict[str, object] = dict(tls_mode="verify-identity", tls_ca=mariadb_10_11.tls_ca)
    with pytest.raises(AccessDenied):
        await Connection.open(_options(mariadb_10_11, name, password, **common))
    async with await _whoami(mariadb_10_11, name, password,
                             tls_cert=os.path.join(tls_dir, "client-cert.pem"),
                             tls_key=os.path.join(tls_dir, "client-key.pem"), **common):
        pass


# --- the daemon keeps logging in across cache flushes and restarts (MySQL 9.7) -------------------

_AUTH_LINE = re.compile(r"authenticated as (\S+) with (\S+)(?: \(([^)]+)\))? over (.*)")
CLEAR = "full path, the password in clear"


def test_daemon_default_tls_mode_survives_flush_privileges_and_restart(
        mysql_9_7: ServerHandle, tmp_path: Path) -> None:
    """``binlake run`` (a subprocess, default tls_mode, stop_at_end) as a caching_sha2_password
    and a sha256_password account: the first login takes the full path (the password in clear
    inside loopback TLS), the next the fast path, and after FLUSH PRIVILEGES and after a server
    restart — both empty the cache — the full path again; every run lands exactly the rows."""
    server = mysql_9_7
    plugins = ["caching_sha2_password"]
    if server.sql("SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = "
                  "'sha256_password' AND PLUGIN_STATUS = 'ACTIVE'")[0][0] == "1":
        plugins.append("sha256_password")
    accounts = []
    for plugin in plugins:
        db = unique_db("auth_daemon")
        password = "d" + secrets.token_hex(8)
        name = _fresh_user(server, f"IDENTIFIED WITH {plugin} BY '{{pw}}'", password)
        server.sql(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{name}'@'%';"
                   f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY)")
        settings = daemon_settings(server, tmp_path / db, db, overrides={
            "server": {"user": name}, "replica": {"stop_at_end": True},
            "log": {"level": "debug"}})
        assert "tls_mode" not in settings["server"]  # the default: auto (preferred on loopback)
        daemon = DaemonProcess(tmp_path, settings, password=password, name=db)
        accounts.append((plugin, name, password, db, daemon))
    next_id = 0

    def insert_and_run(rows: int) -> dict[str, str]:
        """Insert ``rows`` rows per account, run each daemon to the end; the auth path per plugin."""
        nonlocal next_id
        paths: dict[str, str] = {}
        for plugin, name, password, db, daemon in accounts:
            values = ", ".join(f"({next_id + i})" for i in range(1, rows + 1))
            server.sql(f"INSERT INTO {db}.t VALUES {values}")
            assert daemon.start().wait(60) == 0, daemon.run_stderr()[-3000:]
            logins = _AUTH_LINE.findall(daemon.run_stderr())
            assert logins, daemon.run_stderr()[-3000:]
            assert {(user, used, over) for user, used, _path, over in logins} == {
                (name, plugin, "TLS (unverified-loopback)")}
            paths[plugin] = logins[0][2] or CLEAR  # sha256 has one path only
            landed = [r["id"] for r in read_lake(tmp_path / db, db).rows["t"]]
            assert landed == list(range(1, next_id + rows + 1)), landed
            daemon.assert_secret_never_shown(password)
        next_id += rows
        return paths

    everything_full = dict.fromkeys(plugins, CLEAR)
    assert insert_and_run(3) == everything_full  # a new account: not cached yet
    assert insert_and_run(2) == {**everything_full, "caching_sha2_password": "fast path"}
    server.sql("FLUSH PRIVILEGES")
    assert insert_and_run(2) == everything_full
    server.restart()
    assert insert_and_run(1) == everything_full
    assert next_id == 8
