"""The connection phase: greeting parsing, responses, and the auth exchange against a fake server."""

from __future__ import annotations

import hashlib
import struct

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from protocol.auth import ed25519_public_key, native_password_hash
from protocol.capabilities import Capability
from protocol.errors import (
    AccessDenied,
    AuthError,
    InsecureTransport,
    MalformedPacket,
    ProtocolError,
    ServerError,
    TlsError,
    UnsupportedAuthPlugin,
)
from protocol.handshake import ClientHandshake, build_ssl_request, parse_greeting
from protocol.packets import PacketCodec, frame_packet, read_lenenc_bytes, read_nul_bytes
from protocol.results import OkPacket

# Captured from MariaDB 10.11.19 (payload of the first packet).
MARIADB_GREETING = bytes.fromhex(
    "0a352e352e352d31302e31312e31392d4d6172696144422d302b646562313275312d6c6f67000f00000063712f"
    "34583e6c2600fef7080200ff81150000000000001d000000743a615b25436347794d5440006d7973716c5f6e61"
    "746976655f70617373776f726400")
MARIADB_SCRAMBLE = bytes.fromhex("63712f34583e6c26743a615b25436347794d5440")


def mysql_greeting(plugin: bytes = b"caching_sha2_password", caps: int = 0xDFFFFFFF) -> bytes:
    scramble = bytes(range(0x41, 0x55))
    return (b"\x0a9.7.4\0" + struct.pack("<I", 12) + scramble[:8] + b"\0"
            + struct.pack("<H", caps & 0xFFFF) + b"\xff" + struct.pack("<H", 2)
            + struct.pack("<H", caps >> 16) + bytes((21,)) + bytes(10)
            + scramble[8:] + b"\0" + plugin + b"\0")


OK = b"\x00\x00\x00\x02\x00\x00\x00"


def test_parse_mariadb_greeting() -> None:
    greeting = parse_greeting(MARIADB_GREETING)
    assert greeting.server_version == "5.5.5-10.11.19-MariaDB-0+deb12u1-log"
    assert greeting.version == "10.11.19-MariaDB-0+deb12u1-log"
    assert greeting.version_tuple == (10, 11, 19)
    assert greeting.is_mariadb and greeting.connection_id == 15
    assert greeting.scramble == MARIADB_SCRAMBLE
    assert greeting.auth_plugin == "mysql_native_password"
    assert not greeting.capabilities & Capability.CLIENT_MYSQL
    assert greeting.capabilities & Capability.MARIADB_PROGRESS
    assert greeting.capabilities & Capability.MARIADB_CACHE_METADATA
    assert "63712f" not in repr(greeting)


def test_parse_mysql_greeting_ignores_the_extended_field() -> None:
    greeting = parse_greeting(mysql_greeting())
    assert not greeting.is_mariadb and greeting.version_tuple == (9, 7, 4)
    assert greeting.capabilities >> 32 == 0
    assert greeting.auth_plugin == "caching_sha2_password"
    assert greeting.scramble == bytes(range(0x41, 0x55))


def test_greeting_whole_bytewise_trailing() -> None:
    wire = frame_packet(MARIADB_GREETING, 0)[0]
    codec = PacketCodec()
    packets = []
    for i in range(len(wire)):
        codec.receive_data(wire[i:i + 1])
        packet = codec.next_packet()
        if packet is not None:
            packets.append(packet)
    assert packets == [(0, MARIADB_GREETING)]
    codec = PacketCodec()
    codec.receive_data(wire + b"\x07\x00\x00\x01")
    _, payload = codec.next_packet() or (0, b"")
    assert parse_greeting(payload).connection_id == 15


def test_greeting_errors_are_typed() -> None:
    for cut in range(len(MARIADB_GREETING) - 24):  # up to the scramble's end
        with pytest.raises(ProtocolError):
            parse_greeting(MARIADB_GREETING[:cut])
    with pytest.raises(MalformedPacket):
        parse_greeting(b"\x09" + MARIADB_GREETING[1:])
    with pytest.raises(ServerError) as info:
        parse_greeting(b"\xff\x69\x04Host '1.2.3.4' is blocked")
    assert info.value.code == 1129


def _parse_response(payload: bytes) -> dict[str, object]:
    caps, max_packet, charset, _, ext = struct.unpack_from("<IIB19sI", payload)
    caps |= ext << 32
    user, offset = read_nul_bytes(payload, 32)
    auth, offset = read_lenenc_bytes(payload, offset)
    database = None
    if caps & Capability.CONNECT_WITH_DB:
        database, offset = read_nul_bytes(payload, offset)
    plugin, offset = read_nul_bytes(payload, offset)
    blob, offset = read_lenenc_bytes(payload, offset)
    attrs = {}
    pos = 0
    assert blob is not None
    while pos < len(blob):
        key, pos = read_lenenc_bytes(blob, pos)
        value, pos = read_lenenc_bytes(blob, pos)
        attrs[key] = value
    assert offset == len(payload)
    return dict(caps=caps, max_packet=max_packet, charset=charset, user=user, auth=auth,
                database=database, plugin=plugin, attrs=attrs)


def test_handshake_response_native_ok() -> None:
    machine = ClientHandshake("repl", "secret", database="db1")
    machine.receive_greeting(MARIADB_GREETING)
    fields = _parse_response(machine.handshake_response())
    assert fields["user"] == b"repl" and fields["database"] == b"db1"
    assert fields["plugin"] == b"mysql_native_password"
    assert fields["charset"] == 45 and fields["max_packet"] == 1 << 30
    stored = native_password_hash(b"secret")
    auth = fields["auth"]
    assert isinstance(auth, bytes)
    stage1 = bytes(a ^ b for a, b in zip(auth, hashlib.sha1(MARIADB_SCRAMBLE + stored).digest(),
                                         strict=True))
    assert hashlib.sha1(stage1).digest() == stored
    caps = fields["caps"]
    assert isinstance(caps, int)
    assert caps & Capability.PROTOCOL_41 and caps & Capability.DEPRECATE_EOF
    assert not caps & (Capability.CLIENT_MYSQL | Capability.SSL | Capability.MULTI_STATEMENTS
                       | Capability.LOCAL_FILES | Capability.COMPRESS)
    assert fields["attrs"][b"_client_name"] == b"binlake"  # type: ignore[index]
    assert not machine.done
    result = machine.receive(OK)
    assert isinstance(result, OkPacket) and machine.done
    assert machine.password_hash() == stored
    assert "secret" not in repr(machine)
    with pytest.raises(AuthError):
        machine.receive(OK)


def test_ssl_request_is_the_response_prefix() -> None:
    machine = ClientHandshake("u", "p")
    machine.receive_greeting(mysql_greeting(caps=0xDFFFFFFF))
    request = machine.ssl_request()
    assert len(request) == 32
    caps = struct.unpack_from("<I", request)[0]
    assert caps & Capability.SSL and caps & Capability.CLIENT_MYSQL
    response = machine.handshake_response(tls_verified=True)
    assert response[:32] == request
    assert build_ssl_request(0)[:4] == struct.pack("<I", Capability.SSL)


def test_ssl_request_without_server_tls() -> None:
    machine = ClientHandshake("u", "p")
    machine.receive_greeting(mysql_greeting(caps=0xDFFFFFFF & ~Capability.SSL))
    assert not machine.server_supports_tls
    with pytest.raises(TlsError):
        machine.ssl_request()


def test_switch_to_ed25519() -> None:
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(MARIADB_GREETING)
    machine.handshake_response()
    nonce = bytes(range(100, 132))
    signature = machine.receive(b"\xfeclient_ed25519\0" + nonce)
    assert isinstance(signature, bytes) and len(signature) == 64
    ed25519.Ed25519PublicKey.from_public_bytes(ed25519_public_key(b"pw")).verify(signature, nonce)
    assert isinstance(machine.receive(OK), OkPacket)
    assert machine.password_hash() == ed25519_public_key(b"pw")
    assert machine.scramble == MARIADB_SCRAMBLE  # zero-config TLS hashes the 20-byte one


@pytest.mark.parametrize("prefix", [b"", b"\x01"])
def test_switch_to_parsec(prefix: bytes) -> None:
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(MARIADB_GREETING)
    machine.handshake_response()
    assert machine.receive(b"\xfeparsec\0" + b"S" * 32) == b""  # an empty packet is sent
    reply = machine.receive(prefix + b"P\x00" + bytes(18))
    assert isinstance(reply, bytes) and len(reply) == 96
    assert isinstance(machine.receive(OK), OkPacket)
    hashed = machine.password_hash()
    assert hashed is not None and len(hashed) == 52


def test_switch_to_native_takes_the_new_scramble() -> None:
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(mysql_greeting())
    machine.handshake_response()
    new = bytes(range(200, 220))
    reply = machine.receive(b"\xfemysql_native_password\0" + new + b"\0")
    assert isinstance(reply, bytes) and len(reply) == 20
    assert machine.scramble == new


def test_caching_sha2_fast_and_full_paths() -> None:
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(mysql_greeting())
    fields = _parse_response(machine.handshake_response())
    assert fields["plugin"] == b"caching_sha2_password" and len(fields["auth"]) == 32  # type: ignore[arg-type]
    assert machine.receive(b"\x01\x03") is None
    assert isinstance(machine.receive(OK), OkPacket)

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    machine = ClientHandshake("u", "pw", get_server_public_key=True)
    machine.receive_greeting(mysql_greeting())
    machine.handshake_response()
    assert machine.receive(b"\x01\x04") == b"\x02"
    blob = machine.receive(b"\x01" + pem)
    assert isinstance(blob, bytes) and len(blob) == 256

    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(mysql_greeting())
    machine.handshake_response(unix_socket=True)
    assert machine.receive(b"\x01\x04") == b"pw\0"

    # unverified TLS (loopback): in clear inside it, as MySQL expects — even with a key pinned
    machine = ClientHandshake("u", "pw", rsa_public_key=pem)
    machine.receive_greeting(mysql_greeting())
    machine.handshake_response(tls=True)
    assert machine.receive(b"\x01\x04") == b"pw\0"

    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(mysql_greeting())
    machine.handshake_response()
    with pytest.raises(InsecureTransport):
        machine.receive(b"\x01\x04")


def test_sha256_default_plugin_falls_back_to_native_answer() -> None:
    # sha256 over plain TCP cannot answer; the client answers as native and waits for a switch.
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(mysql_greeting(b"sha256_password"))
    fields = _parse_response(machine.handshake_response())
    assert fields["plugin"] == b"mysql_native_password"


def test_access_denied() -> None:
    machine = ClientHandshake("u", "bad")
    machine.receive_greeting(MARIADB_GREETING)
    machine.handshake_response()
    with pytest.raises(AccessDenied) as info:
        machine.receive(b"\xff\x15\x04#28000Access denied for user 'u'@'localhost'")
    assert info.value.code == 1045 and "bad" not in str(info.value)


def test_unknown_plugin_and_bad_packets() -> None:
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(MARIADB_GREETING)
    machine.handshake_response()
    with pytest.raises(UnsupportedAuthPlugin):
        machine.receive(b"\xfeauth_gssapi_client\0principal\0")
    with pytest.raises(ProtocolError):
        machine.receive(b"")
    with pytest.raises(ProtocolError):
        machine.receive(b"\xfeno-nul")


def test_zero_config_refuses_plugins_without_hash() -> None:
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(mysql_greeting())
    fields = _parse_response(machine.handshake_response(require_password_hash=True))
    assert fields["plugin"] == b"mysql_native_password"  # not the default caching_sha2
    with pytest.raises(TlsError):
        machine.receive(b"\xfecaching_sha2_password\0" + bytes(20) + b"\0")
    machine = ClientHandshake("u", "pw")
    machine.receive_greeting(MARIADB_GREETING)
    machine.handshake_response(require_password_hash=True)
    assert isinstance(machine.receive(b"\xfeclient_ed25519\0" + bytes(32)), bytes)


def test_state_order_is_enforced() -> None:
    machine = ClientHandshake("u", "pw")
    with pytest.raises(AuthError):
        machine.handshake_response()
    machine.receive_greeting(MARIADB_GREETING)
    with pytest.raises(AuthError):
        machine.receive(OK)
    with pytest.raises(AuthError):
        machine.receive_greeting(MARIADB_GREETING)


def test_server_without_protocol_41_is_refused() -> None:
    with pytest.raises(MalformedPacket):
        ClientHandshake("u").receive_greeting(mysql_greeting(caps=0xDFFFFFFF & ~(1 << 9)))
