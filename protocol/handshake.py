"""The connection phase: server greeting, SSLRequest, HandshakeResponse41 and the auth exchange.

:class:`ClientHandshake` is a sans-I/O state machine. The driver (``replica.core.connection``):

1. feeds the server's first packet to :meth:`ClientHandshake.receive_greeting`;
2. if it wants TLS, sends :meth:`ClientHandshake.ssl_request` and upgrades the stream;
3. sends :meth:`ClientHandshake.handshake_response` (told how safe the channel now is);
4. feeds every following packet to :meth:`ClientHandshake.receive`, which returns the bytes to
   send next, or the final :class:`~protocol.results.OkPacket` once the server accepts.

During the exchange a packet starting with 0xFE is an AuthSwitchRequest (new plugin and
challenge), 0x01 is AuthMoreData for the current plugin, 0x00 is the final OK, 0xFF an ERR.
MariaDB sends other plugin data raw (it adds the 0x01 marker only when the data itself starts
with 0x01, 0xFE or 0xFF), so anything else is plugin data too.

When zero-config TLS must vouch for an unverified certificate (``require_password_hash``), the
machine refuses — before sending any answer — to use a plugin that has no password hash, since
the server's proof could not be checked afterwards and a man in the middle could relay the
exchange.
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field

from .auth import HASHABLE_PLUGINS, AuthContext, AuthPlugin, NativePassword, make_plugin
from .capabilities import CLIENT_CAPABILITIES, Capability
from .errors import AuthError, MalformedPacket, TlsError, TruncatedData
from .packets import DEFAULT_MAX_PACKET_SIZE, lenenc_bytes, read_fixed, read_nul_bytes
from .results import OkPacket, parse_err, parse_ok

__all__ = [
    "ServerGreeting",
    "ClientHandshake",
    "parse_greeting",
    "greeting_problem",
    "build_ssl_request",
    "build_handshake_response",
    "default_connect_attrs",
    "UTF8MB4_GENERAL_CI",
]

UTF8MB4_GENERAL_CI = 45

_GREETING_FIXED = struct.Struct("<I8sxH")  # connection id, scramble part 1, filler, caps low
_GREETING_REST = struct.Struct("<BHHB6s4s")  # charset, status, caps high, auth len, filler, ext
_RESPONSE_HEAD = struct.Struct("<IIB19sI")  # caps, max packet, charset, filler, ext caps

_REQUIRED_SERVER_CAPS = (Capability.PROTOCOL_41 | Capability.SECURE_CONNECTION
                         | Capability.PLUGIN_AUTH)
_LOW32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class ServerGreeting:
    """The Initial Handshake Packet (protocol v10)."""

    protocol_version: int
    server_version: str
    connection_id: int
    scramble: bytes = field(repr=False)
    capabilities: int  # 64 bits: MariaDB's extended capabilities in the high half
    charset: int
    status: int
    auth_plugin: str

    @property
    def is_mariadb(self) -> bool:
        version = self.server_version
        return version.startswith("5.5.5-") or "mariadb" in version.lower()

    @property
    def version(self) -> str:
        """The version without MariaDB 10's "5.5.5-" replication-compatibility prefix."""
        version = self.server_version
        return version[6:] if version.startswith("5.5.5-") else version

    @property
    def version_tuple(self) -> tuple[int, ...]:
        digits = self.version.split("-", 1)[0].split(".")
        parts: list[int] = []
        for digit in digits[:3]:
            number = "".join(ch for ch in digit if ch.isdigit())
            parts.append(int(number) if number else 0)
        return tuple(parts)


#: A greeting is a few hundred bytes (version, scramble, plugin name); more is not a greeting.
MAX_GREETING = 16 * 1024


def greeting_problem(head: bytes) -> str | None:
    """Why ``head`` — the first bytes a server sent, at least 5 — cannot start a MySQL/MariaDB
    greeting (sequence id 0, a sane length, protocol 10 or an ERR packet), or None if it can.

    The answer describes what was seen, for an operator who pointed binlake at the wrong port.
    """
    if len(head) < 5:
        return None if len(head) < 4 or head[3] == 0 else _seen(head)
    length = int.from_bytes(head[:3], "little")
    if head[3] == 0 and 0 < length <= MAX_GREETING and head[4] in (10, 0xFF):
        return None
    return _seen(head)


def _seen(head: bytes) -> str:
    if head[:1] == b"\x16" and head[1:2] == b"\x03":
        return "it answered with a TLS handshake (a TLS-only service)"
    line = head.split(b"\n", 1)[0].rstrip(b"\r")[:60]
    if line and all(32 <= c < 127 for c in line):
        return f"it sent {line.decode('ascii')!r}"
    return f"it sent bytes {head[:8].hex(' ')}, not a protocol-10 greeting"


def parse_greeting(payload: bytes | memoryview) -> ServerGreeting:
    """Parse the server's first packet.

    Raises:
        ServerError: the server refused the connection outright (ERR packet, e.g. 1129).
        MalformedPacket: not a protocol-10 greeting, or truncated.
    """
    data = bytes(payload)
    if data[:1] == b"\xff":
        raise parse_err(data)
    if not data:
        raise TruncatedData("empty greeting")
    if data[0] != 10:
        raise MalformedPacket(f"unsupported protocol version {data[0]} (binlake speaks 10)")
    raw_version, offset = read_nul_bytes(data, 1)
    if offset + _GREETING_FIXED.size > len(data):
        raise TruncatedData("greeting truncated")
    connection_id, scramble1, caps = _GREETING_FIXED.unpack_from(data, offset)
    offset += _GREETING_FIXED.size
    charset = status = auth_len = 0
    if offset + _GREETING_REST.size > len(data):
        raise MalformedPacket("pre-4.1 greeting: the server is too old for binlake")
    charset, status, caps_high, auth_len, _, extended = _GREETING_REST.unpack_from(data, offset)
    offset += _GREETING_REST.size
    caps |= caps_high << 16
    if not caps & Capability.CLIENT_MYSQL:
        caps |= int.from_bytes(extended, "little") << 32
    scramble = scramble1
    if caps & Capability.SECURE_CONNECTION:
        part2_len = max(12, auth_len - 9)
        part2, offset = read_fixed(data, offset, part2_len)
        scramble += part2
        offset += 1  # the scramble's NUL
    plugin = ""
    if caps & Capability.PLUGIN_AUTH and offset < len(data):
        end = data.find(b"\0", offset)
        plugin = (data[offset:] if end < 0 else data[offset:end]).decode("ascii", "replace")
    return ServerGreeting(10, raw_version.decode("utf-8", "replace"), connection_id, scramble,
                          caps, charset, status, plugin)


def default_connect_attrs() -> dict[str, str]:
    """The connect attributes binlake announces (visible in performance_schema)."""
    from importlib import metadata

    try:
        version = metadata.version("binlake")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        version = "0"
    return {
        "_client_name": "binlake",
        "_client_version": version,
        "_os": sys.platform,
        "_pid": str(os.getpid()),
        "program_name": "binlake",
    }


def build_ssl_request(capabilities: int, charset: int = UTF8MB4_GENERAL_CI,
                      max_packet_size: int = DEFAULT_MAX_PACKET_SIZE) -> bytes:
    """The SSLRequest: the first 32 bytes of a HandshakeResponse, with the SSL bit set."""
    caps = capabilities | Capability.SSL
    return _RESPONSE_HEAD.pack(caps & _LOW32, max_packet_size, charset, bytes(19), caps >> 32)


def build_handshake_response(capabilities: int, user: str, auth_response: bytes,
                             plugin: str, *, database: str | None = None,
                             connect_attrs: dict[str, str] | None = None,
                             charset: int = UTF8MB4_GENERAL_CI,
                             max_packet_size: int = DEFAULT_MAX_PACKET_SIZE) -> bytes:
    """HandshakeResponse41 for the negotiated ``capabilities``."""
    parts = [_RESPONSE_HEAD.pack(capabilities & _LOW32, max_packet_size, charset, bytes(19),
                                 capabilities >> 32),
             user.encode("utf-8") + b"\0"]
    if capabilities & Capability.PLUGIN_AUTH_LENENC_CLIENT_DATA:
        parts.append(lenenc_bytes(auth_response))
    else:
        if len(auth_response) > 255:
            raise AuthError("authentication response too long for this server")
        parts.append(bytes((len(auth_response),)) + auth_response)
    if capabilities & Capability.CONNECT_WITH_DB:
        parts.append((database or "").encode("utf-8") + b"\0")
    parts.append(plugin.encode("ascii") + b"\0")
    if capabilities & Capability.CONNECT_ATTRS:
        attrs = b"".join(lenenc_bytes(k.encode("utf-8")) + lenenc_bytes(v.encode("utf-8"))
                         for k, v in (connect_attrs or {}).items())
        parts.append(lenenc_bytes(attrs))
    return b"".join(parts)


class ClientHandshake:
    """Sans-I/O client side of the connection phase, up to the server's final OK.

    Args:
        user: account name.
        password: the password (held privately, never in repr or errors).
        database: default schema, or None.
        connect_attrs: connect attributes; defaults to :func:`default_connect_attrs`.
        rsa_public_key: pinned PEM RSA public key for caching_sha2/sha256 over plain TCP.
        get_server_public_key: allow fetching the RSA key from the server.
        max_packet_size: announced maximum packet size.
    """

    def __init__(self, user: str, password: str | bytes = b"", *, database: str | None = None,
                 connect_attrs: dict[str, str] | None = None,
                 rsa_public_key: bytes | None = None, get_server_public_key: bool = False,
                 max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
                 charset: int = UTF8MB4_GENERAL_CI) -> None:
        self.user = user
        self._password = password.encode("utf-8") if isinstance(password, str) else password
        self.database = database
        self.connect_attrs = default_connect_attrs() if connect_attrs is None else connect_attrs
        self._rsa_public_key = rsa_public_key
        self._get_server_public_key = get_server_public_key
        self.max_packet_size = max_packet_size
        self.charset = charset
        self.greeting: ServerGreeting | None = None
        self.capabilities = 0
        #: The 20-byte scramble zero-config TLS hashes (a native AuthSwitch replaces it).
        self.scramble = b""
        self.plugin: AuthPlugin | None = None
        self.context = AuthContext()
        self.require_password_hash = False
        self.ok: OkPacket | None = None
        self._state = "greeting"

    def __repr__(self) -> str:
        return f"<ClientHandshake user={self.user!r} state={self._state}>"

    @property
    def done(self) -> bool:
        return self._state == "done"

    def receive_greeting(self, payload: bytes) -> ServerGreeting:
        """Parse the greeting and negotiate capabilities (TLS decided later by the caller)."""
        self._expect("greeting")
        greeting = parse_greeting(payload)
        missing = _REQUIRED_SERVER_CAPS & ~greeting.capabilities
        if missing:
            raise MalformedPacket(f"server lacks required capabilities {missing!r}")
        wanted = int(CLIENT_CAPABILITIES)
        if greeting.capabilities & Capability.CLIENT_MYSQL:
            wanted |= Capability.CLIENT_MYSQL  # MySQL's LONG_PASSWORD, which its clients set
        if not self.database:
            wanted &= ~Capability.CONNECT_WITH_DB
        self.capabilities = wanted & greeting.capabilities
        self.greeting = greeting
        self.scramble = greeting.scramble[:20]
        self._state = "response"
        return greeting

    @property
    def server_supports_tls(self) -> bool:
        return self.greeting is not None and bool(self.greeting.capabilities & Capability.SSL)

    def ssl_request(self) -> bytes:
        """The SSLRequest to send before the TLS handshake (adds SSL to the capabilities)."""
        self._expect("response")
        if not self.server_supports_tls:
            raise TlsError("the server does not offer TLS")
        self.capabilities |= Capability.SSL
        return build_ssl_request(self.capabilities, self.charset, self.max_packet_size)

    def handshake_response(self, *, tls: bool = False, tls_verified: bool = False,
                           unix_socket: bool = False,
                           require_password_hash: bool = False) -> bytes:
        """The HandshakeResponse41 with the first answer of the server's default plugin.

        Args:
            tls: TLS is up (the caller keeps only TLS it accepts; see ``protocol.auth``).
            tls_verified: TLS is up and the server certificate was verified.
            unix_socket: the channel is a unix socket.
            require_password_hash: TLS is up but unverified; zero-config TLS must vouch for
                it afterwards, so only plugins with a password hash may be used.
        """
        self._expect("response")
        assert self.greeting is not None
        self.context = AuthContext(tls=tls or tls_verified, tls_verified=tls_verified,
                                   unix_socket=unix_socket,
                                   rsa_public_key=self._rsa_public_key,
                                   get_server_public_key=self._get_server_public_key)
        self.require_password_hash = require_password_hash
        plugin_name = self.greeting.auth_plugin or NativePassword.name
        if require_password_hash and plugin_name not in HASHABLE_PLUGINS:
            # Answer as native: the server switches us to the account's real plugin, and
            # that switch is checked below before anything is sent.
            plugin_name = NativePassword.name
        try:
            plugin = make_plugin(plugin_name, self._password, self.greeting.scramble,
                                 self.context)
            first = plugin.start()
        except AuthError:
            # The default plugin may not be the account's; native costs nothing to try and the
            # server answers with an AuthSwitch to the right one.
            plugin = NativePassword(self._password, self.greeting.scramble, self.context)
            first = plugin.start()
        self.plugin = plugin
        self._state = "auth"
        return build_handshake_response(self.capabilities, self.user, first, plugin.name,
                                        database=self.database,
                                        connect_attrs=self.connect_attrs,
                                        charset=self.charset,
                                        max_packet_size=self.max_packet_size)

    def receive(self, payload: bytes) -> bytes | OkPacket | None:
        """Feed one packet of the auth exchange.

        Returns:
            bytes to send next (possibly empty: an empty packet is a valid answer), None when
            nothing is to be sent and the next packet must be fed, or the final OK.

        Raises:
            AccessDenied / ServerError: the server refused (ERR packet).
            AuthError / InsecureTransport / UnsupportedAuthPlugin: the client refuses.
            TlsError: zero-config TLS is required but the plugin cannot provide it.
        """
        self._expect("auth")
        assert self.plugin is not None
        if not payload:
            raise TruncatedData("empty packet during authentication")
        head = payload[0]
        if head == 0xFF:
            self._state = "failed"
            raise parse_err(payload)
        if head == 0x00:
            ok = parse_ok(payload, self.capabilities)
            self.ok = ok
            self._state = "done"
            return ok
        if head == 0xFE:
            return self._switch(payload)
        data = payload[1:] if head == 0x01 else payload
        return self.plugin.continue_with(bytes(data))

    def _switch(self, payload: bytes) -> bytes:
        name_raw, offset = read_nul_bytes(payload, 1)
        name = name_raw.decode("ascii", "replace")
        data = bytes(payload[offset:])
        if data.endswith(b"\0") and name in ("mysql_native_password", "caching_sha2_password",
                                              "sha256_password", "mysql_clear_password"):
            data = data[:-1]  # these plugins' scrambles come NUL-terminated
        if self.require_password_hash and name not in HASHABLE_PLUGINS:
            self._state = "failed"
            raise TlsError(
                f"the server certificate is unverified and plugin {name!r} cannot prove the "
                "server's identity (zero-config TLS needs mysql_native_password, ed25519 or "
                "parsec); configure a CA file (tls mode verify-ca/verify-identity)")
        plugin = make_plugin(name, self._password, data, self.context)
        if name == NativePassword.name and len(data) >= 20:
            self.scramble = data[:20]
        self.plugin = plugin
        return plugin.start()

    def password_hash(self) -> bytes | None:
        return self.plugin.password_hash() if self.plugin is not None else None

    def _expect(self, state: str) -> None:
        if self._state != state:
            raise AuthError(f"handshake is in state {self._state!r}, not {state!r}")
