"""What a test gets from the test bed: a running server, its accounts, and its stock tools.

A :class:`ServerHandle` wraps a ``devtools.sandbox.SandboxServer`` with the per-flavor facts tests
need (flavor name, version, TLS CA, the accounts created for the session) and runs the flavor's
own stock client. Paths on the handle are host paths; :meth:`ServerHandle.inside` translates one
to the path the server and its tools see inside their chroot.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devtools.sandbox import MARIADB, SandboxServer, in_root_argv

__all__ = ["ServerHandle", "User"]


@dataclass(frozen=True, slots=True)
class User:
    """An account on a test server. ``plugin`` is its authentication plugin as the server names
    it (``mysql_native_password``, ``ed25519``, ``parsec``, ``caching_sha2_password``, ...)."""

    name: str
    password: str = field(repr=False)
    plugin: str


class ServerHandle:
    """A running test server.

    Attributes:
        flavor: ``'mariadb-10.11'``, ``'mariadb-11.8'`` or ``'mysql-9.7'``.
        version: ``SELECT VERSION()``, e.g. ``'11.8.6-MariaDB-0+deb13u1 from Debian-log'``.
        host: always ``'127.0.0.1'``.
        port, socket, datadir, server_id, root: see the properties.
        tls_ca: host path of the CA that signed the server's certificate, or None when the
            server uses its own self-signed one (MariaDB 11.8, MySQL 9.7).
        users: the accounts, by role: ``'root'`` (empty password) and ``'repl'`` everywhere;
            ``'native'``, ``'ed25519'`` on MariaDB; ``'parsec'`` on 11.8; ``'caching_sha2'`` and,
            if the server still has the plugin, ``'sha256'`` on MySQL. Every account but root
            has REPLICATION SLAVE, REPLICATION CLIENT (BINLOG MONITOR) and SELECT on ``*.*``.
        missing_users: role -> why the account does not exist on this server.
        base_args: the flavor's own extra server options (TLS files on 10.11).
        name: the test bed's label for this server (the flavor, or the factory's ``name``).
        sandbox: the underlying ``devtools.sandbox.SandboxServer``.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        *,
        flavor: str,
        name: str,
        sandbox: SandboxServer,
        tls_ca: str | None,
        base_args: Sequence[str] = (),
    ) -> None:
        self.flavor = flavor
        self.base_args = tuple(base_args)
        self.name = name
        self.sandbox = sandbox
        self.tls_ca = tls_ca
        self.version = sandbox.version()
        self.users: dict[str, User] = {"root": User("root", "", _root_plugin(sandbox))}
        self.missing_users: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<ServerHandle {self.name} {self.version} port={self.port} socket={self.socket}>"

    @property
    def is_mariadb(self) -> bool:
        return self.sandbox.kind == MARIADB

    @property
    def port(self) -> int:
        """TCP port on 127.0.0.1 (unchanged by ``restart``)."""
        return self.sandbox.port

    @property
    def socket(self) -> str:
        """Host path of the server's unix socket."""
        return os.fspath(self.sandbox.socket)

    @property
    def datadir(self) -> str:
        """Host path of the datadir (the binlogs live here)."""
        return os.fspath(self.sandbox.datadir)

    @property
    def server_id(self) -> int:
        return self.sandbox.server_id

    @property
    def root(self) -> str:
        """The filesystem root the server runs from: ``'/'`` or a chroot directory."""
        return os.fspath(self.sandbox.root)

    def inside(self, host_path: str | os.PathLike[str]) -> str:
        """``host_path`` as seen by the server and its tools inside the root."""
        return self.sandbox.inside(host_path)

    # --- running things ---------------------------------------------------------------------------

    def sql(
        self,
        statement: str,
        *,
        user: str = "root",
        database: str | None = None,
        tcp: bool = False,
        client_args: Sequence[str] = (),
    ) -> list[tuple[str | None, ...]]:
        """Run ``statement`` (``;``-separated statements allowed) with the flavor's own stock
        client and return all result rows as text, NULL as None.

        Args:
            user: a key of :attr:`users` to log in as (root by default).
            database: the default database.
            tcp: connect over TCP to 127.0.0.1 instead of the unix socket (the client then uses
                TLS if the server offers it; the 10.11 client only with ``--ssl``).
            client_args: more client options, e.g. ``["--ssl-verify-server-cert",
                f"--ssl-ca={server.inside(server.tls_ca)}"]`` (paths as seen inside the root).

        Raises:
            devtools.sandbox.SandboxError: the client failed; the message holds its stderr.
        """
        account = self.users[user]
        extra = ["--protocol=TCP", "--host=127.0.0.1", f"--port={self.port}"] if tcp else []
        return self.sandbox.sql(
            statement,
            user=account.name,
            password=account.password or None,
            database=database,
            extra_client_args=[*extra, *client_args],
        )

    def binlog_files(self) -> list[str]:
        """Host paths of the server's binlog files, oldest first (from its index file)."""
        datadir = Path(self.datadir)
        try:
            lines = (datadir / "mysql-bin.index").read_text().split()
        except FileNotFoundError:
            return []
        return [os.fspath(datadir / Path(line).name) for line in lines if line]

    def binlog_tool_argv(self, *args: str) -> list[str]:
        """The argv that runs this flavor's ``mariadb-binlog``/``mysqlbinlog`` from its root,
        followed by ``args``. Arguments that are host paths under the root (say, from
        :meth:`binlog_files`) are translated to the path the tool sees."""
        program = "mariadb-binlog" if self.is_mariadb else "mysqlbinlog"
        root = self.root.rstrip("/")
        translated = [
            self.inside(arg) if root and (arg == root or arg.startswith(root + "/")) else arg
            for arg in args
        ]
        return in_root_argv(self.root, [program, "--no-defaults", *translated])

    # --- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after a timeout); its datadir stays."""
        self.sandbox.stop()

    def start(self) -> None:
        """Start a stopped server again, same port, socket and datadir."""
        self.sandbox.start()

    def restart(self, extra_args: Sequence[str] | None = None) -> None:
        """Stop and start; ``extra_args`` (when given) replaces the test's extra server options
        for this and later runs (the flavor's own, like the TLS files, always stay).
        ``restart([])`` goes back to the defaults; a test that changes a shared fixture's options
        must do that before it ends."""
        if extra_args is None:
            self.sandbox.restart()
        else:
            self.sandbox.restart([*self.base_args, *extra_args])


def _root_plugin(sandbox: SandboxServer) -> str:
    return "mysql_native_password" if sandbox.kind == MARIADB else "caching_sha2_password"
