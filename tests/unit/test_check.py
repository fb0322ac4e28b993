"""binlake check without a server: SHOW GRANTS parsing and the checklist's verdicts."""

from __future__ import annotations

import pytest

from replica.commands.check import (
    CheckResult,
    ServerReport,
    Status,
    evaluate,
    parse_grants,
    print_results,
)
from replica.config import Config, ReplicaConfig, SemiSyncConfig, ServerConfig, StartConfig

GOOD = {"server_id": "1", "log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL", "binlog_checksum": "CRC32", "have_ssl": "YES",
        "gtid_binlog_state": "0-1-100,1-1-7", "version": "10.11.19-MariaDB"}
MARIADB_GRANTS = ["GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `repl`@`%` "
                  "IDENTIFIED BY PASSWORD '*0123456789ABCDEF0123456789ABCDEF01234567'"]


def _report(**overrides: object) -> ServerReport:
    values: dict[str, object] = dict(
        mariadb=True, variables=dict(GOOD), grants=list(MARIADB_GRANTS), replica_ids=[],
        binary_logs=[("mysql-bin.000003", 1000), ("mysql-bin.000004", 500)],
        earliest_gtid_state="0-1-50", unix_socket=True, user="repl")
    values.update(overrides)
    return ServerReport(**values)  # type: ignore[arg-type]


def _config(**sections: object) -> Config:
    sections.setdefault("replica", ReplicaConfig(server_id=99))
    return Config(**sections)  # type: ignore[arg-type]


def _named(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


@pytest.mark.parametrize(("lines", "privileges", "roles"), [
    (MARIADB_GRANTS, {"SELECT", "REPLICATION SLAVE", "BINLOG MONITOR"}, False),
    (["GRANT USAGE ON *.* TO `u`@`%`",
      "GRANT REPLICATION SLAVE,REPLICATION CLIENT ON *.* TO `u`@`%`",
      "GRANT ALL PRIVILEGES ON `shop`.* TO `u`@`%`"],
     {"USAGE", "REPLICATION SLAVE", "REPLICATION CLIENT"}, False),
    (["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"],
     {"ALL PRIVILEGES"}, False),
    (["GRANT ALL ON *.* TO 'root'@'%'"], {"ALL PRIVILEGES"}, False),
    (["GRANT USAGE ON *.* TO `u`@`%`", "GRANT `replication_role`@`%` TO `u`@`%`"],
     {"USAGE"}, True),
    (["grant replication   slave on *.* to u@'%'"], {"REPLICATION SLAVE"}, False),
])
def test_parse_grants(lines: list[str], privileges: set[str], roles: bool) -> None:
    assert parse_grants(lines) == (frozenset(privileges), roles)


def test_everything_fine() -> None:
    results = evaluate(_config(), _report())
    assert all(r.status in (Status.OK, Status.SKIP) for r in results), results


@pytest.mark.parametrize(("variable", "value", "name", "status"), [
    ("log_bin", "OFF", "binlog", Status.FAIL),
    ("binlog_format", "STATEMENT", "binlog_format", Status.FAIL),
    ("binlog_format", "MIXED", "binlog_format", Status.FAIL),
    ("binlog_row_image", "MINIMAL", "binlog_row_image", Status.WARN),
    ("binlog_row_image", "NOBLOB", "binlog_row_image", Status.WARN),
    ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata", Status.WARN),
    ("binlog_checksum", "NONE", "binlog_checksum", Status.WARN),
])
def test_variables(variable: str, value: str, name: str, status: Status) -> None:
    variables = dict(GOOD, **{variable: value})
    result = _named(evaluate(_config(), _report(variables=variables)))[name]
    assert result.status is status
    assert value in result.detail
    assert result.fix


def test_missing_privileges_mysql_wording() -> None:
    report = _report(mariadb=False, grants=["GRANT SELECT ON *.* TO `u`@`%`"])
    result = _named(evaluate(_config(), report))["privileges"]
    assert result.status is Status.FAIL
    assert "REPLICATION SLAVE and REPLICATION CLIENT" in result.detail
    assert result.fix is not None and result.fix.startswith(
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user")
    assert "IDENTIFIED" not in repr(evaluate(_config(), _report()))  # no hash in output


def test_replication_client_counts_as_binlog_monitor() -> None:
    report = _report(grants=["GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO u@'%'"])
    assert _named(evaluate(_config(), report))["privileges"].status is Status.OK


def test_roles_are_mentioned() -> None:
    report = _report(grants=["GRANT USAGE ON *.* TO u@'%'", "GRANT `r`@`%` TO `u`@`%`"])
    assert "roles" in _named(evaluate(_config(), report))["privileges"].detail


def test_server_id_conflicts() -> None:
    named = _named(evaluate(_config(replica=ReplicaConfig(server_id=1)), _report()))
    assert named["server_id"].status is Status.FAIL
    report = _report(replica_ids=[(99, "10.0.0.5:3306")])
    named = _named(evaluate(_config(), report))
    assert named["server_id"].status is Status.FAIL
    assert "10.0.0.5:3306" in named["server_id"].detail
    named = _named(evaluate(_config(), _report(replica_ids=None, replicas_error="denied")))
    assert named["server_id"].status is Status.WARN


def test_tls() -> None:
    remote = _config(server=ServerConfig(host="db.example.com"))
    named = _named(evaluate(remote, _report(unix_socket=False)))
    assert named["tls"].status is Status.FAIL
    named = _named(evaluate(_config(), _report(unix_socket=False)))
    assert named["tls"].status is Status.WARN  # loopback
    named = _named(evaluate(remote, _report(unix_socket=False, tls=True, tls_trust="ca")))
    assert named["tls"].status is Status.OK


@pytest.mark.parametrize(("start", "status", "words"), [
    (StartConfig(from_="file", file="mysql-bin.000004", pos=100), Status.OK, "is in"),
    (StartConfig(from_="file", file="mysql-bin.000004", pos=501), Status.FAIL, "beyond"),
    (StartConfig(from_="file", file="mysql-bin.000001", pos=4), Status.FAIL, "purged"),
    (StartConfig(from_="file", file="other-bin.000001", pos=4), Status.FAIL, "no binlog"),
    (StartConfig(from_="file"), Status.FAIL, "start.file is not set"),
    (StartConfig(from_="gtid", gtid="0-1-60"), Status.OK, "is in"),
    (StartConfig(from_="gtid", gtid="0-1-50"), Status.OK, "is in"),
    (StartConfig(from_="gtid", gtid="0-1-49"), Status.FAIL, "purged"),
    (StartConfig(from_="gtid", gtid="0-1-101"), Status.FAIL, "ahead"),
    (StartConfig(from_="gtid", gtid="5-1-1"), Status.FAIL, "not in the server's binlog"),
    (StartConfig(from_="gtid", gtid="not a gtid"), Status.FAIL, "not a gtid"),
    (StartConfig(from_="earliest"), Status.OK, "mysql-bin.000003:4"),
    (StartConfig(from_="latest"), Status.OK, "latest"),
])
def test_start_position(start: StartConfig, status: Status, words: str) -> None:
    result = _named(evaluate(_config(start=start), _report()))["start position"]
    assert result.status is status, result
    assert words in result.detail


def test_checkpoint_wins_over_start_config() -> None:
    checkpoint = {"seq": 5, "binlog_file": "mysql-bin.000002", "binlog_pos": 4,
                  "gtid_flavor": "mariadb"}
    result = _named(evaluate(_config(start=StartConfig(from_="latest")), _report(),
                             checkpoint))["start position"]
    assert result.status is Status.FAIL and "checkpoint" in result.detail
    checkpoint = {"seq": 5, "binlog_file": "mysql-bin.000004", "binlog_pos": 4,
                  "gtid_flavor": "mysql"}
    result = _named(evaluate(_config(), _report(), checkpoint))["start position"]
    assert result.status is Status.FAIL and "mysql server" in result.detail


def test_mysql_gtid_sets() -> None:
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    variables = dict(GOOD, gtid_purged=f"{uuid}:1-10", gtid_executed=f"{uuid}:1-100")
    report = _report(mariadb=False, variables=variables)
    for wanted, status in ((f"{uuid}:1-50", Status.OK), (f"{uuid}:1-5", Status.FAIL),
                           (f"{uuid}:1-200", Status.FAIL)):
        start = StartConfig(from_="gtid", gtid=wanted)
        assert _named(evaluate(_config(start=start), report))["start position"].status is status


def test_semi_sync() -> None:
    semi = _config(semi_sync=SemiSyncConfig(mode="ack-after-land"))
    assert _named(evaluate(semi, _report()))["semi_sync"].status is Status.FAIL  # no variable
    variables = dict(GOOD, rpl_semi_sync_master_enabled="OFF")
    assert _named(evaluate(semi, _report(variables=variables)))["semi_sync"].status is Status.WARN
    variables = dict(GOOD, rpl_semi_sync_master_enabled="ON")
    assert _named(evaluate(semi, _report(variables=variables)))["semi_sync"].status is Status.OK
    assert _named(evaluate(_config(), _report()))["semi_sync"].status is Status.SKIP


def test_printing() -> None:
    import io

    out = io.StringIO()
    print_results([CheckResult("binlog_format", Status.FAIL, "STATEMENT", "SET it"),
                   CheckResult("tls", Status.OK, "socket")], out)
    text = out.getvalue()
    assert "  FAIL  binlog_format  STATEMENT\n" in text
    assert "fix: SET it" in text
    assert "1 check(s) failed" in text


@pytest.mark.parametrize(("start", "checkpoint", "status"), [
    ("snapshot", None, Status.FAIL),  # a new lake's snapshot reads every table with SELECT
    ("snapshot", {"seq": 1}, Status.WARN),  # resuming: only later snapshots need it
    ("latest", None, Status.WARN),
])
def test_select_is_what_snapshots_need(start: str, checkpoint: dict[str, object] | None,
                                       status: Status) -> None:
    from dataclasses import replace

    config = _config()
    config = replace(config, start=replace(config.start, from_=start))
    report = _report(grants=["GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO u@'%'"])
    result = _named(evaluate(config, report, checkpoint))["privilege SELECT"]
    assert result.status is status
    assert "snapshot" in result.detail
    assert result.fix == "GRANT SELECT ON *.* TO the user (or on each database binlake lands)"
    granted = _named(evaluate(config, _report(), checkpoint))["privilege SELECT"]
    assert granted.status is Status.OK


@pytest.mark.parametrize(("metadata", "grants", "says"), [
    ("MINIMAL", MARIADB_GRANTS,
     "MINIMAL: the binlog names no columns and carries no ENUM/SET labels or keys; `binlake run` "
     "reads them from information_schema as the tables are now, so only rows written before a "
     "later ALTER of their table land with unnamed columns (col_1, col_2, …, with a warning)"),
    ("NO_LOG", ["GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `repl`@`%`",
                "GRANT SELECT ON `shop`.* TO `repl`@`%`"],
     "NO_LOG: the binlog names no columns and carries no ENUM/SET labels, keys, signedness or "
     "charsets; `binlake run` reads them from information_schema as the tables are now, so only "
     "rows written before a later ALTER of their table land with unnamed columns (col_1, col_2, "
     "…, with a warning)"),
    ("MINIMAL", ["GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `repl`@`%`"],
     "MINIMAL: the binlog names no columns and carries no ENUM/SET labels or keys; `binlake run` "
     "would read them from information_schema, where this user (no SELECT on any table) does not "
     "see the tables: columns land as col_1, col_2, …"),
])
def test_row_metadata_says_what_the_daemon_does(metadata: str, grants: list[str],
                                                says: str) -> None:
    report = _report(variables={**GOOD, "binlog_row_metadata": metadata}, grants=grants)
    line = _named(evaluate(_config(), report))["binlog_row_metadata"]
    assert (line.status, line.detail) == (Status.WARN, says)


def test_replicas_not_listable_is_one_info_line() -> None:
    report = _report(replica_ids=None, replicas_denied=True,
                     replicas_error="Access denied; you need (at least one of) the REPLICATION "
                                    "MASTER ADMIN privilege(s) for this operation")
    line = _named(evaluate(_config(), report))["server_id"]
    assert line.status is Status.INFO and line.fix is None
    assert line.detail.count("REPLICATION MASTER ADMIN") == 1
    other = _named(evaluate(_config(), _report(replica_ids=None, replicas_error="boom")))
    assert other["server_id"].status is Status.WARN
