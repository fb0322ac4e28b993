"""Differential check: the server's own binlog tool and binlake see the same events.

For each flavor, a small workload goes into a live test-bed server; then ``mariadb-binlog`` /
``mysqlbinlog`` of that flavor and binlake's file reader + EventStream decode the same binlog
files, and every event start position (``# at N``) must agree, as must the rotation between
files.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest

from protocol.binlog.events import RotateEvent, StopEvent
from protocol.binlog.filereader import split_binlog

from ..unit.test_binlog_events import new_stream

pytestmark = pytest.mark.server

WORKLOAD = """
CREATE DATABASE {db}; USE {db};
CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(40), d DATETIME(6));
INSERT INTO t (v, d) VALUES ('a', NOW(6)), ('b', NULL);
BEGIN; UPDATE t SET v = 'c' WHERE id = 1; DELETE FROM t WHERE id = 2; COMMIT;
ALTER TABLE t ADD COLUMN n INT;
XA START 'x{tag}'; INSERT INTO t (v) VALUES ('xa'); XA END 'x{tag}'; XA PREPARE 'x{tag}';
XA COMMIT 'x{tag}';
DROP DATABASE {db};
FLUSH BINARY LOGS;
"""


def tool_positions(server, path: str) -> list[int]:
    result = subprocess.run(server.binlog_tool_argv(path), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return [int(n) for n in re.findall(r"^# at (\d+)", result.stdout, re.MULTILINE)]


@pytest.mark.parametrize("flavor", ["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def test_positions_match_the_servers_binlog_tool(flavor, request):
    server = request.getfixturevalue(flavor)
    tag = uuid.uuid4().hex[:8]
    server.sql(WORKLOAD.format(db=f"bl_diff_{tag}", tag=tag))
    files = server.binlog_files()[:-1]  # the last one is still being written
    assert files
    stream = new_stream()
    for path in files:
        name = Path(path).name
        stream.start_file(name)
        ours: list[int] = []
        for offset, raw in split_binlog(Path(path).read_bytes()):
            decoded = stream.feed(raw)
            assert decoded[0].header.position == offset and decoded[0].header.file == name
            ours.append(offset)
            last = decoded[-1]
        theirs = tool_positions(server, path)
        assert sorted(set(theirs)) == ours, name
        # a closed file ends in a ROTATE, or in a STOP where the shared server was restarted
        # by another test while this file was the newest
        assert isinstance(last, RotateEvent | StopEvent), (name, last)
        if isinstance(last, RotateEvent):
            assert stream.position.file != name
