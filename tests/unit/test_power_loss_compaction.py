"""Power loss during a local compaction, modelled as the commit protocol's is.

``tests/unit/test_power_loss.py``'s :class:`ModelFs` records every operation the real
:func:`compact_lake` makes — the staged partition built in ``_compact_staging/``, the compaction
record and the commit record, the ``renameat2(RENAME_EXCHANGE)`` of the staged and the live
partition, the move of the old one to the trash — and every state a power loss could leave
(each crash point × each subset of the operations not yet durable) is rebuilt. On each, the
daemon's start runs (:func:`recover_if_idle`), and then:

* every partition holds all its old files or all its new ones, never a mixture, and every
  committed row exactly once (its Parquet files read back);
* the partition's compaction record (``<table>/_compacted/``) exists exactly when the
  partition was switched, naming what it replaced;
* nothing is left of the compaction's bookkeeping (``_compact.json``, ``_compact_staging/``),
  and a second recovery has nothing to do;
* the next compaction run finishes the job: every partition compacted, the rows intact.

Where the compaction was under way (its commit record on disk), a second power loss during that
recovery is explored the same way. Retention (:func:`drop_history`, whole partitions moved to
the trash) is explored too: each retired partition is whole or gone, gone only once the table's
``_retention.json`` covers its rows, and gone for good once ``drop_history`` returned.

What it found, all fixed in ``sinks/parquet/compact.py``: the compaction record was written
before the commit record, so a crash between the two left a record (or its temporary file) of
a switch that never happened, which no recovery knew of; the record's ``_compacted/``
directory, new at a table's first compaction, was never made durable in its parent, so a power
loss after the switch could lose the record of a switch that did happen; and a crash while the
generation counter was replaced left its temporary file for good. ``compact_partition`` now
writes the commit record first and makes the record's directory durable with it, and recovery
removes both temporary files. Retention fsync-ed only the directory a partition left, not the
trash directory it was renamed into, so by ``sinks/storage.py``'s promise (a rename is durable
once its destination's directory is) a dropped partition could come back; it fsyncs both now.
"""

from __future__ import annotations

import functools
import os
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.parquet import commit as C
from sinks.parquet import compact as K
from sinks.parquet import layout as L

from .test_power_loss import LAKE, ModelFs, State, _crash_states

NOW = 10_000.0
OPTIONS = K.CompactOptions(min_age=0.0, target_size=1 << 30, grace=3600.0)
SCHEMA = pa.schema([("_seq", pa.int64()), ("_row", pa.int32()), ("v", pa.string())])

ORDERS = "shop/orders/schema_version=1/commit_date=2024-01-01"  # compacted once already
USERS = "shop/users/schema_version=1/commit_date=2024-01-01"  # its table's first compaction
ACCOUNTS = "bank/acct/schema_version=1/commit_date=2024-01-02"  # one file: left alone
#: partition -> {file name: first _seq of its rows}
FILES = {
    ORDERS: {"compacted-g00000001-0000000000000001-000.parquet": 1,
             "part-0000000000000003-000.parquet": 3, "part-0000000000000005-000.parquet": 5},
    USERS: {"part-0000000000000002-000.parquet": 2, "part-0000000000000004-000.parquet": 4,
            "part-0000000000000006-000.parquet": 6},
    ACCOUNTS: {"part-0000000000000007-000.parquet": 7},
}
COMPACTED = (ORDERS, USERS)


def _rows(first_seq: int) -> list[tuple[int, int, str]]:
    return [(first_seq, row, f"txn {first_seq} row {row}") for row in range(2)]


def _parquet(rows: list[tuple[int, int, str]]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table([list(c) for c in zip(*rows, strict=True)], schema=SCHEMA), sink)
    return sink.getvalue().to_pybytes()


def _expected_rows(partition: str) -> list[tuple[int, int, str]]:
    return sorted(row for first in FILES[partition].values() for row in _rows(first))


def _base_lake() -> State:
    """The lake before the compaction, everything on it durable."""
    fs = ModelFs()
    fs.write(f"{LAKE}/{L.CHECKPOINT}", C.dumps({"seq": 7}))
    fs.write(f"{LAKE}/{L.COMPACT_GENERATION}", C.dumps({"generation": 1}))
    for partition, files in FILES.items():
        fs.makedirs(f"{LAKE}/{partition}")
        for name, first in files.items():
            fs.write(f"{LAKE}/{partition}/{name}", _parquet(_rows(first)))
    first = K.CompactionRecord(1, ORDERS, ("part-0000000000000001-000.parquet",),
                               ("compacted-g00000001-0000000000000001-000.parquet",))
    fs.makedirs(f"{LAKE}/{os.path.dirname(L.compaction_record(ORDERS, 1))}")
    fs.write(f"{LAKE}/{L.compaction_record(ORDERS, 1)}", C.dumps(first.to_json()))
    return fs.state.copy()


def _lake_rows(fs: ModelFs, partition: str) -> list[tuple[Any, ...]]:
    """Every row of the partition's data files, as (_seq, _row, v), sorted."""
    return sorted(row for name in fs.listdir(f"{LAKE}/{partition}")
                  for row in _file_rows(fs.read(f"{LAKE}/{partition}/{name}")))


@functools.cache
def _file_rows(data: bytes) -> tuple[tuple[Any, ...], ...]:
    """A Parquet file's rows (an empty or torn file fails to read): the same few files recur
    in every state, read once each."""
    return tuple(tuple(row.values()) for row in pq.read_table(pa.BufferReader(data)).to_pylist())


def _record(fs: ModelFs, partition: str, generation: int) -> K.CompactionRecord | None:
    path = f"{LAKE}/{L.compaction_record(partition, generation)}"
    return K.CompactionRecord.read(path, fs) if fs.exists(path) else None


def _check_partitions(fs: ModelFs, generation: int) -> dict[str, bool]:
    """Each partition all old or all new with every row once, its record there exactly when
    it is new; returns which are new."""
    switched = {}
    for partition, files in FILES.items():
        names = set(fs.listdir(f"{LAKE}/{partition}"))
        record = _record(fs, partition, generation)
        kept = {n for n in files if not L.is_original(n)}
        new = names != set(files)
        if new:
            assert record is not None, f"{partition} was switched but has no record"
            assert names == kept | set(record.outputs), (partition, sorted(names))
            assert record.inputs == tuple(sorted(n for n in files if L.is_original(n)))
            assert not any(L.is_original(n) for n in names)
        else:
            assert record is None, f"{partition} was not switched but has a record"
        rows = _lake_rows(fs, partition)
        assert rows == _expected_rows(partition), f"{partition}: {rows}"
        switched[partition] = new
    return switched


def _check(state: State, generation: int) -> dict[str, bool]:
    """The daemon's start on ``state``, then the invariants; returns which partitions are new."""
    fs = ModelFs(state.copy())
    K.recover_if_idle(LAKE, fs)
    switched = _check_partitions(fs, generation)
    for leftover in (L.COMPACT_MANIFEST, L.COMPACT_MANIFEST + ".tmp", L.COMPACT_STAGING):
        assert not fs.exists(f"{LAKE}/{leftover}"), f"{leftover} left after recovery"
    assert not [p for p in fs.state.entries if p.endswith(".tmp")], "a temporary file left"
    assert K.recover_if_idle(LAKE, fs) is None  # nothing left for a second recovery
    assert fs.read(f"{LAKE}/{L.CHECKPOINT}") == C.dumps({"seq": 7})
    # the next run finishes: every partition with two daemon files or more is compacted
    K.compact_lake(LAKE, OPTIONS, now=NOW, storage=fs)
    for partition in COMPACTED:
        names = fs.listdir(f"{LAKE}/{partition}")
        assert not any(L.is_original(n) for n in names), (partition, names)
    assert {p: _lake_rows(fs, p) for p in FILES} == {p: _expected_rows(p) for p in FILES}
    return switched


def _run_compaction(state: State) -> tuple[ModelFs, K.CompactStats]:
    fs = ModelFs(state.copy())
    stats = K.compact_lake(LAKE, OPTIONS, now=NOW, storage=fs)
    return fs, stats


def explore() -> dict[str, Any]:
    """Every crash point × every durable-or-not subset of the pending operations of one
    compaction run (and a second power loss during each recovery that had work to do);
    returns counts, raises AssertionError at the first state that recovers wrongly."""
    base = _base_lake()
    fs, stats = _run_compaction(base)
    assert (stats.partitions, stats.files_in, stats.files_out) == (2, 5, 2)
    ops = fs.log
    rng = random.Random(26)
    seen: dict[Any, tuple[bool, ...]] = {}
    nested: set[Any] = set()
    for crash, lost, state in _crash_states(base, ops, rng):
        key = _key(state)
        if key in seen:  # many subsets of lost operations leave the same disk
            continue
        try:
            switched = _check(state, 2)
        except Exception as exc:
            raise AssertionError(
                f"power loss after operation {crash} ({ops[crash - 1] if crash else '-'}) "
                f"with these never reaching the disk: {lost}: {exc!r}") from exc
        seen[key] = tuple(switched[p] for p in COMPACTED)
        if f"{LAKE}/{L.COMPACT_MANIFEST}" in state.entries:
            nested |= _recovery_crashes(state, set(seen) | nested)
    return {"operations": len(ops), "states": len(seen), "during_recovery": len(nested),
            "outcomes": sorted(set(seen.values()))}


def _key(state: State) -> Any:
    """What a state holds (names, directories, bytes), whatever its inode numbers."""
    return (frozenset(state.dirs),
            frozenset((path, state.data[inode]) for path, inode in state.entries.items()))


def _recovery_crashes(state: State, checked: set[Any]) -> set[Any]:
    """A second power loss, during the recovery of ``state``: the states checked that
    ``checked`` did not hold yet."""
    fs = ModelFs(state.copy())
    K.recover_if_idle(LAKE, fs)
    new: set[Any] = set()
    for crash, lost, again in _crash_states(state, fs.log, random.Random(len(fs.log))):
        key = _key(again)
        if key in checked or key in new:
            continue
        try:
            _check(again, 2)
        except Exception as exc:
            raise AssertionError(f"power loss during recovery, after its operation {crash}, "
                                 f"with these lost: {lost}: {exc!r}") from exc
        new.add(key)
    return new


def test_every_power_loss_during_compaction_leaves_each_partition_old_or_new() -> None:
    result = explore()
    # both partitions were seen old and new, alone and together
    assert result["outcomes"] == [(False, False), (True, False), (True, True)]  # in turn
    assert result == {"operations": 67, "states": 731, "during_recovery": 430,
                      "outcomes": [(False, False), (True, False), (True, True)]}


def test_the_model_catches_a_record_directory_not_made_durable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A table's first compaction makes ``_compacted/``: without making its entry durable,
    a power loss after the swap can lose the record of a swap that happened."""
    monkeypatch.setattr(K, "ensure_dir", lambda path, known, storage: storage.makedirs(path))
    with pytest.raises(AssertionError, match="was switched but has no record"):
        explore()


def test_the_model_catches_a_swap_not_made_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fsync of the live partition's parent after the exchange, the commit
    record's removal can reach the disk while the swap does not."""
    real = K.fsync_path
    parents = {os.path.dirname(f"{LAKE}/{p}") for p in COMPACTED}
    monkeypatch.setattr(K, "fsync_path",
                        lambda path, storage: None if path in parents else real(path, storage))
    with pytest.raises(AssertionError, match="not switched but has a record"):
        explore()


def test_the_model_catches_the_record_written_before_the_commit_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept record written first: a crash between the two leaves it (or its temporary
    file) for a swap that never happened, which no recovery knows of. The model fails."""
    real = K.replace_atomically
    held: list[tuple[str, bytes]] = []

    def record_first(path: str, data: bytes, storage: ModelFs) -> None:
        if path.endswith(L.COMPACT_MANIFEST):
            held.append((path, data))  # written after the kept record, below
            return
        real(path, data, storage)
        if held:
            real(*held.pop(), storage)

    monkeypatch.setattr(K, "replace_atomically", record_first)
    with pytest.raises(AssertionError, match="not switched but has a record|temporary file"):
        explore()


# --- retention: drop_history moves whole partitions to the trash --------------------------------

LATER = "bank/acct/schema_version=1/commit_date=2024-01-03"
RETIRED = {ACCOUNTS: 7, LATER: 8}  # partition -> the largest _seq it holds


def _retention_lake() -> State:
    fs = ModelFs(_base_lake())
    fs.makedirs(f"{LAKE}/{LATER}")
    fs.write(f"{LAKE}/{LATER}/part-0000000000000008-000.parquet", _parquet(_rows(8)))
    return fs.state.copy()


def _check_retention(state: State, returned: bool) -> tuple[bool, ...]:
    """Each retired partition whole or gone, gone only with the table's retention record at or
    past its rows (a stream that had not read them must fail, not skip them); after
    ``drop_history`` returned, gone. Returns which are gone."""
    fs = ModelFs(state.copy())
    table = f"{LAKE}/bank/acct"
    gone = []
    for partition, highest in RETIRED.items():
        live = f"{LAKE}/{partition}"
        if fs.isdir(live):
            assert not returned, f"{partition} back after drop_history returned"
            assert _lake_rows(fs, partition) == sorted(_rows(highest)), partition
        else:
            assert K.dropped_upto(table, fs) >= highest, f"{partition} gone, unrecorded"
        gone.append(not fs.isdir(live))
    for partition in FILES.keys() - RETIRED.keys():
        assert _lake_rows(fs, partition) == _expected_rows(partition), partition
    return tuple(gone)


def explore_retention() -> dict[str, Any]:
    base = _retention_lake()
    fs = ModelFs(base.copy())
    assert K.drop_history(LAKE, "bank", "acct", covered_seq=8, before="2024-12-31", now=NOW,
                          storage=fs) == 2
    ops = fs.log
    seen: dict[Any, tuple[bool, ...]] = {}
    for crash, lost, state in _crash_states(base, ops, random.Random(27)):
        key = (_key(state), crash == len(ops))
        if key in seen:
            continue
        try:
            seen[key] = _check_retention(state, crash == len(ops))
        except Exception as exc:
            raise AssertionError(
                f"power loss after operation {crash} ({ops[crash - 1] if crash else '-'}) "
                f"with these never reaching the disk: {lost}: {exc!r}") from exc
    return {"operations": len(ops), "states": len(seen),
            "outcomes": sorted(set(seen.values()))}


def test_every_power_loss_during_retention_leaves_partitions_whole_and_recorded() -> None:
    result = explore_retention()
    assert result["outcomes"] == [(False, False), (True, False), (True, True)]  # in turn
    assert result == {"operations": 21, "states": 45,
                      "outcomes": [(False, False), (True, False), (True, True)]}


def test_the_model_catches_a_partition_dropped_before_its_note(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(K, "_record_dropped", lambda table_path, highest, storage: None)
    with pytest.raises(AssertionError, match="gone, unrecorded"):
        explore_retention()


def test_the_model_catches_a_retired_partition_not_made_durable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the source's directory fsync-ed: the rename into the trash may not survive."""
    real = K.fsync_path
    monkeypatch.setattr(K, "fsync_path", lambda path, storage: None
                        if f"/{L.COMPACT_TRASH}/" in path else real(path, storage))
    with pytest.raises(AssertionError, match="back after drop_history returned"):
        explore_retention()
