"""Compaction on object storage: a commit that changes no data, beside a running writer.

On disk a compaction swaps a partition's directory (``sinks/parquet/compact.py``). On object
storage the lake is its commit log (``commit.py``), so a compaction is one more record:

1. the log is read (records ``1..base``); the live daemon files (``part-*``) of each partition
   whose files are all older than ``min_age`` (a file's age: its newest row's source commit
   time, ``_commit_ts`` from the footer — the store keeps no modification time binlake
   trusts) are the inputs;
2. each partition's inputs are rewritten, sorted by ``(_seq, _row)``, into files of about
   ``target_size`` (streamed uploads) named ``compacted-g<base>-<first _seq>-<k>-c<run>.parquet``:
   no epoch tag, so a writer's start never sweeps a compaction's outputs, and a run token, so
   two compactions never write the same key;
3. one record adds the outputs and removes the inputs, ``data_change`` false, ``compaction``
   true, carrying the checkpoint of the record it follows unchanged. It takes the next free
   number with ``If-None-Match: *`` **without the writer's lease**: a writer finding its
   number taken by a compaction commits at the next one (``ObjectCommitter.commit``). If a
   record created since ``base`` removed one of the inputs (another compaction), this run
   is abandoned and its outputs deleted; otherwise the create is retried at the next number;
4. the objects a compaction record removed stay readable at their keys for ``grace`` seconds
   after it (its ``time``): a batch reader's file list or a streaming query's batch planned
   before the compaction still reads them. A later run deletes them (``_compact_purged.json``
   remembers how far it got). The guarantee is the grace period's: a reader that acts on a
   file list older than ``grace`` may find a file gone (and fails; it never reads wrong rows).

Readers never see a half-done compaction: before its record the outputs are objects no record
names (unread); after it the log says the inputs are replaced, and every reader of the log
sees the same rows (a streaming reader skips ``data_change``-false additions).

A killed compaction leaves outputs no record names (``-c<run>`` objects). The next run that
finds such objects removes them without ever racing a compaction that is still running: it
first creates a *fence* record (a compaction record adding and removing nothing), then reads
the log up to the fence and deletes only the ``-c`` objects no record up to it adds. A
compaction still running commits only if no fence sits between its base and its own record
(step 3 re-reads every record in between): its record is either before the fence (its outputs
are named, so kept) or it sees the fence and abandons (its outputs were never live).
"""

from __future__ import annotations

import datetime
import json
import logging
import posixpath
import re
import secrets
import time
from collections import defaultdict
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ..parquet import layout as L
from ..parquet.compact import ROW_GROUP_BYTES, CompactOptions, CompactStats
from .commit import CommitLog, Record, Retry
from .logstate import PURGED, LogState, lake_objects, purged_number, read_state
from .store import ObjectStore
from .view import is_data_name, read_records

__all__ = ["PURGED", "compact_store"]

log = logging.getLogger("binlake.compact")

_OUTPUT = re.compile(r"/compacted-g(\d+)-\d+-\d+-c[0-9a-f]+\.parquet$")


def compact_store(store: ObjectStore, url: str, options: CompactOptions | None = None,
                  now: float | None = None, retry: Retry | None = None,
                  stop: Callable[[], bool] | None = None) -> CompactStats:
    """Compact every partition of the lake at ``url`` whose files are old enough, in one
    compaction record; delete what earlier compactions replaced once ``grace`` has passed.
    Safe beside a running writer and another compaction (module docstring).

    ``stop`` (the daemon's background compaction: true once the daemon is stopping) is asked
    before each output file is written: once it is true the run deletes the outputs it wrote
    and returns without a record, so a clean stop leaves no object outside the log."""
    options = options or CompactOptions()
    stopping = stop or (lambda: False)
    retry = retry or Retry()
    clock = time.time() if now is None else now
    run = secrets.token_hex(4)
    state = read_state(store, retry=retry)
    stats = CompactStats()
    _purge(store, state, options.grace, clock, retry)
    if _sweep_outputs(store, url, state, clock, run, retry):
        state = read_state(store, retry=retry)  # past the fence this run created
    base = state.number
    live = state.names
    adds: list[str] = []
    removes: list[str] = []
    for partition, inputs in sorted(_partitions(live).items()):
        if len(inputs) < 2 or not _old_enough(store, inputs, options.min_age, clock):
            continue
        if stopping():
            break
        outputs, rows = _rewrite(store, partition, inputs, base, run, options, stopping)
        if stopping():
            adds += outputs
            break
        if not outputs:
            continue
        adds += outputs
        removes += inputs
        stats.count(partition, len(inputs), len(outputs), rows)
    if adds and stopping():
        retry.call("removing a stopped compaction's files", lambda: store.delete_many(adds))
        log.info("compaction of %s stopped before its record: its %d files removed", url,
                 len(adds))
        return CompactStats()
    if adds and _commit(store, url, base, adds, removes, clock, run, retry) is None:
        retry.call("removing an abandoned compaction's files", lambda: store.delete_many(adds))
        log.info("compaction of %s abandoned: another compaction replaced some of its inputs "
                 "or fenced it first", url)
        return CompactStats()
    return stats


def _partitions(live: dict[str, str]) -> dict[str, list[str]]:
    """Partition (``<db>/<t>/schema_version=N/commit_date=D``) → keys of its daemon files, in
    name order (a part's name is its first ``_seq``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for name in sorted(live):
        if is_data_name(name) and L.is_original(posixpath.basename(name)):
            found[posixpath.dirname(name)].append(live[name])
    return found


def _old_enough(store: ObjectStore, keys: list[str], min_age: float, now: float) -> bool:
    if min_age <= 0:
        return True
    limit = now - min_age
    for key in keys:
        newest = _newest_commit(store, key)
        if newest is None or newest > limit:
            return False
    return True


def _newest_commit(store: ObjectStore, key: str) -> float | None:
    """The newest ``_commit_ts`` in ``key``'s footer statistics (seconds), None if unknown."""
    with store.open_input(key) as stream:
        metadata = pq.ParquetFile(stream).metadata
    schema = metadata.schema.to_arrow_schema()
    index = schema.get_field_index("_commit_ts")
    if index < 0:
        return None
    newest: float | None = None
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max:
            return None
        value = stats.max
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.UTC)
            seconds = value.timestamp()
        else:
            seconds = float(value) / 1e6
        newest = seconds if newest is None else max(newest, seconds)
    return newest


def _rewrite(store: ObjectStore, partition: str, inputs: list[str], base: int, run: str,
             options: CompactOptions, stopping: Callable[[], bool]) -> tuple[list[str], int]:
    """Write the compacted files of ``inputs``; ([], 0) if their schemas differ (the daemon
    never does that within a partition). Once ``stopping()`` is true no further file is
    written: the caller deletes what was."""
    tables = []
    for key in inputs:
        if stopping():
            return [], 0
        with store.open_input(key) as stream:
            tables.append(pq.read_table(stream))
    schema = tables[0].schema
    if any(not t.schema.equals(schema, check_metadata=False) for t in tables):
        log.warning("not compacting %s: its files' schemas differ", partition)
        return [], 0
    merged = pa.concat_tables(tables).sort_by([("_seq", "ascending"), ("_row", "ascending")])
    del tables
    outputs: list[str] = []
    offset = 0
    per_file = max(1, int(merged.num_rows * options.target_size
                          / max(1, merged.nbytes)))  # rows per output of about target_size
    per_group = max(1, int(merged.num_rows * ROW_GROUP_BYTES / max(1, merged.nbytes)))
    while offset < merged.num_rows and not stopping():
        piece = merged.slice(offset, per_file)
        first_seq = int(piece.column("_seq")[0].as_py())
        name = L.compacted_file(partition, base, first_seq, len(outputs))
        key = name[:-len(L.DATA_SUFFIX)] + f"-c{run}{L.DATA_SUFFIX}"
        with store.open_output(key) as out:
            writer = pq.ParquetWriter(out, schema, compression=options.compression,
                                      write_statistics=True)
            writer.write_table(piece, row_group_size=per_group)
            writer.close()
        outputs.append(key)
        offset += piece.num_rows
    return outputs, merged.num_rows


def _is_fence(record: Record) -> bool:
    return record.compaction and not record.adds and not record.removes


def _commit(store: ObjectStore, url: str, base: int, adds: list[str], removes: list[str],
            now: float, run: str, retry: Retry) -> int | None:
    """Create a compaction record at the next free number (module docstring, step 3): its
    number once it exists; None if a record since ``base`` removed one of the inputs or is a
    fence (another run's sweep, which may have deleted this run's outputs)."""
    commit_log = CommitLog(store, retry)
    wanted = set(removes)
    seen = base
    while True:
        newer = read_records(store, after=seen, retry=retry)
        if any(wanted.intersection(r.removes) or _is_fence(r) for r in newer):
            return None
        if newer:
            seen = newer[-1].number
        previous = commit_log.read(seen) if seen else None
        record = Record(seen + 1, f"compact-{run}", tuple(adds), tuple(removes),
                        previous.checkpoint if previous is not None else None,
                        data_change=False, compaction=True, time=now)
        if commit_log.create(record):
            commit_log.set_hint(record.number)
            log.info("compaction of %s committed as record %d", url, record.number)
            return record.number


def _purge(store: ObjectStore, state: LogState, grace: float, now: float,
           retry: Retry) -> None:
    """Delete what compaction records older than ``grace`` removed (module docstring, 4)."""
    done = purged_number(store, retry)
    reached = done
    doomed: list[str] = []
    for number, (time_of, removes) in sorted(state.replaced.items()):
        if number <= done:
            continue
        if time_of is None or time_of > now - grace:
            break
        doomed += removes
        reached = number
    if reached > done:
        retry.call("removing files compactions replaced", lambda: store.delete_many(doomed))
        store.put(PURGED, json.dumps({"number": reached}).encode())
        log.info("removed %d files compactions had replaced more than %.0f s ago",
                 len(doomed), grace)


def _sweep_outputs(store: ObjectStore, url: str, state: LogState, now: float, run: str,
                   retry: Retry) -> bool:
    """Delete the outputs of killed compactions behind a fence record (module docstring);
    True if a fence was created. An output is named while it is live or replaced but not yet
    purged; once purged it is gone."""
    def unnamed(known: LogState) -> list[str]:
        named = known.kept()
        return [info.key for info in lake_objects(store, retry)
                if _OUTPUT.search("/" + info.key) and info.key not in named]

    if not unnamed(state):
        return False
    fence = _commit(store, url, state.number, [], [], now, run, retry)
    if fence is None:  # another run fenced first: its sweep does this
        return False
    doomed = unnamed(read_state(store, upto=fence, retry=retry))
    if doomed:
        log.info("removing %d files of interrupted compactions", len(doomed))
        retry.call("removing interrupted compactions' files", lambda: store.delete_many(doomed))
    return True
