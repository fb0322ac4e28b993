"""Throwaway MariaDB/MySQL servers on loopback, for `binlake demo`, the benchmark and the tests.

A sandbox server owns everything it touches: a fresh temporary base directory holding its
datadir, unix socket, pid file, error log and client option files, a free TCP port on 127.0.0.1,
and a process that is stopped by its PID. Nothing is read from or written to the machine's
``/etc/mysql``: every server and client runs with ``--no-defaults`` / ``--defaults-file``.

The server binaries can come from the host (``root="/"``) or from a Debian chroot (the test bed
keeps MariaDB 11.8 and MySQL 9.7 in chroots because bookworm only packages MariaDB 10.11). Inside a
chroot, ``mariadbd``/``mysqld`` need ``/proc`` and ``/dev``. Rather than mounting them on the host
for as long as servers run, and having to remember to unmount them (a forgotten ``/dev`` bind
mount under a directory that is later ``rm -rf``-ed wipes the host's device nodes), every command
run inside a chroot gets a private mount namespace (``unshare --mount``) in which ``/proc`` and
``/dev`` are mounted just before ``chroot``. The kernel tears those mounts down when the last
process in the namespace exits, so they can never leak, not even when we are killed with SIGKILL,
and the host never sees them. ``unshare``, ``sh`` and ``chroot`` all ``exec`` the next program,
so the PID we hold is the server's own.

The server's binlog settings are the ones binlake is built for: ROW format, full row metadata,
CRC32 checksums, a unique ``server_id`` and, on MySQL, GTIDs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MARIADB",
    "MYSQL",
    "SandboxError",
    "SandboxServer",
    "ensure_host_mariadb",
    "in_root_argv",
    "parse_batch_output",
    "remove_stale_sandboxes",
    "server_kind",
    "start_server",
    "terminate",
    "timeout_scale",
    "tool_failure",
]

MARIADB = "mariadb"
MYSQL = "mysql"

#: How long a server may take to accept connections (MySQL 9.7 needs ~1.5 s on 2 idle cores;
#: the bound is generous because several test runs may share the machine), before
#: :func:`timeout_scale`.
DEFAULT_START_TIMEOUT = 120.0
#: How long ``mariadb-install-db`` / ``mysqld --initialize`` may take, before the scale.
INSTALL_TIMEOUT = 300.0
#: Environment variable multiplying every sandbox timeout (a slow CI runner sets it to 3).
TIMEOUT_SCALE_ENV = "BINLAKE_SANDBOX_TIMEOUT_SCALE"
#: The most the machine's load can stretch the timeouts by (an explicit scale is not capped).
_MAX_LOAD_SCALE = 5.0
#: How long SIGTERM gets before SIGKILL.
DEFAULT_STOP_TIMEOUT = 30.0
#: The longest unix socket path the kernel accepts (sun_path is 108 bytes including the NUL).
_MAX_SOCKET_PATH = 107

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Mounts /proc and /dev for the chroot inside a private mount namespace, then becomes the
# program. "$0" is the chroot directory, "$@" the program and its arguments.
_ENTER_ROOT_SCRIPT = (
    'mount -t proc proc "$0/proc" && mount --bind /dev "$0/dev" && exec chroot "$0" "$@"'
)


class SandboxError(Exception):
    """A sandbox server could not be created, started, queried or stopped."""


def in_root_argv(root: str | os.PathLike[str], argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` with ``root`` as its filesystem root.

    ``root="/"`` returns ``argv`` unchanged. Otherwise the program runs under ``chroot`` in a
    private mount namespace that has ``/proc`` and ``/dev`` mounted (see the module docstring);
    paths in ``argv`` must be as seen inside the root.
    """
    root = os.fspath(root)
    if os.path.realpath(root) == "/":
        return list(argv)
    return [
        "unshare", "--mount", "--propagation", "private",
        "sh", "-c", _ENTER_ROOT_SCRIPT, os.path.realpath(root), *argv,
    ]  # fmt: skip


def root_env() -> dict[str, str]:
    """A small, predictable environment for programs run in a root (no host locale or proxies
    leaking into a chroot; ``MYSQL_PWD``-style variables never inherited)."""
    env = {"PATH": _PATH, "LC_ALL": "C", "HOME": "/root", "TZ": "UTC"}
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def server_kind(root: str | os.PathLike[str] = "/") -> str:
    """Which server the root holds: ``MARIADB`` if it has ``mariadbd``, else ``MYSQL`` if it has
    ``mysqld``. Raises SandboxError if it has neither."""
    base = Path(root)
    if (base / "usr/sbin/mariadbd").exists():
        return MARIADB
    if (base / "usr/sbin/mysqld").exists():
        return MYSQL
    raise SandboxError(f"no mariadbd or mysqld under {os.fspath(root)!r}/usr/sbin")


def ensure_host_mariadb() -> None:
    """Install Debian's ``mariadb-server mariadb-client`` if this machine has no ``mariadbd``.

    For ``binlake demo`` on a fresh Debian machine. Needs root and the package archive; the
    packages' scripts do not start a system service in a container, and the sandbox never uses
    one anyway.
    """
    if shutil.which("mariadbd") or os.path.exists("/usr/sbin/mariadbd"):
        return
    if os.geteuid() != 0:
        raise SandboxError(
            "mariadbd is not installed; run as root or `apt-get install mariadb-server mariadb-client`"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends",
         "mariadb-server", "mariadb-client"],
    ):  # fmt: skip
        result = subprocess.run(argv, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise SandboxError(f"{' '.join(argv)} failed:\n{_tail(result.stderr + result.stdout)}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now (the server may still lose a
    race for it; ``SandboxServer.start`` retries on "address in use")."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def parse_batch_output(text: str) -> list[tuple[str | None, ...]]:
    """Rows from the stock client's ``--batch --skip-column-names`` output.

    Batch mode separates columns with tabs and escapes tab, newline, backslash and NUL inside
    values as ``\\t``, ``\\n``, ``\\\\``, ``\\0``, so multi-line values (``SHOW CREATE TABLE``)
    survive. SQL NULL prints as ``NULL`` and becomes None; the string ``'NULL'`` is
    indistinguishable from it in this format.
    """
    rows: list[tuple[str | None, ...]] = []
    for line in text.split("\n"):
        if not line:
            # A lone empty line is a one-column row holding ''; only the final newline makes one.
            continue
        rows.append(tuple(None if f == "NULL" else _unescape(f) for f in line.split("\t")))
    return rows


_ESCAPES = {"t": "\t", "n": "\n", "\\": "\\", "0": "\0"}


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out: list[str] = []
    i = 0
    while i < len(field):
        ch = field[i]
        if ch == "\\" and i + 1 < len(field):
            out.append(_ESCAPES.get(field[i + 1], field[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def timeout_scale(environ: dict[str, str] | None = None) -> float:
    """How much to stretch the sandbox's timeouts on this machine, now.

    ``$BINLAKE_SANDBOX_TIMEOUT_SCALE`` when set; else the 1-minute load average per CPU (at
    least 1, at most 5): a server that starts in 2 s on an idle machine can take ten times that
    while other test runs start their own servers on the same two cores.
    """
    env = os.environ if environ is None else environ
    text = env.get(TIMEOUT_SCALE_ENV, "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            raise SandboxError(f"{TIMEOUT_SCALE_ENV}={text!r} is not a number") from None
        if value <= 0:
            raise SandboxError(f"{TIMEOUT_SCALE_ENV} must be greater than 0, got {text!r}")
        return value
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 1.0
    return min(max(1.0, load), _MAX_LOAD_SCALE)


def tool_failure(program: str, outcome: str, stdout: str, stderr: str, error_log: str) -> str:
    """The message of a failed setup tool: what it printed on each stream and the server's
    error log, each labelled, and an explicit ``(empty)`` for a stream that printed nothing —
    never a bare colon with nothing after it."""
    sections = [f"{program} {outcome}"]
    for label, text in (("stdout", stdout), ("stderr", stderr)):
        body = _tail(text) if text.strip() else "(empty)"
        sections.append(f"--- {program} {label} ---\n{body}")
    sections.append(error_log.strip() or "--- server error log ---\n(none written)")
    return "\n".join(sections)


_PR_SET_PDEATHSIG = 1


def _text(output: str | bytes | None) -> str:
    """What a timed-out subprocess had printed (bytes even in text mode, or None)."""
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def _die_with_parent() -> None:
    """preexec_fn: the server gets SIGTERM if the process that started it dies, so a test run
    killed with SIGKILL leaves no server behind. Survives the exec chain (no setuid binaries)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def terminate(
    process: subprocess.Popen[bytes], timeout: float, stop_signal: int = signal.SIGTERM
) -> None:
    """Send ``stop_signal`` (a clean shutdown) and wait; SIGKILL after ``timeout`` seconds,
    stretched by :func:`timeout_scale`. Nothing if the process has already exited."""
    if process.poll() is not None:
        return
    process.send_signal(stop_signal)
    try:
        process.wait(timeout * timeout_scale())
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# Servers that are running, so `stop_all` can stop them at interpreter exit or session end.
_LIVE: weakref.WeakSet[SandboxServer] = weakref.WeakSet()


def stop_all() -> None:
    """Stop and remove every sandbox server this process still has (an ``atexit``/Ctrl-C net)."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.cleanup()


@dataclass(frozen=True)
class _Paths:
    """One location both as the host sees it and as the server inside its root sees it."""

    host: Path
    inside: str


class SandboxServer:
    """One MariaDB or MySQL server in its own temporary directory. Use :func:`start_server`.

    Attributes:
        kind: ``MARIADB`` or ``MYSQL``.
        root: the filesystem root its binaries run from (``/`` or a chroot directory).
        server_id: its ``server_id``.
        port: its TCP port on 127.0.0.1 (kept across restarts).
        base_dir: host path of the directory holding everything it owns.
        datadir, socket, error_log: host paths inside ``base_dir``.
        extra_args: the extra server options of the current run.
    """

    def __init__(
        self,
        *,
        kind: str,
        root: str | os.PathLike[str],
        server_id: int,
        base_dir: Path,
        extra_args: Sequence[str] = (),
        port: int | None = None,
    ) -> None:
        if kind not in (MARIADB, MYSQL):
            raise SandboxError(f"unknown server kind {kind!r}")
        self.kind = kind
        self.root = Path(os.path.realpath(root))
        self.server_id = server_id
        self.base_dir = base_dir
        self.extra_args: tuple[str, ...] = tuple(extra_args)
        self.port = port if port is not None else free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._base = self._paths(base_dir)
        if len(os.fspath(self.socket)) > _MAX_SOCKET_PATH:
            raise SandboxError(
                f"socket path {os.fspath(self.socket)!r} is longer than {_MAX_SOCKET_PATH} bytes; "
                "use a shorter root or base directory"
            )

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.pid is not None else "stopped"
        return (
            f"<SandboxServer {self.kind} root={os.fspath(self.root)!r} port={self.port} "
            f"server_id={self.server_id} {state}>"
        )

    # --- locations ------------------------------------------------------------------------------

    def _paths(self, host: Path) -> _Paths:
        host = Path(os.path.realpath(host))
        if self.root == Path("/"):
            return _Paths(host, os.fspath(host))
        try:
            relative = host.relative_to(self.root)
        except ValueError:
            raise SandboxError(f"{os.fspath(host)!r} is not inside root {self.root}") from None
        return _Paths(host, "/" + os.fspath(relative))

    def inside(self, host_path: str | os.PathLike[str]) -> str:
        """``host_path`` as the server (and the root's client) sees it."""
        return self._paths(Path(host_path)).inside

    @property
    def datadir(self) -> Path:
        return self._base.host / "data"

    @property
    def socket(self) -> Path:
        return self._base.host / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self._base.host / "error.log"

    @property
    def pid_file(self) -> Path:
        return self._base.host / "mysqld.pid"

    @property
    def pid(self) -> int | None:
        """The server's PID while it runs, else None."""
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    def _inside(self, name: str) -> str:
        return self._base.inside.rstrip("/") + "/" + name

    # --- lifecycle ------------------------------------------------------------------------------

    def initialize(self) -> None:
        """Create the datadir with the flavor's own tool (``mariadb-install-db`` or ``mysqld
        --initialize-insecure``); root gets an empty password."""
        if self.datadir.exists():
            raise SandboxError(f"datadir {self.datadir} already exists")
        if self.kind == MARIADB:
            argv = [
                "mariadb-install-db", "--no-defaults", *self._user_args(),
                f"--datadir={self._inside('data')}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=8M",
            ]  # fmt: skip
        else:
            # mysqld fails silently when the datadir's parent is missing; ours is base_dir.
            argv = [
                "/usr/sbin/mysqld", "--no-defaults", *self._user_args(),
                "--initialize-insecure", f"--datadir={self._inside('data')}",
                f"--log-error={self._inside('error.log')}", "--innodb-redo-log-capacity=8M",
            ]  # fmt: skip
        failures: list[str] = []
        for attempt in range(2):
            failure = self._run_install(argv)
            if failure is None:
                return
            failures.append(failure)
            if attempt == 0:
                # A busy machine makes the bootstrap server fail now and then (a timed-out
                # probe, a slow fsync); a fresh datadir and one more try usually succeeds.
                shutil.rmtree(self.datadir, ignore_errors=True)
                with contextlib.suppress(OSError):
                    self.error_log.unlink()
        raise SandboxError("\n--- retried once with a fresh datadir ---\n".join(failures))

    def _run_install(self, argv: list[str]) -> str | None:
        """Run the datadir tool once: None on success, else the failure's full message."""
        timeout = INSTALL_TIMEOUT * timeout_scale()
        try:
            result = subprocess.run(
                in_root_argv(self.root, argv), env=root_env(), capture_output=True, text=True,
                stdin=subprocess.DEVNULL, timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            return tool_failure(argv[0], f"timed out after {timeout:.0f} s:", _text(exc.stdout),
                                _text(exc.stderr), self.error_log_tail())
        if result.returncode != 0:
            return tool_failure(argv[0], f"failed (exit {result.returncode}):", result.stdout,
                                result.stderr, self.error_log_tail())
        if not (self.datadir / "mysql").is_dir():
            return tool_failure(argv[0], f"exited 0 but made no {self.datadir / 'mysql'}:",
                                result.stdout, result.stderr, self.error_log_tail())
        return None

    def server_argv(self) -> list[str]:
        """The full command line of the server as run inside its root."""
        if self.kind == MARIADB:
            program = "/usr/sbin/mariadbd"
            # --log-basename resets the log file names given before it (--log-error included),
            # so it goes first, right after --no-defaults (which must be first of all).
            leading = ["--log-basename=mysql"]
            specific = ["--innodb-log-file-size=8M"]
        else:
            program = "/usr/sbin/mysqld"
            leading = []
            specific = [
                "--innodb-redo-log-capacity=8M", "--gtid-mode=ON",
                "--enforce-gtid-consistency=ON", "--secure-file-priv=NULL", "--mysqlx=OFF",
            ]  # fmt: skip
        common = [
            *self._user_args(),
            f"--datadir={self._inside('data')}",
            f"--socket={self._inside('mysqld.sock')}",
            f"--pid-file={self._inside('mysqld.pid')}",
            f"--log-error={self._inside('error.log')}",
            f"--port={self.port}", "--bind-address=127.0.0.1", "--skip-name-resolve",
            f"--server-id={self.server_id}",
            "--log-bin=mysql-bin", "--binlog-format=ROW", "--binlog-row-metadata=FULL",
            "--binlog-checksum=CRC32",
        ]  # fmt: skip
        return [program, "--no-defaults", *leading, *common, *specific, *self.extra_args]

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Start the server and return once it accepts connections on its socket.

        Raises SandboxError with the tail of the server's error log if it exits or does not
        become ready within ``timeout`` seconds. A port lost to another process between
        :func:`free_port` and the server's bind is retried with a new port.
        """
        if self.pid is not None:
            raise SandboxError(f"{self!r} is already running")
        for attempt in range(3):
            log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()
            self._process = subprocess.Popen(
                in_root_argv(self.root, self.server_argv()),
                env=root_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=open(self._base.host / "console.log", "ab"),  # noqa: SIM115
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the server
                preexec_fn=_die_with_parent,
            )
            _LIVE.add(self)
            try:
                self._wait_ready(timeout * timeout_scale())
                return
            except SandboxError:
                self._kill()
                log = self._read_error_log(log_offset)
                if attempt < 2 and (
                    "Address already in use" in log or "Do you already have" in log
                ):
                    self.port = free_port()
                    continue
                raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise SandboxError(
                    f"{self.kind} server exited with code {code} during startup:\n"
                    f"{self.error_log_tail()}"
                )
            if self._greets():
                return
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"{self.kind} server not ready after {timeout:.0f} s (set "
                    f"{TIMEOUT_SCALE_ENV} to allow more):\n{self.error_log_tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def _greets(self) -> bool:
        """True once the server sends a protocol-10 handshake on its unix socket.

        The socket file appears before the server is ready to talk, and a busy server may
        accept and then take seconds to greet: a probe reads the whole 5-byte header (packet
        header and protocol version) with its own generous timeout, and anything short of a
        greeting (an ERR packet while starting, a reset) means "not yet".
        """
        if not self.socket.exists():
            return False
        header = b""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5.0)
                sock.connect(os.fspath(self.socket))
                while len(header) < 5:
                    chunk = sock.recv(5 - len(header))
                    if not chunk:
                        break
                    header += chunk
        except OSError:
            return False
        return len(header) == 5 and header[4] == 10

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """SIGTERM the server (a clean shutdown), SIGKILL it after ``timeout`` seconds."""
        process = self._process
        if process is None:
            return
        terminate(process, timeout)
        self._process = None
        _LIVE.discard(self)
        # A stopped server has no pid file: a fresh mtime keeps remove_stale_sandboxes away.
        with contextlib.suppress(OSError):
            os.utime(self.base_dir)

    def kill(self) -> None:
        """SIGKILL the server: a crash, nothing flushed or shut down (the datadir stays)."""
        self._kill()

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None
        _LIVE.discard(self)

    def restart(self, extra_args: Sequence[str] | None = None) -> None:
        """Stop, then start again on the same port and datadir; ``extra_args`` (when given)
        replaces the extra server options."""
        self.stop()
        if extra_args is not None:
            self.extra_args = tuple(extra_args)
        self.start()

    def cleanup(self) -> None:
        """Stop the server and delete its base directory."""
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> SandboxServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    # --- the stock client -----------------------------------------------------------------------

    def client_argv(self, defaults_file: str | None = None) -> list[str]:
        """The root's own command-line client, connected over the unix socket, as run inside the
        root. ``defaults_file`` (a path inside the root) must come first, so it is placed here."""
        program = "mariadb" if self.kind == MARIADB else "mysql"
        first = [f"--defaults-file={defaults_file}"] if defaults_file else ["--no-defaults"]
        return [program, *first, f"--socket={self._inside('mysqld.sock')}"]

    @contextlib.contextmanager
    def _option_file(self, user: str, password: str | None) -> Iterator[str | None]:
        """A private ``[client]`` option file so the password never appears in an argv."""
        if password is None:
            yield None
            return
        path = self._base.host / f"client-{secrets.token_hex(6)}.cnf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f'[client]\nuser="{user}"\npassword="{password}"\n')
        try:
            yield self.inside(path)
        finally:
            path.unlink(missing_ok=True)

    def sql(
        self,
        statement: str,
        *,
        user: str = "root",
        password: str | None = None,
        database: str | None = None,
        extra_client_args: Sequence[str] = (),
        timeout: float = 120.0,
    ) -> list[tuple[str | None, ...]]:
        """Run ``statement`` (one or more ``;``-separated statements) with the stock client and
        return the rows of its results as text (NULL as None), via :func:`parse_batch_output`.

        The statement goes in on stdin and the password through an option file, so neither
        shows in the process list. Raises SandboxError with the client's stderr (never the
        statement or the password) if the client fails.
        """
        with self._option_file(user, password) as defaults_file:
            argv = self.client_argv(defaults_file)
            if defaults_file is None:
                argv.append(f"--user={user}")
            argv += ["--batch", "--skip-column-names", *extra_client_args]
            if database is not None:
                argv.append(f"--database={database}")
            limit = timeout * timeout_scale()
            try:
                result = subprocess.run(
                    in_root_argv(self.root, argv), env=root_env(), input=statement.encode(),
                    capture_output=True, timeout=limit,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise SandboxError(f"{argv[0]} as {user!r} timed out after {limit:.0f} s") from None
        if result.returncode != 0:
            message = (result.stderr.decode(errors="replace").strip()
                       or _tail(result.stdout.decode(errors="replace"))
                       or "(the client printed nothing)")
            if password:
                message = message.replace(password, "***")
            raise SandboxError(
                f"{argv[0]} as {user!r} failed (exit {result.returncode}): {message}"
            )
        return parse_batch_output(result.stdout.decode(errors="replace"))

    def version(self) -> str:
        """``SELECT VERSION()``, e.g. ``'11.8.6-MariaDB-0+deb13u1'``."""
        rows = self.sql("SELECT VERSION()")
        return rows[0][0] or ""

    def drop_anonymous_users(self) -> None:
        """Remove the anonymous accounts ``mariadb-install-db`` creates: ``''@'localhost'``
        outranks ``'name'@'%'`` for local logins and would make every test user fail."""
        hosts = self.sql("SELECT Host FROM mysql.user WHERE User = ''")
        if hosts:
            self.sql("".join(f"DROP USER ''@'{host}';" for (host,) in hosts) + "FLUSH PRIVILEGES;")

    # --- diagnostics ----------------------------------------------------------------------------

    def _read_error_log(self, offset: int = 0) -> str:
        try:
            with open(self.error_log, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def error_log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's error log (and of its console output), for errors."""
        parts = [f"--- {self.error_log} (tail) ---", _tail(self._read_error_log(), lines)]
        console = self._base.host / "console.log"
        with contextlib.suppress(OSError):
            text = console.read_text(errors="replace").strip()
            if text:
                parts += [f"--- {console} (tail) ---", _tail(text, lines)]
        return "\n".join(parts)

    def _user_args(self) -> list[str]:
        # Both servers refuse to run as root unless told to; as another user they run as it.
        return ["--user=root"] if os.geteuid() == 0 else []


def remove_stale_sandboxes(parent: str | os.PathLike[str], min_age: float = 3600.0) -> list[Path]:
    """Delete the ``binlake-sandbox-*`` directories under ``parent`` left by processes that were
    killed before they could clean up; return what was deleted.

    A directory stays while its server (``mysqld.pid``) or the process that created it
    (``owner.pid``) still runs. One with neither file stays until it is ``min_age`` seconds old.
    """
    removed = []
    for base in Path(parent).glob("binlake-sandbox-*"):
        server_pid = _read_pid(base / "mysqld.pid")
        owner_pid = _read_pid(base / "owner.pid")
        if server_pid is not None and _running(server_pid):
            continue
        if owner_pid is not None:
            if _running(owner_pid):
                continue
        else:
            try:
                if time.time() - base.stat().st_mtime < min_age:
                    continue
            except OSError:
                continue
        shutil.rmtree(base, ignore_errors=True)
        removed.append(base)
    return removed


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_next_server_id = 100 + os.getpid() % 1000 * 10


def start_server(
    root: str | os.PathLike[str] = "/",
    *,
    kind: str | None = None,
    server_id: int | None = None,
    extra_args: Sequence[str] = (),
    base_parent: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
) -> SandboxServer:
    """Create, initialize and start a fresh server from ``root``; return it once it accepts
    connections, with anonymous users dropped.

    Args:
        root: ``/`` for the host's packages or a chroot directory holding a server.
        kind: ``MARIADB``/``MYSQL``; detected from the root's binaries when None.
        server_id: its ``server_id``; a process-unique one when None.
        extra_args: extra server options, appended last (so they override ours).
        base_parent: where the temporary base directory goes (host path); defaults to the
            system temp dir, or ``ROOT/tmp`` for a chroot (the server must see it).
        timeout: seconds to wait for the server to accept connections.

    Raises:
        SandboxError: with the tail of the server's error log, if anything fails; the
            half-made server is cleaned up.
    """
    global _next_server_id
    if kind is None:
        kind = server_kind(root)
    if server_id is None:
        server_id = _next_server_id
        _next_server_id += 1
    if base_parent is None:
        base_parent = tempfile.gettempdir() if os.path.realpath(root) == "/" else Path(root, "tmp")
    base_dir = Path(tempfile.mkdtemp(prefix="binlake-sandbox-", dir=base_parent))
    # Whoever runs the server (root, or --user inside) must be able to reach it.
    os.chmod(base_dir, 0o755)
    (base_dir / "owner.pid").write_text(f"{os.getpid()}\n")
    server = SandboxServer(
        kind=kind, root=root, server_id=server_id, base_dir=base_dir, extra_args=extra_args
    )
    try:
        server.initialize()
        server.start(timeout)
        if kind == MARIADB:
            server.drop_anonymous_users()
    except BaseException:
        server.cleanup()
        raise
    return server
