"""Authentication plugins: what the client answers to each server challenge.

A plugin object lives for one authentication exchange. :meth:`AuthPlugin.start` returns the
first response (sent in the HandshakeResponse or after an AuthSwitchRequest) and
:meth:`AuthPlugin.continue_with` answers each later plugin-data packet (with the 0x01
AuthMoreData marker already stripped), or returns None when the plugin expects the server's
verdict next. The exchange itself (OK / ERR / switch) is driven by ``protocol.handshake``.

Where a password may go. Three plugins can send the password itself: mysql_clear_password
(always), and caching_sha2_password (on its full path: the server's cache of the account is empty
after a restart or FLUSH PRIVILEGES) and sha256_password (always), which MySQL expects in clear
inside TLS — it answers "Access denied" to an RSA-encrypted password on a TLS channel. They send
it in clear only inside TLS (any TLS the connection accepted, see below) or over a unix socket
(not for sha256_password, whose server insists on TLS). Without either, caching_sha2/sha256
encrypt the password to the server's RSA key, which is either pinned in the configuration or
fetched from the server only when the user opted in (``get_server_public_key``), since a fetched
key is only as trustworthy as the channel; mysql_clear_password is refused.

Which TLS is accepted is the connection's policy (``replica.core.connection``): a verified
certificate; or, unverified, only to a loopback address (an impostor would have to own this
host) or when MariaDB's zero-configuration TLS vouches for the certificate — and that needs a
plugin with a password hash, which never sends the password, so an unverified channel to a remote
host never carries one. On unverified loopback TLS an active man in the middle *on this host*
could read a password sent in clear; verified TLS (verify-ca) is what stops that.

Zero-configuration TLS (MariaDB 11.4+) proves after the fact that an unverified TLS channel
ends at the server that knows the password hash. :meth:`AuthPlugin.password_hash` gives that
hash for the plugins that have one; :func:`expected_tls_fingerprint` and
:func:`check_tls_fingerprint` do the comparison.

Passwords are held as bytes in ``repr=False`` slots and never appear in messages.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import ClassVar

# libsodium (PyNaCl) and cryptography are imported by the plugins that use them, on first use:
# most connections authenticate with a hash alone, and importing the two is a noticeable part
# of every `binlake` start-up.
from .errors import AuthError, InsecureTransport, MalformedPacket, UnsupportedAuthPlugin

__all__ = [
    "AuthContext",
    "AuthPlugin",
    "NativePassword",
    "ClearPassword",
    "CachingSha2Password",
    "Sha256Password",
    "Ed25519Password",
    "ParsecPassword",
    "PLUGINS",
    "make_plugin",
    "native_password_hash",
    "ed25519_public_key",
    "ed25519_sign",
    "expected_tls_fingerprint",
    "check_tls_fingerprint",
]


@dataclass(frozen=True, slots=True)
class AuthContext:
    """What a plugin needs to know about the channel and the user's key settings.

    Attributes:
        tls: TLS is active (verified or not: the connection only keeps TLS it accepts).
        tls_verified: TLS is active and the server certificate was verified against a CA.
        unix_socket: the connection is a local unix socket.
        rsa_public_key: a pinned PEM public key of the server (caching_sha2 / sha256).
        get_server_public_key: the user allows fetching the RSA key from the server.
    """

    tls: bool = False
    tls_verified: bool = False
    unix_socket: bool = False
    rsa_public_key: bytes | None = field(default=None, repr=False)
    get_server_public_key: bool = False


class AuthPlugin:
    """One client-side authentication plugin for one exchange."""

    name: ClassVar[str]
    __slots__ = ("_password", "scramble", "context")

    def __init__(self, password: bytes, scramble: bytes, context: AuthContext) -> None:
        self._password = password
        self.scramble = scramble
        self.context = context

    def __repr__(self) -> str:
        return f"<{type(self).__name__} plugin={self.name!r}>"

    def start(self) -> bytes:
        """The first response to the server's challenge ``self.scramble``."""
        raise NotImplementedError

    def continue_with(self, data: bytes) -> bytes | None:
        """Answer a later plugin-data packet; None means "now wait for OK/ERR"."""
        raise AuthError(f"unexpected authentication data for plugin {self.name!r}")

    def password_hash(self) -> bytes | None:
        """The hash the server stores, for the zero-config TLS fingerprint (None: has none)."""
        return None


def _sha1(data: bytes) -> bytes:
    return hashlib.sha1(data).digest()


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


# --- mysql_native_password ----------------------------------------------------------------------


def native_password_hash(password: bytes) -> bytes:
    """SHA1(SHA1(password)): what the server stores, and the zero-config TLS hash."""
    return _sha1(_sha1(password))


class NativePassword(AuthPlugin):
    """``SHA1(pw) XOR SHA1(scramble20 || SHA1(SHA1(pw)))``; empty password → empty answer."""

    name = "mysql_native_password"
    __slots__ = ()

    def start(self) -> bytes:
        if not self._password:
            return b""
        stage1 = _sha1(self._password)
        return _xor(stage1, _sha1(self.scramble[:20] + _sha1(stage1)))

    def password_hash(self) -> bytes | None:
        return native_password_hash(self._password) if self._password else None


# --- mysql_clear_password -------------------------------------------------------------------------


def _cleartext_channel(context: AuthContext, *, unix_ok: bool) -> bool:
    """Whether the password may go in clear: inside TLS, or over a unix socket if ``unix_ok``."""
    return context.tls or context.tls_verified or (unix_ok and context.unix_socket)


class ClearPassword(AuthPlugin):
    """The password itself, NUL-terminated; refused unless the channel is safe."""

    name = "mysql_clear_password"
    __slots__ = ()

    def start(self) -> bytes:
        if not _cleartext_channel(self.context, unix_ok=True):
            raise InsecureTransport(
                f"{self.name} sends the password itself, which binlake does only inside TLS or "
                "over a unix socket, and this connection is plain TCP",
                fix="enable TLS on the server and use server.tls_mode = verify-ca with "
                    "server.tls_ca (or preferred/required on loopback), or connect through "
                    "the unix socket (server.socket)")
        return self._password + b"\0"


# --- RSA for caching_sha2_password / sha256_password ----------------------------------------------


def _rsa_encrypt_password(password: bytes, scramble: bytes, pem: bytes, plugin: str) -> bytes:
    """RSA-OAEP(SHA1, MGF1-SHA1) of ``(password || NUL) XOR scramble`` (scramble repeated)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, UnsupportedAlgorithm):
        raise AuthError(f"{plugin}: the server RSA public key is not a valid PEM key") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise AuthError(f"{plugin}: the server public key is not an RSA key")
    plain = password + b"\0"
    nonce = scramble[:20]
    if not nonce:
        raise AuthError(f"{plugin}: empty scramble")
    mask = (nonce * (len(plain) // len(nonce) + 1))[: len(plain)]
    if len(plain) + 42 > key.key_size // 8:
        raise AuthError(f"{plugin}: the password is too long for the server's RSA key")
    return key.encrypt(
        _xor(plain, mask),
        padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(),
                     label=None),
    )


def _no_key_error(plugin: str, *, unix_ok: bool) -> InsecureTransport:
    socket = ", the unix socket (server.socket)" if unix_ok else ""
    return InsecureTransport(
        f"{plugin} needs the password sent inside TLS{' or over a unix socket' if unix_ok else ''}"
        ", or RSA-encrypted to the server's key, and this connection is plain TCP with no key",
        fix=f"use TLS (server.tls_mode = verify-ca with server.tls_ca){socket}, pin the "
            "server's RSA public key (server.server_public_key_file), or allow fetching it "
            "(server.get_server_public_key = true)")


# --- caching_sha2_password ----------------------------------------------------------------------


class CachingSha2Password(AuthPlugin):
    """MySQL 8+'s default: a SHA-256 scramble (fast path) or the password (full path).

    Fast path: send ``SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) || nonce)``; the server answers
    0x03 (cached, OK follows) or 0x04 (full authentication needed). Full path: the password in
    clear inside TLS or over a unix socket (as MySQL expects), else RSA-encrypted (0x02 asks the
    server for its key). :attr:`path` records which it was, for the connection's log.
    """

    name = "caching_sha2_password"
    __slots__ = ("_awaiting_key", "path")

    def __init__(self, password: bytes, scramble: bytes, context: AuthContext) -> None:
        super().__init__(password, scramble, context)
        self._awaiting_key = False
        #: Which path authenticated, for the connection's log; "" until known.
        self.path = ""

    def start(self) -> bytes:
        if not self._password:
            return b"\0"
        stage1 = _sha256(self._password)
        return _xor(stage1, _sha256(_sha256(stage1) + self.scramble[:20]))

    def continue_with(self, data: bytes) -> bytes | None:
        if self._awaiting_key:
            self._awaiting_key = False
            return _rsa_encrypt_password(self._password, self.scramble, data, self.name)
        if data == b"\x03":
            self.path = "fast path"
            return None  # fast authentication succeeded; OK follows
        if data != b"\x04":
            raise AuthError(f"{self.name}: unexpected server message {data[:16]!r}")
        context = self.context
        if _cleartext_channel(context, unix_ok=True):
            self.path = "full path, the password in clear"
            return self._password + b"\0"
        self.path = "full path, the password RSA-encrypted"
        if context.rsa_public_key is not None:
            return _rsa_encrypt_password(self._password, self.scramble, context.rsa_public_key,
                                         self.name)
        if context.get_server_public_key:
            self._awaiting_key = True
            return b"\x02"
        raise _no_key_error(self.name, unix_ok=True)


# --- sha256_password ----------------------------------------------------------------------------


class Sha256Password(AuthPlugin):
    """MySQL's sha256_password: the password in clear inside TLS, else RSA-encrypted (0x01 asks
    for the key)."""

    name = "sha256_password"
    __slots__ = ("_awaiting_key",)

    def __init__(self, password: bytes, scramble: bytes, context: AuthContext) -> None:
        super().__init__(password, scramble, context)
        self._awaiting_key = False

    def start(self) -> bytes:
        if not self._password:
            return b"\0"
        context = self.context
        if _cleartext_channel(context, unix_ok=False):
            return self._password + b"\0"
        if context.rsa_public_key is not None:
            return _rsa_encrypt_password(self._password, self.scramble, context.rsa_public_key,
                                         self.name)
        if context.get_server_public_key:
            self._awaiting_key = True
            return b"\x01"
        raise _no_key_error(self.name, unix_ok=False)

    def continue_with(self, data: bytes) -> bytes | None:
        if not self._awaiting_key:
            raise AuthError(f"{self.name}: unexpected server message {data[:16]!r}")
        self._awaiting_key = False
        return _rsa_encrypt_password(self._password, self.scramble, data, self.name)


# --- client_ed25519 (MariaDB) ---------------------------------------------------------------------
#
# MariaDB's ed25519 takes the whole password as the "seed" (RFC 8032 hashes a 32-byte seed), so
# off-the-shelf signing reproduces it only for 32-byte passwords. The steps below are RFC 8032
# signing with az = SHA512(password), done with libsodium's scalar and point primitives.


def _ed25519_secret(password: bytes) -> tuple[bytes, bytes]:
    import nacl.bindings as sodium

    az = bytearray(hashlib.sha512(password).digest())
    az[0] &= 248
    az[31] &= 63
    az[31] |= 64
    scalar = sodium.crypto_core_ed25519_scalar_reduce(bytes(az[:32]) + bytes(32))
    return scalar, bytes(az[32:])


def ed25519_public_key(password: bytes) -> bytes:
    """The public key MariaDB stores for ``password`` (base64 of it is the auth string)."""
    import nacl.bindings as sodium

    scalar, _ = _ed25519_secret(password)
    return sodium.crypto_scalarmult_ed25519_base_noclamp(scalar)


def ed25519_sign(password: bytes, message: bytes) -> bytes:
    """MariaDB client_ed25519 signature ``R || S`` of ``message`` (64 bytes)."""
    import nacl.bindings as sodium

    scalar, prefix = _ed25519_secret(password)
    public = sodium.crypto_scalarmult_ed25519_base_noclamp(scalar)
    r = sodium.crypto_core_ed25519_scalar_reduce(hashlib.sha512(prefix + message).digest())
    big_r = sodium.crypto_scalarmult_ed25519_base_noclamp(r)
    h = sodium.crypto_core_ed25519_scalar_reduce(
        hashlib.sha512(big_r + public + message).digest())
    s = sodium.crypto_core_ed25519_scalar_add(r, sodium.crypto_core_ed25519_scalar_mul(h, scalar))
    return big_r + s


class Ed25519Password(AuthPlugin):
    """MariaDB's client_ed25519: sign the server's 32-byte nonce."""

    name = "client_ed25519"
    __slots__ = ()

    def start(self) -> bytes:
        if len(self.scramble) != 32:
            raise AuthError(f"{self.name}: nonce of {len(self.scramble)} bytes, expected 32")
        return ed25519_sign(self._password, self.scramble)

    def password_hash(self) -> bytes | None:
        return ed25519_public_key(self._password) if self._password else None


# --- parsec (MariaDB 11.6+) -----------------------------------------------------------------------

_PARSEC_MAX_EXPONENT = 15  # parsec_pbkdf2_iterations allows 0..15 (default 8 in newer servers)


@functools.lru_cache(maxsize=16)
def _parsec_derive_key(password: bytes, salt: bytes, iterations: int) -> bytes:
    # Cached: with a high factor (8: 262,144 rounds) every reconnect would cost ~0.3 s of CPU.
    return hashlib.pbkdf2_hmac("sha512", password, salt, iterations, dklen=32)


class ParsecPassword(AuthPlugin):
    """MariaDB's parsec: PBKDF2-SHA512 derived Ed25519 key signs server || client nonces.

    The first answer is an empty packet asking for the "ext-salt" ``'P' | exponent | salt``;
    the second is ``client_nonce(32) || Ed25519(key).sign(server_nonce || client_nonce)``.
    """

    name = "parsec"
    __slots__ = ("_ext_salt", "_client_nonce")

    def __init__(self, password: bytes, scramble: bytes, context: AuthContext,
                 client_nonce: bytes | None = None) -> None:
        super().__init__(password, scramble, context)
        self._ext_salt: bytes | None = None
        self._client_nonce = client_nonce

    def start(self) -> bytes:
        if len(self.scramble) != 32:
            raise AuthError(f"{self.name}: nonce of {len(self.scramble)} bytes, expected 32")
        return b""

    def continue_with(self, data: bytes) -> bytes | None:
        if self._ext_salt is not None:
            raise AuthError(f"{self.name}: unexpected second salt")
        if len(data) < 3 or data[0:1] != b"P":
            raise AuthError(f"{self.name}: unsupported key derivation in ext-salt")
        exponent = data[1]
        if exponent > _PARSEC_MAX_EXPONENT:
            raise AuthError(f"{self.name}: iteration exponent {exponent} is out of range 0..15")
        self._ext_salt = bytes(data)
        key = self._derived_key()
        nonce = self._client_nonce if self._client_nonce is not None else os.urandom(32)
        from cryptography.hazmat.primitives.asymmetric import ed25519

        signature = ed25519.Ed25519PrivateKey.from_private_bytes(key).sign(self.scramble + nonce)
        return nonce + signature

    def _derived_key(self) -> bytes:
        assert self._ext_salt is not None
        return _parsec_derive_key(self._password, self._ext_salt[2:], 1024 << self._ext_salt[1])

    def password_hash(self) -> bytes | None:
        if not self._password or self._ext_salt is None:
            return None
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519

        public = ed25519.Ed25519PrivateKey.from_private_bytes(self._derived_key()).public_key()
        return self._ext_salt + public.public_bytes(serialization.Encoding.Raw,
                                                    serialization.PublicFormat.Raw)


# --- registry -----------------------------------------------------------------------------------

PLUGINS: dict[str, type[AuthPlugin]] = {
    cls.name: cls
    for cls in (NativePassword, ClearPassword, CachingSha2Password, Sha256Password,
                Ed25519Password, ParsecPassword)
}

#: Plugins whose password hash lets zero-config TLS validate an unverified certificate.
HASHABLE_PLUGINS = frozenset({NativePassword.name, Ed25519Password.name, ParsecPassword.name})


def make_plugin(name: str, password: bytes, scramble: bytes, context: AuthContext) -> AuthPlugin:
    try:
        cls = PLUGINS[name]
    except KeyError:
        raise UnsupportedAuthPlugin(name) from None
    return cls(password, scramble, context)


# --- zero-configuration TLS (MariaDB 11.4+) -------------------------------------------------------


def expected_tls_fingerprint(password_hash: bytes, scramble: bytes, cert_der: bytes) -> bytes:
    """``SHA256(password_hash || scramble20 || SHA256(certificate DER))``, as 64 uppercase hex."""
    digest = _sha256(password_hash + scramble[:20] + _sha256(cert_der))
    return digest.hex().upper().encode("ascii")


def check_tls_fingerprint(info: bytes, password_hash: bytes, scramble: bytes,
                          cert_der: bytes) -> bool:
    """True iff the first OK packet's info (``0x01`` + 64 hex chars) matches the certificate.

    Raises:
        MalformedPacket: the info field is not a fingerprint at all.
    """
    if len(info) != 65 or info[0] != 0x01:
        raise MalformedPacket("OK packet info is not a SHA-256 TLS fingerprint")
    expected = expected_tls_fingerprint(password_hash, scramble, cert_der)
    return hmac.compare_digest(expected, bytes(info[1:]).upper())
