"""How long to wait before reconnecting, and whether reconnecting can help at all.

The delay is "full jitter" exponential backoff: attempt *n* sleeps a uniformly random time in
``[0, min(max_delay, initial_delay * multiplier**n)]``. Randomising the whole interval (rather
than adding a little noise to a fixed one) is what spreads a fleet of replicas out after the
server they all follow restarts, instead of having them knock in lockstep.

Retrying only makes sense for failures that time can fix: the network, a stalled stream, a server
that restarts or is momentarily overloaded. Failures that need a human — wrong password, missing
privilege, the start position purged from the server, a duplicate server_id, a config error, a
stream binlake cannot decode — must stop the daemon with a non-zero exit instead of turning into
a retry storm that hides the cause. :func:`classify` makes that call in one place.
"""

from __future__ import annotations

import enum
import errno
import random
import ssl

import trio

from protocol import errors
from replica.config import ConfigError, ReconnectConfig
from replica.errors import HeartbeatTimeout
from sinks.contract import SinkError

__all__ = ["Backoff", "Disposition", "classify", "is_permanent", "RETRYABLE_SERVER_CODES",
           "PERMANENT_SERVER_CODES", "LAKE_ERRNOS"]


class Backoff:
    """Exponential backoff with full jitter and a cap.

    ``failed()`` counts a failed connection attempt; ``exhausted`` turns true once
    ``max_attempts`` attempts in a row have failed (never, when ``max_attempts`` is 0), so
    ``max_attempts = 3`` means exactly three attempts. ``next_delay()`` gives the time to sleep
    before the next attempt; ``reset()`` is called once a connection has proved healthy.
    """

    def __init__(self, initial_delay: float = 0.5, max_delay: float = 60.0,
                 multiplier: float = 2.0, max_attempts: int = 0,
                 rng: random.Random | None = None) -> None:
        if initial_delay <= 0 or max_delay < initial_delay or multiplier < 1 or max_attempts < 0:
            raise ValueError("need 0 < initial_delay <= max_delay, multiplier >= 1, "
                             "max_attempts >= 0")
        self.initial_delay = initial_delay
        self.max_delay = max_delay
        self.multiplier = multiplier
        self.max_attempts = max_attempts
        self.attempts = 0  # delays handed out since the last reset (the backoff's exponent)
        self.failures = 0  # failed attempts in a row since the last reset
        self._rng = rng if rng is not None else random.Random()

    @classmethod
    def from_config(cls, config: ReconnectConfig, rng: random.Random | None = None) -> Backoff:
        return cls(config.initial_delay, config.max_delay, config.multiplier,
                   config.max_attempts, rng)

    def ceiling(self, attempt: int) -> float:
        """The upper bound of the delay before attempt number ``attempt`` (0-based)."""
        # Compare exponents rather than computing multiplier**attempt, which overflows a float
        # after a few thousand attempts of a daemon that retries forever.
        bound = self.initial_delay
        for _ in range(attempt):
            bound *= self.multiplier
            if bound >= self.max_delay:
                return self.max_delay
        return min(bound, self.max_delay)

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt; counts the attempt."""
        delay = self._rng.uniform(0.0, self.ceiling(self.attempts))
        self.attempts += 1
        return delay

    def failed(self) -> None:
        """Count one failed connection attempt."""
        self.failures += 1

    @property
    def exhausted(self) -> bool:
        return self.max_attempts > 0 and self.failures >= self.max_attempts

    def reset(self) -> None:
        self.attempts = 0
        self.failures = 0


class Disposition(enum.Enum):
    """What to do about a failure of the replication session."""

    #: Reconnect after a backoff delay and resume from the lake's checkpoint.
    RETRY = "retry"
    #: Stop: the daemon exits with the permanent-error code; a human has to act.
    STOP = "stop"


#: Server error codes that are worth retrying: the server or the connection will come back.
RETRYABLE_SERVER_CODES = frozenset({
    1040,  # ER_CON_COUNT_ERROR: too many connections
    1053,  # ER_SERVER_SHUTDOWN: server shutdown in progress
    1077,  # ER_NORMAL_SHUTDOWN
    1079,  # ER_SHUTDOWN_COMPLETE
    1152,  # ER_ABORTING_CONNECTION
    1158, 1159, 1160, 1161,  # ER_NET_READ_ERROR / _INTERRUPTED, ER_NET_ERROR_ON_WRITE / _INTERRUPTED
    1184,  # ER_NEW_ABORTING_CONNECTION
    1205,  # ER_LOCK_WAIT_TIMEOUT
    1213,  # ER_LOCK_DEADLOCK
    1317,  # ER_QUERY_INTERRUPTED
    1927,  # ER_CONNECTION_KILLED (MariaDB)
    2006, 2013,  # client-side: server has gone away, lost connection
    3169,  # ER_SESSION_WAS_KILLED (MySQL)
})

#: errnos of a filesystem that needs a human (a socket never gives them): never retried.
LAKE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EACCES,
                         errno.EPERM})

#: Server error codes that a retry cannot fix, whatever exception class carries them.
PERMANENT_SERVER_CODES = frozenset({
    1044,  # ER_DBACCESS_DENIED_ERROR
    1045,  # ER_ACCESS_DENIED_ERROR
    1129,  # ER_HOST_IS_BLOCKED: needs FLUSH HOSTS
    1130,  # ER_HOST_NOT_PRIVILEGED
    1142, 1143,  # ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR
    1227,  # ER_SPECIFIC_ACCESS_DENIED_ERROR: e.g. REPLICATION SLAVE missing
    1236,  # ER_MASTER_FATAL_ERROR_READING_BINLOG: purged/missing position, bad GTID
    1251,  # ER_NOT_SUPPORTED_AUTH_MODE
    1698,  # ER_ACCESS_DENIED_NO_PASSWORD_ERROR
    1820,  # ER_MUST_CHANGE_PASSWORD
    1862,  # ER_MUST_CHANGE_PASSWORD_LOGIN
    3118,  # ER_ACCOUNT_HAS_BEEN_LOCKED (MySQL)
    4052,  # ER_SLAVE_SAME_ID (MariaDB): another replica uses our server_id
    4151,  # ER_ACCOUNT_HAS_BEEN_LOCKED (MariaDB)
})


def classify(exc: BaseException) -> Disposition:
    """Whether reconnecting can fix ``exc``.

    Permanent (STOP): config errors; authentication refused or impossible (AccessDenied,
    AuthError, TLS that cannot be had or trusted); missing privileges; a start position the
    server cannot serve (GTID purged, not in the binlog, diverged, bad file/position); a duplicate
    server_id — two replicas with one id would keep kicking each other off, so it is a
    configuration error, not a transient one; and bytes binlake cannot decode (a retry would read
    the same bytes again). Unknown exceptions are bugs: STOP rather than loop.

    The lake is never retried: a :class:`~sinks.errors.SinkError` (disk full, I/O error,
    read-only, permission, another writer) stops, and so does a bare ``OSError`` whose errno
    only a filesystem gives (:data:`LAKE_ERRNOS`), should one ever escape the sink unwrapped.

    Retryable (RETRY): other OSErrors and trio's broken/closed streams (network, server restart),
    timeouts and stalls (HeartbeatTimeout), checksum mismatches (bytes damaged in transit are
    read again; a damaged file on the server keeps failing until max_attempts), and server errors
    whose codes say the server or connection is going away or busy.
    """
    if isinstance(exc, BaseExceptionGroup):
        # trio nurseries wrap failures: the group is retryable only if every part is.
        parts = [classify(e) for e in exc.exceptions]
        return Disposition.RETRY if all(p is Disposition.RETRY for p in parts) else Disposition.STOP
    if isinstance(exc, ConfigError | SinkError):
        return Disposition.STOP
    if isinstance(exc, OSError) and exc.errno in LAKE_ERRNOS:
        return Disposition.STOP
    if isinstance(exc, errors.ServerError):
        return _classify_server_error(exc)
    if isinstance(exc, HeartbeatTimeout | errors.ChecksumMismatch):
        return Disposition.RETRY
    if isinstance(exc, errors.ProtocolError):
        # AuthError, TlsError, MalformedPacket and decode errors, SemiSyncError, GtidError
        return Disposition.STOP
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Disposition.STOP
    if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError | trio.TooSlowError
                  | TimeoutError | EOFError | ConnectionError | OSError):
        return Disposition.RETRY
    return Disposition.STOP


def _classify_server_error(exc: errors.ServerError) -> Disposition:
    if isinstance(exc, errors.AccessDenied | errors.MissingPrivilege | errors.BinlogDumpError):
        # every BinlogDumpError subclass (GtidPurged, DuplicateServerId, ...) is permanent
        return Disposition.STOP
    if exc.code in PERMANENT_SERVER_CODES:
        return Disposition.STOP
    if exc.code in RETRYABLE_SERVER_CODES:
        return Disposition.RETRY
    # Other server errors during registration or dump are rare; they come from the server's
    # state, which can change (a restart, a lock), so they are retried — bounded by the backoff.
    return Disposition.RETRY


def is_permanent(exc: BaseException) -> bool:
    return classify(exc) is Disposition.STOP
