"""The daemon's configuration: one typed tree, three sources, one error type.

Settings come from, in increasing precedence:

1. a TOML file (``--config PATH``, ``$BINLAKE_CONFIG``, or ``/etc/binlake/binlake.toml`` if it
   exists),
2. ``BINLAKE_<SECTION>_<KEY>`` environment variables (``BINLAKE_SERVER_HOST``),
3. command-line flags (``--host``, ``--set server.host=...``).

Every key is a field of one of the frozen dataclasses below; its ``metadata`` carries the help
text, so the dataclass fields are the single place where keys, types, defaults and meanings are
written down. :func:`reference_document` renders them as ``docs/configuration.md`` (``python -m
replica.config > docs/configuration.md``; a test keeps the file equal to it).

Secrets (the server password) are held in :class:`Secret`, whose ``repr``/``str`` never show the
value, so a config can be logged or printed in a traceback safely. They come from the environment
or from a ``*_file`` path and are refused on the command line, where ``ps`` would show them.

Anything wrong becomes a single :class:`ConfigError` that names the key and where its value came
from (the file, the environment variable or the flag), plus a hint on how to fix it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import re
import tomllib
import types
import typing
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sinks.objectstore.s3 import ADDRESSING as S3_ADDRESSING
from sinks.objectstore.s3 import (
    AWS_CREDENTIALS,
    DEFAULT_REGION,
    S3Settings,
    is_store_url,
    read_secret_file,
    resolve_credential,
    split_url,
)
from sinks.transform import ACTIONS, ColumnRule, Transform, TypeOptions

__all__ = [
    "ConfigError",
    "Secret",
    "ServerConfig",
    "ReplicaConfig",
    "StartConfig",
    "SemiSyncConfig",
    "FilterConfig",
    "LakeConfig",
    "S3Config",
    "ReconnectConfig",
    "MetricsConfig",
    "LogConfig",
    "TransformConfig",
    "TypesConfig",
    "Config",
    "DEFAULT_CONFIG_PATH",
    "ENV_PREFIX",
    "load_config",
    "env_name",
    "reference_markdown",
    "reference_document",
]

DEFAULT_CONFIG_PATH = "/etc/binlake/binlake.toml"
ENV_PREFIX = "BINLAKE_"
#: Environment variables with the prefix that are not config keys.
RESERVED_ENV = frozenset({"BINLAKE_CONFIG"})
#: ``BINLAKE_DEFAULT_<SECTION>_<KEY>``: a default for the key that the config file (and the
#: environment, and flags) override — how an image gives a setting a default of its own
#: (metrics on all interfaces inside a container) without beating a mounted config file.
DEFAULT_ENV_PREFIX = "BINLAKE_DEFAULT_"


class ConfigError(Exception):
    """The configuration is invalid: names the key, where its value came from, and the fix."""

    def __init__(self, message: str, *, key: str | None = None, origin: str | None = None,
                 hint: str | None = None) -> None:
        text = message
        if key is not None:
            text = f"{key}: {text}"
        if origin is not None:
            text = f"{text} (from {origin})"
        super().__init__(text)
        self.key = key
        self.origin = origin
        self.hint = hint


@typing.final
class Secret:
    """A string that never shows itself in ``repr``, ``str`` or f-strings.

    Call :meth:`reveal` at the one place that needs the value (the authentication exchange).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))


def _key(help: str, *, choices: Sequence[str] = (), unit: str = "", secret: bool = False,
         name: str = "", required: bool = False, joins_list: bool = False) -> dict[str, Any]:
    """Field metadata: the help text and the validation hints for one config key.
    ``joins_list``: a text key that also takes a list, kept as its comma-separated text."""
    return {"help": help, "choices": tuple(choices), "unit": unit, "secret": secret,
            "name": name, "required": required, "joins_list": joins_list}


TLS_MODES = ("auto", "disabled", "preferred", "required", "verify-ca", "verify-identity")
START_FROM = ("latest", "earliest", "gtid", "file", "snapshot")
ON_DIVERGENCE = ("stop", "continue")
SEMI_SYNC_MODES = ("off", "ack-after-land", "ack-on-receive")
COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "none")
LOG_FORMATS = ("human", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


# --- the sections ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The primary server binlake replicates from, and how to reach and trust it."""

    host: str = field(default="127.0.0.1", metadata=_key(
        "Server host name or IP address; or the candidate servers of a failover topology, as "
        "a list [\"db1:3306\", \"db2:3306\"] (port defaults to server.port): the daemon "
        "follows whichever is a writable primary and moves on when it is lost.",
        joins_list=True))
    port: int = field(default=3306, metadata=_key("Server TCP port."))
    socket: str | None = field(default=None, metadata=_key(
        "Unix socket path; when set, host and port are not used."))
    user: str = field(default="binlake", metadata=_key(
        "Replication user (needs REPLICATION SLAVE and REPLICATION CLIENT/BINLOG MONITOR)."))
    password: Secret | None = field(default=None, metadata=_key(
        "Password of the user. Give it by environment or password_file, never as a flag.",
        secret=True))
    password_file: str | None = field(default=None, metadata=_key(
        "File holding the password (one trailing newline is ignored)."))
    tls_mode: str = field(default="auto", metadata=_key(
        "TLS: auto (preferred on loopback and unix sockets, required elsewhere), disabled, "
        "preferred (if the server offers it), required, verify-ca "
        "(certificate chain checked against tls_ca), verify-identity (and the host name).",
        choices=TLS_MODES))
    tls_ca: str | None = field(default=None, metadata=_key(
        "CA bundle (PEM) for verify-ca/verify-identity; the system store when unset."))
    tls_cert: str | None = field(default=None, metadata=_key(
        "Client certificate (PEM) for servers that require X509."))
    tls_key: str | None = field(default=None, metadata=_key(
        "Private key (PEM file) of the client certificate."))
    server_public_key_file: str | None = field(default=None, metadata=_key(
        "Server RSA public key (PEM) for caching_sha2_password/sha256_password without TLS."))
    get_server_public_key: bool = field(default=False, metadata=_key(
        "Ask the server for its RSA public key when needed (trusts the network path)."))
    connect_timeout: float = field(default=10.0, metadata=_key(
        "Seconds to connect, negotiate TLS and authenticate.", unit="seconds"))
    read_timeout: float = field(default=30.0, metadata=_key(
        "Seconds a query (not the binlog stream) may take to answer.", unit="seconds"))

    @property
    def candidates(self) -> tuple[tuple[str, int], ...]:
        """The servers ``host`` names, as (host, port), in order: one, or a failover list
        (``db1:3306,db2`` — an entry without a port takes ``port``)."""
        return tuple(_host_and_port(entry.strip(), self.port)
                     for entry in self.host.split(",") if entry.strip())

    def following(self, host: str, port: int) -> ServerConfig:
        """This section with ``host``/``port`` as the one server to reach (a candidate)."""
        return dataclasses.replace(self, host=host, port=port)


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """How binlake presents itself to the server as a replica."""

    server_id: int = field(default=0, metadata=_key(
        "Replica server_id, unique among the server's replicas and the server itself (1..2^32-1).",
        required=True))
    report_host: str | None = field(default=None, metadata=_key(
        "Host name shown in SHOW REPLICA HOSTS."))
    report_port: int = field(default=0, metadata=_key("Port shown in SHOW REPLICA HOSTS."))
    heartbeat_period: float = field(default=5.0, metadata=_key(
        "Seconds between server heartbeats when idle; no data for twice this is a stall.",
        unit="seconds"))
    stop_timeout: float = field(default=8.0, metadata=_key(
        "Seconds SIGTERM/SIGINT may spend flushing, committing and sending ACKs before the "
        "daemon exits anyway (what is not committed is streamed again on restart); keep it "
        "under the supervisor's grace period (docker stop: 10 s).", unit="seconds"))
    stop_at_end: bool = field(default=False, metadata=_key(
        "Stop (exit 0) once the server's binlog end is reached instead of streaming forever: a "
        "batch run that catches up and stops."))


@dataclass(frozen=True, slots=True)
class StartConfig:
    """Where to start streaming; used only when the lake has no checkpoint yet."""

    from_: str = field(default="latest", metadata=_key(
        "latest (the server's current end), earliest (oldest binlog kept), gtid, file, or "
        "snapshot (land the included tables' existing rows, then stream on from there).",
        choices=START_FROM, name="from"))
    gtid: str | None = field(default=None, metadata=_key(
        "GTID position to start after when from = gtid (MariaDB 0-1-100 or a MySQL GTID set)."))
    file: str | None = field(default=None, metadata=_key(
        "Binlog file name to start in when from = file."))
    pos: int = field(default=4, metadata=_key("Position in file to start at when from = file."))
    gtid_strict_mode: bool = field(default=False, metadata=_key(
        "MariaDB: ask the server to enforce GTID strict mode for this replica."))
    gtid_ignore_duplicates: bool = field(default=False, metadata=_key(
        "MariaDB: skip events of a domain already applied (multi-source setups)."))
    on_divergence: str = field(default="stop", metadata=_key(
        "When the server lacks transactions the lake holds (a failover promoted a replica "
        "that was behind): stop (exit 3, the lake unchanged), or continue from where both "
        "histories agree, landing the server's transactions after that point and recording "
        "the lost ones in the lake's checkpoint (divergences).",
        choices=ON_DIVERGENCE))


@dataclass(frozen=True, slots=True)
class SemiSyncConfig:
    """Semi-synchronous replication: whether and when binlake acknowledges transactions."""

    mode: str = field(default="off", metadata=_key(
        "off; ack-after-land (ACK once the transaction is durably in the lake); ack-on-receive "
        "(ACK on arrival, like a stock replica).", choices=SEMI_SYNC_MODES))


@dataclass(frozen=True, slots=True)
class FilterConfig:
    """Which changes land. Patterns are ``database.table`` globs (``shop.*``, ``*.audit_*``)."""

    include: tuple[str, ...] = field(default=(), metadata=_key(
        "Tables to land (database.table globs, case-sensitive); empty means all. A bare name "
        "means the whole database. A pattern matching no table is warned about at start."))
    exclude: tuple[str, ...] = field(default=(), metadata=_key(
        "Tables never to land; wins over include."))
    skip_server_ids: tuple[int, ...] = field(default=(), metadata=_key(
        "Skip transactions that originated on these server ids (loop prevention)."))
    skip_gtid_domains: tuple[int, ...] = field(default=(), metadata=_key(
        "Skip transactions of these GTID domain ids (MariaDB)."))

    def accepts(self, database: str, table: str) -> bool:
        """Whether changes to ``database.table`` land. Case-sensitive, like Linux table names."""
        name = f"{database}.{table}"
        if self.exclude and _compiled_patterns(self.exclude).match(name):
            return False
        return not self.include or _compiled_patterns(self.include).match(name) is not None

    def accepts_database(self, database: str) -> bool:
        """Whether some table of ``database`` may land: not excluded as a whole (``db`` or
        ``db.*``), and named by the database part of an include pattern (or no includes)."""
        if any(_database_part(p)[1] == "*" and fnmatch.fnmatchcase(database, _database_part(p)[0])
               for p in self.exclude):
            return False
        return not self.include or any(fnmatch.fnmatchcase(database, _database_part(p)[0])
                                       for p in self.include)

    def unmatched(self, tables: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
        """The include and the exclude patterns that match none of ``tables`` ((db, table)
        pairs: what exists on the server), each in the order configured."""
        names = [f"{database}.{table}" for database, table in tables]

        def matches_nothing(pattern: str) -> bool:
            compiled = _compiled_patterns((pattern,))
            return not any(compiled.match(name) for name in names)

        return ([p for p in self.include if matches_nothing(p)],
                [p for p in self.exclude if matches_nothing(p)])


_pattern_cache: dict[tuple[str, ...], re.Pattern[str]] = {}


def _database_part(pattern: str) -> tuple[str, str]:
    """``db.table`` glob → (database glob, table glob); a bare ``db`` means ``db.*``."""
    database, dot, table = pattern.partition(".")
    return database, table if dot else "*"


def _compiled_patterns(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for a tuple of ``db.table`` globs; a bare ``db`` means ``db.*``."""
    compiled = _pattern_cache.get(patterns)
    if compiled is None:
        parts = [fnmatch.translate(".".join(_database_part(p))) for p in patterns]
        compiled = re.compile("|".join(f"(?:{p})" for p in parts))
        _pattern_cache[patterns] = compiled
    return compiled


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    """Snapshots: the rows tables already hold, landed as _op = R."""

    chunk_rows: int = field(default=10_000, metadata=_key(
        "Rows read (and landed) per chunk: memory is bounded by two chunks (the next one "
        "is read while one lands); a table without a key is staged in pieces of this many "
        "rows, landed in one commit."))
    chunk_pause: float = field(default=0.0, metadata=_key(
        "Seconds to wait between two chunks (or a keyless table's pieces), to spare a busy "
        "server (0: none).",
        unit="seconds"))
    signal_table: str | None = field(default=None, metadata=_key(
        "db.table of a signal table (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32), data TEXT): "
        "an INSERT of ('an-id', 'snapshot', '{\"tables\": [\"db.table\"]}') seen in the "
        "binlog asks the running daemon for a snapshot of those tables (an optional "
        "\"condition\": \"SQL\" in data limits the rows read). Acknowledged in the log and "
        "binlake status, never written back. Its own rows land only if filter.include takes "
        "the table."))
    on_new_tables: bool = field(default=True, metadata=_key(
        "Snapshot tables that filter.include gained since the lake last ran, at start "
        "(false: warn and leave it to binlake snapshot)."))


@dataclass(frozen=True, slots=True)
class S3Config:
    """A lake on S3 or an S3-compatible store (Ceph, MinIO), used when lake.path is
    s3://BUCKET/PREFIX. Credentials: the *_file keys, else BINLAKE_LAKE_S3_* variables, else
    the standard AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the AWS
    default chain (~/.aws/credentials, an instance role); never logged or shown."""

    endpoint: str | None = field(default=None, metadata=_key(
        "URL of the store, e.g. \"http://127.0.0.1:7480\" (Ceph RGW) or \"https://minio:9000\"; "
        "unset means AWS S3."))
    region: str = field(default=DEFAULT_REGION, metadata=_key(
        "Region requests are signed for (AWS: the bucket's region)."))
    addressing: str = field(default="auto", metadata=_key(
        "Bucket addressing: auto (virtual-hosted on AWS, path-style with an endpoint), path "
        "(https://host/BUCKET/key; needs endpoint) or virtual (https://BUCKET.host/key).",
        choices=S3_ADDRESSING))
    tls_ca: str | None = field(default=None, metadata=_key(
        "CA bundle (PEM) that signed the store's certificate; the system store when unset."))
    connect_timeout: float = field(default=10.0, metadata=_key(
        "Seconds to connect to the store.", unit="seconds"))
    request_timeout: float = field(default=60.0, metadata=_key(
        "Seconds one request may wait for the store's answer.", unit="seconds"))
    max_attempts: int = field(default=3, metadata=_key(
        "Attempts of one request inside the S3 client before the failure reaches binlake (which "
        "retries what can be retried with backoff, its position kept)."))
    lease_duration: float = field(default=30.0, metadata=_key(
        "Seconds of the writer's lease on the lake (renewed every third of it): a second daemon "
        "refuses while the first renews it, and takes over a writer that stopped renewing for "
        "this long (one that died on the same host at once). Only who writes waits on it; a "
        "writer paused past it is fenced by the commit log, never trusted.", unit="seconds"))
    access_key_id: Secret | None = field(default=None, metadata=_key(
        "Access key id; prefer access_key_id_file or AWS_ACCESS_KEY_ID. Never on the command "
        "line.", secret=True))
    access_key_id_file: str | None = field(default=None, metadata=_key(
        "File holding the access key id (one trailing newline is ignored)."))
    secret_access_key: Secret | None = field(default=None, metadata=_key(
        "Secret access key; prefer secret_access_key_file or AWS_SECRET_ACCESS_KEY. Never on "
        "the command line.", secret=True))
    secret_access_key_file: str | None = field(default=None, metadata=_key(
        "File holding the secret access key."))
    session_token: Secret | None = field(default=None, metadata=_key(
        "Session token of temporary credentials; or AWS_SESSION_TOKEN.", secret=True))
    session_token_file: str | None = field(default=None, metadata=_key(
        "File holding the session token."))
    log_snapshot_records: int = field(default=100, metadata=_key(
        "Write a snapshot of the lake's commit log every this many records, so that a start "
        "and every reader read it and the records after it instead of the whole log; 0 = "
        "never (each reads every record)."))

    def settings(self) -> S3Settings:
        """These settings as the S3 store takes them, credentials revealed (the one place)."""
        def reveal(secret: Secret | None) -> str | None:
            return None if secret is None else secret.reveal()

        return S3Settings(
            endpoint=self.endpoint, region=self.region, addressing=self.addressing,
            tls_ca=self.tls_ca, connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout, max_attempts=self.max_attempts,
            access_key_id=reveal(self.access_key_id),
            secret_access_key=reveal(self.secret_access_key),
            session_token=reveal(self.session_token))


@dataclass(frozen=True, slots=True)
class LakeConfig:
    """Where and how changes land as Parquet."""

    path: str = field(default="/var/lib/binlake", metadata=_key(
        "Directory of the lake (created if missing), or s3://BUCKET/PREFIX for a lake on S3 "
        "or a compatible store ([lake.s3]; the bucket must exist)."))
    flush_bytes: int = field(default=64 * 1024 * 1024, metadata=_key(
        "Land a table's buffered rows once they take this many bytes (suffixes KiB, MiB, GiB).",
        unit="bytes"))
    flush_rows: int = field(default=1_000_000, metadata=_key(
        "Land a table's buffered rows once there are this many."))
    flush_interval: float = field(default=5.0, metadata=_key(
        "Land whatever is buffered at least this often, in seconds (data appears in the lake "
        "within about this delay).", unit="seconds"))
    catch_up_flush_interval: float = field(default=60.0, metadata=_key(
        "While the stream is behind the server's end (a backlog), land by size and row count, "
        "and by time only this often, in seconds: a flush writes a file per table it touched.",
        unit="seconds"))
    compression: str = field(default="zstd", metadata=_key(
        "Parquet compression codec (a file of less than 256 KiB of rows is written "
        "uncompressed instead of with zstd or gzip, whose set-up costs more than they save "
        "there).",
        choices=COMPRESSIONS))
    compact_interval: float = field(default=0.0, metadata=_key(
        "Compact the lake in the background this often, in seconds; 0 = off (run `binlake "
        "compact` from cron instead).", unit="seconds"))
    compact_min_age: float = field(default=3600.0, metadata=_key(
        "Compaction rewrites a partition only when all its files are older than this, in "
        "seconds (streaming queries never depend on it).",
        unit="seconds"))
    compact_target_size: int = field(default=128 * 1024 * 1024, metadata=_key(
        "Size of the files compaction writes (suffixes KiB, MiB, GiB).", unit="bytes"))
    compact_grace: float = field(default=3600.0, metadata=_key(
        "Seconds the files compaction replaced stay in _compacted_trash/ before deletion.",
        unit="seconds"))
    file_mode: str = field(default="0640", metadata=_key(
        "Mode of every file binlake creates in the lake, in octal: the owner writes, the "
        "lake's group reads (a Spark reader in another account joins the group), others "
        "nothing. Must be dir_mode without its execute bits."))
    dir_mode: str = field(default="0750", metadata=_key(
        "Mode of every directory binlake creates in the lake, in octal."))
    #: The ``[lake.s3]`` table (a section of its own, not a key).
    s3: S3Config = field(default=S3Config(), metadata={"section": "lake.s3"})

    @property
    def on_object_store(self) -> bool:
        """Whether :attr:`path` is an ``s3://`` URL (the lake lives in a bucket)."""
        return is_store_url(self.path)

    @property
    def file_mode_bits(self) -> int:
        """:attr:`file_mode` as a number (validated by :func:`load_config`)."""
        return int(self.file_mode, 8)

    @property
    def dir_mode_bits(self) -> int:
        """:attr:`dir_mode` as a number (validated by :func:`load_config`)."""
        return int(self.dir_mode, 8)

    @property
    def umask(self) -> int:
        """The process umask that makes the modes exact: every file and directory in the lake
        is created asking for 0666 or 0777 (binlake's own code, its C writers and pyarrow's
        alike), which this umask turns into :attr:`file_mode` and :attr:`dir_mode`."""
        return 0o777 & ~self.dir_mode_bits


@dataclass(frozen=True, slots=True)
class ReconnectConfig:
    """Retrying after network errors, stalls and server restarts (exponential, full jitter)."""

    initial_delay: float = field(default=0.5, metadata=_key(
        "Upper bound of the first retry delay, in seconds.", unit="seconds"))
    max_delay: float = field(default=60.0, metadata=_key(
        "Cap of the retry delay, in seconds.", unit="seconds"))
    multiplier: float = field(default=2.0, metadata=_key(
        "Growth of the delay bound per failed attempt."))
    max_attempts: int = field(default=0, metadata=_key(
        "Give up (exit 1) once this many connection attempts in a row have failed (3: exactly "
        "three attempts; a connection that streams for healthy_after resets the count); 0 "
        "retries forever."))
    healthy_after: float = field(default=30.0, metadata=_key(
        "A connection that streamed this long resets the delay to initial_delay.", unit="seconds"))


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The HTTP endpoint with /metrics (Prometheus), /healthz and /readyz."""

    address: str = field(default="127.0.0.1:9108", metadata=_key(
        "host:port to listen on ([::1]:9108 for IPv6); empty disables the endpoint."))
    ready_max_lag: float = field(default=300.0, metadata=_key(
        "/readyz fails when connected but more than this many seconds behind.", unit="seconds"))

    @property
    def host(self) -> str:
        return _split_address(self.address)[0]

    @property
    def port(self) -> int:
        return _split_address(self.address)[1]


def _host_and_port(entry: str, default_port: int) -> tuple[str, int]:
    """``db1``, ``db1:3306``, ``[::1]:3306`` or ``::1`` → (host, port); raises ValueError."""
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r} is not [v6] or [v6]:port")
        return host, int(rest[1:]) if rest else default_port
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if not port.isdigit() or not host:
            raise ValueError(f"{entry!r} is not host or host:port")
        return host, int(port)
    return entry, default_port


def _split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host, port); raises ValueError."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError("expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError("port out of range")
    return host or "0.0.0.0", port


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Logging: where to, how, and how much."""

    format: str = field(default="human", metadata=_key(
        "human (one readable line per record) or json (one JSON object per line).",
        choices=LOG_FORMATS))
    level: str = field(default="info", metadata=_key("Minimum level logged.", choices=LOG_LEVELS))
    file: str | None = field(default=None, metadata=_key(
        "Append to this file instead of stderr; reopened on SIGHUP (logrotate)."))
    progress_interval: float = field(default=10.0, metadata=_key(
        "While the daemon is catching up, one progress line (transactions and rows landed; "
        "decoded, their rate, bytes read, what is buffered and when it lands; lag, time left) "
        "this often, in seconds; and one per table being snapshotted.",
        unit="seconds"))


@dataclass(frozen=True, slots=True)
class TransformConfig:
    """Column rules: each `[[transform.column]]` table has `match` ("db.table.column", shell
    patterns, the first matching rule wins), `action` ("exclude", "mask", "hash" or
    "truncate"), `mask` (the replacement text; omitted: NULL) and `length` (characters kept by
    "truncate"); see lake-format.md. The keys below hold the key of "hash" rules.

    The rules are :attr:`Config.transform_rules` (``sinks.transform``)."""

    hash_key_file: str | None = field(default=None, metadata=_key(
        "File holding the HMAC-SHA-256 key of action = \"hash\" rules (its bytes, one trailing "
        "newline dropped); or set BINLAKE_TRANSFORM_HASH_KEY. Never logged."))
    hash_key: Secret | None = field(default=None, metadata=_key(
        "The HMAC key itself (prefer hash_key_file); never accepted on the command line.",
        secret=True))


@dataclass(frozen=True, slots=True)
class TypesConfig:
    """How some source types land, chosen when a lake is created and recorded in it
    (`_types.json`): a daemon started on that lake with other choices stops (exit 2) naming
    both."""

    tinyint1_as_boolean: bool = field(default=False, metadata=_key(
        "TINYINT(1) (and BOOL) as boolean: 0 is false, any other value (2, -1) true; "
        "TINYINT(1) UNSIGNED stays an integer (MySQL keeps no width for it). The "
        "binlog carries no display width, so binlake reads it from information_schema "
        "(COLUMN_TYPE) as each table is first seen and after each DDL on it."))
    bigint_unsigned: str = field(default="decimal", metadata=_key(
        "BIGINT UNSIGNED as decimal(20,0) (\"decimal\", every value fits) or as int64 "
        "(\"int64\": a value above 2^63-1 stops the daemon, exit 2, never wraps).",
        choices=("decimal", "int64")))
    wide_decimal: str = field(default="string", metadata=_key(
        "DECIMAL wider than 38 digits (more than Spark reads) as its exact text (\"string\"), "
        "or refused when its table is first seen (\"error\": exit 2).",
        choices=("string", "error")))
    zero_date: str = field(default="null", metadata=_key(
        "DATE, DATETIME and TIMESTAMP: typed columns whose zero or invalid dates land as NULL "
        "(\"null\"), or text columns holding every value as the server prints it, zero dates "
        "included (\"string\"; TIMESTAMP in UTC).",
        choices=("null", "string")))


#: The keys of one ``[[transform.column]]`` table, and the actions it may name.
_RULE_KEYS = frozenset({"match", "action", "mask", "length"})


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration. ``repr`` is safe to log: secrets show as ``***``."""

    replica: ReplicaConfig
    server: ServerConfig = ServerConfig()
    start: StartConfig = StartConfig()
    semi_sync: SemiSyncConfig = SemiSyncConfig()
    filter: FilterConfig = FilterConfig()
    snapshot: SnapshotConfig = SnapshotConfig()
    lake: LakeConfig = LakeConfig()
    reconnect: ReconnectConfig = ReconnectConfig()
    metrics: MetricsConfig = MetricsConfig()
    log: LogConfig = LogConfig()
    transform: TransformConfig = TransformConfig()
    types: TypesConfig = TypesConfig()
    #: The ``[[transform.column]]`` rules, in file order (the first match wins).
    transform_rules: tuple[ColumnRule, ...] = ()
    #: The TOML file that was read, if any.
    source_file: str | None = None

    def secrets(self) -> list[str]:
        """The revealed secret values, for the log redaction filter."""
        s3 = self.lake.s3
        found = [secret.reveal() for secret in (self.server.password, self.transform.hash_key,
                                                s3.access_key_id, s3.secret_access_key,
                                                s3.session_token)
                 if secret is not None and secret.reveal()]
        return found

    def column_transform(self) -> Transform | None:
        """The column rules with their key and the [types] choices, for every path that lands
        or prints rows; None without rules and with the default types."""
        types = TypeOptions(tinyint1_as_boolean=self.types.tinyint1_as_boolean,
                            bigint_unsigned=self.types.bigint_unsigned,
                            wide_decimal=self.types.wide_decimal, zero_date=self.types.zero_date)
        if not self.transform_rules and types.is_default:
            return None
        key = self.transform.hash_key
        return Transform(self.transform_rules,
                         key.reveal().encode("utf-8") if key is not None else None, types)


_SECTIONS: dict[str, type[Any]] = {
    "server": ServerConfig,
    "replica": ReplicaConfig,
    "start": StartConfig,
    "semi_sync": SemiSyncConfig,
    "filter": FilterConfig,
    "snapshot": SnapshotConfig,
    "lake": LakeConfig,
    "lake.s3": S3Config,
    "reconnect": ReconnectConfig,
    "metrics": MetricsConfig,
    "log": LogConfig,
    "transform": TransformConfig,
    "types": TypesConfig,
}


# --- key catalogue -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KeySpec:
    section: str
    name: str  # the key as written in TOML / env / --set
    attr: str  # the dataclass attribute
    kind: str  # str, int, float, bool, secret, str_list, int_list
    optional: bool
    default: Any
    help: str
    choices: tuple[str, ...]
    unit: str
    secret: bool
    required: bool
    joins_list: bool = False

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def env(self) -> str:
        return env_name(self.section, self.name)


def env_name(section: str, key: str) -> str:
    """The environment variable of a key: ``BINLAKE_SERVER_HOST``, ``BINLAKE_LAKE_S3_REGION``."""
    return f"{ENV_PREFIX}{section}_{key}".upper().replace(".", "_")


def _kind_of(hint: Any) -> tuple[str, bool]:
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        (hint,) = args
    if hint is Secret:
        return "secret", optional
    if typing.get_origin(hint) is tuple:
        return ("int_list" if typing.get_args(hint)[0] is int else "str_list"), optional
    return {str: "str", int: "int", float: "float", bool: "bool"}[hint], optional


def _catalogue() -> dict[str, _KeySpec]:
    specs: dict[str, _KeySpec] = {}
    for section, cls in _SECTIONS.items():
        hints = typing.get_type_hints(cls, globalns=globals())
        for f in dataclasses.fields(cls):
            if "section" in f.metadata:
                continue  # a nested table ([lake.s3]): a section of its own
            kind, optional = _kind_of(hints[f.name])
            meta = f.metadata
            spec = _KeySpec(
                section=section, name=meta["name"] or f.name, attr=f.name, kind=kind,
                optional=optional, default=f.default, help=meta["help"], choices=meta["choices"],
                unit=meta["unit"], secret=meta["secret"], required=meta["required"],
                joins_list=meta["joins_list"])
            specs[spec.dotted] = spec
    return specs


KEYS: Mapping[str, _KeySpec] = _catalogue()
_ENV_KEYS = {spec.env: spec for spec in KEYS.values()}


# --- value conversion --------------------------------------------------------------------------

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_SIZE_SUFFIXES = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
                  "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3}
_DURATION_SUFFIXES = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}
_NUMBER_WITH_UNIT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*")


class _BadValue(Exception):
    """Internal: a value that does not convert; becomes a ConfigError with key and origin."""


def _convert(spec: _KeySpec, value: Any, from_text: bool) -> Any:
    """TOML-typed or (from env/flags) text value → the field's Python value."""
    if from_text and spec.optional and value == "":
        return None
    kind = spec.kind
    if kind in ("str", "secret"):
        if spec.joins_list and isinstance(value, list):
            if not value or not all(isinstance(item, str) and item.strip() for item in value):
                raise _BadValue("expected a non-empty list of non-empty strings")
            value = ",".join(item.strip() for item in value)
        if not isinstance(value, str):
            raise _BadValue(f"expected a string, got {_describe(value)}")
        if spec.choices and value not in spec.choices:
            raise _BadValue(f"expected one of {', '.join(spec.choices)}; got {value!r}")
        return Secret(value) if kind == "secret" else value
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise _BadValue(f"expected true or false, got {_describe(value)}")
    if kind == "int":
        return _to_int(spec, value, from_text)
    if kind == "float":
        return _to_float(spec, value, from_text)
    # lists
    if from_text and isinstance(value, str):
        items: list[Any] = _list_from_text(value)
    elif isinstance(value, list):
        items = value
    else:
        raise _BadValue(f"expected a list, got {_describe(value)}")
    if kind == "int_list":
        return tuple(_to_int(spec, item, from_text) for item in items)
    if not all(isinstance(item, str) and item for item in items):
        raise _BadValue("expected a list of non-empty strings")
    return tuple(items)


def _list_from_text(text: str) -> list[Any]:
    """A list given as text (environment, ``--set``): TOML array syntax exactly as the file
    takes it (``["shop.orders", "shop.items"]``, ``[1, 2]``), or the plain comma-separated form
    (``shop.orders,shop.items``). Text that starts like an array but is not one is an error,
    never a single odd pattern that silently matches nothing."""
    stripped = text.strip()
    if not stripped.startswith("["):
        return [item.strip() for item in stripped.split(",") if item.strip()]
    try:
        value = tomllib.loads(f"value = {stripped}")["value"]
    except tomllib.TOMLDecodeError as exc:
        raise _BadValue(f"{text!r} is not a TOML list ({exc}); write [\"a\", \"b\"] or "
                        "a,b") from None
    if not isinstance(value, list):
        raise _BadValue(f"{text!r} is not a TOML list; write [\"a\", \"b\"] or a,b")
    return value


def _to_int(spec: _KeySpec, value: Any, from_text: bool) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and (from_text or spec.unit == "bytes"):
        text = value.strip()
        if spec.unit == "bytes":
            match = _NUMBER_WITH_UNIT.fullmatch(text)
            if match and match.group(2).lower() in _SIZE_SUFFIXES:
                return int(float(match.group(1)) * _SIZE_SUFFIXES[match.group(2).lower()])
            raise _BadValue(f"expected a size like 67108864 or 64MiB, got {value!r}")
        try:
            return int(text, 10)
        except ValueError:
            pass
    raise _BadValue(f"expected an integer, got {_describe(value)}")


def _to_float(spec: _KeySpec, value: Any, from_text: bool) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        match = _NUMBER_WITH_UNIT.fullmatch(value)
        if match:
            suffix = match.group(2).lower()
            if spec.unit == "seconds" and suffix in _DURATION_SUFFIXES:
                return float(match.group(1)) * _DURATION_SUFFIXES[suffix]
            if not suffix and from_text:
                return float(match.group(1))
    if spec.unit == "seconds":
        raise _BadValue(f"expected seconds like 5, 0.5 or 500ms, got {_describe(value)}")
    raise _BadValue(f"expected a number, got {_describe(value)}")


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return f"{type(value).__name__} {value!r}" if not isinstance(value, dict) else "a table"


# --- loading -----------------------------------------------------------------------------------

Origin = str  # "file /etc/binlake/binlake.toml", "env BINLAKE_SERVER_HOST", "flag --host"


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Iterable[tuple[str, Any, str]] = (),
    require_server_id: bool = True,
) -> Config:
    """Build the configuration from a TOML file, the environment and flags, in that precedence.

    Below the file: ``BINLAKE_DEFAULT_<SECTION>_<KEY>`` variables, defaults that replace the
    built-in ones (the container image sets ``BINLAKE_DEFAULT_METRICS_ADDRESS``).

    Args:
      path: the TOML file. ``None`` means ``$BINLAKE_CONFIG``, else ``/etc/binlake/binlake.toml``
        if it exists, else no file. A path given explicitly (argument or env) must exist.
      env: the environment (``os.environ`` when ``None``).
      flags: ``(dotted key, value, flag name)`` triples from the command line, applied last.
        Values may be text (converted like environment values) or already typed.
      require_server_id: False for commands that never register as a replica (``status``);
        the server_id then stays 0 when unset.

    Raises:
      ConfigError: naming the key and the source of the bad value.
    """
    environ = os.environ if env is None else env
    values: dict[str, tuple[Any, Origin]] = {}
    for name, text in environ.items():
        if name.startswith(DEFAULT_ENV_PREFIX):
            spec = _ENV_KEYS.get(ENV_PREFIX + name[len(DEFAULT_ENV_PREFIX):])
            if spec is None:
                raise ConfigError(f"unknown setting {name}", origin="environment",
                                  hint=f"{DEFAULT_ENV_PREFIX}<SECTION>_<KEY> gives a key a "
                                       "default, e.g. BINLAKE_DEFAULT_METRICS_ADDRESS")
            origin = f"env {name} (a default)"
            values[spec.dotted] = (_checked(spec, text, True, origin), origin)

    file_path: str | None
    if path is not None:
        file_path = os.fspath(path)
    elif environ.get("BINLAKE_CONFIG"):
        file_path = environ["BINLAKE_CONFIG"]
    else:
        file_path = DEFAULT_CONFIG_PATH if os.path.exists(DEFAULT_CONFIG_PATH) else None
    if file_path is not None:
        _read_file(file_path, values)

    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX) or name in RESERVED_ENV \
                or name.startswith(DEFAULT_ENV_PREFIX):
            continue
        spec = _ENV_KEYS.get(name)
        if spec is None:
            if any(name.startswith(env_name(section, "")) for section in _SECTIONS):
                raise ConfigError(f"unknown setting {name}", origin="environment",
                                  hint=_did_you_mean(name, _ENV_KEYS))
            continue  # BINLAKE_* variables of other tools/tests are not ours to judge
        values[spec.dotted] = (_checked(spec, text, True, f"env {name}"), f"env {name}")

    for dotted, value, flag in flags:
        spec = KEYS.get(dotted)
        if spec is None:
            raise ConfigError(f"unknown setting {dotted!r}", origin=f"flag {flag}",
                              hint=_did_you_mean(dotted, KEYS))
        if spec.secret:
            raise ConfigError(
                "secrets are not accepted on the command line (other users can read it)",
                key=dotted, origin=f"flag {flag}",
                hint=f"set {spec.env} or {spec.section}.{spec.name}_file instead")
        origin = f"flag {flag}"
        values[dotted] = (_checked(spec, value, isinstance(value, str), origin), origin)

    return _build(values, file_path, require_server_id, environ)


def peek_key(dotted: str, path: str | os.PathLike[str] | None = None, *,
             env: Mapping[str, str] | None = None,
             flags: Iterable[tuple[str, Any, str]] = ()) -> Any:
    """One key's value when the whole configuration did not load (:func:`load_config` raised),
    under the same precedence: built-in default, ``BINLAKE_DEFAULT_*``, the file, the
    environment, the flags. A source that cannot be read, or gives this key a bad value, is
    passed over: the caller (how the error that ended the command is printed) must not fail in
    turn, and asks nothing it could not have anyway."""
    spec = KEYS[dotted]
    environ = os.environ if env is None else env
    value = spec.default
    candidates: list[tuple[Any, bool]] = []
    default_name = DEFAULT_ENV_PREFIX + spec.env[len(ENV_PREFIX):]
    if default_name in environ:
        candidates.append((environ[default_name], True))
    file_path = (os.fspath(path) if path is not None else environ.get("BINLAKE_CONFIG")
                 or (DEFAULT_CONFIG_PATH if os.path.exists(DEFAULT_CONFIG_PATH) else None))
    if file_path is not None:
        try:
            with open(file_path, "rb") as f:
                table = tomllib.load(f).get(spec.section)
            if isinstance(table, dict) and spec.name in table:
                candidates.append((table[spec.name], False))
        except (OSError, tomllib.TOMLDecodeError):
            pass
    if spec.env in environ:
        candidates.append((environ[spec.env], True))
    candidates += [(given, isinstance(given, str)) for key, given, _flag in flags
                   if key == dotted]
    for raw, from_text in candidates:
        try:
            value = _checked(spec, raw, from_text, "")
        except ConfigError:
            continue
    return value


def _read_file(file_path: str, values: dict[str, tuple[Any, Origin]]) -> None:
    origin = f"file {file_path}"
    try:
        with open(file_path, "rb") as f:
            document = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {file_path} does not exist",
                          hint="pass an existing file with --config or $BINLAKE_CONFIG") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file_path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file_path} is not valid TOML: {exc}") from None
    for section, table in document.items():
        if section not in _SECTIONS:
            raise ConfigError(f"unknown section [{section}]", origin=origin,
                              hint=f"sections are {', '.join(_SECTIONS)}")
        _read_table(section, table, origin, values)


def _read_table(section: str, table: Any, origin: Origin,
                values: dict[str, tuple[Any, Origin]]) -> None:
    """One ``[section]`` of the file; a nested table that is a section (``[lake.s3]``) too."""
    if not isinstance(table, dict):
        raise ConfigError(f"{section} must be a table ([{section}])", origin=origin)
    for name, raw in table.items():
        dotted = f"{section}.{name}"
        if dotted == "transform.column":
            values[dotted] = (_column_rules(raw, origin), origin)
            continue
        if dotted in _SECTIONS:
            _read_table(dotted, raw, origin, values)
            continue
        spec = KEYS.get(dotted)
        if spec is None:
            raise ConfigError(f"unknown setting {dotted!r}", origin=origin,
                              hint=_did_you_mean(dotted, KEYS))
        values[dotted] = (_checked(spec, raw, False, origin), origin)


def _column_rules(raw: Any, origin: Origin) -> tuple[ColumnRule, ...]:
    """``[[transform.column]]`` tables → rules, each checked (see ``sinks.transform``)."""
    key = "transform.column"
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise ConfigError("must be an array of tables ([[transform.column]])", key=key,
                          origin=origin)
    rules = []
    for n, table in enumerate(raw, 1):
        where = f"{key}[{n}]"
        unknown = sorted(set(table) - _RULE_KEYS)
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}", key=where, origin=origin,
                              hint="a rule has match, action, mask (mask) and length (truncate)")
        match, action = table.get("match"), table.get("action")
        if not isinstance(match, str) or match.count(".") < 2:
            raise ConfigError(f"match must be db.table.column, got {match!r}", key=where,
                              origin=origin, hint='e.g. match = "shop.customers.email" or '
                                                  '"*.*.email" (shell patterns)')
        if action not in ACTIONS:
            raise ConfigError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}",
                              key=where, origin=origin)
        mask, length = table.get("mask"), table.get("length")
        if mask is not None and (action != "mask" or not isinstance(mask, str)):
            raise ConfigError("mask is the replacement text of action = \"mask\"", key=where,
                              origin=origin)
        if action == "truncate":
            if not isinstance(length, int) or isinstance(length, bool) or length < 0:
                raise ConfigError(f"action = \"truncate\" needs length = N (N >= 0), got "
                                  f"{length!r}", key=where, origin=origin)
        elif length is not None:
            raise ConfigError("length belongs to action = \"truncate\"", key=where,
                              origin=origin)
        rules.append(ColumnRule(match=match, action=action, mask=mask, length=length))
    return tuple(rules)


def _checked(spec: _KeySpec, raw: Any, from_text: bool, origin: Origin) -> Any:
    try:
        return _convert(spec, raw, from_text)
    except _BadValue as exc:
        # never echo what was given for a secret
        message = "invalid value" if spec.secret else str(exc)
        raise ConfigError(message, key=spec.dotted, origin=origin) from None


def _did_you_mean(name: str, known: Iterable[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else None


def _build(values: Mapping[str, tuple[Any, Origin]], file_path: str | None,
           require_server_id: bool, environ: Mapping[str, str]) -> Config:
    def origin_of(dotted: str) -> str:
        return values[dotted][1] if dotted in values else "the default"

    password_file_key = "server.password_file"
    if "server.password" in values and values.get(password_file_key, (None,))[0] is not None:
        raise ConfigError(
            "both server.password and server.password_file are set",
            key=password_file_key, origin=origin_of(password_file_key),
            hint=f"keep one of them (password from {origin_of('server.password')})")
    password_file = values.get(password_file_key, (None,))[0]
    resolved = dict(values)
    if password_file is not None:
        resolved["server.password"] = (_read_secret_file(password_file, password_file_key,
                                                          origin_of(password_file_key)),
                                       origin_of(password_file_key))

    hash_key_file = values.get("transform.hash_key_file", (None,))[0]
    if hash_key_file is not None:
        if "transform.hash_key" in values:
            raise ConfigError(
                "both transform.hash_key and transform.hash_key_file are set",
                key="transform.hash_key_file", origin=origin_of("transform.hash_key_file"),
                hint=f"keep one of them (key from {origin_of('transform.hash_key')})")
        resolved["transform.hash_key"] = (
            _read_secret_file(hash_key_file, "transform.hash_key_file",
                              origin_of("transform.hash_key_file")),
            origin_of("transform.hash_key_file"))

    for name in AWS_CREDENTIALS:  # the rule readers of the lake use too (sinks.objectstore.s3)
        dotted = f"lake.s3.{name}"
        file_key = f"{dotted}_file"
        own = values.get(dotted, (None,))[0]
        try:
            value, source = resolve_credential(
                name, None if own is None else own.reveal(), values.get(file_key, (None,))[0],
                environ, functools.partial(_revealed_file, key=file_key,
                                           origin=origin_of(file_key)))
        except ValueError:
            raise ConfigError(
                f"both {dotted} and {file_key} are set", key=file_key,
                origin=origin_of(file_key),
                hint=f"keep one of them (the other from {origin_of(dotted)})") from None
        if value is not None:
            origin = {"file": origin_of(file_key), "key": origin_of(dotted)}.get(
                source, f"env {source}")
            resolved[dotted] = (Secret(value), origin)

    sections: dict[str, Any] = {}
    # Nested sections ([lake.s3]) first: each becomes a field of its parent.
    for section, cls in sorted(_SECTIONS.items(), key=lambda item: -item[0].count(".")):
        kwargs = {spec.attr: resolved[dotted][0]
                  for dotted, spec in KEYS.items()
                  if spec.section == section and dotted in resolved}
        for nested in [name for name in sections if name.rpartition(".")[0] == section]:
            kwargs[nested.rpartition(".")[2]] = sections.pop(nested)
        sections[section] = cls(**kwargs)
    rules = values.get("transform.column", ((),))[0]
    config = Config(**sections, transform_rules=rules, source_file=file_path)
    _validate(config, origin_of, require_server_id)
    return config


def _revealed_file(path: str, *, key: str, origin: Origin) -> str:
    return _read_secret_file(path, key, origin).reveal()


def _read_secret_file(path: str, key: str, origin: Origin) -> Secret:
    try:
        return Secret(read_secret_file(path))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", key=key, origin=origin) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text", key=key, origin=origin) from None


def _validate(config: Config, origin_of: typing.Callable[[str], str],
              require_server_id: bool) -> None:
    """Cross-field and range checks, after every source has been applied."""

    def fail(dotted: str, message: str, hint: str | None = None) -> typing.NoReturn:
        raise ConfigError(message, key=dotted, origin=origin_of(dotted), hint=hint)

    server, replica, start = config.server, config.replica, config.start
    if replica.server_id == 0 and require_server_id and origin_of("replica.server_id") != \
            "the default":
        fail("replica.server_id", "must be between 1 and 4294967295, got 0 (0 is not a valid "
             "replica id)", hint="choose an N in 1..4294967295 unused by the server and its "
             "other replicas")
    if replica.server_id == 0 and require_server_id:
        raise ConfigError(
            "is required (1..4294967295): every replica needs a server_id of its own",
            key="replica.server_id",
            hint=f"set [replica] server_id = N in the config file or {env_name('replica', 'server_id')}"
                 ", choosing N unused by the server and its other replicas")
    if not 0 <= replica.server_id <= 0xFFFFFFFF:
        fail("replica.server_id", f"must be between 1 and 4294967295, got {replica.server_id}")
    if not 1 <= server.port <= 65535:
        fail("server.port", f"must be between 1 and 65535, got {server.port}")
    if not 0 <= replica.report_port <= 65535:
        fail("replica.report_port", f"must be between 0 and 65535, got {replica.report_port}")
    if not server.host and server.socket is None:
        fail("server.host", "is empty and no server.socket is set")
    try:
        candidates = server.candidates
    except ValueError as exc:
        fail("server.host", str(exc), hint='write host, host:port, or a list '
             '["db1:3306", "db2:3306"]')
    if any(not 1 <= port <= 65535 for _, port in candidates):
        fail("server.host", "a port must be between 1 and 65535")
    if len(candidates) > 1 and server.socket is not None:
        fail("server.socket", "a unix socket reaches one server; it cannot be combined with a "
             "list of candidate hosts", hint="remove server.socket, or list one host")
    if not server.user:
        fail("server.user", "must not be empty")
    if (server.tls_cert is None) != (server.tls_key is None):
        fail("server.tls_key" if server.tls_key is None else "server.tls_cert",
             "tls_cert and tls_key go together", hint="set both or neither")
    for dotted, value in (("server.connect_timeout", server.connect_timeout),
                          ("server.read_timeout", server.read_timeout),
                          ("replica.heartbeat_period", replica.heartbeat_period),
                          ("replica.stop_timeout", replica.stop_timeout),
                          ("lake.flush_interval", config.lake.flush_interval),
                          ("lake.catch_up_flush_interval", config.lake.catch_up_flush_interval),
                          ("log.progress_interval", config.log.progress_interval),
                          ("reconnect.initial_delay", config.reconnect.initial_delay),
                          ("reconnect.max_delay", config.reconnect.max_delay)):
        if not value > 0:
            fail(dotted, f"must be greater than 0, got {value}")
    if replica.heartbeat_period > 4294967:
        fail("replica.heartbeat_period", "must be at most 4294967 seconds")

    if start.from_ == "gtid" and not start.gtid:
        fail("start.gtid", "is required when start.from = gtid")
    if start.from_ == "file" and not start.file:
        fail("start.file", "is required when start.from = file")
    if config.snapshot.chunk_pause < 0:
        fail("snapshot.chunk_pause", f"must be 0 or more, got {config.snapshot.chunk_pause}")
    signal_table = config.snapshot.signal_table
    if signal_table is not None and (signal_table.count(".") != 1 or any(
            c in signal_table for c in "*?[")):
        fail("snapshot.signal_table", f"must be db.table (no patterns), got {signal_table!r}")
    if config.snapshot.chunk_rows < 1:
        fail("snapshot.chunk_rows", f"must be at least 1, got {config.snapshot.chunk_rows}")
    modes = {}
    for dotted, text in (("lake.file_mode", config.lake.file_mode),
                         ("lake.dir_mode", config.lake.dir_mode)):
        if not re.fullmatch(r"0?[0-7]{3}", text.strip()):
            fail(dotted, f"must be an octal mode such as 0640, got {text!r}")
        modes[dotted] = int(text, 8)
    if modes["lake.dir_mode"] & 0o700 != 0o700:
        fail("lake.dir_mode", f"must give the owner rwx (binlake writes the lake), got "
             f"{config.lake.dir_mode}")
    if modes["lake.file_mode"] != modes["lake.dir_mode"] & 0o666:
        fail("lake.file_mode", f"must be lake.dir_mode without its execute bits "
             f"({modes['lake.dir_mode'] & 0o666:04o} for dir_mode {config.lake.dir_mode}), "
             f"got {config.lake.file_mode}",
             hint="both come from one process umask, so a file can be read by exactly whom "
                  "its directory can be entered by: set lake.file_mode = "
                  f"\"{modes['lake.dir_mode'] & 0o666:04o}\"")
    if start.pos < 4:
        fail("start.pos", f"must be at least 4 (the first event), got {start.pos}")

    for dotted, ids, limit in (("filter.skip_server_ids", config.filter.skip_server_ids,
                                0xFFFFFFFF),
                               ("filter.skip_gtid_domains", config.filter.skip_gtid_domains,
                                0xFFFFFFFF)):
        for value in ids:
            if not 0 <= value <= limit:
                fail(dotted, f"{value} is out of range 0..{limit}")
    for dotted, patterns in (("filter.include", config.filter.include),
                             ("filter.exclude", config.filter.exclude)):
        for pattern in patterns:
            if pattern.count(".") > 1:
                fail(dotted, f"pattern {pattern!r} must be database or database.table",
                     hint="use globs like shop.* or *.audit_log")
            if any(quote in pattern for quote in "\"'") or pattern.startswith("["):
                # a quoted or bracketed pattern is list syntax that went astray, not a name
                fail(dotted, f"pattern {pattern!r} contains quotes or starts with [",
                     hint='give a list as ["shop.orders", "shop.items"] or shop.orders,shop.items')

    lake = config.lake
    if not lake.path:
        fail("lake.path", "must not be empty")
    _validate_s3(lake, fail)
    if lake.flush_bytes < 1024:
        fail("lake.flush_bytes", f"must be at least 1024, got {lake.flush_bytes}")
    if lake.flush_rows < 1:
        fail("lake.flush_rows", f"must be at least 1, got {lake.flush_rows}")

    reconnect = config.reconnect
    if reconnect.max_delay < reconnect.initial_delay:
        fail("reconnect.max_delay", "must not be smaller than reconnect.initial_delay")
    if reconnect.multiplier < 1:
        fail("reconnect.multiplier", f"must be at least 1, got {reconnect.multiplier}")
    if reconnect.max_attempts < 0:
        fail("reconnect.max_attempts", "must be 0 (forever) or more")
    if reconnect.healthy_after < 0:
        fail("reconnect.healthy_after", "must not be negative")

    transform = config.transform
    if transform.hash_key is not None and not transform.hash_key.reveal():
        fail("transform.hash_key_file" if transform.hash_key_file else "transform.hash_key",
             "the HMAC key is empty")
    if any(rule.action == "hash" for rule in config.transform_rules) and \
            transform.hash_key is None:
        raise ConfigError(
            "action = \"hash\" rules need a key", key="transform.hash_key_file",
            hint="set [transform] hash_key_file = PATH (a file only the daemon can read) or "
                 "BINLAKE_TRANSFORM_HASH_KEY")

    metrics = config.metrics
    if metrics.address:
        try:
            _split_address(metrics.address)
        except ValueError:
            fail("metrics.address", f"{metrics.address!r} is not host:port",
                 hint="e.g. 127.0.0.1:9108, 0.0.0.0:9108 or [::1]:9108; empty disables it")
    if metrics.ready_max_lag <= 0:
        fail("metrics.ready_max_lag", "must be greater than 0")


def _validate_s3(lake: LakeConfig,
                 fail: typing.Callable[[str, str, str | None], typing.NoReturn]) -> None:
    """``[lake.s3]`` and an ``s3://`` lake.path."""
    s3 = lake.s3
    if lake.on_object_store:
        try:
            split_url(lake.path)
        except ValueError as exc:
            fail("lake.path", str(exc), "write s3://BUCKET or s3://BUCKET/PREFIX")
    elif "://" in lake.path:
        fail("lake.path", f"{lake.path!r}: only s3:// URLs (or a directory) are lakes",
             "write s3://BUCKET/PREFIX for S3 and compatible stores (Ceph, MinIO: set "
             "lake.s3.endpoint), or a local directory")
    if s3.endpoint is not None:
        parts = urllib.parse.urlsplit(s3.endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
            fail("lake.s3.endpoint", f"must be http(s)://HOST[:PORT], got {s3.endpoint!r}",
                 "e.g. http://127.0.0.1:7480 or https://s3.example.com")
    if s3.addressing == "path" and s3.endpoint is None:
        fail("lake.s3.addressing", "path-style addressing needs lake.s3.endpoint",
             "set lake.s3.endpoint (on AWS: https://s3.REGION.amazonaws.com) or use auto")
    if (s3.access_key_id is None) != (s3.secret_access_key is None):
        missing = "lake.s3.secret_access_key" if s3.secret_access_key is None \
            else "lake.s3.access_key_id"
        fail(missing, "the access key id and the secret access key go together",
             "give both (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the two *_file keys) "
             "or neither (the AWS default chain)")
    for dotted, value in (("lake.s3.connect_timeout", s3.connect_timeout),
                          ("lake.s3.request_timeout", s3.request_timeout),
                          ("lake.s3.lease_duration", s3.lease_duration)):
        if not value > 0:
            fail(dotted, f"must be greater than 0, got {value}", None)
    if s3.max_attempts < 1:
        fail("lake.s3.max_attempts", f"must be at least 1, got {s3.max_attempts}", None)
    if s3.log_snapshot_records < 0:
        fail("lake.s3.log_snapshot_records",
             f"must be 0 (never) or more, got {s3.log_snapshot_records}", None)


# --- documentation -----------------------------------------------------------------------------


def _format_default(spec: _KeySpec) -> str:
    if spec.required:
        return "*required*"
    value = spec.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return "`[]`" if not value else "`[" + ", ".join(map(repr, value)) + "]`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if spec.unit == "bytes" and value % (1024 * 1024) == 0:
        return f"`{value}` ({value // (1024 * 1024)} MiB)"
    return f"`{value}`"


def reference_markdown() -> str:
    """The configuration reference as a Markdown table, generated from the dataclass fields."""
    return _table(KEYS.values())


def _table(specs: Iterable[_KeySpec]) -> str:
    lines = [
        "| key | environment | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for spec in specs:
        meaning = spec.help.replace("|", "\\|")
        lines.append(f"| `{spec.dotted}` | `{spec.env}` | {_format_default(spec)} | {meaning} |")
    return "\n".join(lines) + "\n"


#: The prose above the tables of ``docs/configuration.md``: how the sources combine.
_REFERENCE_INTRO = """\
<!-- Generated by `python -m replica.config > docs/configuration.md` from the fields of
replica/config.py; do not edit by hand (a test compares this file with the generator). -->

# Configuration reference

binlake reads its settings from, in increasing precedence:

1. `BINLAKE_DEFAULT_<SECTION>_<KEY>` environment variables: a default of your own for a key
   (the container image sets `BINLAKE_DEFAULT_METRICS_ADDRESS=0.0.0.0:9108`, so a mounted file
   still decides);
2. a TOML file: `--config PATH`, else `$BINLAKE_CONFIG`, else `/etc/binlake/binlake.toml` if it
   exists;
3. `BINLAKE_<SECTION>_<KEY>` environment variables (`BINLAKE_SERVER_HOST`);
4. command-line flags: `--set section.key=value` (and the few named flags a command offers).

Each command takes only the flags of the sections it uses (`binlake status`: server, lake, log;
`binlake compact`: lake, log); any other is a usage error (exit 2), as is `--set` of such a key.
Secrets (the password, TLS keys) come from the environment or from a file path
(`server.password_file`), never from the command line, where `ps` would show them. An invalid
setting is one error naming the key and where its value came from, with a fix line (exit 2).

Lists are written as in the file, `--set 'filter.include=["shop.orders", "crm.*"]'`, or
comma-separated in the environment, `BINLAKE_FILTER_INCLUDE=shop.orders,crm.*`; text that starts
with `[` but is not a TOML list, or a pattern holding quotes, is refused (exit 2), never taken as
a pattern that silently matches nothing. Durations are seconds, as a number (`5`, `0.5`) or with a
unit (`"500ms"`, `"2s"`, `"1min"`, `"1h"`); sizes are bytes, as a number or with a suffix
(`"64MiB"`: KiB, MiB, GiB count 1024s; k/kB, M/MB, G/GB 1000s).
"""


def reference_document() -> str:
    """``docs/configuration.md``: the sources, then one table per section, from the fields."""
    parts = [_REFERENCE_INTRO]
    for section, cls in _SECTIONS.items():
        summary = (cls.__doc__ or "").strip().split("\n\n")[0]
        summary = " ".join(line.strip() for line in summary.splitlines())
        specs = [spec for spec in KEYS.values() if spec.section == section]
        parts.append(f"\n## `[{section}]`\n\n{summary}\n\n")
        parts.append(_table(specs))
    return "".join(parts)


if __name__ == "__main__":
    # `python -m replica.config > docs/configuration.md` regenerates the reference.
    print(reference_document(), end="")
