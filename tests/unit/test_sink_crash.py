"""Crash safety of ParquetSink: a crash at any instant neither loses nor duplicates a transaction.

Two proofs:

* fault injection: every filesystem step of the commit protocol (renames, fsyncs, removals) is
  made to "crash" in turn; the sink is abandoned, a new one opens the lake, the stream is
  replayed from the start (the sink skips what its checkpoint covers) — and the lake must equal
  the lake of a run without crashes;
* SIGKILL: a writer subprocess is killed at random moments (``BINLAKE_CRASH_ITERATIONS`` times,
  default 20) and restarted each time; the final lake must equal the reference, with no
  ``(_seq, _row)`` twice.

Run as a script (``python tests/unit/test_sink_crash.py LAKE``) this module is the writer.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from protocol.binlog.coltypes import FieldType as T
from sinks.parquet import ParquetSink, SinkOptions
from sinks.parquet import commit as C
from sinks.parquet.testing import StreamBuilder, col

SEED = 20260101
SMALL = SinkOptions(memory_limit_bytes=256 * 1024, row_group_bytes=64 * 1024,
                    file_size_bytes=128 * 1024, flush_rows=700)


def workload(seed: int = SEED, transactions: int = 240) -> list[list[Any]]:
    """A deterministic random stream: several tables, I/U/D, PK changes, rollbacks, an ALTER,
    a big (spilling) transaction. Returns a list of transactions (lists of items)."""
    rng = random.Random(seed)
    b = StreamBuilder()
    accounts_cols = [col(0, T.LONGLONG, "id", pk=True), col(1, T.VARCHAR, "owner", charset=45),
                     col(2, T.NEWDECIMAL, "balance", precision=12, scale=2)]
    events_cols = [col(0, T.LONG, "id", pk=True, unsigned=True), col(1, T.BLOB, "payload",
                                                                      binary=True)]
    accounts = b.table("bank", "accounts", accounts_cols)
    events = b.table("bank", "events", events_cols)
    live: dict[int, tuple[Any, ...]] = {}
    next_id = 1
    out: list[list[Any]] = []
    altered = False
    for n in range(transactions):
        if n == transactions // 2 and not altered:
            altered = True
            out.append([b.begin(), b.ddl("bank", "ALTER TABLE accounts ADD COLUMN note TEXT"),
                        b.commit()])
            accounts_cols = [*accounts_cols, col(3, T.BLOB, "note", charset=45)]
            accounts = b.table("bank", "accounts", accounts_cols)
            live = {k: (*v, None) for k, v in live.items()}
            continue
        width = len(accounts_cols)
        items: list[Any] = [b.begin()]
        if n == transactions // 3:  # a big transaction: spills to staging
            for _ in range(30):
                rows = [(next_id + i, rng.randbytes(200)) for i in range(200)]
                next_id += 200
                items.append(b.insert(events, rows))
            items.append(b.commit())
            out.append(items)
            continue
        for _ in range(rng.randint(1, 4)):
            action = rng.random()
            if action < 0.5 or len(live) < 5:
                rows = []
                for _ in range(rng.randint(1, 20)):
                    row = (next_id, f"owner{next_id}", Decimal(rng.randint(0, 10**6)) / 100)
                    row = row + (None,) * (width - 3)
                    live[next_id] = row
                    rows.append(row)
                    next_id += 1
                items.append(b.insert(accounts, rows))
            elif action < 0.8:
                pairs = []
                for key in rng.sample(sorted(live), min(len(live), rng.randint(1, 5))):
                    old = live.pop(key)
                    new_key = next_id if rng.random() < 0.2 else key
                    next_id += new_key == next_id
                    new = (new_key, old[1], Decimal(rng.randint(0, 10**6)) / 100, *old[3:])
                    live[new_key] = new
                    pairs.append((old, new))
                items.append(b.update(accounts, pairs))
            else:
                keys = rng.sample(sorted(live), min(len(live), rng.randint(1, 3)))
                items.append(b.delete(accounts, [live.pop(k) for k in keys]))
        if rng.random() < 0.05:
            # undo the model changes: rolled back
            items.append(b.rollback())
            out.append(items)
            return_to = _replay_model(out, width)
            live = return_to
            continue
        items.append(b.commit())
        out.append(items)
    return out


def _replay_model(transactions: list[list[Any]], width: int) -> dict[int, tuple[Any, ...]]:
    """The accounts table after the committed transactions (to undo a rolled-back one)."""
    state: dict[int, tuple[Any, ...]] = {}
    for items in transactions:
        if type(items[-1]).__name__ != "TransactionCommit":
            continue
        for item in items:
            if type(item).__name__ == "Statement":
                state = {k: (*v, None) for k, v in state.items()}
            if type(item).__name__ != "RowsEvent" or item.table.table != "accounts":
                continue
            if item.kind.value == "I":
                for row in zip(*item.after, strict=True):
                    state[row[0]] = row
            elif item.kind.value == "D":
                for row in zip(*item.before, strict=True):
                    state.pop(row[0])
            else:
                for old, new in zip(zip(*item.before, strict=True), zip(*item.after, strict=True),
                                    strict=True):
                    state.pop(old[0])
                    state[new[0]] = new
    return {k: v[:width] + (None,) * (width - len(v)) for k, v in state.items()}


def land(lake: str, transactions: list[list[Any]], options: SinkOptions = SMALL,
         opened: list[ParquetSink] | None = None, sink: ParquetSink | None = None,
         pace: float = 0.0) -> None:
    """Land ``transactions`` into ``lake`` (through ``sink`` if given), flushing as a daemon
    would every half second of a clock that advances per transaction (and waiting ``pace``
    real seconds after each, for a writer another process stops or kills mid-way)."""
    sink = sink or ParquetSink(lake, options)
    if opened is not None:
        opened.append(sink)
    sink.open()
    clock = 0.0
    try:
        for items in transactions:
            for item in items:
                sink.handle(item)
            clock += 0.5
            sink.maybe_flush(clock)
            if pace:
                time.sleep(pace)
    except _Crash:
        sink._lock.release()  # the kernel drops a dead process's flock; the sink is not closed
        raise
    sink.close()


def lake_rows(lake: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every landed row per table, sorted by (_seq, _row); rows as tuples of all columns."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for table_dir in sorted(glob.glob(os.path.join(lake, "*", "*"))):
        if os.path.basename(os.path.dirname(table_dir)).startswith("_"):
            continue
        rows = []
        for f in sorted(glob.glob(os.path.join(table_dir, "schema_version=*", "*", "*.parquet"))):
            version = f.split("schema_version=")[1].split("/")[0]
            for r in pq.read_table(f).to_pylist():
                rows.append((r["_seq"], r["_row"], version, repr(sorted(r.items()))))
        rows.sort()
        out[table_dir[len(lake):]] = rows
    return out


def assert_no_duplicates(rows: dict[str, list[tuple[Any, ...]]]) -> None:
    for table, table_rows in rows.items():
        keys = [(r[0], r[1]) for r in table_rows]
        assert len(keys) == len(set(keys)), f"duplicate (_seq, _row) in {table}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, list[tuple[Any, ...]]]:
    lake = str(tmp_path_factory.mktemp("reference") / "lake")
    land(lake, workload())
    return lake_rows(lake)


def test_reference_lake_matches_the_model(reference, tmp_path_factory):
    transactions = workload()
    committed = [t for t in transactions if type(t[-1]).__name__ == "TransactionCommit"]
    accounts = reference["/bank/accounts"]
    assert_no_duplicates(reference)
    seqs = {r[0] for rows in reference.values() for r in rows}
    assert max(seqs) == len(committed)
    # current state computed from the change log equals the model
    lake = str(tmp_path_factory.mktemp("model") / "lake")
    land(lake, transactions)
    files = glob.glob(os.path.join(lake, "bank", "accounts", "*", "*", "*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files],
                             promote_options="permissive").to_pylist()
    table.sort(key=lambda r: (r["_seq"], r["_row"]))
    state: dict[int, dict[str, Any]] = {}
    for r in table:
        if r["_op"] == "D":
            state.pop(r["id"], None)
        else:
            state[r["id"]] = r
    model = _replay_model(transactions, 4)
    assert {k: (v["id"], v["owner"], v["balance"], v.get("note")) for k, v in state.items()} \
        == model
    assert len(accounts) == len(table)


class _Crash(BaseException):
    """Stands for the process dying: nothing after it runs (BaseException: no handler eats it)."""


@pytest.mark.slow
def test_a_crash_at_every_commit_step_recovers(tmp_path, monkeypatch):
    transactions = workload(transactions=80)
    reference_lake = str(tmp_path / "reference")
    land(reference_lake, transactions)
    reference = lake_rows(reference_lake)
    real = {"replace": C.OS.replace, "remove": C.OS.remove, "fsync": C.OS.fsync}
    calls = {"n": 0, "limit": 0}

    def crashing(name: str) -> Any:
        def op(self: C.FileSystem, *args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == calls["limit"]:
                raise _Crash(name)
            return real[name](*args, **kwargs)
        return op

    # Patched on the class: monkeypatch undoes an instance's attribute by setting the bound
    # method back on the instance, which would then hide every later patch of the class.
    for name in real:  # the commit protocol's filesystem (commit.FileSystem)
        monkeypatch.setattr(type(C.OS), name, crashing(name))
    land(str(tmp_path / "count"), transactions)
    total = calls["n"]
    # every step of the first commits (new directories, first manifest), then a sample
    steps = list(range(1, 24)) + random.Random(SEED).sample(range(24, total + 1), 8)
    for step in steps:
        lake = str(tmp_path / f"lake{step}")
        calls.update(n=0, limit=step)
        crashed: list[ParquetSink] = []
        with pytest.raises(_Crash):
            land(lake, transactions, opened=crashed)
        crashed[0]._lock.release()  # the process died: the kernel drops its lock
        calls.update(n=0, limit=0)
        land(lake, transactions)  # restart: recover, replay from the start, finish
        got = lake_rows(lake)
        assert_no_duplicates(got)
        assert got == reference, f"a crash at filesystem step {step} changed the lake"


@pytest.mark.slow
def test_sigkill_at_random_moments(reference, tmp_path):
    iterations = int(os.environ.get("BINLAKE_CRASH_ITERATIONS", "20"))
    lake = str(tmp_path / "lake")
    rng = random.Random(os.environ.get("BINLAKE_CRASH_SEED", "7"))
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    # how long the landing itself takes, to spread the kills over the whole workload
    landing = _run_child(str(tmp_path / "timing"), env, None)
    killed = 0
    for _ in range(iterations):
        if _run_child(lake, env, rng.uniform(0, 1.5 * landing / iterations)) < 0:
            killed += 1
    _run_child(lake, env, None)
    got = lake_rows(lake)
    assert_no_duplicates(got)
    assert got == reference
    assert killed >= iterations * 0.6, f"only {killed} of {iterations} runs were killed"


def _run_child(lake: str, env: dict[str, str], kill_after: float | None) -> float:
    """Run the writer; SIGKILL it ``kill_after`` s into landing. Returns the landing time, or
    -1 when the child was killed."""
    child = subprocess.Popen([sys.executable, __file__, lake], env=env, stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    started = time.monotonic()
    if kill_after is None:
        assert child.wait() == 0
        return time.monotonic() - started
    time.sleep(kill_after)
    if child.poll() is None:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        return -1.0
    assert child.returncode == 0
    return time.monotonic() - started


if __name__ == "__main__":
    _transactions = workload()
    print("ready", flush=True)
    land(sys.argv[1], _transactions)
