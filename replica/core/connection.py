"""An authenticated client connection to MariaDB / MySQL over trio (TCP or unix socket).

This module only moves bytes: ``protocol.packets.PacketCodec`` frames them and
``protocol.handshake.ClientHandshake`` decides the authentication. What lives here is policy
that needs the outside world: sockets, TLS contexts, timeouts, and the translation of
``OSError``/trio stream errors into :mod:`replica.errors` at this boundary (protocol errors pass
through unchanged).

TLS modes (``tls_mode``), after MySQL's ``--ssl-mode``:

``disabled``
    never TLS.
``preferred``
    TLS when the server offers it (the default on loopback TCP and unix sockets; on a unix
    socket "preferred" skips TLS, which would only add cost to a channel that is already safe).
``required``
    TLS or fail (the default for TCP to any other host).
``verify-ca`` / ``verify-identity``
    TLS with the certificate chain checked against ``tls_ca`` (the system store when unset),
    and for verify-identity the host name too.

With ``preferred``/``required`` and a ``tls_ca`` configured the certificate is verified as
for verify-ca. Without a CA the certificate cannot be verified; then MariaDB 11.4+'s
zero-configuration TLS must vouch for it: the first OK packet carries a fingerprint that only
the server knowing the password hash can compute (native, ed25519, parsec). If it is missing or
wrong the connection fails with ``TlsError``. Two exceptions, where an impostor would have to
own this host already: a unix socket, and — unless ``trust_loopback=False`` — loopback TCP,
where an unverified certificate is accepted if no fingerprint is offered (a fingerprint that is
offered must still match). Inside TLS accepted by these rules, MySQL's caching_sha2_password
(full path) and sha256_password send the password in clear, as MySQL expects (see
``protocol.auth``); remote unverified TLS is accepted only with a fingerprint, which only
plugins that never send the password can give. :attr:`Connection.tls_trust` says which rule
applied.
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import trio

from protocol.auth import check_tls_fingerprint
from protocol.errors import MalformedPacket, NotMySQLServer, TlsError
from protocol.handshake import ClientHandshake, ServerGreeting, greeting_problem
from protocol.packets import DEFAULT_MAX_PACKET_SIZE, PacketCodec
from protocol.results import OkPacket, ResultSet, TextResultReader, com_ping, com_query, com_quit
from replica.errors import ConnectError, ConnectionLost, ConnectTimeout, ReadTimeout

if TYPE_CHECKING:
    from replica.config import ServerConfig

__all__ = ["ConnectOptions", "Connection", "TLS_MODES", "is_loopback"]

TLS_MODES = ("disabled", "preferred", "required", "verify-ca", "verify-identity")

log = logging.getLogger("binlake.connection")

_RECEIVE_SIZE = 256 * 1024


class _Default(enum.Enum):
    TIMEOUT = enum.auto()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """How to reach, trust and log into the server.

    ``tls_mode=None`` picks the default: ``preferred`` on a unix socket or loopback TCP,
    ``required`` otherwise. ``read_timeout=None`` waits forever (the replication session uses
    its own heartbeat-based timeout per read).
    """

    host: str = "127.0.0.1"
    port: int = 3306
    unix_socket: str | None = None
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str | None = None
    tls_mode: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    rsa_public_key: bytes | None = field(default=None, repr=False)
    get_server_public_key: bool = False
    trust_loopback: bool = True
    connect_timeout: float = 10.0
    read_timeout: float | None = 30.0
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE
    connect_attrs: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if self.tls_mode is not None and self.tls_mode not in TLS_MODES:
            raise ValueError(f"tls_mode must be one of {TLS_MODES}, not {self.tls_mode!r}")

    @property
    def effective_tls_mode(self) -> str:
        if self.tls_mode is not None:
            return self.tls_mode
        if self.unix_socket or is_loopback(self.host):
            return "preferred"
        return "required"

    @classmethod
    def from_config(cls, config: ServerConfig, **overrides: object) -> ConnectOptions:
        """Options from the ``[server]`` section (reads the password and public-key files)."""
        password = ""
        if config.password is not None:
            password = config.password.reveal()
        elif config.password_file:
            with open(config.password_file, encoding="utf-8") as f:
                password = f.read()
            password = password[:-1] if password.endswith("\n") else password
        key = None
        if config.server_public_key_file:
            with open(config.server_public_key_file, "rb") as f:
                key = f.read()
        # A list of candidate hosts: the first, unless the caller picked one (following()).
        host, port = config.candidates[0] if config.candidates else (config.host, config.port)
        values: dict[str, object] = dict(
            host=host, port=port, unix_socket=config.socket, user=config.user,
            password=password, tls_ca=config.tls_ca, tls_cert=config.tls_cert,
            # "auto": preferred on loopback and unix sockets, required for remote hosts.
            tls_mode=None if config.tls_mode == "auto" else config.tls_mode,
            tls_key=config.tls_key, rsa_public_key=key,
            get_server_public_key=config.get_server_public_key,
            connect_timeout=config.connect_timeout, read_timeout=config.read_timeout)
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


@contextmanager
def _translate_stream_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise ConnectionLost(f"connection lost while {what}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    """What broke, never empty: trio's BrokenResourceError around an SSL EOF or a reset socket
    has no text of its own, its cause has."""
    for current in (exc, exc.__cause__, exc.__context__):
        if current is not None and str(current).strip():
            return f"{type(current).__name__}: {str(current).strip()}" if current is not exc \
                else str(current).strip()
    cause = exc.__cause__ or exc.__context__
    return type(cause or exc).__name__ + (" (the peer closed the connection)"
                                          if isinstance(exc, trio.BrokenResourceError) else "")


class Connection:
    """One authenticated connection. Create with ``await Connection.open(options)``.

    Low-level API for the replication session: :meth:`send_packet`, :meth:`read_packet`,
    :meth:`reset_sequence`. High-level: :meth:`query`, :meth:`query_result`, :meth:`execute`,
    :meth:`ping`, :meth:`close`. Usable as ``async with``.
    """

    def __init__(self, stream: trio.abc.Stream, options: ConnectOptions) -> None:
        self._stream = stream
        self.options = options
        self._codec = PacketCodec(options.max_packet_size)
        self.greeting: ServerGreeting | None = None
        self.capabilities = 0
        self.is_tls = False
        self.is_unix_socket = options.unix_socket is not None
        #: How the TLS certificate was trusted: "ca", "fingerprint", "unix-socket",
        #: "unverified-loopback", or None without TLS.
        self.tls_trust: str | None = None
        self.auth_plugin: str | None = None
        self.ok: OkPacket | None = None
        self._closed = False

    # --- opening -----------------------------------------------------------------------------

    @classmethod
    async def open(cls, options: ConnectOptions) -> Connection:
        """Connect, negotiate TLS, authenticate.

        Raises:
            ConnectError, ConnectTimeout, ConnectionLost: the network failed.
            AccessDenied / ServerError: the server refused.
            AuthError, InsecureTransport, TlsError: binlake refused (see the module doc).
        """
        where = options.unix_socket or f"{options.host}:{options.port}"
        connected = False
        try:
            with trio.fail_after(options.connect_timeout):
                stream = await cls._open_stream(options)
                connected = True
                conn = cls(stream, options)
                try:
                    await conn._handshake()
                except BaseException:
                    await trio.aclose_forcefully(stream)
                    raise
                return conn
        except trio.TooSlowError:
            if not connected:
                raise ConnectTimeout(
                    f"connecting to {where} took longer than {options.connect_timeout} s "
                    "(no answer to the TCP connection: a firewall dropping packets, or a host "
                    "that is down)") from None
            raise ConnectTimeout(
                f"connected to {where}, but the greeting, TLS and authentication took longer "
                f"than {options.connect_timeout} s (a server that sends nothing first is not "
                "MySQL/MariaDB, e.g. HTTP; or an overloaded server)") from None

    @staticmethod
    async def _open_stream(options: ConnectOptions) -> trio.abc.Stream:
        try:
            if options.unix_socket:
                return await trio.open_unix_socket(options.unix_socket)
            return await trio.open_tcp_stream(options.host, options.port)
        except OSError as exc:
            where = options.unix_socket or f"{options.host}:{options.port}"
            raise ConnectError(f"cannot connect to {where}: {exc}") from exc

    async def _handshake(self) -> None:
        options = self.options
        machine = ClientHandshake(
            options.user, options.password, database=options.database,
            connect_attrs=options.connect_attrs, rsa_public_key=options.rsa_public_key,
            get_server_public_key=options.get_server_public_key,
            max_packet_size=options.max_packet_size)
        self.greeting = greeting = machine.receive_greeting(await self._read_greeting())
        mode = options.effective_tls_mode
        use_tls = False
        if mode != "disabled" and not (mode == "preferred" and self.is_unix_socket):
            if machine.server_supports_tls:
                use_tls = True
            elif mode != "preferred":
                raise TlsError(
                    f"tls mode {mode!r} but the server ({greeting.server_version}) does not "
                    "offer TLS; configure TLS on the server or lower tls_mode")
        verified = False
        require_hash = False
        cert_der = b""
        if use_tls:
            await self.send_packet(machine.ssl_request())
            verified, cert_der = await self._start_tls(mode)
            self.is_tls = True
            if verified:
                self.tls_trust = "ca"
            elif self.is_unix_socket:
                self.tls_trust = "unix-socket"
            else:
                loopback_ok = options.trust_loopback and is_loopback(options.host)
                require_hash = not loopback_ok
        await self.send_packet(machine.handshake_response(
            tls=use_tls, tls_verified=verified, unix_socket=self.is_unix_socket,
            require_password_hash=require_hash))
        while True:
            step = machine.receive(await self.read_packet())
            if isinstance(step, OkPacket):
                break
            if step is not None:
                await self.send_packet(step)
        self.ok = step
        self.capabilities = machine.capabilities
        self.auth_plugin = machine.plugin.name if machine.plugin is not None else None
        if use_tls and not verified and not self.is_unix_socket:
            self._check_zero_config_tls(machine, step, cert_der, require_hash)
        path = getattr(machine.plugin, "path", "")
        log.debug("authenticated as %s with %s%s over %s", options.user, self.auth_plugin,
                  f" ({path})" if path else "",
                  f"TLS ({self.tls_trust})" if self.is_tls
                  else "a unix socket" if self.is_unix_socket else "plain TCP")

    async def _read_greeting(self) -> bytes:
        """The server's first packet, or :class:`NotMySQLServer` when the first bytes cannot
        start one (an HTTP or SSH server, a TLS-only port, a proxy's banner) — said plainly,
        rather than as a packet sequence error of a packet that never was."""
        head = b""
        while len(head) < 5:
            with _translate_stream_errors("reading the server's greeting"):
                data = await self._stream.receive_some(_RECEIVE_SIZE)
            if not data:
                if head:
                    break
                raise ConnectionLost("the server closed the connection before its greeting")
            head += data
        problem = greeting_problem(head)
        if problem is not None:
            where = self.options.unix_socket or f"{self.options.host}:{self.options.port}"
            raise NotMySQLServer(f"not a MySQL/MariaDB server at {where}: {problem}")
        self._codec.receive_data(head)
        try:
            return await self.read_packet()
        except MalformedPacket as exc:  # a plausible start, then nonsense
            where = self.options.unix_socket or f"{self.options.host}:{self.options.port}"
            raise NotMySQLServer(f"not a MySQL/MariaDB server at {where}: {exc}") from None

    def _check_zero_config_tls(self, machine: ClientHandshake, ok: OkPacket, cert_der: bytes,
                               required: bool) -> None:
        info = ok.info
        password_hash = machine.password_hash()
        has_fingerprint = len(info) == 65 and info[0] == 0x01
        if has_fingerprint and password_hash:
            try:
                matches = check_tls_fingerprint(info, password_hash, machine.scramble, cert_der)
            except MalformedPacket:
                matches = False
            if not matches:
                raise TlsError(
                    "the server's TLS certificate does not match the zero-config TLS "
                    "fingerprint: possible man in the middle")
            self.tls_trust = "fingerprint"
        elif required:
            raise TlsError(
                "the server's TLS certificate cannot be verified (no tls_ca configured) and the "
                "server offered no zero-config TLS fingerprint (MariaDB 11.4+ with a password "
                "and mysql_native_password/ed25519/parsec); configure tls_ca with tls_mode "
                "verify-ca or verify-identity")
        else:
            self.tls_trust = "unverified-loopback"

    def _ssl_context(self, mode: str) -> tuple[ssl.SSLContext, bool]:
        options = self.options
        verify = mode in ("verify-ca", "verify-identity") or options.tls_ca is not None
        if verify:
            context = ssl.create_default_context(cafile=options.tls_ca)
            context.check_hostname = mode == "verify-identity"
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if options.tls_cert:
            context.load_cert_chain(options.tls_cert, options.tls_key)
        return context, verify

    async def _start_tls(self, mode: str) -> tuple[bool, bytes]:
        try:
            context, verify = self._ssl_context(mode)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot set up TLS (CA file, client certificate or key): {exc}") \
                from None
        hostname = self.options.host if mode == "verify-identity" else None
        tls = trio.SSLStream(self._stream, context, server_hostname=hostname)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLCertVerificationError):
                raise TlsError(
                    f"the server's TLS certificate was rejected: {cause.verify_message}") from None
            if isinstance(cause, ssl.SSLError):
                raise TlsError(f"TLS handshake failed: {cause}") from None
            raise ConnectionLost(f"connection lost during the TLS handshake: {exc}") from exc
        self._stream = tls
        der = tls.getpeercert(binary_form=True) or b""
        return verify, der

    # --- low-level packet API ----------------------------------------------------------------

    @property
    def server_version(self) -> str:
        return self.greeting.version if self.greeting is not None else ""

    @property
    def is_mariadb(self) -> bool:
        return self.greeting is not None and self.greeting.is_mariadb

    @property
    def connection_id(self) -> int:
        return self.greeting.connection_id if self.greeting is not None else 0

    @property
    def is_secure(self) -> bool:
        """The channel is encrypted (TLS) or local (unix socket)."""
        return self.is_tls or self.is_unix_socket

    def reset_sequence(self, seq: int = 0) -> None:
        """Start a new exchange: the next packet (sent or received) carries sequence id ``seq``."""
        self._codec.reset_sequence(seq)

    @property
    def sequence(self) -> int:
        """The sequence id the next packet (sent or received) is expected to carry."""
        return int(self._codec.sequence)

    @property
    def check_sequence(self) -> bool:
        """Whether received sequence ids are verified (on by default)."""
        return self._codec.check_sequence

    @check_sequence.setter
    def check_sequence(self, value: bool) -> None:
        self._codec.check_sequence = value

    async def send_packet(self, payload: bytes, seq: int | None = None) -> None:
        """Frame and send one payload (split at 16 MiB); ``seq`` forces its sequence id."""
        data = self._codec.send(payload, seq)
        with _translate_stream_errors("sending"):
            await self._stream.send_all(data)

    async def read_packet(self, timeout: float | None | _Default = _Default.TIMEOUT) -> bytes:
        """The next joined payload from the server.

        Args:
            timeout: seconds to wait for it; default ``options.read_timeout``; None = forever.

        Raises:
            ReadTimeout, ConnectionLost; PacketSequenceError/PacketTooLarge from the codec.
        """
        limit = self.options.read_timeout if isinstance(timeout, _Default) else timeout
        codec = self._codec
        packet = codec.next_packet()
        if packet is not None:
            return packet[1]
        deadline = trio.current_time() + limit if limit is not None else float("inf")
        while True:
            await self._receive(deadline, limit)
            packet = codec.next_packet()
            if packet is not None:
                return packet[1]

    def buffered_packet(self) -> bytes | None:
        """The next joined payload if it is already received whole, else None (never waits;
        :meth:`read_packet` does)."""
        packet = self._codec.next_packet()
        return None if packet is None else packet[1]

    def buffered_packets(self) -> list[bytes]:
        """Every plain packet already received whole (``PacketCodec.next_packets``: not for a
        peer that restarts sequence ids in mid-stream); never waits."""
        return self._codec.next_packets()

    def buffered_payloads_after(self, status: int) -> list[bytes]:
        """The payloads, without their first byte, of the plain packets already received whole
        that begin with ``status`` (``PacketCodec.next_payloads_after``); never waits."""
        return self._codec.next_payloads_after(status)

    async def _receive(self, deadline: float, limit: float | None) -> None:
        """Buffer the next bytes from the server in the codec."""
        try:
            with trio.fail_at(deadline), _translate_stream_errors("reading"):
                data = await self._stream.receive_some(_RECEIVE_SIZE)
        except trio.TooSlowError:
            raise ReadTimeout(f"no data from the server within {limit} s") from None
        if not data:
            raise ConnectionLost("the server closed the connection")
        self._codec.receive_data(data)

    # --- commands ----------------------------------------------------------------------------

    async def query_result(self, sql: str) -> ResultSet:
        """Run one statement; its result set (text values, None for NULL) or its OK."""
        self.reset_sequence()
        await self.send_packet(com_query(sql))
        reader = TextResultReader(self.capabilities)
        feed, codec = reader.feed, self._codec
        while not reader.done:
            feed(await self.read_packet())
            # The packets already buffered, without an await each (a snapshot's rows).
            while not reader.done and (packet := codec.next_packet()) is not None:
                feed(packet[1])
        assert reader.result is not None
        return reader.result

    async def query_columns(self, sql: str, kinds: bytes = b"") -> ResultSet:
        """Run a statement returning rows, gathered column-wise in ``ResultSet.values``:
        ``kinds`` (``protocol.results.TEXT_*``) for the first columns, the others as
        :meth:`query` gives them. The buffered row packets are parsed in bulk, with no await
        and no Python object per packet (a snapshot reads millions of rows here)."""
        await self.send_query(sql)
        return await self.read_columns(kinds)

    async def send_query(self, sql: str) -> None:
        """Send a statement and return at once: the server runs it (and sends its rows, as far
        as the socket buffers take them) while the caller does something else; then its
        response must be read with :meth:`read_columns` before anything else is sent."""
        self.reset_sequence()
        await self.send_packet(com_query(sql))

    async def send_query_after(self, sql: str) -> None:
        """Send a statement right after :meth:`send_query`, before the response to that one
        is read (pipelined). The server reads its commands in order, so it runs this one once
        it has sent the whole response before: a small statement after a big result costs no
        round trip of its own. Read the first response as usual, then this one's with
        :meth:`read_result_after` — also when the first was an error, before anything else is
        sent."""
        await self.send_query(sql)  # the first response's packets come next, from 1

    async def read_result_after(self) -> ResultSet:
        """The response to :meth:`send_query_after`'s statement, once the one before is read."""
        self.reset_sequence(1)
        return await self._read_result(TextResultReader(self.capabilities))

    async def read_columns(self, kinds: bytes = b"", *, keep: bool = False) -> ResultSet:
        """The response to :meth:`send_query`, as :meth:`query_columns` returns it; with
        ``keep``, its rows kept unparsed in ``ResultSet.kept`` instead (copied in bulk)."""
        return await self._read_result(TextResultReader(self.capabilities, kinds, keep=keep))

    async def _read_result(self, reader: TextResultReader,
                           between: Callable[[], Awaitable[None]] | None = None) -> ResultSet:
        """Feed ``reader`` what the server sends until its result is whole (``between``
        awaited before each wait for more bytes); the result."""
        limit = self.options.read_timeout
        while not reader.pump(self._codec):  # each wait for bytes has the whole read timeout
            if between is not None:
                await between()
            await self._receive(
                trio.current_time() + limit if limit is not None else float("inf"), limit)
        assert reader.result is not None
        return reader.result

    async def read_columns_in_pieces(
            self, kinds: bytes, rows: int,
            take: Callable[[tuple[list[Any], ...], bool], Awaitable[None]]) -> None:
        """The response to :meth:`send_query`, handed to ``take`` in pieces of at most ``rows``
        rows (column lists and their ``converted`` flag, as :meth:`read_columns` would give
        them), in order, as they come off the socket: memory holds one piece and one receive
        buffer, however big the result (a keyless table's snapshot is one SELECT). The server
        waits (its socket buffers full) while ``take`` runs."""
        reader = TextResultReader(self.capabilities, kinds)

        async def hand_on() -> None:
            while reader.gathered >= rows:
                await take(*reader.take_values(rows))

        result = await self._read_result(reader, hand_on)
        values = result.values or ()
        left = len(values[0]) if values else 0
        for start in range(0, left, rows):
            await take(tuple(column[start:start + rows] for column in values), result.converted)

    async def query(self, sql: str) -> list[tuple[str | bytes | None, ...]]:
        """Run a statement returning rows: text values (bytes for binary columns), None = NULL."""
        return (await self.query_result(sql)).rows

    async def execute(self, sql: str) -> OkPacket | None:
        """Run a statement; its OK packet (None if it unexpectedly returned rows)."""
        return (await self.query_result(sql)).ok

    async def ping(self) -> None:
        self.reset_sequence()
        await self.send_packet(com_ping())
        reader = TextResultReader(self.capabilities)
        reader.feed(await self.read_packet())

    # --- closing -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Say COM_QUIT and close; never raises for a connection that is already broken."""
        if self._closed:
            return
        self._closed = True
        with trio.move_on_after(1):
            try:
                self.reset_sequence()
                await self.send_packet(com_quit())
            except (ConnectionLost, MalformedPacket):
                pass
        with trio.move_on_after(1) as scope:
            try:
                await self._stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        if scope.cancelled_caught:
            await trio.aclose_forcefully(self._stream)

    async def aclose(self) -> None:
        await self.close()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        where = self.options.unix_socket or f"{self.options.host}:{self.options.port}"
        return (f"<Connection {self.options.user}@{where} server={self.server_version!r} "
                f"tls={self.tls_trust}>")

