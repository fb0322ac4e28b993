"""What each server returns for every character of the legacy charsets binlake decodes.

binlake promises "decoded value = what ``SELECT`` returns". Python's codecs disagree with the
servers on a few code points (sjis 0x815F is ``\\`` on the server and U+FF3C in Python, eucjpms
has NEC/IBM rows Python's ``euc_jp`` lacks, ...), so the truth is asked of the servers
themselves: every byte of each single-byte charset, and every well-formed sequence of each
multi-byte one (a sample of gb18030's algorithmic 4-byte planes), is converted by the server
with ``HEX(CONVERT(CONVERT(X'..' USING <cs>) USING utf8mb4))``, 1,500 sequences per query.

Used twice:

- ``python -m tests.charset_derive`` (dev time, ~1 min): starts MariaDB 10.11, 11.8 and MySQL 9.7
  from the test bed and writes ``protocol/binlog/_charset_tables.py``, the generated tables
  :mod:`protocol.binlog.charsets` decodes with.
- ``tests/integration/test_charsets_servers.py``: asks a running server again (sampled) and checks
  binlake's decoder against it, table-driven.

A sequence the server has no Unicode for comes back as ``?``; those are recorded as unmapped
(``None``), and binlake keeps such a value as bytes (its rule for values not valid in their
charset).
"""

from __future__ import annotations

import codecs
import random
from collections.abc import Callable, Iterable, Iterator

from protocol.binlog.charsets import MULTI_BYTE_CODECS

__all__ = ["SINGLE_BYTE", "MULTI_BYTE", "sequences", "server_map", "python_text"]

Sql = Callable[[str], list[tuple[str | None, ...]]]

#: Single-byte charsets binlake decodes (with a Python codec or not) → Python's codec (or None).
SINGLE_BYTE: dict[str, str | None] = {
    "latin1": "cp1252", "latin2": "iso8859_2", "latin5": "iso8859_9", "latin7": "iso8859_13",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1256": "cp1256", "cp1257": "cp1257",
    "cp850": "cp850", "cp852": "cp852", "cp866": "cp866", "greek": "iso8859_7",
    "hebrew": "iso8859_8", "koi8r": "koi8_r", "koi8u": "koi8_u", "macroman": "mac_roman",
    "macce": "mac_latin2", "tis620": "tis_620", "ascii": "ascii",
    "dec8": None, "hp8": None, "swe7": None, "armscii8": None, "keybcs2": None, "geostd8": None,
}

#: Multi-byte charsets → the Python codec binlake starts from.
MULTI_BYTE = MULTI_BYTE_CODECS


def _ranges(*spans: tuple[int, int]) -> list[int]:
    return [b for lo, hi in spans for b in range(lo, hi + 1)]


def _two(leads: list[int], trails: list[int]) -> Iterator[bytes]:
    for lead in leads:
        for trail in trails:
            yield bytes((lead, trail))


def sequences(charset: str, sample: int | None = None, seed: int = 15) -> list[bytes]:
    """Every well-formed character of ``charset`` (bytes), or a random ``sample`` of them
    (always including the single bytes). gb18030's supplementary planes are sampled."""
    if charset in SINGLE_BYTE:
        return [bytes((b,)) for b in range(256)]
    single = [bytes((b,)) for b in range(0x80)]
    multi: Iterable[bytes]
    if charset in ("sjis", "cp932"):
        single += [bytes((b,)) for b in range(0xA1, 0xE0)]
        multi = _two(_ranges((0x81, 0x9F), (0xE0, 0xFC)), _ranges((0x40, 0x7E), (0x80, 0xFC)))
    elif charset in ("ujis", "eucjpms"):
        hi = _ranges((0xA1, 0xFE))
        multi = [*(bytes((0x8E, b)) for b in range(0xA1, 0xE0)), *_two(hi, hi),
                 *(b"\x8f" + s for s in _two(hi, hi))]
    elif charset == "big5":
        multi = _two(_ranges((0xA1, 0xF9)), _ranges((0x40, 0x7E), (0xA1, 0xFE)))
    elif charset == "gbk":
        multi = _two(_ranges((0x81, 0xFE)), _ranges((0x40, 0x7E), (0x80, 0xFE)))
    elif charset == "gb2312":
        multi = _two(_ranges((0xA1, 0xF7)), _ranges((0xA1, 0xFE)))
    elif charset == "euckr":
        multi = _two(_ranges((0x81, 0xFE)), _ranges((0x41, 0x5A), (0x61, 0x7A), (0x81, 0xFE)))
    elif charset == "gb18030":
        two = list(_two(_ranges((0x81, 0xFE)), _ranges((0x40, 0x7E), (0x80, 0xFE))))
        digits = range(0x30, 0x3A)
        bmp = [bytes((a, b, c, d)) for a in range(0x81, 0x85) for b in digits
               for c in range(0x81, 0xFF) for d in digits]
        rng = random.Random(seed)
        supp = [bytes((a, b, c, d)) for a in range(0x90, 0xE4) for b in digits
                for c in (0x81, rng.randrange(0x82, 0xFE), 0xFE) for d in (0x30, 0x39)]
        multi = [*two, *bmp, *supp]
    else:
        raise ValueError(f"no sequence list for {charset}")
    multi = list(multi)
    if sample is not None and sample < len(multi):
        multi = random.Random(seed).sample(multi, sample)
    return single + multi


def server_map(sql: Sql, charset: str, seqs: list[bytes],
               batch: int = 1500) -> dict[bytes, str | None]:
    """What the server's ``CONVERT(... USING utf8mb4)`` makes of each sequence: its text, or
    ``None`` when the server has no character for it (``?``) or rejects it (MySQL: NULL).
    One ``SELECT`` of ``batch`` columns per query."""
    out: dict[bytes, str | None] = {}
    for start in range(0, len(seqs), batch):
        chunk = seqs[start:start + batch]
        exprs = ", ".join(f"HEX(CONVERT(CONVERT(X'{s.hex()}' USING {charset}) USING utf8mb4))"
                          for s in chunk)
        row = sql(f"SELECT {exprs}")[0]
        if len(row) != len(chunk):
            raise AssertionError(f"{charset}: {len(row)} results for {len(chunk)} sequences")
        for seq, cell in zip(chunk, row, strict=True):
            text = None if cell is None else bytes.fromhex(cell).decode("utf-8")
            out[seq] = None if text == "?" and seq != b"?" else text
    return out


def python_text(codec: str | None, seq: bytes) -> str | None:
    """Python's decoding of one sequence, or ``None`` if Python cannot decode it."""
    if codec is None:
        return None
    try:
        return codecs.decode(seq, codec)
    except UnicodeDecodeError:
        return None


# --- the generator ---------------------------------------------------------------------------


def _derive_all(sql: Sql) -> dict[str, dict[bytes, str | None]]:
    known = {row[0] for row in sql("SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS")}
    maps = {}
    for charset in [*SINGLE_BYTE, *MULTI_BYTE]:
        if charset in known:
            maps[charset] = server_map(sql, charset, sequences(charset))
    return maps


def _runs(diffs: dict[bytes, str]) -> list[tuple[str, int, int, int]]:
    """``(first sequence hex, code point, count, step)`` runs over consecutive sequences whose
    characters are equal (step 0) or consecutive (step 1)."""
    runs: list[tuple[str, int, int, int]] = []
    items = sorted((int.from_bytes(s, "big"), len(s), ord(c)) for s, c in diffs.items())
    for value, width, cp in items:
        if runs:
            start_hex, cp0, count, step = runs[-1]
            first = int(start_hex, 16)
            if (len(start_hex) == 2 * width and value == first + count
                    and (count == 1 and cp - cp0 in (0, 1) or cp == cp0 + count * step)):
                runs[-1] = (start_hex, cp0, count + 1, cp - cp0 if count == 1 else step)
                continue
        runs.append((value.to_bytes(width, "big").hex(), cp, 1, 0))
    return runs


def _emit(maps: dict[str, dict[bytes, str | None]]) -> str:
    lines = [
        '"""What the servers make of each byte of the legacy character sets: data for :mod:`.charsets`.',
        "",
        "GENERATED by ``python -m tests.charset_derive`` from MariaDB 10.11, 11.8 and MySQL 9.7",
        "(they agree wherever both have a charset): do not edit.",
        "",
        "SINGLE_BYTE[charset]: 256 characters, byte -> what the server's CONVERT(... USING utf8mb4)",
        "returns ('?' where it has no character). MULTI_BYTE[charset]: runs (first sequence hex,",
        "code point, count, step) of the sequences where the server and the charset's Python codec",
        "(charsets.MULTI_BYTE_CODECS) disagree.",
        '"""',
        "",
        "# fmt: off",
        "SINGLE_BYTE: dict[str, str] = {",
    ]
    for charset in SINGLE_BYTE:
        table = "".join(maps[charset][bytes((b,))] or "?" for b in range(256))
        lines.append(f"    {charset!r}: {table!a},")
    lines.append("}")
    lines.append("MULTI_BYTE: dict[str, tuple[tuple[str, int, int, int], ...]] = {")
    for charset, codec in MULTI_BYTE_CODECS.items():
        diffs = {}
        for seq, text in maps[charset].items():
            ours = python_text(codec, seq)
            if text is None:
                if ours is not None:
                    diffs[seq] = "?"
            elif ours != text:
                diffs[seq] = text
        runs = _runs(diffs)
        lines.append(f"    {charset!r}: (")
        for i in range(0, len(runs), 4):
            lines.append("        " + " ".join(f"{r!r}," for r in runs[i:i + 4]))
        lines.append("    ),")
    lines.append("}")
    lines.append("# fmt: on")
    return "\n".join(lines) + "\n"


def _from_servers() -> dict[str, dict[str, dict[bytes, str | None]]]:
    import sys
    import time

    from tests.servers.plugin import ServerFactory

    factory = ServerFactory()
    per_server = {}
    try:
        for flavor in ("mariadb-10.11", "mariadb-11.8", "mysql-9.7"):
            t0 = time.monotonic()
            per_server[flavor] = _derive_all(factory.default(flavor).sql)
            print(f"{flavor}: derived in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    finally:
        factory.close()
    return per_server


def main() -> None:
    """Derive from the three servers and write ``protocol/binlog/_charset_tables.py``.
    ``CHARSET_DERIVE_DUMP=file`` also pickles the raw maps; ``CHARSET_DERIVE_LOAD=file`` re-emits
    from such a dump without starting servers."""
    import os
    import pathlib
    import pickle
    import sys

    load, dump = os.environ.get("CHARSET_DERIVE_LOAD"), os.environ.get("CHARSET_DERIVE_DUMP")
    per_server = pickle.loads(pathlib.Path(load).read_bytes()) if load else _from_servers()
    if dump:
        pathlib.Path(dump).write_bytes(pickle.dumps(per_server))
    merged: dict[str, dict[bytes, str | None]] = {}
    for flavor, maps in per_server.items():
        for charset, mapping in maps.items():
            known = merged.setdefault(charset, mapping)
            diff = [s.hex() for s in mapping if mapping[s] != known.get(s)]
            if diff:  # never seen so far; it would need per-flavor tables
                raise SystemExit(f"{flavor} differs from another server on {charset}: {diff[:10]}")
    out = pathlib.Path(__file__).resolve().parents[1] / "protocol" / "binlog" / "_charset_tables.py"
    out.write_text(_emit(merged))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
