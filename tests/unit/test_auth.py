"""Authentication plugins: vectors from protocol-details.md and server-side verification."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa

from protocol.auth import (
    AuthContext,
    CachingSha2Password,
    ClearPassword,
    Ed25519Password,
    NativePassword,
    ParsecPassword,
    Sha256Password,
    check_tls_fingerprint,
    ed25519_public_key,
    ed25519_sign,
    expected_tls_fingerprint,
    make_plugin,
    native_password_hash,
)
from protocol.errors import AuthError, InsecureTransport, MalformedPacket, UnsupportedAuthPlugin

NONCE20 = bytes(range(1, 21))
PLAIN = AuthContext()
TLS = AuthContext(tls=True, tls_verified=True)
#: TLS the connection accepted without verifying the certificate (loopback): MySQL still wants
#: the password in clear inside it, and an RSA-encrypted one gets "Access denied".
UNVERIFIED_TLS = AuthContext(tls=True, rsa_public_key=b"never used",
                             get_server_public_key=True)
UNIX = AuthContext(unix_socket=True)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def _server_decrypt(key: rsa.RSAPrivateKey, blob: bytes, nonce: bytes) -> bytes:
    plain = key.decrypt(blob, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()),
                                           algorithm=hashes.SHA1(), label=None))
    mask = (nonce * (len(plain) // len(nonce) + 1))[: len(plain)]
    return _xor(plain, mask)


# --- mysql_native_password ----------------------------------------------------------------------


def test_native_password_verifies_like_the_server() -> None:
    reply = NativePassword(b"secret", NONCE20 + b"\0", PLAIN).start()
    stored = native_password_hash(b"secret")
    assert stored == hashlib.sha1(hashlib.sha1(b"secret").digest()).digest()
    # server: SHA1(reply XOR SHA1(scramble || stored)) == stored
    stage1 = _xor(reply, hashlib.sha1(NONCE20 + stored).digest())
    assert hashlib.sha1(stage1).digest() == stored
    assert NativePassword(b"", NONCE20, PLAIN).start() == b""
    assert NativePassword(b"", NONCE20, PLAIN).password_hash() is None
    assert NativePassword(b"secret", NONCE20, PLAIN).password_hash() == stored


# --- client_ed25519 -----------------------------------------------------------------------------


def test_ed25519_vectors_from_mariadb() -> None:
    assert ed25519_public_key(b"foobar").hex() == (
        "aafda61ba1d60aecb7d9295be71855e131d2b5ec0dcf65483553db824f97009f")
    assert ed25519_sign(b"foobar", b"A" * 32).hex() == (
        "e83dc93f433f33355649ee23aa7592d61a1123090884f58d3063423a24e4305473febba858a2f93923554"
        "feea76a44753887ab2f140e854f0fe57ca0b0648a0e")
    for password, stored in [(b"foo", "vubFBzIrapbfHct1/J72dnUryz5VS7lA6XHH8sIx4TI"),
                             (b"secret", "ZIgUREUg5PVgQ6LskhXmO+eZLS0nC8be6HPjYWR4YJY"),
                             (b"bar", "pfzkeWMzkTefY1oshXS+/kATeN51M+4jxi3/cbyTd10")]:
        assert base64.b64encode(ed25519_public_key(password)).decode().rstrip("=") == stored


@pytest.mark.parametrize("length", [1, 31, 32, 33, 100])
def test_ed25519_signature_verifies_for_any_length(length: int) -> None:
    password = bytes((65 + i % 26) for i in range(length))
    nonce = bytes(range(32))
    plugin = Ed25519Password(password, nonce, PLAIN)
    signature = plugin.start()
    assert len(signature) == 64
    public = ed25519_public_key(password)
    ed25519.Ed25519PublicKey.from_public_bytes(public).verify(signature, nonce)
    assert plugin.password_hash() == public
    if length == 32:  # only then is the password a standard RFC 8032 seed
        standard = ed25519.Ed25519PrivateKey.from_private_bytes(password)
        assert standard.sign(nonce) == signature


def test_ed25519_rejects_a_wrong_nonce_length() -> None:
    with pytest.raises(AuthError):
        Ed25519Password(b"pw", NONCE20, PLAIN).start()


# --- parsec -------------------------------------------------------------------------------------


def test_parsec_vector_and_signature() -> None:
    server_nonce, client_nonce = b"A" * 32, b"B" * 32
    plugin = ParsecPassword(b"secret", server_nonce, PLAIN, client_nonce=client_nonce)
    assert plugin.start() == b""
    ext_salt = b"P\x00" + bytes(range(18))
    reply = plugin.continue_with(ext_salt)
    assert reply is not None and len(reply) == 96 and reply[:32] == client_nonce
    public = bytes.fromhex("bcdf1a007dee3190e983163be162322bddc149487fb8222d930c6bba65e82159")
    ed25519.Ed25519PublicKey.from_public_bytes(public).verify(reply[32:],
                                                               server_nonce + client_nonce)
    assert plugin.password_hash() == ext_salt + public
    derived = hashlib.pbkdf2_hmac("sha512", b"secret", bytes(range(18)), 1024, 32)
    assert derived.hex() == "08cc70b0fe8e4e8c5814c987aaf5762f12d5590883f956b0b0eb2ad71bcf645f"


def test_parsec_iterations_and_bad_salt() -> None:
    plugin = ParsecPassword(b"pw", b"A" * 32, PLAIN)
    with pytest.raises(AuthError):
        plugin.continue_with(b"P\x10" + bytes(18))  # exponent 16 is out of range
    with pytest.raises(AuthError):
        ParsecPassword(b"pw", b"A" * 32, PLAIN).continue_with(b"X\x00" + bytes(18))
    with pytest.raises(AuthError):
        ParsecPassword(b"pw", b"A" * 32, PLAIN).continue_with(b"P")
    plugin = ParsecPassword(b"pw", b"A" * 32, PLAIN)
    assert plugin.password_hash() is None  # not known before the ext-salt
    reply = plugin.continue_with(b"P\x03" + bytes(18))  # 8192 rounds
    assert reply is not None and len(reply) == 96
    with pytest.raises(AuthError):
        plugin.continue_with(b"P\x03" + bytes(18))
    with pytest.raises(AuthError):
        ParsecPassword(b"pw", NONCE20, PLAIN).start()


@pytest.mark.parametrize("factor", [4, 9, 15])
def test_parsec_factors_above_what_servers_store(factor: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Factors 4-15 are valid in the protocol but MariaDB 11.8 stores only 0-3 (proven against
    it in tests/integration/test_auth.py): here the ext-salt's factor becomes 1024 << factor
    PBKDF2 rounds and the reply is signed with the key derived from them."""
    from protocol import auth

    rounds: list[int] = []
    seed = bytes(range(32))

    def derive(password: bytes, salt: bytes, iterations: int) -> bytes:
        rounds.append(iterations)
        assert (password, salt) == (b"pw", bytes(18))
        return seed  # the real derivation of 2^25 rounds would take seconds

    monkeypatch.setattr(auth, "_parsec_derive_key", derive)
    server_nonce = b"A" * 32
    plugin = ParsecPassword(b"pw", server_nonce, PLAIN)
    reply = plugin.continue_with(bytes([ord("P"), factor]) + bytes(18))
    assert rounds[0] == 1024 << factor
    assert reply is not None and len(reply) == 96
    public = ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key()
    public.verify(reply[32:], server_nonce + reply[:32])


# --- caching_sha2_password ------------------------------------------------------------------------


def test_caching_sha2_fast_path_verifies_like_the_server() -> None:
    plugin = CachingSha2Password(b"secret", NONCE20, PLAIN)
    reply = plugin.start()
    stage1 = hashlib.sha256(b"secret").digest()
    stage2 = hashlib.sha256(stage1).digest()  # what the server caches
    # server: SHA256(reply XOR SHA256(stage2 || nonce)) == stage2
    assert hashlib.sha256(_xor(reply, hashlib.sha256(stage2 + NONCE20).digest())).digest() \
        == stage2
    assert plugin.continue_with(b"\x03") is None
    assert CachingSha2Password(b"", NONCE20, PLAIN).start() == b"\0"


@pytest.mark.parametrize("context", [TLS, UNVERIFIED_TLS, UNIX])
def test_caching_sha2_full_path_in_clear_inside_tls_or_a_socket(context: AuthContext) -> None:
    plugin = CachingSha2Password(b"secret", NONCE20, context)
    plugin.start()
    assert plugin.continue_with(b"\x04") == b"secret\0"
    assert plugin.path == "full path, the password in clear"


def test_caching_sha2_fast_path_is_recorded() -> None:
    plugin = CachingSha2Password(b"secret", NONCE20, UNVERIFIED_TLS)
    plugin.start()
    assert plugin.continue_with(b"\x03") is None and plugin.path == "fast path"


def test_caching_sha2_full_path_refuses_plain_tcp_without_a_key() -> None:
    plugin = CachingSha2Password(b"secret", NONCE20, PLAIN)
    plugin.start()
    with pytest.raises(InsecureTransport) as info:
        plugin.continue_with(b"\x04")
    assert str(info.value) == ("caching_sha2_password needs the password sent inside TLS or over "
                               "a unix socket, or RSA-encrypted to the server's key, and this "
                               "connection is plain TCP with no key")
    assert info.value.fix == (
        "use TLS (server.tls_mode = verify-ca with server.tls_ca), the unix socket "
        "(server.socket), pin the server's RSA public key (server.server_public_key_file), or "
        "allow fetching it (server.get_server_public_key = true)")


def test_caching_sha2_full_path_with_pinned_key(rsa_key: rsa.RSAPrivateKey) -> None:
    plugin = CachingSha2Password(b"secret", NONCE20,
                                 AuthContext(rsa_public_key=_pem(rsa_key)))
    plugin.start()
    blob = plugin.continue_with(b"\x04")
    assert blob is not None and len(blob) == 256
    assert _server_decrypt(rsa_key, blob, NONCE20) == b"secret\0"


def test_caching_sha2_full_path_fetching_the_key(rsa_key: rsa.RSAPrivateKey) -> None:
    plugin = CachingSha2Password(b"a much longer password than the nonce", NONCE20,
                                 AuthContext(get_server_public_key=True))
    plugin.start()
    assert plugin.continue_with(b"\x04") == b"\x02"
    blob = plugin.continue_with(_pem(rsa_key))
    assert blob is not None
    assert _server_decrypt(rsa_key, blob, NONCE20) == b"a much longer password than the nonce\0"


def test_caching_sha2_bad_messages() -> None:
    plugin = CachingSha2Password(b"pw", NONCE20, AuthContext(get_server_public_key=True))
    with pytest.raises(AuthError):
        plugin.continue_with(b"\x07")
    plugin.continue_with(b"\x04")
    with pytest.raises(AuthError):
        plugin.continue_with(b"-----BEGIN nonsense")
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    plugin = CachingSha2Password(b"p" * 100, NONCE20, AuthContext(rsa_public_key=_pem(small)))
    with pytest.raises(AuthError):
        plugin.continue_with(b"\x04")


# --- sha256_password ----------------------------------------------------------------------------


def test_sha256_password(rsa_key: rsa.RSAPrivateKey) -> None:
    assert Sha256Password(b"secret", NONCE20, TLS).start() == b"secret\0"
    assert Sha256Password(b"secret", NONCE20, UNVERIFIED_TLS).start() == b"secret\0"
    assert Sha256Password(b"", NONCE20, PLAIN).start() == b"\0"
    with pytest.raises(InsecureTransport):
        Sha256Password(b"secret", NONCE20, UNIX).start()  # the server insists on TLS
    plugin = Sha256Password(b"secret", NONCE20, AuthContext(get_server_public_key=True))
    assert plugin.start() == b"\x01"
    blob = plugin.continue_with(_pem(rsa_key))
    assert blob is not None and _server_decrypt(rsa_key, blob, NONCE20) == b"secret\0"
    pinned = Sha256Password(b"secret", NONCE20, AuthContext(rsa_public_key=_pem(rsa_key)))
    assert _server_decrypt(rsa_key, pinned.start(), NONCE20) == b"secret\0"
    with pytest.raises(AuthError):
        pinned.continue_with(b"x")


# --- mysql_clear_password, registry, repr ----------------------------------------------------------


def test_clear_password_only_inside_tls_or_a_socket() -> None:
    assert ClearPassword(b"pw", b"", TLS).start() == b"pw\0"
    assert ClearPassword(b"pw", b"", UNVERIFIED_TLS).start() == b"pw\0"
    assert ClearPassword(b"pw", b"", UNIX).start() == b"pw\0"
    # plain TCP: refused, and the fix never suggests an RSA key (which it cannot use)
    with pytest.raises(InsecureTransport) as info:
        ClearPassword(b"pw", b"", AuthContext(rsa_public_key=b"k", get_server_public_key=True)
                      ).start()
    assert info.value.fix is not None and "RSA" not in info.value.fix
    assert "public_key" not in info.value.fix and "server.socket" in info.value.fix


def test_registry_and_repr() -> None:
    plugin = make_plugin("client_ed25519", b"hunter2", b"A" * 32, PLAIN)
    assert isinstance(plugin, Ed25519Password)
    assert "hunter2" not in repr(plugin) and "hunter2" not in repr(PLAIN)
    with pytest.raises(UnsupportedAuthPlugin) as info:
        make_plugin("dialog", b"", b"", PLAIN)
    assert info.value.plugin == "dialog"
    with pytest.raises(AuthError):
        NativePassword(b"pw", NONCE20, PLAIN).continue_with(b"\x01")


# --- zero-config TLS fingerprint ------------------------------------------------------------------


def test_tls_fingerprint() -> None:
    cert = b"0\x82 fake DER certificate"
    pw_hash = native_password_hash(b"secret")
    expected = hashlib.sha256(pw_hash + NONCE20 + hashlib.sha256(cert).digest()).hexdigest()
    assert expected_tls_fingerprint(pw_hash, NONCE20 + b"\0", cert) == expected.upper().encode()
    info = b"\x01" + expected.upper().encode()
    assert check_tls_fingerprint(info, pw_hash, NONCE20, cert)
    assert not check_tls_fingerprint(info, pw_hash, NONCE20, cert + b"x")
    assert not check_tls_fingerprint(info, native_password_hash(b"other"), NONCE20, cert)
    for bad in (b"", b"\x02" + expected.encode(), info[:-1]):
        with pytest.raises(MalformedPacket):
            check_tls_fingerprint(bad, pw_hash, NONCE20, cert)
