"""Failover without servers: identities, divergence arithmetic, the host list, and the sink's
seeded GTID state, recorded server and recorded divergences (servers: integration/test_failover)."""

from __future__ import annotations

import pytest

from protocol.binlog.coltypes import FieldType as T
from protocol.errors import GtidDiverged
from protocol.failover import (
    ServerIdentity,
    describe_mariadb_missing,
    mariadb_fork,
    mariadb_missing,
    mysql_fork,
    mysql_missing,
)
from protocol.gtid import GtidPosition, GtidSet
from protocol.replication import ServerFacts
from replica.config import ConfigError, load_config
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col

ENV = {"BINLAKE_REPLICA_SERVER_ID": "42"}
UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "4e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_identity_is_server_uuid_on_mysql_and_server_id_on_mariadb() -> None:
    a = ServerIdentity("mariadb", 5000, gtid_domain_id=0, address="db1:3306")
    assert a.same_server(ServerIdentity("mariadb", 5000, address="db1.example:3306"))
    assert not a.same_server(ServerIdentity("mariadb", 5001, address="db1:3306"))
    assert not a.same_server(ServerIdentity("mysql", 5000))
    m = ServerIdentity("mysql", 1, server_uuid=UUID_A)
    assert m.same_server(ServerIdentity("mysql", 2, server_uuid=UUID_A))
    assert not m.same_server(ServerIdentity("mysql", 1, server_uuid=UUID_B))
    assert ServerIdentity.from_json(a.to_json()) == a
    assert str(a) == "mariadb server_id 5000, gtid_domain_id 0 at db1:3306"


def test_mariadb_missing_names_the_sequence_numbers_per_domain() -> None:
    lake = GtidPosition.parse("0-1-105,1-7-9,2-3-4")
    server = GtidPosition.parse("0-1-100,1-8-20")
    missing = mariadb_missing(lake, server)
    assert set(missing) == {0, 2}
    assert describe_mariadb_missing(missing) == (
        "domain 0: sequence numbers 101..105 (the lake's last is 0-1-105; the server's "
        "0-1-100); domain 2: sequence numbers 1..4 (the lake's last is 2-3-4; the server's "
        "nothing in that domain)")
    assert mariadb_missing(GtidPosition.parse("0-1-100"), server) == {}


def test_mariadb_fork_is_where_both_histories_agree() -> None:
    lake = GtidPosition.parse("0-1-105")
    # the server is behind and wrote nothing since: its own last GTID
    assert str(mariadb_fork(lake, GtidPosition.parse("0-1-100"), GtidPosition())) == "0-1-100"
    # the server holds the lake's GTIDs: the fork is the lake's own state
    assert str(mariadb_fork(lake, GtidPosition.parse("0-2-110"), GtidPosition())) == "0-1-105"
    # the dump refused domain 0: the server applied up to 100 as a replica, then wrote 101..
    refused = frozenset({0})
    assert str(mariadb_fork(lake, GtidPosition.parse("0-2-110"),
                            GtidPosition.parse("0-1-100"), refused)) == "0-1-100"
    # ... and with no replica position no fork can be told
    assert mariadb_fork(lake, GtidPosition.parse("0-2-110"), GtidPosition(), refused) is None
    # a domain the server never had is left out (it has nothing of it to send)
    two = GtidPosition.parse("0-1-105,5-1-3")
    assert str(mariadb_fork(two, GtidPosition.parse("0-1-100"), GtidPosition())) == "0-1-100"


def test_mysql_missing_and_fork_are_set_differences() -> None:
    lake = GtidSet.parse(f"{UUID_A}:1-105")
    executed = GtidSet.parse(f"{UUID_A}:1-100,{UUID_B}:1-3")
    assert str(mysql_missing(lake, executed)) == f"{UUID_A}:101-105"
    assert str(mysql_fork(lake, executed)) == f"{UUID_A}:1-100"
    assert not mysql_missing(GtidSet.parse(f"{UUID_A}:1-100"), executed)


def test_gtid_diverged_raised_by_binlake_has_no_server_code() -> None:
    exc = GtidDiverged(0, "", "the server lacks 0-1-101..105", missing="0-1-101..105")
    assert str(exc) == "the server lacks 0-1-101..105" and exc.missing == "0-1-101..105"
    from_server = GtidDiverged(1236, "HY000", "diverged")
    assert str(from_server) == "(1236, 'HY000') diverged" and from_server.missing == ""


def test_server_facts_say_whether_gtids_can_be_used() -> None:
    mariadb = ServerFacts.from_variables({"server_id": "1", "log_bin": "ON",
                                          "gtid_binlog_pos": "", "gtid_domain_id": "3",
                                          "read_only": "OFF"})
    assert mariadb.has_gtids and mariadb.gtid_domain_id == 3 and not mariadb.read_only
    mysql_off = ServerFacts.from_variables({"server_id": "1", "gtid_mode": "OFF",
                                            "server_uuid": UUID_A, "read_only": "ON"})
    assert not mysql_off.has_gtids and mysql_off.read_only
    assert ServerFacts.from_variables({"server_id": "1", "gtid_mode": "ON"}).has_gtids


def test_server_host_takes_a_list_of_candidates(tmp_path) -> None:
    path = tmp_path / "binlake.toml"
    path.write_text('[server]\nhost = ["db1:3307", "db2", "[::1]:3308"]\nport = 3306\n')
    config = load_config(str(path), env=ENV)
    assert config.server.host == "db1:3307,db2,[::1]:3308"
    assert config.server.candidates == (("db1", 3307), ("db2", 3306), ("::1", 3308))
    assert config.server.following("db2", 3306).candidates == (("db2", 3306),)
    from_env = load_config(env={**ENV, "BINLAKE_SERVER_HOST": "db1:1,db2:2"})
    assert from_env.server.candidates == (("db1", 1), ("db2", 2))
    assert load_config(env=ENV).server.candidates == (("127.0.0.1", 3306),)
    assert load_config(env={**ENV, "BINLAKE_SERVER_HOST": "::1"}).server.candidates == (
        ("::1", 3306),)


@pytest.mark.parametrize("host, message", [
    ("db1:x", "is not host or host:port"),
    ("db1:70000", "a port must be between 1 and 65535"),
])
def test_bad_candidates_are_config_errors(host: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={**ENV, "BINLAKE_SERVER_HOST": host})
    assert info.value.key == "server.host" and message in str(info.value)


def test_on_divergence_is_stop_or_continue() -> None:
    assert load_config(env=ENV).start.on_divergence == "stop"
    config = load_config(env={**ENV, "BINLAKE_START_ON_DIVERGENCE": "continue"})
    assert config.start.on_divergence == "continue"
    with pytest.raises(ConfigError):
        load_config(env={**ENV, "BINLAKE_START_ON_DIVERGENCE": "ignore"})


def _one_transaction(sink: ParquetSink, b: StreamBuilder) -> None:
    users = b.table("shop", "users", [col(0, T.LONGLONG, "id", pk=True)])
    for item in [b.begin(), b.insert(users, [(b.gtid_seq,)]), b.commit()]:
        sink.handle(item)


def test_a_seeded_state_covers_the_lake_start_and_skips_what_it_covers(tmp_path) -> None:
    lake = str(tmp_path / "lake")
    sink = ParquetSink(lake)
    assert sink.open() is None and sink.seedable
    sink.seed_gtid_state("0-1-10", "mariadb")
    assert not sink.seedable and sink.gtid_seed == "0-1-10"
    b = StreamBuilder(first_gtid_seq=10)
    _one_transaction(sink, b)  # 0-1-10: before the start, covered by the seed
    _one_transaction(sink, b)  # 0-1-11 lands
    server = ServerIdentity("mariadb", 1, gtid_domain_id=0, address="db1:3306")
    sink.note_server(server)
    checkpoint = sink.flush()
    assert checkpoint is not None and checkpoint.seq == 1
    assert checkpoint.gtid_state == "0-1-11" and checkpoint.gtid_state_complete
    assert checkpoint.server == server and checkpoint.position is not None
    sink.close()

    again = ParquetSink(lake)
    reopened = again.open()
    assert reopened is not None and reopened.server == server and again.gtid_state_complete
    assert not again.seedable
    with pytest.raises(Exception, match="after transactions were landed"):
        again.seed_gtid_state("0-1-1", "mariadb")
    # another server: the old binlog position is void from now on
    other = ServerIdentity("mariadb", 2, gtid_domain_id=0, address="db2:3306")
    again.note_server(other)
    moved = again.flush()
    assert moved is not None and moved.server == other and moved.position is None
    assert moved.seq == 1 and moved.gtid_state == "0-1-11"
    again.close()


def test_a_divergence_gone_past_is_recorded_and_the_state_is_the_fork(tmp_path) -> None:
    lake = str(tmp_path / "lake")
    sink = ParquetSink(lake)
    sink.open()
    sink.seed_gtid_state(f"{UUID_A}:1-5", "mysql")
    b = StreamBuilder(flavor="mysql", first_gtid_seq=6, source_uuid=UUID_A)
    _one_transaction(sink, b)
    _one_transaction(sink, b)
    assert sink.flush().gtid_state == f"{UUID_A}:1-7"
    record = {"lost": f"{UUID_A}:7", "resumed_from": f"{UUID_A}:1-6"}
    sink.diverge(f"{UUID_A}:1-6", record)
    checkpoint = sink.durable_position
    assert checkpoint is not None and checkpoint.gtid_state == f"{UUID_A}:1-6"
    assert checkpoint.divergences == (record,)
    b2 = StreamBuilder(flavor="mysql", first_gtid_seq=1, source_uuid=UUID_B)
    _one_transaction(sink, b2)
    assert sink.flush().gtid_state == f"{UUID_A}:1-6,{UUID_B}:1"
    sink.close()
    reopened = ParquetSink(lake)
    assert reopened.open().divergences == (record,)
    reopened.close()


def test_the_lag_forgets_the_old_primarys_positions() -> None:
    from protocol.binlog.model import BinlogPosition
    from replica.observe.lag import BinlogFile, Lag, LagTracker, ServerEnd

    received: list[BinlogPosition | None] = [None]
    lag = LagTracker(lambda: (received[0], True), fresh_for=5.0, clock=lambda: 100.0,
                     wall=lambda: 1_000.0)
    lag.set_connected(True)
    # the old primary's file sorts after the new one's: compared, it would claim caught up
    lag.landed(BinlogPosition("mysql-bin.000009", 500), 990_000_000, "0-1-105")
    lag.server_changed()
    received[0] = BinlogPosition("mysql-bin.000002", 100)
    files = (BinlogFile("mysql-bin.000002", 4000),)
    lag.server_end(ServerEnd("mariadb", 1_000_000_000, "0-2-110",
                             BinlogPosition("mysql-bin.000002", 4000), files))
    assert lag.measure() == Lag(False, 10.0, None, 3900)


def test_a_durable_position_acks_only_on_its_own_server() -> None:
    a = ServerIdentity("mariadb", 5000)
    assert a.describes(ServerFacts.from_variables({"server_id": "5000"}))
    assert not a.describes(ServerFacts.from_variables({"server_id": "5001"}))
    m = ServerIdentity("mysql", 1, server_uuid=UUID_A)
    assert not m.describes(ServerFacts.from_variables({"server_id": "1",
                                                       "server_uuid": UUID_B}))


def test_a_mariadb_lake_begun_unseeded_is_completed_per_domain(tmp_path) -> None:
    lake = str(tmp_path / "lake")
    sink = ParquetSink(lake)
    sink.open()
    b = StreamBuilder(first_gtid_seq=5)
    _one_transaction(sink, b)
    assert sink.flush().gtid_state == "0-1-5" and not sink.gtid_state_complete
    _one_transaction(sink, b)  # 0-1-6: handed over, not flushed
    sink.complete_gtid_state("0-1-5,3-9-40")
    assert sink.gtid_state_complete
    checkpoint = sink.flush()
    assert checkpoint is not None and checkpoint.gtid_state == "0-1-6,3-9-40"
    assert checkpoint.gtid_state_complete
    with pytest.raises(Exception, match="complete or a MySQL state"):
        sink.complete_gtid_state("0-1-5")
    sink.close()
