"""Legacy charsets decode to exactly what the server's conversion returns.

Table-driven, per flavor: for every charset the server has, every byte of the single-byte ones
and a sample of each multi-byte charset's well-formed sequences plus every sequence the
generated tables override (``protocol/binlog/_charset_tables.py``, from
``python -m tests.charset_derive``) are converted by the server, ``HEX(CONVERT(CONVERT(X'..'
USING cs) USING utf8mb4))``, 1,500 per query, and compared with binlake's decoder. Then the
known mismatches (below) go through a real binlog (INSERT, decoded from the server's
files) and must equal ``SELECT``. Size: ``BINLAKE_CHARSET_SAMPLE`` sequences per multi-byte
charset (default 1,500; ``0`` = all, as the generator does).
"""

from __future__ import annotations

import os
import uuid

import pytest

from protocol.binlog import charsets
from tests.charset_derive import SINGLE_BYTE, sequences, server_map
from tests.integration.test_type_matrix import decoded_rows
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.server

SAMPLE = int(os.environ.get("BINLAKE_CHARSET_SAMPLE", "1500")) or None


@pytest.fixture(params=["mariadb_10_11", "mariadb_11_8", "mysql_9_7"])
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


def _known(server: ServerHandle) -> set[str]:
    rows = server.sql("SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS")
    return {r[0] for r in rows if r[0]}


def test_decoders_equal_server_conversion(server: ServerHandle) -> None:
    known = _known(server)
    checked = 0
    for charset in [*SINGLE_BYTE, *charsets.MULTI_BYTE_CODECS]:
        if charset not in known:
            assert charset == "gb18030" and server.is_mariadb  # MariaDB has no gb18030
            continue
        decode = charsets.decoder(charset)
        assert decode is not None, charset
        seqs = sequences(charset, sample=SAMPLE)
        seqs += [s for s in charsets.overrides(charset) if s not in set(seqs)]
        theirs = server_map(server.sql, charset, seqs)
        wrong = {}
        for seq, text in theirs.items():
            ours = decode(seq)
            if ours != (text if text is not None else "?"):
                wrong[seq.hex()] = (ours, text)
        assert wrong == {}, f"{server.flavor} {charset}: {len(wrong)} differ"
        checked += len(seqs)
    multi = len(charsets.MULTI_BYTE_CODECS) - (1 if server.is_mariadb else 0)
    assert checked >= 256 * len(SINGLE_BYTE) + multi * 128


# Known mismatches between Python's codecs and the server (server spelling, stored bytes), and
# a few neighbours.
CASES = [
    ("sjis", "815f5c41"),              # \ (not U+FF3C), \, A
    ("cp932", "815f"),
    ("eucjpms", "ada18ff3f3a1c1a1c2a1f1a1f2a2cc"),  # ① ⅰ ～ ∥ ￠ ￡ ￢
    ("ujis", "a1c0"),
    ("koi8u", "95"), ("greek", "a1a2"), ("hebrew", "af"), ("cp866", "fcfd"),
    ("swe7", "5b5c5d"), ("dec8", "c4"),
    ("gb18030", "8135f437a8bc"),
]


def test_named_mismatches_through_the_binlog(server: ServerHandle) -> None:
    known = _known(server)
    cases = [(cs, hx) for cs, hx in CASES if cs in known]
    db = f"cs_{uuid.uuid4().hex[:10]}"
    cols = ", ".join(f"c{i} VARCHAR(20) CHARACTER SET {cs}" for i, (cs, _) in enumerate(cases))
    values = ", ".join(f"X'{hx}'" for _, hx in cases)
    server.sql(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, {cols}); "
               f"SET SESSION sql_mode=''; INSERT INTO {db}.t VALUES (1, {values})")
    try:
        exprs = ", ".join(f"HEX(CONVERT(c{i} USING utf8mb4))" for i in range(len(cases)))
        selected = [bytes.fromhex(h or "").decode() for h in server.sql(
            f"SELECT {exprs} FROM {db}.t")[0]]
        events = decoded_rows(server, db)
        assert len(events) == 1 and events[0].row_count == 1
        row = events[0].rows_after()[0]
        decoded = [row[f"c{i}"] for i in range(len(cases))]
        assert decoded == selected
        # and the spellings named above
        by_charset = dict(zip((cs for cs, _ in cases), decoded, strict=True))
        assert by_charset["sjis"] == "\\\\A"
        assert by_charset["eucjpms"] == "①ⅰ～∥￠￡￢"
        assert by_charset["koi8u"] == "•" and by_charset["greek"] == "ʽʼ"
        assert by_charset["hebrew"] == "‾" and by_charset["cp866"] == "ⁿ²"
        if "gb18030" in by_charset:
            assert by_charset["gb18030"] == "\ue7c7ḿ"
    finally:
        server.sql(f"DROP DATABASE {db}")
