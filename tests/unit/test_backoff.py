"""replica.core.backoff: delay bounds, the cap, jitter spread, and which failures stop the daemon."""

from __future__ import annotations

import random
import ssl

import pytest
import trio

from protocol import errors
from replica.config import ConfigError, ReconnectConfig
from replica.core.backoff import Backoff, Disposition, classify, is_permanent
from replica.errors import HeartbeatTimeout


def test_delays_stay_within_the_exponential_bound_and_the_cap() -> None:
    backoff = Backoff(initial_delay=0.5, max_delay=10.0, multiplier=2.0, rng=random.Random(1))
    for attempt in range(200):
        bound = min(10.0, 0.5 * 2.0**attempt) if attempt < 100 else 10.0
        assert backoff.ceiling(attempt) == pytest.approx(bound)
        delay = backoff.next_delay()
        assert 0.0 <= delay <= bound
    assert backoff.attempts == 200


def test_ceiling_does_not_overflow_after_many_attempts() -> None:
    backoff = Backoff(initial_delay=1.0, max_delay=30.0, multiplier=10.0)
    assert backoff.ceiling(100_000) == 30.0


def test_full_jitter_spreads_over_the_whole_interval() -> None:
    backoff = Backoff(initial_delay=1.0, max_delay=8.0, rng=random.Random(7))
    backoff.attempts = 10  # at the cap: delays uniform in [0, 8]
    delays = []
    for _ in range(2000):
        delays.append(backoff.next_delay())
        backoff.attempts = 10
    assert min(delays) < 0.5 and max(delays) > 7.5
    assert 3.5 < sum(delays) / len(delays) < 4.5


def test_reset_and_exhaustion() -> None:
    backoff = Backoff(initial_delay=0.1, max_delay=1.0, max_attempts=3)
    for _ in range(2):  # max_attempts = 3: the third failure in a row is the last
        backoff.failed()
        assert not backoff.exhausted
        backoff.next_delay()
    backoff.failed()
    assert backoff.exhausted and backoff.failures == 3 and backoff.attempts == 2
    backoff.reset()
    assert backoff.attempts == 0 and backoff.failures == 0 and not backoff.exhausted
    assert not Backoff(max_attempts=0).exhausted


def test_from_config() -> None:
    backoff = Backoff.from_config(ReconnectConfig(initial_delay=0.2, max_delay=3.0, multiplier=3.0,
                                                  max_attempts=5))
    assert (backoff.initial_delay, backoff.max_delay, backoff.multiplier, backoff.max_attempts) == (
        0.2, 3.0, 3.0, 5)


@pytest.mark.parametrize("kwargs", [dict(initial_delay=0), dict(initial_delay=2, max_delay=1),
                                    dict(multiplier=0.5), dict(max_attempts=-1)])
def test_invalid_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)  # type: ignore[arg-type]


PERMANENT = [
    ConfigError("bad", key="server.port"),
    errors.AccessDenied(1045, "28000", "Access denied for user 'repl'@'localhost'"),
    errors.MissingPrivilege(1227, "42000", "need REPLICATION SLAVE"),
    errors.ServerError(1227, "42000", "Access denied; you need the REPLICATION SLAVE privilege"),
    errors.GtidPurged(1236, "HY000", "purged"),
    errors.GtidNotInBinlog(1236, "HY000", "not in binlog"),
    errors.GtidDiverged(1236, "HY000", "diverged"),
    errors.BinlogPositionError(1236, "HY000", "bad pos"),
    errors.DuplicateServerId(4052, "HY000", "same server id"),
    errors.ServerError(1236, "HY000", "Could not find first log file name"),
    errors.UnsupportedAuthPlugin("dialog"),
    errors.InsecureTransport("would send password in clear"),
    errors.TlsError("server has no TLS"),
    errors.MalformedPacket("garbage"),
    errors.RowDecodeError("bad row", type_code=30),
    ssl.SSLCertVerificationError("certificate verify failed"),
    ValueError("a bug"),
]

RETRYABLE = [
    OSError("connection refused"),
    ConnectionResetError(),
    TimeoutError(),
    EOFError(),
    trio.BrokenResourceError("socket connection broken"),
    trio.ClosedResourceError(),
    trio.TooSlowError(),
    HeartbeatTimeout("no heartbeat for 10 s"),
    errors.ChecksumMismatch("mariadb-bin.000001", 256, 1, 2),
    errors.ServerError(1053, "08S01", "Server shutdown in progress"),
    errors.ServerError(1927, "70100", "Connection was killed"),
    errors.ServerError(1040, "08004", "Too many connections"),
    ssl.SSLError("EOF occurred in violation of protocol"),
]


@pytest.mark.parametrize("exc", PERMANENT, ids=lambda e: type(e).__name__)
def test_permanent_failures_stop(exc: BaseException) -> None:
    assert classify(exc) is Disposition.STOP
    assert is_permanent(exc)


@pytest.mark.parametrize("exc", RETRYABLE, ids=lambda e: type(e).__name__)
def test_transient_failures_retry(exc: BaseException) -> None:
    assert classify(exc) is Disposition.RETRY
    assert not is_permanent(exc)


def test_exception_groups_retry_only_if_every_part_does() -> None:
    assert classify(ExceptionGroup("x", [OSError(), trio.TooSlowError()])) is Disposition.RETRY
    assert classify(ExceptionGroup("x", [OSError(), errors.GtidPurged(1236, "", "p")])) \
        is Disposition.STOP


def test_sole_exception_unwraps_a_nursery_group() -> None:
    import trio

    from replica.errors import sole_exception

    stall = HeartbeatTimeout("stalled")
    group = BaseExceptionGroup("nursery", [stall, BaseExceptionGroup("inner", [
        trio.Cancelled._create()])])
    assert sole_exception(group) is stall
    two = BaseExceptionGroup("nursery", [stall, ValueError("x")])
    assert sole_exception(two) is two
