"""No password in any output, on real servers: the password-bearing statements of MariaDB 10.11
and 11.8 and MySQL 9.7 are run, then the lake's DDL log, ``binlake decode`` of the server's binlog in both
formats and the daemon's debug-level log are searched for every password (and, on MySQL, for the
password hashes its binlog carries instead: ``$A$005$…``, the prefix of a caching_sha2 hash).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.handle import ServerHandle

from .daemon_process import REPO, DaemonProcess, daemon_settings, trusted_tls, unique_db

pytestmark = pytest.mark.server


def _secret(tag: str) -> str:
    return f"Pw{tag}{secrets.token_hex(4)}"


def _mariadb_statements(db: str, pw: dict[str, str]) -> list[str]:
    u = f"s{secrets.token_hex(3)}"
    return [
        # several users at once, both quote styles, an escaped quote, a comment
        f"CREATE USER '{u}a'@'%' IDENTIFIED BY '{pw['a']}', '{u}b'@'%' IDENTIFIED BY "
        f"\"{pw['b']}\", '{u}c'@'%' IDENTIFIED /* why */ BY '{pw['c']}''q'",
        f"ALTER USER '{u}a'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{pw['d']}') "
        f"OR unix_socket",
        f"SET PASSWORD FOR '{u}b'@'%' = PASSWORD('{pw['e']}')",
        f"GRANT SELECT ON {db}.* TO '{u}c'@'%' IDENTIFIED BY '{pw['f']}'",
        f"CREATE SERVER {u}srv FOREIGN DATA WRAPPER mysql OPTIONS (USER 'x', PASSWORD '{pw['g']}', "
        "HOST '127.0.0.1')",
        f"ALTER SERVER {u}srv OPTIONS (PASSWORD '{pw['h']}')",
        f"CREATE TABLE {db}.fed (a INT) CONNECTION='mysql://x:{pw['i']}@127.0.0.1:1/{db}/t'",
        f"CREATE OR REPLACE USER '{u}a'@'%' IDENTIFIED BY 'it\\'s{pw['j']}'",
        f"DROP SERVER {u}srv",
        f"DROP USER '{u}a'@'%', '{u}b'@'%', '{u}c'@'%'",
    ]


def _mysql_statements(db: str, pw: dict[str, str]) -> list[str]:
    u = f"s{secrets.token_hex(3)}"
    return [
        f"CREATE USER '{u}a'@'%' IDENTIFIED BY '{pw['a']}', '{u}b'@'%' IDENTIFIED WITH "
        f"caching_sha2_password BY \"{pw['b']}\"",
        f"ALTER USER '{u}a'@'%' IDENTIFIED /* c */ BY '{pw['c']}''q'",
        f"SET PASSWORD FOR '{u}b'@'%' = '{pw['d']}'",
        f"CREATE USER '{u}s'@'%' IDENTIFIED WITH sha256_password BY '{pw['e']}'"
        if pw.get("sha256") else f"CREATE USER '{u}s'@'%' IDENTIFIED BY '{pw['e']}'",
        f"CREATE SERVER {u}srv FOREIGN DATA WRAPPER mysql OPTIONS (USER 'x', PASSWORD '{pw['g']}', "
        "HOST '127.0.0.1')",
        f"ALTER SERVER {u}srv OPTIONS (PASSWORD '{pw['h']}')",
        f"CREATE TABLE {db}.fed (a INT) CONNECTION='mysql://x:{pw['i']}@127.0.0.1:1/{db}/t'",
        f"DROP SERVER {u}srv",
        f"DROP USER '{u}a'@'%', '{u}b'@'%', '{u}s'@'%'",
    ]


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def test_passwords_never_in_any_output(flavor: str, request: pytest.FixtureRequest,
                                        tmp_path: Path) -> None:
    server: ServerHandle = request.getfixturevalue(flavor)
    db = unique_db("secrets")
    lake = tmp_path / "lake"
    settings = daemon_settings(server, lake, db, overrides={
        "replica": {"stop_at_end": True}, "log": {"level": "debug"},
        "filter": {"include": []}, "server": trusted_tls(server)})
    start_file, start_pos = settings["start"]["file"], settings["start"]["pos"]
    pw = {k: _secret(k) for k in "abcdefghij"}
    server.sql(f"CREATE DATABASE {db}")
    if server.is_mariadb:
        statements = _mariadb_statements(db, pw)
        for plugin in ("ed25519", "parsec"):  # where the test bed installed them
            if plugin not in server.missing_users:
                u, pw[plugin] = f"{plugin[0]}{secrets.token_hex(3)}", _secret(plugin)
                statements += [f"CREATE USER '{u}'@'%' IDENTIFIED VIA {plugin} USING "
                               f"PASSWORD('{pw[plugin]}')", f"DROP USER '{u}'@'%'"]
    else:
        plugins = server.sql("SELECT PLUGIN_NAME FROM information_schema.PLUGINS "
                             "WHERE PLUGIN_STATUS = 'ACTIVE' AND PLUGIN_NAME = 'sha256_password'")
        pw["sha256"] = "yes" if plugins else ""
        statements = _mysql_statements(db, pw)
        # CREATE USER … IDENTIFIED BY RANDOM PASSWORD: the server makes one up and shows it once
        u = f"r{secrets.token_hex(3)}"
        rows = server.sql(f"CREATE USER '{u}'@'%' IDENTIFIED BY RANDOM PASSWORD")
        pw["random"] = str(rows[0][2])
        statements.append(f"DROP USER '{u}'@'%'")
    for statement in statements:
        server.sql(statement, database=db)
    passwords = [v for k, v in pw.items() if k != "sha256" and v]

    daemon = DaemonProcess(tmp_path, settings, password=server.users["repl"].password)
    daemon.start()
    assert daemon.wait(120) == 0, daemon.stderr()[-3000:]

    ddl_log = "".join(p.read_text() for p in sorted(lake.glob("_ddl/*/*.jsonl")))
    entries = [json.loads(line) for line in ddl_log.splitlines()]
    account = [e["query"] for e in entries
               if any(w in e["query"].upper() for w in ("IDENTIFIED", "PASSWORD", "CONNECTION"))]
    # every password-bearing statement landed in the DDL log, redacted (DROPs carry none)
    # (neither server writes CREATE/ALTER/DROP SERVER to its binlog; the unit table covers them)
    bearing = len([s for s in statements if not s.startswith(("DROP", "CREATE SERVER",
                                                                 "ALTER SERVER"))])
    bearing += "random" in pw
    assert len(account) == bearing, account
    assert all("<redacted>" in q for q in account), account

    decode = [sys.executable, "-m", "replica.cli", "decode", "--start-position", str(start_pos)]
    files = [f for f in server.binlog_files() if Path(f).name >= start_file]
    outputs = {"ddl log": ddl_log, "daemon log": daemon.stderr() + daemon.stdout()}
    for fmt in ("text", "open-protocol"):
        proc = subprocess.run([*decode, "--format", fmt, *files], capture_output=True,
                              text=True, cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs[f"decode {fmt}"] = proc.stdout + proc.stderr
        redacted_lines = [line for line in proc.stdout.splitlines() if "<redacted>" in line]
        assert len(redacted_lines) == bearing, redacted_lines
    # the debug log shows every DDL statement, the password-bearing ones redacted
    debug = [line for line in outputs["daemon log"].splitlines()
             if " DEBUG " in line and "<redacted>" in line]
    assert len(debug) == bearing, debug
    for name, text in outputs.items():
        for password in passwords:
            assert password not in text, f"a password in the {name}"
        assert "$A$005$" not in text, f"a caching_sha2 hash in the {name}"
