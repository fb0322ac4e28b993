"""``SinkStats``: what a sink has done since it was made, as one typed counters record.

The sink's roles bump its counters by attribute as they work; whoever asks (tests, benchmarks,
an operator's summary) gets a copy from ``Sink.stats``, read by attribute too. A misspelt
counter is then a type error, not a silent zero, and no caller learns what happened by
diffing string-keyed dictionaries.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

__all__ = ["SinkStats"]


@dataclass(slots=True)
class SinkStats:
    """Counters since the sink was made."""

    transactions: int = 0  # committed transactions handed over (snapshot chunks included)
    rows: int = 0  # their rows
    skipped_transactions: int = 0  # replayed transactions the lake already held
    rollbacks: int = 0
    statement_dml: int = 0  # statement-based DML seen (cannot land as rows)
    ddl: int = 0  # DDL statements logged
    files: int = 0  # Parquet files committed
    flushes: int = 0
    spilled_batches: int = 0  # batches of an open transaction written to disk
    xa_prepared: int = 0
    xa_committed: int = 0
    xa_rolled_back: int = 0
    json_diff_rows: int = 0  # rows landed as ``_json_diff`` (no before image)
    snapshot_rows: int = 0
    snapshot_chunks: int = 0

    def copy(self) -> SinkStats:
        """The counters now, in a record of their own (the sink's keep counting)."""
        return copy.copy(self)
