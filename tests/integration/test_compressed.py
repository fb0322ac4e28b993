"""Compressed binlogs decode to the same rows as uncompressed ones.

The same workload runs on a server that compresses its binlog — MariaDB with
``--log-bin-compress=ON --log-bin-compress-min-len=10`` (QUERY_COMPRESSED and
WRITE/UPDATE/DELETE_ROWS_COMPRESSED_V1 events, zlib per event), MySQL with
``--binlog-transaction-compression=ON`` (TRANSACTION_PAYLOAD, zstd per transaction) — and on
the session's ordinary server of the same flavor. Then:

- the compressed binlog really holds the compressed event types (165–168 on MariaDB, 40 on
  MySQL) and no plain rows events for the workload; the ordinary one holds none of them;
- binlake decodes the very same row changes (kind, table, before and after images by column
  name, every value) from both;
- on the compressed server, the values also equal what the flavor's own binlog tool prints
  (the differential check of ``test_decode_differential``, over compressed events).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from protocol.binlog.events import ChecksumAlg
from protocol.binlog.filereader import split_binlog
from protocol.binlog.model import RowsEvent
from protocol.binlog.stream import EventStream
from tests.integration.test_decode_differential import UTF8, WORKLOAD, WORKLOAD_MARIADB, compare
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server

# Enough rows that events span several KB and multi-row events are the norm.
DIGITS = "(" + " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10)) + ")"
BULK = f"""
CREATE TABLE bulk (id INT PRIMARY KEY, n BIGINT, txt VARCHAR(200), d DECIMAL(14,4),
  at DATETIME(6), b BLOB);
INSERT INTO bulk
  SELECT k, k * 1000003, CONCAT('row ', k, ' ', REPEAT('abc', k % 50)), k / 7,
         TIMESTAMPADD(MICROSECOND, k * 1234567, '2024-01-01'), UNHEX(REPEAT('00ff', k % 20))
  FROM (SELECT a.d * 1000 + b.d * 100 + c.d * 10 + e.d + 1 AS k
        FROM {DIGITS} a, {DIGITS} b, {DIGITS} c, {DIGITS} e WHERE a.d < 2) seq;
UPDATE bulk SET txt = CONCAT(txt, '!'), n = -n WHERE id % 3 = 0;
DELETE FROM bulk WHERE id % 5 = 0;
"""

COMPRESSION = {
    "mariadb-10.11": ["--log-bin-compress=ON", "--log-bin-compress-min-len=10"],
    "mariadb-11.8": ["--log-bin-compress=ON", "--log-bin-compress-min-len=10"],
    "mysql-9.7": ["--binlog-transaction-compression=ON"],
}
FIXTURE = {"mariadb-10.11": "mariadb_10_11", "mariadb-11.8": "mariadb_11_8",
           "mysql-9.7": "mysql_9_7"}
PLAIN_ROWS = {23, 24, 25, 30, 31, 32}
MARIADB_COMPRESSED = {165, 166, 167, 168}
MYSQL_PAYLOAD = 40


def run_workload(server: ServerHandle, schema: str) -> None:
    workload = WORKLOAD + (WORKLOAD_MARIADB if server.is_mariadb else "") + BULK
    server.sql(f"CREATE DATABASE `{schema}`; USE `{schema}`;" + workload, client_args=UTF8)


def decode_schema(server: ServerHandle, schema: str) -> tuple[list[Any], set[int]]:
    """The schema's row changes, by column name, from all the server's binlog files; and the
    type codes of the raw events that carried them (rows events, or the payload around them)."""
    changes: list[Any] = []
    carriers: set[int] = set()
    for path in server.binlog_files():
        stream = EventStream(file=Path(path).name)  # CRC32 verified
        for _, raw in split_binlog(Path(path).read_bytes()):
            for event in stream.feed(raw):
                if not isinstance(event, RowsEvent) or event.table.schema != schema:
                    continue
                carriers.add(raw[4])
                changes += [(event.kind, event.table.table, before, after)
                            for before, after in zip(event.rows_before() or [None] *
                                                     event.row_count,
                                                     event.rows_after() or [None] *
                                                     event.row_count, strict=True)]
        fde = stream.format_description
        assert fde is not None and fde.checksum_alg == ChecksumAlg.CRC32
    return changes, carriers


@pytest.mark.parametrize("flavor", list(COMPRESSION))
def test_compressed_binlog_gives_the_same_rows(flavor: str, server_factory: Any,
                                                request: pytest.FixtureRequest) -> None:
    compressed: ServerHandle = server_factory.start(flavor, COMPRESSION[flavor],
                                                    name=f"compressed-{flavor}")
    plain: ServerHandle = request.getfixturevalue(FIXTURE[flavor])
    schema = f"cz_{uuid.uuid4().hex[:10]}"
    for server in (compressed, plain):
        run_workload(server, schema)
        server.sql("FLUSH BINARY LOGS")

    ours_compressed, carriers_compressed = decode_schema(compressed, schema)
    ours_plain, carriers_plain = decode_schema(plain, schema)

    if compressed.is_mariadb:
        assert carriers_compressed <= MARIADB_COMPRESSED, carriers_compressed
        assert {166, 167, 168} <= carriers_compressed, carriers_compressed
        types = {raw[4] for path in compressed.binlog_files()
                 for _, raw in split_binlog(Path(path).read_bytes())}
        assert 165 in types  # QUERY_COMPRESSED (the DDL)
    else:
        assert carriers_compressed == {MYSQL_PAYLOAD}, carriers_compressed
    assert carriers_plain <= PLAIN_ROWS, carriers_plain

    assert len(ours_compressed) > 2000
    assert ours_compressed == ours_plain

    # and the compressed events' values are what the server's own tool prints
    schema2 = f"czd_{uuid.uuid4().hex[:10]}"
    compressed.sql(f"CREATE DATABASE `{schema2}`; USE `{schema2}`;" + WORKLOAD +
                   (WORKLOAD_MARIADB if compressed.is_mariadb else ""), client_args=UTF8)
    assert compare(compressed, schema2) == 8 * 44 + (4 * 5 if compressed.is_mariadb else 0)
    for server in (compressed, plain):
        server.sql(f"DROP DATABASE IF EXISTS `{schema}`; DROP DATABASE IF EXISTS `{schema2}`")
