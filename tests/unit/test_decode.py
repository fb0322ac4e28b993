"""binlake decode: the captured binlogs of every flavor, both formats, positions, filters, and
damaged files (one typed line naming the file and position, exit 1)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.binlog.filereader import split_binlog
from protocol.binlog.model import RowsEvent
from protocol.binlog.stream import EventStream
from protocol.binlog.transactions import TransactionAssembler
from protocol.binlog.values import InvalidTemporal
from replica import cli
from replica.commands import decode
from sinks.openprotocol import OpenProtocolEncoder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "binlogs"
FLAVORS = ("mariadb-10.11", "mariadb-11.8", "mysql-9.7")


def _files(flavor: str) -> list[str]:
    return sorted(str(p) for p in (FIXTURES / flavor).glob("mysql-bin.0*"))


def _decode(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.run(["decode", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _whole_file_events(paths: list[str]) -> list[object]:
    """The reference: each whole file split in memory and fed to one EventStream."""
    stream = EventStream()
    events: list[object] = []
    for path in paths:
        stream.start_file(Path(path).name, 4)
        for _offset, raw in split_binlog(Path(path).read_bytes()):
            events.extend(stream.feed(raw))
    return events


@pytest.mark.parametrize("flavor", FLAVORS)
def test_incremental_reading_gives_the_same_events_as_whole_files(flavor: str) -> None:
    paths = _files(flavor)
    expected = _whole_file_events(paths)
    for chunk_size in (1, 7, 1 << 20):
        got = list(decode.read_events(paths, chunk_size=chunk_size))
        assert [(e.header, type(e)) for e in got] == [(e.header, type(e)) for e in expected]  # type: ignore[attr-defined]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_text_has_one_line_per_event_and_per_row(flavor: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    paths = _files(flavor)
    code, out, err = _decode(paths, capsys)
    assert code == 0, err
    lines = out.splitlines()
    events = _whole_file_events(paths)
    rows = sum(e.row_count for e in events if isinstance(e, RowsEvent))
    assert len([ln for ln in lines if ln.startswith("# ")]) == len(events)
    assert len([ln for ln in lines if ln.startswith("### ")]) == rows
    assert all(ln.startswith(("# ", "### ")) for ln in lines)
    # positions across the rotation: every file appears, in order
    seen = [ln.split()[1].split(":")[0] for ln in lines if ln.startswith("# ")]
    assert list(dict.fromkeys(seen)) == [Path(p).name for p in paths]


def test_text_lines_of_the_mariadb_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _decode(_files("mariadb-10.11"), capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("# mysql-bin.000001:4 end=256 ")
    assert "server_id=7 FORMAT_DESCRIPTION server_version=10.11." in lines[0]
    assert lines[0].endswith("checksum=CRC32")
    assert ("### INSERT INTO bl.t SET id=1, v='a', d='2024-02-29 12:34:56.123456'" in lines)
    assert "### INSERT INTO bl.t SET id=2, v='b', d=NULL" in lines
    assert ("### UPDATE bl.t WHERE id=1, v='a', d='2024-02-29 12:34:56.123456' "
            "SET id=1, v='c', d='2024-02-29 12:34:56.123456'") in lines
    assert "### DELETE FROM bl.t WHERE id=2, v='b', d=NULL" in lines
    gtid = next(ln for ln in lines if "gtid=0-7-1 " in ln)
    assert gtid.endswith("MARIADB_GTID gtid=0-7-1 flags=STANDALONE,ALLOW_PARALLEL,DDL")
    assert any("ROTATE next=mysql-bin.000002:4" in ln for ln in lines)
    assert any("WRITE_ROWS_COMPRESSED_V1" in ln for ln in lines)
    assert any("QUERY_COMPRESSED" in ln and " compressed query=CREATE TABLE c" in ln
               for ln in lines)


def test_mysql_payload_events_follow_the_payload(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _decode(_files("mysql-9.7"), capsys)
    assert code == 0
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if "TRANSACTION_PAYLOAD compression=zstd" in ln)
    where = lines[at].split()[1]
    assert lines[at + 1].split()[1] == where and "QUERY" in lines[at + 1]
    assert any("GTID_TAGGED gtid=" in ln and ":tagone:1 " in ln for ln in lines)
    assert any(ln.endswith(":tagone:1") and "PREVIOUS_GTIDS" in ln for ln in lines)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_open_protocol_is_the_encoder_over_the_assembler(
        flavor: str, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _files(flavor)
    code, out, err = _decode(["--format", "open-protocol", *paths], capsys)
    assert code == 0, err
    assembler, encoder = TransactionAssembler(), OpenProtocolEncoder()
    expected = [obj for event in _whole_file_events(paths)
                for item in assembler.feed(event) for obj in encoder.encode(item)]
    got = [json.loads(line) for line in out.splitlines()]
    assert got == json.loads(json.dumps(expected))
    assert {obj["key"]["t"] for obj in got} == {1, 2, 3}
    ts = [obj["key"]["ts"] for obj in got if obj["key"]["t"] == 3]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)


def test_start_and_stop_positions(capsys: pytest.CaptureFixture[str]) -> None:
    path = _files("mariadb-10.11")[0]
    code, out, _ = _decode(["--start-position", "1135", "--stop-position", "1393", path], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("# mysql-bin.000001:1135 ")
    assert lines[-1].startswith("# mysql-bin.000001:1362 ") and "XID" in lines[-1]
    assert [ln for ln in lines if ln.startswith("###")] == [
        "### UPDATE bl.t WHERE id=1, v='a', d='2024-02-29 12:34:56.123456' "
        "SET id=1, v='c', d='2024-02-29 12:34:56.123456'"]


def test_start_in_first_file_stop_in_last(capsys: pytest.CaptureFixture[str]) -> None:
    first, second, _third = _files("mariadb-10.11")
    code, out, _ = _decode(["--start-position", "5078", "--stop-position", "683",
                            first, second], capsys)
    assert code == 0
    heads = [ln.split()[1] for ln in out.splitlines() if ln.startswith("# ")]
    assert heads[0] == "mysql-bin.000001:5078"
    assert heads[-1] == "mysql-bin.000002:652"
    assert "mysql-bin.000002:4" in heads


def test_start_mid_transaction_still_decodes_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """The TABLE_MAP before the start is context: the rows after it decode."""
    path = _files("mariadb-10.11")[0]
    code, out, _ = _decode(["--start-position", "1049", "--stop-position", "1104", path], capsys)
    assert code == 0
    assert out.splitlines()[1:] == ["### INSERT INTO bl.t SET id=1, v='a', "
                                    "d='2024-02-29 12:34:56.123456'",
                                    "### INSERT INTO bl.t SET id=2, v='b', d=NULL"]


def test_bad_positions_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.run(["decode", "--start-position", "2", "x"])
    assert exc.value.code == 2
    assert "positions start at 4" in capsys.readouterr().err


def test_table_filter(capsys: pytest.CaptureFixture[str]) -> None:
    paths = _files("mariadb-10.11")
    code, out, _ = _decode(["--table", "bl.m", *paths], capsys)
    assert code == 0
    rows = [ln for ln in out.splitlines() if ln.startswith("###")]
    assert rows and all(ln.split()[3] == "bl.m" or ln.split()[2] == "bl.m" for ln in rows)
    assert not any("TABLE_MAP" in ln and " bl.t " in ln for ln in out.splitlines())
    assert not any("ANNOTATE_ROWS" in ln for ln in out.splitlines())
    code, out, _ = _decode(["--database", "nothing", *paths], capsys)
    assert not any(ln.startswith("###") for ln in out.splitlines())
    assert any("XID" in ln for ln in out.splitlines())  # boundaries stay


def test_table_filter_open_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _decode(["-f", "open-protocol", "-t", "bl.t", *_files("mariadb-11.8")],
                           capsys)
    assert code == 0
    objs = [json.loads(line) for line in out.splitlines()]
    assert {o["key"].get("tbl") for o in objs if o["key"]["t"] == 1} == {"t"}
    code, out, _ = _decode(["-f", "open-protocol", "-t", "other.*", *_files("mariadb-11.8")],
                           capsys)
    assert {json.loads(line)["key"]["t"] for line in out.splitlines()} == {3}


# --- damaged files ------------------------------------------------------------------------------


def _damaged(tmp_path: Path, offset: int, *, cut: bool = False) -> str:
    data = bytearray((FIXTURES / "mariadb-10.11" / "mysql-bin.000001").read_bytes())
    if cut:
        data = data[:offset]
    else:
        data[offset] ^= 0x01
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(bytes(data))
    return str(path)


def test_checksum_mismatch_names_file_and_position(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = _damaged(tmp_path, 1080)  # inside the first WRITE_ROWS (1049..1104)
    code, out, err = _decode([path], capsys)
    assert code == 1
    assert out.splitlines()[-1].startswith("# mysql-bin.000001:984 ")  # printed up to it
    first = err.splitlines()[0]
    assert first.startswith(f"binlake: error: {path}: ChecksumMismatch: ")
    assert "at 1049" in first
    assert "--no-verify-checksum" in err
    assert "Traceback" not in err
    code, out, _ = _decode(["--no-verify-checksum", path], capsys)
    assert code == 0
    assert "### INSERT INTO bl.t SET id=257, v='a'" in out


def test_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _damaged(tmp_path, 1090, cut=True)
    code, _out, err = _decode([path], capsys)
    assert code == 1
    assert "TruncatedData" in err and "offset 1049" in err
    assert len([ln for ln in err.splitlines() if ln.startswith("binlake: error:")]) == 1


def test_not_a_binlog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello world, this is not a binlog\n")
    code, _out, err = _decode([str(path)], capsys)
    assert code == 1
    assert "not a binlog file" in err


def test_verbose_prints_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.run(["decode", "-v", _damaged(tmp_path, 1080)])
    assert code == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_bit_flip_gives_a_typed_error_or_output(flavor: str, tmp_path: Path) -> None:
    """Never a crash: flips anywhere end in output or BinlogFileError."""
    original = (FIXTURES / flavor / "mysql-bin.000001").read_bytes()
    for offset in range(4, len(original), max(1, len(original) // 150)):
        data = bytearray(original)
        data[offset] ^= 0x10
        path = tmp_path / "mysql-bin.000001"
        path.write_bytes(bytes(data))
        options = decode.DecodeOptions(files=(str(path),), verify_checksums=False)
        for writer in (decode.write_text, decode.write_open_protocol):
            try:
                writer(decode.selected_events(options), io.StringIO())
            except decode.BinlogFileError as exc:
                assert str(path) in str(exc)


def test_broken_pipe_is_quiet() -> None:
    paths = _files("mariadb-10.11")
    proc = subprocess.run(
        f"{sys.executable} -m replica.cli decode {' '.join(paths)} | head -1",
        shell=True, capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("# mysql-bin.000001:4 ")
    assert proc.stderr == ""


@pytest.mark.parametrize(("hidden", "said"), [
    ("protocol._native_slots", "protocol._native_slots is not built: events are made by their "
     "Python classes (same events, slower)"),
    ("protocol._native_frames", "the native binlog framing is not built: events are framed in "
     "Python (same events, slower)"),
])
def test_a_missing_extension_is_said_once_and_the_output_is_the_same(hidden: str,
                                                                      said: str) -> None:
    paths = _files("mariadb-10.11")
    hide = (f"import sys; sys.modules[{hidden!r}] = None; from replica.cli import main; "
            "sys.argv[0] = 'binlake'; sys.exit(main())")
    env = {k: v for k, v in os.environ.items() if k != "BINLAKE_NATIVE"}
    built = subprocess.run([sys.executable, "-m", "replica.cli", "decode", *paths],
                           capture_output=True, text=True, timeout=120, env=env)
    missing = subprocess.run([sys.executable, "-c", hide, "decode", *paths],
                             capture_output=True, text=True, timeout=120, env=env)
    assert built.returncode == missing.returncode == 0
    assert built.stderr == ""
    assert missing.stderr == (f"binlake decode: warning: {said}; reinstall binlake (or "
                              "`python setup.py build_ext --inplace` in a checkout) to build it\n")
    assert missing.stdout == built.stdout


# --- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (None, "NULL"),
    (True, "1"),
    (-42, "-42"),
    (18446744073709551615, "18446744073709551615"),
    (decimal.Decimal("-0.000000000000000000000000000001"),
     "-1E-30"),
    (1.5, "1.5"),
    ("it's", "'it\\'s'"),
    ("two\nlines\\\t\x00\x01", "'two\\nlines\\\\\\t\\0\\x01'"),
    ("😀 é", "'😀 é'"),
    (b"\x00\xffA", "X'00ff41'"),
    (b"", "X''"),
    (dt.datetime(2024, 2, 29, 12, 34, 56, 123456), "'2024-02-29 12:34:56.123456'"),
    (dt.datetime(2024, 2, 29, 12, 34, 56, tzinfo=dt.UTC), "'2024-02-29 12:34:56+00:00'"),
    (dt.date(9999, 12, 31), "'9999-12-31'"),
    (-dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
     "'-838:59:59.999999'"),
    (dt.timedelta(seconds=1), "'00:00:01'"),
    (InvalidTemporal("0000-00-00"), "'0000-00-00'"),
])
def test_format_value(value: object, text: str) -> None:
    assert decode.format_value(value) == text
