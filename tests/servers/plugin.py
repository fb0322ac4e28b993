"""The test bed's pytest plugin: real MariaDB 10.11, MariaDB 11.8 and MySQL 9.7 servers on
loopback, one of each per test session. Registered by ``tests/conftest.py``.

Fixtures (all session-scoped):

- ``mariadb_10_11``, ``mariadb_11_8``, ``mysql_9_7`` -> :class:`~tests.servers.handle.ServerHandle`,
  started on first use and shared by every test of the session. Tests may create their own
  databases, tables and users (with unique names), and must undo any ``restart(extra_args)``.
- ``server_factory`` -> :class:`ServerFactory`: ``start(flavor, extra_args=[...], name=...)``
  gives a separate server for special options (semi-sync, compression, STATEMENT format);
  servers with the same ``name`` are shared, so a module can reuse one.

Where the servers come from: 10.11 is the host's Debian package, 11.8 and 9.7 run from the
chroots built by ``python -m tests.servers.provision`` (see ``chroot.py``; this plugin never
builds them, it only checks their marker). A flavor that cannot be provided skips the tests that
ask for it with the reason, or fails them when ``CI=true``. A server that is provided but fails to
start is an error, not a skip.

Everything is stopped and its temporary directory removed when the session ends, including on
Ctrl-C (pytest tears session fixtures down on KeyboardInterrupt; ``pytest_sessionfinish`` and an
``atexit`` hook are the nets behind that). If the run is killed outright, the servers get SIGTERM
from the kernel (``PR_SET_PDEATHSIG``) and the next session removes their directories.

``/proc`` and ``/dev`` for the chroot servers exist only in each server's private mount
namespace (see ``devtools/sandbox.py``), so there is nothing to unmount at session end.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools import sandbox
from devtools.sandbox import MARIADB, MYSQL, SandboxError

from .chroot import SID_MYSQL, TRIXIE_MARIADB, ChrootSpec, chroot_path, ready_chroot
from .handle import ServerHandle, User

__all__ = ["FLAVORS", "ServerFactory", "unavailable"]

TLS_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "tls"


@dataclass(frozen=True)
class Flavor:
    """How the test bed provides one server flavor."""

    name: str
    kind: str
    version_prefix: str
    chroot: ChrootSpec | None  # None: the host's own packages
    server_id: int  # of the session's shared server; factory servers count up from 5000
    needs_tls_files: bool  # no zero-config TLS: start with fixtures/tls


FLAVORS: dict[str, Flavor] = {
    flavor.name: flavor
    for flavor in (
        Flavor("mariadb-10.11", MARIADB, "10.11.", None, 1011, needs_tls_files=True),
        Flavor("mariadb-11.8", MARIADB, "11.8.", TRIXIE_MARIADB, 1108, needs_tls_files=False),
        Flavor("mysql-9.7", MYSQL, "9.7.", SID_MYSQL, 907, needs_tls_files=False),
    )
}


def unavailable(reason: str) -> None:
    """Skip the current test because the test bed cannot provide something; fail under CI."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the test bed cannot provide: {reason}", pytrace=False)
    pytest.skip(reason)


def user_or_skip(server: ServerHandle, role: str) -> User:
    """``server.users[role]``, or skip (fail under CI) with the reason the account is missing."""
    if role not in server.users:
        unavailable(server.missing_users.get(role, f"{server.flavor} has no {role!r} account"))
    return server.users[role]


@functools.cache
def _can_mount_privately() -> bool:
    """Whether this process may do what ``in_root_argv`` does: mount /proc in a namespace."""
    probe = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "mount",
        "-t",
        "proc",
        "proc",
        "/proc",
    ]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _find_root(flavor: Flavor) -> str:
    """The flavor's filesystem root, or raise LookupError saying why it cannot be had."""
    if flavor.chroot is None:
        if not (os.path.exists("/usr/sbin/mariadbd") and os.path.exists("/usr/bin/mariadb")):
            raise LookupError(
                f"{flavor.name}: the host has no MariaDB server/client "
                "(apt-get install mariadb-server mariadb-client, or scripts/setup.sh --test)"
            )
        return "/"
    if os.geteuid() != 0:
        raise LookupError(f"{flavor.name}: running servers from a chroot needs root")
    if not _can_mount_privately():
        raise LookupError(
            f"{flavor.name}: cannot create a private mount namespace (`unshare --mount` failed; "
            "a container needs CAP_SYS_ADMIN) to give the chroot /proc and /dev"
        )
    root = ready_chroot(flavor.chroot)
    if root is None:
        raise LookupError(
            f"{flavor.name}: chroot {chroot_path(flavor.chroot)} is not built; "
            "run `python -m tests.servers.provision` (as root)"
        )
    return os.fspath(root)


class ServerFactory:
    """Starts test servers and remembers them so the session can stop them all."""

    def __init__(self) -> None:
        self._servers: dict[str, tuple[tuple[str, ...], ServerHandle]] = {}
        self._unavailable: dict[str, str] = {}
        self._failed: dict[str, SandboxError] = {}
        self._next_server_id = 5000
        self._closed = False
        self._cleaned_parents: set[str] = set()

    def start(
        self, flavor: str, extra_args: Sequence[str] = (), name: str | None = None
    ) -> ServerHandle:
        """A new server of ``flavor`` started with ``extra_args`` after the flavor's defaults.

        With ``name``, a server of that name started earlier in the session is returned instead
        (it must have the same flavor and extra_args). Skips (fails under CI) if the flavor
        cannot be provided.
        """
        if self._closed:
            raise RuntimeError("the test session's server factory is closed")
        if flavor not in FLAVORS:
            raise ValueError(f"unknown flavor {flavor!r}; known: {', '.join(FLAVORS)}")
        extra = tuple(extra_args)
        if name is not None and name in self._servers:
            known_extra, handle = self._servers[name]
            if handle.flavor != flavor or known_extra != extra:
                raise ValueError(f"server {name!r} already exists with other options")
            return handle
        key = name or f"{flavor}#{len(self._servers)}"
        if key in self._failed:
            raise self._failed[key]
        server_id = self._next_server_id
        self._next_server_id += 1
        handle = self._start(FLAVORS[flavor], key, extra, server_id)
        self._servers[key] = (extra, handle)
        return handle

    def default(self, flavor: str) -> ServerHandle:
        """The session's shared server of ``flavor`` (what the flavor fixtures return)."""
        if flavor in self._servers:
            return self._servers[flavor][1]
        if flavor in self._failed:
            raise self._failed[flavor]
        handle = self._start(FLAVORS[flavor], flavor, (), FLAVORS[flavor].server_id)
        self._servers[flavor] = ((), handle)
        return handle

    def _start(
        self, flavor: Flavor, name: str, extra: tuple[str, ...], server_id: int
    ) -> ServerHandle:
        reason = self._unavailable.get(flavor.name)
        if reason is None:
            try:
                root = _find_root(flavor)
            except LookupError as exc:
                reason = self._unavailable[flavor.name] = str(exc)
        if reason is not None:
            unavailable(reason)
        base_parent = tempfile.gettempdir() if root == "/" else os.path.join(root, "tmp")
        if base_parent not in self._cleaned_parents:
            sandbox.remove_stale_sandboxes(base_parent)
            self._cleaned_parents.add(base_parent)
        base_args: tuple[str, ...] = ()
        tls_ca = None
        if flavor.needs_tls_files:
            tls_ca = os.fspath(TLS_DIR / "ca.pem")
            base_args = (
                f"--ssl-ca={tls_ca}",
                f"--ssl-cert={TLS_DIR / 'server-cert.pem'}",
                f"--ssl-key={TLS_DIR / 'server-key.pem'}",
            )
        try:
            server = sandbox.start_server(
                root,
                kind=flavor.kind,
                server_id=server_id,
                extra_args=(*base_args, *extra),
                base_parent=base_parent,
            )
        except SandboxError as exc:
            self._failed[name] = exc
            raise
        try:
            handle = ServerHandle(
                flavor=flavor.name, name=name, sandbox=server, tls_ca=tls_ca, base_args=base_args
            )
            if not handle.version.startswith(flavor.version_prefix):
                reason = (
                    f"{flavor.name}: {root} provides {handle.version}, not {flavor.version_prefix}x"
                )
                self._unavailable[flavor.name] = reason
                unavailable(reason)
            _create_users(handle)
        except BaseException as exc:
            server.cleanup()
            if isinstance(exc, SandboxError):
                self._failed[name] = exc
            raise
        return handle

    def handles(self) -> list[ServerHandle]:
        return [handle for _, handle in self._servers.values()]

    def close(self) -> None:
        """Stop every server and delete its directory. Idempotent."""
        self._closed = True
        for handle in self.handles():
            with contextlib.suppress(Exception):
                handle.sandbox.cleanup()
        self._servers.clear()


# --- accounts -------------------------------------------------------------------------------------


def _password() -> str:
    return secrets.token_urlsafe(12)


def _plugin_library_present(handle: ServerHandle, library: str) -> bool:
    (plugin_dir,) = handle.sql("SELECT @@plugin_dir")[0]
    return plugin_dir is not None and Path(handle.root, plugin_dir.lstrip("/"), library).exists()


def _plugin_active(handle: ServerHandle, plugin: str) -> bool:
    rows = handle.sql(
        f"SELECT PLUGIN_STATUS FROM information_schema.PLUGINS WHERE PLUGIN_NAME = '{plugin}'"
    )
    return bool(rows) and rows[0][0] == "ACTIVE"


def _create_users(handle: ServerHandle) -> None:
    """Create the session's accounts (see ServerHandle.users) with fresh random passwords.

    Runs with ``sql_log_bin=0`` so the setup leaves no trace in the binlog tests read.
    """
    statements: list[str] = ["SET SESSION sql_log_bin = 0"]
    passwords: dict[str, str] = {}

    def account(role: str, identified: str, grants: str) -> None:
        password = passwords[role] = _password()
        statements.append(f"CREATE USER '{role}'@'%' {identified.format(pw=password)}")
        statements.append(f"GRANT {grants} ON *.* TO '{role}'@'%'")

    if handle.is_mariadb:
        grants = "REPLICATION SLAVE, BINLOG MONITOR, SELECT"
        account("repl", "IDENTIFIED BY '{pw}'", grants)
        account("native", "IDENTIFIED VIA mysql_native_password USING PASSWORD('{pw}')", grants)
        for role, library in (("ed25519", "auth_ed25519"), ("parsec", "auth_parsec")):
            if not _plugin_library_present(handle, f"{library}.so"):
                handle.missing_users[role] = f"{handle.flavor} has no {library} plugin"
                continue
            if not _plugin_active(handle, role):
                statements.append(f"INSTALL SONAME '{library}'")
            account(role, f"IDENTIFIED VIA {role} USING PASSWORD('{{pw}}')", grants)
    else:
        grants = "REPLICATION SLAVE, REPLICATION CLIENT, SELECT"
        # mysqld --initialize creates root@localhost only, which TCP logins do not match.
        statements.append("CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY ''")
        statements.append("GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
        account("repl", "IDENTIFIED WITH caching_sha2_password BY '{pw}'", grants)
        account("caching_sha2", "IDENTIFIED WITH caching_sha2_password BY '{pw}'", grants)
        if _plugin_active(handle, "sha256_password"):
            account("sha256", "IDENTIFIED WITH sha256_password BY '{pw}'", grants)
        else:
            handle.missing_users["sha256"] = (
                f"{handle.flavor} ({handle.version}) has no active sha256_password plugin"
            )
    try:
        handle.sql(";\n".join(statements) + ";")
    except SandboxError as exc:
        message = str(exc)
        for password in passwords.values():
            message = message.replace(password, "***")
        raise SandboxError(
            f"creating the test accounts on {handle.flavor} failed: {message}"
        ) from None
    plugins = dict(
        (user, plugin)
        for user, plugin in handle.sql("SELECT User, plugin FROM mysql.user WHERE Host = '%'")
    )
    for role, password in passwords.items():
        handle.users[role] = User(role, password, plugins.get(role) or "")


# --- pytest wiring --------------------------------------------------------------------------------

_factories: list[ServerFactory] = []


def _close_all() -> None:
    for factory in _factories:
        factory.close()
    sandbox.stop_all()


atexit.register(_close_all)


@pytest.fixture(scope="session")
def server_factory() -> Iterator[ServerFactory]:
    factory = ServerFactory()
    _factories.append(factory)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="session")
def mariadb_10_11(server_factory: ServerFactory) -> ServerHandle:
    return server_factory.default("mariadb-10.11")


@pytest.fixture(scope="session")
def mariadb_11_8(server_factory: ServerFactory) -> ServerHandle:
    return server_factory.default("mariadb-11.8")


@pytest.fixture(scope="session")
def mysql_9_7(server_factory: ServerFactory) -> ServerHandle:
    return server_factory.default("mysql-9.7")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _close_all()


def pytest_report_header(config: pytest.Config) -> list[str]:
    found = []
    for flavor in FLAVORS.values():
        try:
            root = _find_root(flavor)
            found.append(f"{flavor.name} ({root})")
        except LookupError as exc:
            found.append(f"{flavor.name}: unavailable ({exc})")
    return ["test bed servers: " + "; ".join(found)]
