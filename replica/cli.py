"""The ``binlake`` command line: parse, load the config, dispatch, and turn failures into exit codes.

Exit codes are :data:`EXIT_OK` … :data:`EXIT_LAKE` below; :data:`EXIT_CODES_HELP` says what each
means in ``binlake --help``, and docs/operations.md is their one home for operators.

Errors are printed as one line plus a ``fix:`` line; ``-v`` adds the traceback. The commands'
implementations live in their own modules (``replica.core.daemon`` for ``run``, the others in
``replica.commands``), listed in :data:`COMMANDS` and imported only when that command runs, so
``binlake --help`` stays fast. Each module exposes ``run(...)``, plain or ``async`` (then run
under ``trio.run``), returning an exit code or ``None`` for 0, and, when the command has options
of its own, ``add_arguments(parser)`` to declare them.
"""

from __future__ import annotations

# First, before the imports below (trio alone takes a while): a SIGTERM from here on stops
# `binlake run` cleanly (exit 0) instead of killing it.
from replica.core import early_stop

early_stop.install_when_launched(__name__)

# Then no cyclic GC while binlake's modules and libraries are imported: tens of thousands of
# objects that live as long as the process, scanned again by every pass for nothing. run()
# turns it back on.
import gc

if early_stop.launched(__name__):
    gc.disable()

import argparse
import datetime as _dt
import importlib
import inspect
import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

import trio

from protocol import errors
from replica.config import Config, ConfigError, load_config, peek_key
from replica.core.backoff import is_permanent
from sinks.errors import (
    LakeError,
    LakeFormatTooNew,
    LakeLocked,
    StoreAbandoned,
    StoreRefused,
    StoreUnavailable,
    TransformRefused,
)
from sinks.parquet import prefer_jemalloc
from sinks.parquet.lean_import import import_pyarrow_lean

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_PERMANENT",
           "EXIT_LAKE", "hint_for"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PERMANENT = 3
EXIT_LAKE = 4
EXIT_INTERRUPTED = 130

PROG = "binlake"

EXIT_CODES_HELP = """\
exit codes:
  0  success; `run` stopped cleanly on SIGTERM/SIGINT
  1  `check` found a problem, `status` could not reach the server (or found no
     lake), `run` gave up after reconnect.max_attempts, `run` stopped with its
     object store unreachable (its last flush not committed), or a runtime error
  2  usage or configuration error (also: a flag the command does not use, a
     metrics.address another process listens on, a lake written by a newer binlake)
  3  permanent replication error (authentication, privileges, purged position,
     duplicate server_id, undecodable stream): fix the cause, retrying will not help
  4  lake error: disk full, I/O error, read-only or permission (the line names the
     path and the errno), another `binlake run` holds the lake's lock, or the object
     store refused (403, missing bucket, quota, no conditional writes; the line names
     the bucket and the operation)

configuration: BINLAKE_DEFAULT_<SECTION>_<KEY> variables (defaults), a TOML file
(--config, $BINLAKE_CONFIG or /etc/binlake/binlake.toml), then BINLAKE_<SECTION>_<KEY>
environment variables, then flags. Secrets come from
BINLAKE_SERVER_PASSWORD or server.password_file, never from the command line.
"""

#: Flags that set a config key: (flag, dotted key, metavar, help). A command gets the flags of
#: the config sections it uses (:data:`COMMAND_SECTIONS`), never one it would silently ignore.
CONFIG_FLAGS = (
    ("--host", "server.host", "HOST", "server host"),
    ("--port", "server.port", "PORT", "server TCP port"),
    ("--socket", "server.socket", "PATH", "server unix socket (instead of host/port)"),
    ("--user", "server.user", "USER", "replication user"),
    ("--tls-mode", "server.tls_mode", "MODE",
     "auto (the default: preferred on loopback and unix sockets, required elsewhere), "
     "disabled, preferred, required, verify-ca or verify-identity"),
    ("--server-id", "replica.server_id", "N", "this replica's unique server_id"),
    ("--start-from", "start.from", "WHERE",
     "latest, earliest, gtid or file (only when the lake has no checkpoint)"),
    ("--lake", "lake.path", "DIR", "the lake directory"),
    ("--metrics-address", "metrics.address", "HOST:PORT",
     "where to serve /metrics, /healthz, /readyz (empty: off)"),
    ("--log-format", "log.format", "FORMAT", "human or json"),
    ("--log-level", "log.level", "LEVEL", "debug, info, warning or error"),
    ("--log-file", "log.file", "PATH", "log to this file (reopened on SIGHUP)"),
)

COMMANDS = {
    # name: (module, what run() takes, one-line help)
    "run": ("replica.core.daemon", "config", "replicate: connect, stream and land until stopped"),
    "check": ("replica.commands.check", "config",
              "check the server is ready for binlake and say what to fix (exit 0/1)"),
    "status": ("replica.commands.status", "config",
               "show where the lake stands: last landed position, lag, tables and rows"),
    "snapshot": ("replica.commands.snapshot", "config",
                 "land tables' existing rows (_op = R) into the lake, beside a running daemon "
                 "or on its own, and exit once they are committed"),
    "compact": ("replica.commands.compact", "config",
                "rewrite old partitions' small files into large ones (safe beside `run`)"),
    "health": ("replica.commands.health", "config",
               "ask the running daemon's /healthz (--ready: /readyz) at metrics.address; "
               "exit 0 when it answers 200 (the container's HEALTHCHECK)"),
    "decode": ("replica.commands.decode", "args", "decode binlog files offline and print their events"),
    "demo": ("replica.commands.demo", "args",
             "start a sandbox MariaDB, run a workload, land it and read it back with Spark"),
}

#: The config sections each config-taking command uses: its flags (and --set keys) are those.
ALL_SECTIONS = frozenset({"server", "replica", "start", "semi_sync", "filter", "snapshot", "lake",
                          "reconnect", "metrics", "log", "transform", "types"})
COMMAND_SECTIONS = {
    "run": ALL_SECTIONS,
    "snapshot": ALL_SECTIONS,  # it streams like `run` while it snapshots
    "check": frozenset({"server", "replica", "start", "semi_sync", "lake", "log"}),
    "status": frozenset({"server", "lake", "log"}),
    "compact": frozenset({"lake", "log"}),
    "health": frozenset({"metrics", "log"}),
}

#: Commands that write Parquet: their start-up chooses Arrow's allocator (prefer_jemalloc).
LANDING_COMMANDS = frozenset({"run", "snapshot", "demo", "compact"})

#: Landing commands that never hand Arrow data to pandas or Spark: pyarrow is imported without
#: numpy for them (sinks/parquet/lean_import.py).
LEAN_ARROW_COMMANDS = frozenset({"run", "snapshot"})


def _verbose_flag(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="show tracebacks on errors (repeat for debug logs)")


def _add_config_flags(parser: argparse.ArgumentParser, sections: frozenset[str]) -> None:
    group = parser.add_argument_group("configuration (override the file and the environment)")
    group.add_argument("-c", "--config", metavar="PATH",
                       help="TOML config file (default: $BINLAKE_CONFIG, else "
                            "/etc/binlake/binlake.toml if present)")
    for flag, key, metavar, help_text in CONFIG_FLAGS:
        if key.partition(".")[0] not in sections:
            continue
        group.add_argument(flag, dest=f"cfg:{key}", metavar=metavar, help=f"{help_text} ({key})")
    group.add_argument("--set", dest="settings", action="append", default=[],
                       metavar="KEY=VALUE",
                       help="set a key of the sections this command uses ("
                            f"{', '.join(sorted(sections))}), e.g. --set "
                            f"{_set_example(sections)} (repeatable)")


def _set_example(sections: frozenset[str]) -> str:
    return "lake.flush_interval=10s" if "replica" in sections else "lake.path=/srv/lake"


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser; ``argv`` names the chosen command, whose module adds its own options."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="binlake joins a MariaDB/MySQL server as a replica and lands every committed "
                    "change as Parquet that Spark reads.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _verbose_flag(parser, 0)
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = early_stop.chosen_command(argv)
    for name, (module_name, takes, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 epilog=EXIT_CODES_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        _verbose_flag(command, argparse.SUPPRESS)
        if takes == "config":
            _add_config_flags(command, COMMAND_SECTIONS[name])
        if name == chosen:
            _module_arguments(module_name, command)
    return parser


def _module_arguments(module_name: str, parser: argparse.ArgumentParser) -> None:
    """Let the command's module declare its options, if it has any."""
    add_arguments = getattr(importlib.import_module(module_name), "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)


class _VersionAction(argparse.Action):
    """``--version``, looking the version up only when asked: the package metadata lookup
    (importlib.metadata and the email parser it needs) would weigh on every command's start-up."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0,
                         help=help or "show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")  # to stdout, as argparse's own version action
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("binlake")
    except PackageNotFoundError:
        return "unknown"


def _flags_from(args: argparse.Namespace) -> list[tuple[str, Any, str]]:
    sections = COMMAND_SECTIONS[args.command]
    flags: list[tuple[str, Any, str]] = []
    for flag, key, _metavar, _help in CONFIG_FLAGS:
        value = getattr(args, f"cfg:{key}", None)
        if value is not None:
            flags.append((key, value, flag))
    for setting in args.settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {setting.split('=')[0]!r}",
                              hint="e.g. --set lake.flush_rows=100000")
        section = key.strip().partition(".")[0]
        if section not in sections and section in ALL_SECTIONS:
            raise ConfigError(f"`binlake {args.command}` does not use {section}.* settings, "
                              f"got --set {key.strip()}",
                              hint=f"it uses {', '.join(sorted(sections))}")
        flags.append((key.strip(), value, f"--set {key.strip()}"))
    return flags


def _call(module_name: str, argument: Any, args: argparse.Namespace | None = None) -> int:
    run = importlib.import_module(module_name).run
    call_args: tuple[Any, ...] = (argument,)
    if args is not None and len(inspect.signature(run).parameters) > 1:
        call_args = (argument, args)  # config commands with options of their own
    result = trio.run(run, *call_args) if inspect.iscoroutinefunction(run) else run(*call_args)
    return EXIT_OK if result is None else int(result)


def _dispatch(args: argparse.Namespace) -> int:
    module_name, takes, _help = COMMANDS[args.command]
    if takes == "args":
        return _call(module_name, args)
    config = load_config(args.config, flags=_flags_from(args),
                         require_server_id=args.command not in ("status", "compact", "health"))
    args.json_errors = config.log.format == "json"
    # Before anything is created, and while the process has one thread: every file and
    # directory the command makes in the lake asks for 0666 or 0777, which this makes
    # lake.file_mode and lake.dir_mode exactly, whatever umask the daemon was started with.
    saved_umask = os.umask(config.lake.umask)
    try:
        return _configured(module_name, config, args)
    finally:
        os.umask(saved_umask)  # a caller in the same process (tests) keeps its own


def _configured(module_name: str, config: Config, args: argparse.Namespace) -> int:
    from replica.observe.logs import setup_logging

    log_config = config.log
    if args.verbose >= 2 and config.log.level != "debug":
        from dataclasses import replace

        log_config = replace(config.log, level="debug")
    setup_logging(log_config, secrets=config.secrets())
    args.secrets = config.secrets()
    return _call(module_name, config, args)


# --- errors for people ---------------------------------------------------------------------

#: Fixes by exception class name (looked up along the MRO, most specific first). Names rather
#: than classes, so classes other modules add later need no import here to get a hint.
_HINTS = {
    "AccessDenied": "check server.user and its password (BINLAKE_SERVER_PASSWORD or "
                    "server.password_file), and that the user may connect from this host",
    "MissingPrivilege": "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user "
                        "(MariaDB 10.5+: BINLOG MONITOR instead of REPLICATION CLIENT); "
                        "`binlake check` lists what is missing",
    "GtidPurged": "the server purged the binlogs the lake needs: restore them, or re-seed — "
                  "a new lake.path with start.from = snapshot lands every table's current rows "
                  "and streams on (`binlake snapshot --table DB.TABLE` re-reads single tables)",
    "GtidNotInBinlog": "the lake's position is not in this server's binlog history: check "
                       "server.host points at the right server",
    "GtidDiverged": "the server lacks transactions the lake holds (a failover promoted a "
                    "replica that was behind): land into a new lake.path with start.from = "
                    "snapshot, or set start.on_divergence = \"continue\" to go on from where "
                    "both histories agree (recorded in the lake's checkpoint)",
    "ServerChanged": "point server.host back at the server the lake was landed from, or land "
                     "into a new lake.path (start.from = snapshot); with GTIDs on (MySQL "
                     "gtid_mode=ON) a lake follows any server of its topology",
    "NoWritablePrimary": "promote one of server.host's candidates (read_only = 0), or add "
                         "the new primary to server.host",
    "GtidStrictModeHole": "the position falls in a hole of the server's binlog: set "
                          "start.gtid_strict_mode = false or start from another position",
    "BinlogPositionError": "the position (the lake's checkpoint, or start.file/start.pos for a "
                           "new lake) is not in the server's binlog: SHOW BINARY LOGS lists the "
                           "files; if they were purged, land into a new lake",
    "DuplicateServerId": "give this replica a replica.server_id that no other replica, nor the "
                         "server, uses",
    "ServerIdConflict": "replica.server_id equals the server's own @@server_id: choose another",
    "BinlogNotEnabled": "start the server with log_bin enabled (and binlog_format=ROW)",
    "BinlogFormatNotRow": "set binlog_format=ROW in the server's config and "
                          "SET GLOBAL binlog_format = 'ROW'",
    "EventTooLarge": "raise max_allowed_packet on the server",
    "InsecureTransport": "use TLS (server.tls_mode = verify-ca with server.tls_ca) or the unix "
                         "socket (server.socket)",
    "UnsupportedAuthPlugin": "switch the user to a supported plugin (mysql_native_password, "
                             "caching_sha2_password, sha256_password, ed25519, parsec)",
    "TlsError": "check server.tls_mode, tls_ca and tls_cert/tls_key: a server other than "
                "loopback needs tls_mode = verify-ca with tls_ca (its CA) unless MariaDB 11.4+ "
                "zero-configuration TLS vouches for it; tls_mode = preferred uses TLS only when "
                "the server offers it",
    "SSLCertVerificationError": "the server's certificate is not trusted: set server.tls_ca to "
                                "the CA that signed it (verify-identity also checks the host "
                                "name)",
    "ChecksumMismatch": "the stream was damaged: check the network path, or the binlog file on "
                        "the server if this repeats",
    "HeartbeatTimeout": "the server stopped sending: check it is up and the network between",
    "ConnectionRefusedError": "is the server running and listening on server.host:server.port "
                              "(or server.socket)?",
    "ConnectError": "is the server running and reachable at server.host:server.port "
                    "(or server.socket)?",
    "NotMySQLServer": "server.host and server.port (--host, --port) name another service: "
                      "point them at the MySQL/MariaDB server (port 3306 by default)",
    "ConnectTimeout": "check server.host and server.port, and that no firewall drops the "
                      "connection; for a slow or distant server raise server.connect_timeout",
    "FileNotFoundError": "check the path",
    "PermissionError": "check the file's owner and mode (the daemon's user must be able to "
                       "read/write it)",
}


def hint_for(exc: BaseException) -> str | None:
    """The one-line fix for an exception, if there is one."""
    if isinstance(exc, ConfigError):
        return exc.hint
    if isinstance(exc, LakeError | LakeLocked | LakeFormatTooNew | TransformRefused
                  | StoreRefused | StoreAbandoned):
        return exc.fix
    if isinstance(exc, StoreUnavailable):
        return ("the object store did not answer or asked to slow down, and the retries ran "
                "out: check lake.s3.endpoint and the network to it, then start binlake again "
                "(it resumes from the lake's last commit)")
    if isinstance(exc, errors.InsecureTransport) and exc.fix:
        return exc.fix
    for cls in type(exc).__mro__:
        hint = _HINTS.get(cls.__name__)
        if hint is not None:
            return hint
    return None


def exit_code_for(exc: BaseException) -> int:
    # the wrong binlake for this lake; a column rule its column refuses
    if isinstance(exc, ConfigError | LakeFormatTooNew | TransformRefused):
        return EXIT_USAGE
    if isinstance(exc, LakeError | LakeLocked | StoreRefused):
        return EXIT_LAKE
    if isinstance(exc, errors.ProtocolError) and is_permanent(exc):
        return EXIT_PERMANENT
    return EXIT_FAILURE


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, ConfigError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _report(exc: BaseException, verbose: int, secrets: Sequence[str] = (),
            whole: BaseException | None = None, json_errors: bool = False) -> None:
    """One line plus the fix on stderr; with -v the traceback first. Secrets are masked."""

    def masked(text: str) -> str:
        for secret in sorted(secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    hint = hint_for(exc)
    _log_to_file(masked(_describe(exc)), type(exc).__name__, hint)
    if json_errors:  # log shippers parse every line of a JSON-logging daemon
        document = {"time": _utc_now(), "level": "error", "logger": PROG,
                    "message": masked(_describe(exc)), "error": type(exc).__name__}
        if hint:
            document["fix"] = hint
        if verbose:
            document["exception"] = masked("".join(traceback.format_exception(whole or exc)))
        print(json.dumps(document, ensure_ascii=False), file=sys.stderr)
        return
    if verbose:
        sys.stderr.write(masked("".join(traceback.format_exception(whole or exc))))
    print(masked(f"{PROG}: error: {_describe(exc)}"), file=sys.stderr)
    if hint:
        print(f"  fix: {hint}", file=sys.stderr)
    if not verbose and not isinstance(exc, ConfigError):
        print("  (run with -v for the traceback)", file=sys.stderr)


def _log_to_file(message: str, error: str, hint: str | None) -> None:
    """The error that ends the command is the last line of ``log.file`` too (in its format):
    whoever reads the file must not find a calm INFO as the last word of a dead daemon."""
    from replica.observe.logs import ReopenableFileHandler, current_setup

    setup = current_setup()
    if setup is None or not isinstance(setup.handler, ReopenableFileHandler):
        return  # logging goes to stderr, where the line below is printed anyway
    extra = {"error": error, **({"fix": hint} if hint else {})}
    logging.getLogger(PROG).error("%s", message, extra=extra)


def _json_errors(args: argparse.Namespace) -> bool:
    """Whether the final error line is JSON: the loaded config says so, or — when the config
    itself failed to load — ``log.format`` as far as its sources can be read
    (:func:`replica.config.peek_key`, the same precedence)."""
    if hasattr(args, "json_errors"):
        return bool(args.json_errors)
    flags = [("log.format", getattr(args, "cfg:log.format", None), "--log-format")]
    flags += [(key.strip(), value, "--set")
              for key, _, value in (s.partition("=") for s in getattr(args, "settings", ()))]
    wanted = peek_key("log.format", getattr(args, "config", None),
                      flags=[flag for flag in flags if flag[1] is not None])
    return bool(wanted == "json")


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: Allocations of container objects between young-generation collections (CPython: 700).
GC_YOUNG_THRESHOLD = 1_000_000


def _tune_gc() -> None:
    """Fewer cyclic-GC passes for a landing process: everything imported so far is frozen (never
    scanned again), and the young generation is collected every 1,000,000 allocations, not 700.

    Landing allocates several objects per event and keeps transactions' rows alive until
    they are converted, so the default thresholds run a collection every few transactions,
    each scanning what is still buffered (a group of one-row events awaiting conversion is
    tens of thousands of live objects, scanned by each young and middle collection until
    converted): a large share of the CPU of one-row transactions. Over thousands of tables no
    table reaches a row group before the flush, so every event stays buffered until then, and
    a threshold much below a backlog's live objects still runs young collections over all of
    them that the same rows over a few tables never run. Nearly everything is freed by
    reference counting anyway (a whole such run collects a few hundred objects of cycles), so
    the bigger batches hold no more memory.
    """
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the command, return the exit code (never raises except SystemExit)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = early_stop.chosen_command(arguments)
    landing = command in LANDING_COMMANDS
    if landing:
        # before the command's module, and with it pyarrow, is imported: Arrow reads its
        # allocator once, at its first import
        prefer_jemalloc()
        if command in LEAN_ARROW_COMMANDS:
            import_pyarrow_lean()
    parser = build_parser(arguments)
    args = parser.parse_args(arguments)  # exits 2 with usage on bad arguments
    if landing:
        _tune_gc()
    gc.enable()  # off during a launched binlake's imports (see the top of this module)
    if args.command in early_stop.STOPPABLE:
        early_stop.install()  # a SIGTERM before the daemon listens still stops it cleanly
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseExceptionGroup as group:
        # a trio nursery's failure: report the first real cause
        leaves = list(_leaves(group))
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
            print(f"{PROG}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        cause = leaves[0] if leaves else group
        _report(cause, args.verbose, getattr(args, "secrets", ()), whole=group,
                json_errors=_json_errors(args))
        return exit_code_for(cause)
    except Exception as exc:
        _report(exc, args.verbose, getattr(args, "secrets", ()), json_errors=_json_errors(args))
        return exit_code_for(exc)


def _leaves(group: BaseExceptionGroup[Any]) -> Any:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


class _ReaderGoneSafe:
    """``sys.stdout`` for a reader that may stop reading (``binlake check | head -3``).

    Python ignores SIGPIPE, so writing to a closed pipe raises BrokenPipeError — in the middle of
    a command, or at exit when the buffer is flushed ("Exception ignored … BrokenPipeError",
    status 120). Whatever the reader did not want is dropped instead: stdout is pointed at
    /dev/null once and the command finishes, so its exit status is still its own verdict.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        #: The stream itself, for a command that stops by itself once its reader is gone
        #: (``decode``: the rest of a large binlog is not worth decoding for nobody).
        self.unwrapped = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._discard()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._discard()
            self._stream.flush()

    def _discard(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main() -> NoReturn:
    """Console entry point (``binlake = "replica.cli:main"``)."""
    stdout = sys.stdout = _ReaderGoneSafe(sys.stdout)  # type: ignore[assignment]
    code = run()
    stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
