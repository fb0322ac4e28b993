"""Replication commands, registration statements, dump-stream framing and error classification."""

from __future__ import annotations

import uuid

import pytest

from protocol import errors
from protocol.gtid import GtidPosition, GtidSet
from protocol.replication import (
    DUMP_END,
    DUMP_SEND_ANNOTATE_ROWS,
    DumpEvent,
    ServerFacts,
    binlog_dump,
    binlog_dump_gtid,
    check_server,
    dump_error,
    parse_dump_packet,
    register_slave,
    registration_statements,
    replica_uuid_for,
    semi_sync_ack,
    semi_sync_statements,
)


def hexbytes(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# Vectors from the MariaDB replication protocol documentation (seed 004), packet headers removed.
REGISTER_SLAVE = hexbytes("15 75 27 00 00 09 73 6c 61 76 65 5f 6e 5f 31 00 00 c9 5a"
                          "00 00 00 00 00 00 00 00")
BINLOG_DUMP = hexbytes("12 34 06 00 00 02 00 75 27 00 00") + b"mysql-bin.000034"
ACK = hexbytes("ef 4a 05 00 00 00 00 00 00") + b"mysql-bin.000034"
HEARTBEAT_SEMI_SYNC = hexbytes("""
    00 ef 00 00 00 00 00 1b d9 27 00 00 27 00 00 00 79 04 00 00 00 00 6d 79 73 71 6c 2d
    62 69 6e 2e 30 30 30 30 33 34 ed ef e1 f0""")
XID_SEMI_SYNC_ACK = hexbytes("""
    00 ef 01 17 d0 37 5a 10 d9 27 00 00 1f 00 00 00 4a 05 00 00 00 00 6f 00
    00 00 00 00 00 00 44 30 aa fc""")


def test_register_slave_vector():
    assert register_slave(10101, host="slave_n_1", port=23241) == REGISTER_SLAVE
    assert register_slave(7) == hexbytes("15 07000000 00 00 00 0000 00000000 00000000")
    with pytest.raises(ValueError):
        register_slave(0)
    with pytest.raises(ValueError):
        register_slave(1, host="h" * 256)


def test_register_slave_password_not_in_errors():
    with pytest.raises(ValueError) as info:
        register_slave(1, password="s3cret" * 50)
    assert "s3cret" not in str(info.value)


def test_binlog_dump_vector():
    assert binlog_dump(10101, "mysql-bin.000034", 1588, DUMP_SEND_ANNOTATE_ROWS) == BINLOG_DUMP
    with pytest.raises(ValueError):
        binlog_dump(1, "f", 1 << 32)


def test_binlog_dump_gtid_layout():
    empty = binlog_dump_gtid(77, GtidSet())
    assert empty == hexbytes("1e 0000 4d000000 00000000 0400000000000000 08000000"
                             "0000000000000000")
    s = GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    packet = binlog_dump_gtid(77, s, filename="b.1", position=4, flags=1)
    assert packet[:11] == hexbytes("1e 0100 4d000000 03000000") and packet[11:14] == b"b.1"
    size = int.from_bytes(packet[22:26], "little")
    assert GtidSet.decode(packet[26:]) == s and size == len(packet) - 26


def test_semi_sync_ack_vector():
    assert semi_sync_ack("mysql-bin.000034", 1354) == ACK


def test_registration_statements_mariadb():
    stmts = registration_statements(mariadb=True, heartbeat_period=30.000001024)
    assert stmts == [
        "SET @master_heartbeat_period=30000001024",
        "SET @master_binlog_checksum=@@global.binlog_checksum",
        "SET @mariadb_slave_capability=4",
    ]
    gtid = registration_statements(mariadb=True, heartbeat_period=1,
                                   gtid_position=GtidPosition.parse("1-2-7,0-10201-9868"),
                                   gtid_strict_mode=True)
    assert gtid[3:] == [
        "SET @slave_connect_state='0-10201-9868,1-2-7'",
        "SET @slave_gtid_strict_mode=1",
        "SET @slave_gtid_ignore_duplicates=0",
    ]
    # an empty position still selects GTID mode ("every domain from its first event")
    assert "SET @slave_connect_state=''" in registration_statements(
        mariadb=True, heartbeat_period=1, gtid_position=GtidPosition())
    assert semi_sync_statements(mariadb=True) == ["SET @rpl_semi_sync_slave=1"]


def test_registration_statements_mysql():
    u = replica_uuid_for(42)
    assert u == replica_uuid_for(42) != replica_uuid_for(43)
    stmts = registration_statements(mariadb=False, heartbeat_period=0.5, replica_uuid=u)
    assert "SET @master_heartbeat_period=500000000" in stmts
    assert "SET @source_heartbeat_period=500000000" in stmts
    assert "SET @source_binlog_checksum=@@global.binlog_checksum" in stmts
    assert f"SET @replica_uuid='{u}'" in stmts and f"SET @slave_uuid='{u}'" in stmts
    assert not any("slave_capability" in s for s in stmts)
    assert set(semi_sync_statements(mariadb=False)) == {"SET @rpl_semi_sync_replica=1",
                                                         "SET @rpl_semi_sync_slave=1"}


# --- dump stream ----------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [HEARTBEAT_SEMI_SYNC, bytearray(HEARTBEAT_SEMI_SYNC),
                                     memoryview(HEARTBEAT_SEMI_SYNC + b"")])
def test_dump_packet_semi_sync_no_ack(payload):
    event = parse_dump_packet(payload, semi_sync=True)
    assert isinstance(event, DumpEvent) and not event.ack_requested
    assert bytes(event.data) == bytes(HEARTBEAT_SEMI_SYNC[3:])
    assert event.data[4] == 0x1B  # HEARTBEAT_LOG_EVENT


def test_dump_packet_semi_sync_ack_requested():
    event = parse_dump_packet(XID_SEMI_SYNC_ACK, semi_sync=True)
    assert isinstance(event, DumpEvent) and event.ack_requested
    assert event.data[4] == 0x10  # XID_EVENT
    assert int.from_bytes(event.data[13:17], "little") == 1354  # what the ACK above carries


def test_dump_packet_without_semi_sync_is_not_sniffed():
    # an event whose first timestamp byte happens to be 0xEF is not a semi-sync header
    payload = b"\x00\xef\x01" + bytes(16)
    event = parse_dump_packet(payload, semi_sync=False)
    assert isinstance(event, DumpEvent) and not event.ack_requested
    assert bytes(event.data) == payload[1:]


@pytest.mark.parametrize("payload", [b"\x00", b"\x00\xef", b"\x00\x12\x00" + bytes(19),
                                     b"\x00\xef\x03" + bytes(19)])
def test_dump_packet_bad_semi_sync_header(payload):
    with pytest.raises(errors.SemiSyncError):
        parse_dump_packet(payload, semi_sync=True)


def test_dump_packet_eof_and_garbage():
    assert parse_dump_packet(b"\xfe\x00\x00\x02\x00", semi_sync=False) is DUMP_END
    assert parse_dump_packet(b"\xfe", semi_sync=True) is DUMP_END
    for bad in (b"", b"\xfe" + bytes(9), b"\x01abc"):
        with pytest.raises(errors.MalformedPacket):
            parse_dump_packet(bad, semi_sync=False)


def _err(code: int, message: str) -> bytes:
    return b"\xff" + code.to_bytes(2, "little") + b"#HY000" + message.encode()


@pytest.mark.parametrize(("code", "message", "cls"), [
    (1236, "Error: connecting slave requested to start from GTID 0-1-100, which is not in the "
           "master's binlog", errors.GtidNotInBinlog),
    (1236, "Error: connecting slave requested to start from GTID 0-1-100, which is not in the "
           "master's binlog. Since the master's binlog contains GTIDs with higher sequence "
           "numbers, it probably means that the slave has diverged due to executing extra "
           "erroneous transactions", errors.GtidDiverged),
    (1236, "Could not find GTID state requested by slave in any binlog files. Probably the slave "
           "state is too old and required binlog files have been purged.", errors.GtidPurged),
    (1236, "The binlog on the master is missing the GTID 0-1-5 requested by the slave (even "
           "though both a prior and a subsequent sequence number does exist), and GTID strict "
           "mode is enabled", errors.GtidStrictModeHole),
    (1236, "Cannot replicate because the source purged required binary logs. Replicate the "
           "missing transactions from elsewhere", errors.GtidPurged),
    (1236, "Could not find first log file name in binary log index file",
     errors.BinlogPositionError),
    (1236, "Client requested master to start replication from impossible position; the first "
           "event 'mysql-bin.000001' at 5, the last event read from 'x' at 4",
     errors.BinlogPositionError),
    (1236, "A replica with the same server_uuid/server_id as this replica has connected to the "
           "source", errors.DuplicateServerId),
    (1236, "log event entry exceeded max_allowed_packet; Increase max_allowed_packet on master",
     errors.EventTooLarge),
    (1236, "Slave can not handle replication events with the checksum that master is "
           "configured to log", errors.ChecksumUnsupported),
    (1236, "Binary log is not open", errors.BinlogNotEnabled),
    (4052, "A slave with the same server_uuid/server_id as this slave has connected to the "
           "master", errors.DuplicateServerId),
    (1227, "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for "
           "this operation", errors.MissingPrivilege),
    (1045, "Access denied for user 'u'@'%' (using password: YES)", errors.MissingPrivilege),
    (1236, "something new", errors.BinlogDumpError),
])
def test_dump_errors_are_typed(code, message, cls):
    with pytest.raises(cls) as info:
        parse_dump_packet(_err(code, message), semi_sync=True)
    exc = info.value
    assert type(exc) is cls
    assert message in str(exc)
    if isinstance(exc, errors.ServerError):
        assert exc.code == code and exc.sqlstate == "HY000"
    assert isinstance(exc, errors.ProtocolError)


def test_dump_error_without_sqlstate_and_truncated():
    exc = dump_error(1236, "", "x")
    assert type(exc) is errors.BinlogDumpError
    with pytest.raises(errors.TruncatedData):
        parse_dump_packet(b"\xff\x01", semi_sync=False)


# --- server checks ----------------------------------------------------------------------------------


def _facts(**overrides):
    variables = {"server_id": "1", "log_bin": "ON", "binlog_format": "ROW",
                 "binlog_checksum": "CRC32", "gtid_binlog_pos": "0-1-5"}
    variables.update(overrides)
    return ServerFacts.from_variables(variables)


def test_server_facts_and_checks():
    facts = _facts(rpl_semi_sync_master_enabled="ON")
    assert facts.server_id == 1 and facts.log_bin and facts.semi_sync_enabled is True
    assert _facts().semi_sync_enabled is None
    assert _facts(rpl_semi_sync_source_enabled="OFF").semi_sync_enabled is False
    check_server(facts, replica_server_id=2)
    with pytest.raises(errors.BinlogNotEnabled, match="log-bin"):
        check_server(_facts(log_bin="OFF"), replica_server_id=2)
    with pytest.raises(errors.BinlogFormatNotRow, match="MIXED"):
        check_server(_facts(binlog_format="MIXED"), replica_server_id=2)
    check_server(_facts(binlog_format="MIXED"), replica_server_id=2, allow_statement_format=True)
    with pytest.raises(errors.ServerIdConflict):
        check_server(facts, replica_server_id=1)


def test_replica_uuid_is_a_uuid():
    assert isinstance(replica_uuid_for(1), uuid.UUID)
