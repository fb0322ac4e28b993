"""The sink contract's outcomes, as the factory's sink gives them: a commit is ACCEPTED or
ALREADY_LANDED, each flush reports one Flushed, and with ``flush_in_handle=False`` a passed
threshold is left to the caller (``flush_wanted``) instead of flushing inside the call."""

from __future__ import annotations

from protocol.binlog.coltypes import FieldType as T
from sinks.contract import CommitOutcome, Flushed, Sink
from sinks.factory import build_sink
from sinks.parquet.testing import StreamBuilder, col


def _sink(lake: str) -> Sink:
    return build_sink(lake, file_size_bytes=1 << 30, flush_rows=2, flush_interval_s=5.0,
                      catch_up_interval_s=60.0, compression="zstd", flush_in_handle=False)


def test_outcomes_and_a_threshold_left_to_the_caller(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lake = str(tmp_path / "lake")
    b = StreamBuilder()
    users = b.table("shop", "users", [col(0, T.LONGLONG, "id", pk=True)])
    flushed: list[Flushed] = []
    sink = _sink(lake)
    sink.on_flush = flushed.append
    assert sink.open() is None
    first = [b.begin(), b.insert(users, [(1,)]), b.commit()]
    sink.handle(first[0])
    sink.handle(first[1])
    assert sink.handle(first[2]) is CommitOutcome.ACCEPTED
    assert not sink.flush_wanted and sink.unlanded
    second = [b.begin(), b.insert(users, [(2,)]), b.commit()]
    sink.handle(second[0])
    sink.handle(second[1])
    assert sink.handle(second[2]) is CommitOutcome.ACCEPTED
    # flush_rows=2 reached: nothing landed inside the call, the caller is told to flush
    assert sink.flush_wanted and sink.durable_position is None and flushed == []
    checkpoint = sink.flush()
    assert checkpoint is not None and checkpoint.seq == 2
    assert len(flushed) == 1 and flushed[0].checkpoint == checkpoint
    assert flushed[0].snapshot_chunks == 0
    assert not sink.flush_wanted and not sink.unlanded
    sink.close()

    again = _sink(lake)  # a replayed stream: the lake has it already
    assert again.open() == checkpoint
    again.handle(first[0])
    again.handle(first[1])
    assert again.handle(first[2]) is CommitOutcome.ALREADY_LANDED
    again.close()
