"""Server-free checks of the server-derived charset decoders and the JSON diff text;
``tests/integration/test_charsets_servers.py`` checks the decoders against the servers."""

from __future__ import annotations

import json
import re

import pytest

from protocol.binlog import charsets
from protocol.binlog.values import JsonDiff, apply_json_diff_text
from tests.charset_derive import MULTI_BYTE, SINGLE_BYTE, sequences


@pytest.mark.parametrize("charset", sorted(MULTI_BYTE))
def test_every_enumerated_sequence_is_one_unit(charset: str) -> None:
    unit = re.compile(charsets.UNIT_PATTERNS[charset], re.DOTALL)
    seqs = sequences(charset, sample=3000)
    assert [s for s in seqs if unit.fullmatch(s) is None] == []


def test_every_single_byte_charset_has_a_full_table() -> None:
    assert set(charsets.SINGLE_BYTE_CHARSETS) == set(SINGLE_BYTE)
    for charset in SINGLE_BYTE:
        decode = charsets.decoder(charset)
        assert decode is not None
        text = decode(bytes(range(256)))
        assert isinstance(text, str) and len(text) == 256, charset


@pytest.mark.parametrize(("charset", "stored", "text"), [
    ("sjis", "815f5c41", "\\\\A"),
    ("cp932", "815f", "＼"),
    ("eucjpms", "ada18ff3f3a1c1a1c2a1f1a1f2a2cc", "①ⅰ～∥￠￡￢"),
    ("ujis", "a1c0", "\\"),
    ("koi8u", "95", "•"), ("greek", "a1a2", "ʽʼ"), ("hebrew", "af", "‾"),
    ("cp866", "fcfd", "ⁿ²"), ("swe7", "5b5c5d", "ÄÖÅ"), ("cp1256", "8a", "?"),
    ("gb18030", "8135f437a8bc", "\ue7c7ḿ"), ("euckr", "8141", "갂"),
])
def test_the_servers_spelling(charset: str, stored: str, text: str) -> None:
    decode = charsets.decoder(charset)
    assert decode is not None
    assert decode(bytes.fromhex(stored)) == text


def test_malformed_bytes_stay_bytes_and_unicode_charsets_are_not_tabled() -> None:
    sjis = charsets.decoder("sjis")
    assert sjis is not None
    assert sjis(b"\x81") == b"\x81" and sjis(b"A\xff") == b"A\xff"
    assert sjis(b"\x85\x40") == "?"  # well-formed, unassigned: SELECT prints '?'
    assert charsets.decoder("utf8mb4") is None and charsets.decoder("binary") is None
    assert charsets.overrides("sjis") == {b"\x81\x5f": "\\"}


def test_json_diff_text_and_its_application() -> None:
    diff = JsonDiff(((0, "$.a", "2"), (2, "$.b[0]", None), (1, '$."k y"', '{"x": 1.50}')))
    text = diff.to_json_text()
    assert text == ('[{"op": "REPLACE", "path": "$.a", "value": 2}, '
                    '{"op": "REMOVE", "path": "$.b[0]"}, '
                    '{"op": "INSERT", "path": "$.\\"k y\\"", "value": {"x": 1.50}}]')
    assert json.loads(text)[2]["path"] == '$."k y"'
    assert apply_json_diff_text('{"a": 1, "b": [1, 2]}', text) == (
        '{"a": 2, "b": [2], "k y": {"x": 1.5}}')
