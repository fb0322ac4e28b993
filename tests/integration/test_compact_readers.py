"""binlake's batch readers vs a compaction between listing and reading: never a failure.

The races are forced deterministically: a DataFrame made before a compaction (and a state
materialisation) is acted on after it, and a compaction switches a partition in the middle of
a reader's pinning (between its listing and its links). A loop of reads beside a loop of
compactions, sized by ``BINLAKE_COMPACT_RACE_ROUNDS``, backs them up.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sinks.parquet import compact as K
from sinks.parquet import layout as L
from sinks.parquet import pins as P
from sinks.spark.readers import read_changes
from sinks.spark.state import materialize_state, read_current_state
from tests.unit.test_compact import build_lake, build_more, data_files

pytestmark = pytest.mark.spark

NOW = K.CompactOptions(min_age=0, grace=0)
ROUNDS = int(os.environ.get("BINLAKE_COMPACT_RACE_ROUNDS", "3"))


def keys(df) -> list[tuple[int, int]]:  # noqa: ANN001 - a DataFrame
    return sorted((r["_seq"], r["_row"]) for r in df.select("_seq", "_row").collect())


def state(df) -> list[tuple[int, str]]:  # noqa: ANN001
    return sorted((r["id"], r["name"]) for r in df.collect())


def replayed(lake: str) -> list[tuple[int, str]]:
    """The current state, replayed in Python from the live files (no compaction meanwhile)."""
    changes = sorted((r for f in data_files(lake) for r in pq.read_table(f).to_pylist()),
                     key=lambda r: (r["_seq"], r["_row"]))
    present: dict[int, str] = {}
    for r in changes:
        if r["_op"] == "D":
            present.pop(r["id"], None)
        else:
            present[r["id"]] = r["name"]
    return sorted(present.items())


def test_a_dataframe_made_before_a_compaction_reads_after_it(spark, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    build_lake(lake, 20)
    changes = read_changes(spark, lake, "shop", "users")
    current = read_current_state(spark, lake, "shop", "users")
    expected_changes = sorted((r["_seq"], r["_row"]) for f in data_files(lake)
                              for r in pq.read_table(f, columns=["_seq", "_row"]).to_pylist())
    expected_state = replayed(lake)
    assert len(expected_changes) == 14 * 2 + 6  # 14 two-row inserts, 6 one-row updates
    assert K.compact_lake(lake, NOW).files_out == 1  # every file those plans listed is gone
    assert not any(L.is_original(n) for _r, _d, files in os.walk(
        os.path.join(lake, "shop", "users", "schema_version=1")) for n in files)
    assert keys(changes) == expected_changes
    assert state(current) == expected_state

    # the materialised state reader: a plan made from state S still reads after a newer state
    # deleted S and another compaction switched the changes after S
    build_more(lake, 3)
    first = materialize_state(spark, lake, "shop", "users")
    build_more(lake, 2)
    from_state = read_current_state(spark, lake, "shop", "users")
    expected_state = replayed(lake)
    build_more(lake, 2)
    assert materialize_state(spark, lake, "shop", "users", keep=1) != first
    assert os.listdir(os.path.join(lake, "shop", "users", L.STATE_DIR)) != [f"seq={first}"]
    K.compact_lake(lake, NOW)
    assert state(from_state) == expected_state


def test_a_switch_between_listing_and_linking_is_pinned_again(spark, tmp_path: Path,
                                                             monkeypatch) -> None:
    lake = str(tmp_path / "lake")
    build_lake(lake, 10)
    expected = keys(read_changes(spark, lake, "shop", "users"))
    pins_before = set(os.listdir(os.path.join(lake, L.PINS_DIR)))
    real_link = os.link
    switched: list[int] = []

    def link_then_compact(src: str, dst: str) -> None:
        real_link(src, dst)
        if not switched:  # after the first link of the listing: the partition switches
            switched.append(K.compact_lake(lake, NOW).partitions)

    monkeypatch.setattr(P.os, "link", link_then_compact)
    df = read_changes(spark, lake, "shop", "users")
    monkeypatch.undo()
    assert switched == [1]
    [pin] = set(os.listdir(os.path.join(lake, L.PINS_DIR))) - pins_before
    [pinned] = [files for _r, _d, files in os.walk(os.path.join(lake, L.PINS_DIR, pin))
                if files]
    assert len(pinned) == 1 and pinned[0].startswith(L.COMPACTED_PREFIX)  # not 1 old + new
    assert keys(df) == expected


def test_reads_beside_a_compaction_loop_never_fail(spark, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    build_lake(lake, 10)
    stop = threading.Event()
    rounds: list[int] = []

    def compact_loop() -> None:
        while not stop.is_set():
            build_more(lake, 3)
            rounds.append(K.compact_lake(lake, NOW).partitions)

    loop = threading.Thread(target=compact_loop)
    loop.start()
    try:
        for _ in range(ROUNDS):
            df = read_changes(spark, lake, "shop", "users")
            got = keys(df)
            assert len(got) == len(set(got))  # never a row twice
            assert got == keys(df)  # the same plan, acted on again later: the same rows
            current = read_current_state(spark, lake, "shop", "users").collect()
            assert len({r["id"] for r in current}) == len(current)
    finally:
        stop.set()
        loop.join()
    assert sum(rounds) >= 1
    assert keys(read_changes(spark, lake, "shop", "users")) == sorted(set(keys(
        read_changes(spark, lake, "shop", "users"))))


def test_old_pins_are_purged(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    build_lake(lake, 3)
    pin = P.pin_table(lake, "shop", "users")
    assert pin is not None and len(os.listdir(os.path.join(pin, "schema_version=1",
                                                           "commit_date=2026-01-01"))) == 3
    assert P.purge_pins(lake, P.PIN_LIFETIME) == 0
    assert P.purge_pins(lake, P.PIN_LIFETIME, now=os.stat(pin).st_mtime + P.PIN_LIFETIME
                        + 1) == 1
    assert os.listdir(os.path.join(lake, L.PINS_DIR)) == []


def newest_pin_files(lake: str) -> list[str]:
    pins = os.path.join(lake, L.PINS_DIR)
    newest = max(os.listdir(pins), key=lambda n: os.stat(os.path.join(pins, n)).st_mtime_ns)
    return sorted(name for _r, _d, files in os.walk(os.path.join(pins, newest))
                  for name in files)


def test_a_state_spares_reading_the_files_it_covers(spark, tmp_path: Path) -> None:
    """read_current_state from a state does not even list the change files the state covers
    (``_covered.json``): it reads the state and the files after it, and gets the same rows."""
    lake = str(tmp_path / "lake")
    build_lake(lake, 12)
    seq = materialize_state(spark, lake, "shop", "users")
    covered_path = os.path.join(lake, L.state_dir("shop", "users", seq), L.STATE_COVERED)
    with open(covered_path, encoding="utf-8") as f:
        covered = json.load(f)
    assert covered["seq"] == seq and len(covered["files"]) == 12
    build_more(lake, 2)
    current = read_current_state(spark, lake, "shop", "users")
    assert len(newest_pin_files(lake)) == 2  # the changes' pin: the two files after the state
    assert state(current) == replayed(lake)
    K.compact_lake(lake, NOW)  # the covered files are replaced: the next state forgets them
    build_more(lake, 1)
    seq = materialize_state(spark, lake, "shop", "users")
    with open(os.path.join(lake, L.state_dir("shop", "users", seq), L.STATE_COVERED),
              encoding="utf-8") as f:
        [compacted] = json.load(f)["files"][:-1]
    assert L.COMPACTED_PREFIX in compacted
    assert state(read_current_state(spark, lake, "shop", "users")) == replayed(lake)
