"""replica.core.connection against a scripted fake server on loopback (no database needed)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from protocol.errors import AccessDenied, PacketSequenceError, ServerError, TlsError
from protocol.packets import PacketCodec, lenenc_bytes, lenenc_int
from replica.core.connection import Connection, ConnectOptions, is_loopback
from replica.errors import ConnectError, ConnectionLost, ConnectTimeout, ReadTimeout

from .test_handshake import MARIADB_GREETING

OK = b"\x00\x00\x00\x02\x00\x00\x00"
Script = Callable[[trio.SocketStream, PacketCodec], Awaitable[None]]


async def _read(stream: trio.SocketStream, codec: PacketCodec) -> bytes:
    while (packet := codec.next_packet()) is None:
        data = await stream.receive_some(65536)
        if not data:
            raise EOFError
        codec.receive_data(data)
    return packet[1]


async def _login(stream: trio.SocketStream, codec: PacketCodec) -> None:
    await stream.send_all(codec.send(MARIADB_GREETING))
    await _read(stream, codec)  # handshake response
    await stream.send_all(codec.send(OK))


async def _serve(script: Script, task_status=trio.TASK_STATUS_IGNORED) -> None:  # type: ignore[no-untyped-def]
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    stream = await listeners[0].accept()
    codec = PacketCodec(check_sequence=False)
    try:
        await script(stream, codec)
    except (EOFError, trio.BrokenResourceError):
        pass
    finally:
        await stream.aclose()
        await listeners[0].aclose()


async def _with_server(script: Script, nursery: trio.Nursery) -> int:
    port: int = await nursery.start(_serve, script)
    return port


async def test_login_query_and_quit(nursery: trio.Nursery) -> None:
    seen: list[bytes] = []
    done = trio.Event()

    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        try:
            await _serve_one_query(stream, codec)
        finally:
            done.set()

    async def _serve_one_query(stream: trio.SocketStream, codec: PacketCodec) -> None:
        await _login(stream, codec)
        query = await _read(stream, codec)
        seen.append(query)
        column = (lenenc_bytes(b"def") + lenenc_bytes(b"") * 3 + lenenc_bytes(b"x")
                  + lenenc_bytes(b"") + b"\x0c\x21\x00\x01\x00\x00\x00\xfd\x00\x00\x00\x00\x00")
        for packet in (lenenc_int(1), column, lenenc_bytes(b"hi"), b"\xfb",
                       b"\xfe\x00\x00\x02\x00\x00\x00"):
            await stream.send_all(codec.send(packet))
        seen.append(await _read(stream, codec))

    port = await _with_server(script, nursery)
    async with await Connection.open(ConnectOptions(port=port, user="u", password="pw")) as conn:
        assert conn.is_mariadb and conn.server_version.startswith("10.11.19")
        assert conn.connection_id == 15 and not conn.is_secure and conn.tls_trust is None
        result = await conn.query_result("SELECT x")
        assert result.column_names == ["x"] and result.rows == [("hi",), (None,)]
        assert "pw" not in repr(conn) and "pw'" not in repr(conn.options)
    with trio.fail_after(5):  # the server task reads COM_QUIT after the client has closed
        await done.wait()
    assert seen == [b"\x03SELECT x", b"\x01"]


async def test_access_denied(nursery: trio.Nursery) -> None:
    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        await stream.send_all(codec.send(MARIADB_GREETING))
        await _read(stream, codec)
        await stream.send_all(codec.send(b"\xff\x15\x04#28000Access denied"))

    port = await _with_server(script, nursery)
    with pytest.raises(AccessDenied):
        await Connection.open(ConnectOptions(port=port, user="u", password="pw"))


async def test_tls_required_but_not_offered(nursery: trio.Nursery) -> None:
    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        greeting = bytearray(MARIADB_GREETING)
        index = MARIADB_GREETING.index(b"\x00", 1) + 1 + 4 + 8 + 1
        greeting[index + 1] &= ~0x08  # clear CLIENT_SSL (bit 11)
        await stream.send_all(codec.send(bytes(greeting)))
        await trio.sleep(5)

    port = await _with_server(script, nursery)
    with pytest.raises(TlsError):
        await Connection.open(ConnectOptions(port=port, tls_mode="required"))


async def test_server_silent_gives_connect_timeout(nursery: trio.Nursery) -> None:
    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        await trio.sleep(5)

    port = await _with_server(script, nursery)
    with pytest.raises(ConnectTimeout):
        await Connection.open(ConnectOptions(port=port, connect_timeout=0.2))


async def test_read_timeout_and_lost_connection(nursery: trio.Nursery) -> None:
    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        await _login(stream, codec)
        await _read(stream, codec)  # the query: never answered, then the socket closes
        await trio.sleep(0.5)

    port = await _with_server(script, nursery)
    conn = await Connection.open(ConnectOptions(port=port, read_timeout=0.2))
    with pytest.raises(ReadTimeout):
        await conn.query("SELECT 1")
    with pytest.raises(ConnectionLost):
        await conn.read_packet(timeout=2)
    await conn.close()
    await conn.close()  # idempotent


async def test_sequence_checking_in_low_level_api(nursery: trio.Nursery) -> None:
    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        await _login(stream, codec)
        await _read(stream, codec)
        await stream.send_all(codec.send(b"\x00event", sequence=1))
        await stream.send_all(codec.send(b"\x00bad", sequence=7))
        await trio.sleep(1)

    port = await _with_server(script, nursery)
    conn = await Connection.open(ConnectOptions(port=port))
    conn.reset_sequence()
    await conn.send_packet(b"\x12dump")
    assert await conn.read_packet() == b"\x00event"
    with pytest.raises(PacketSequenceError):
        await conn.read_packet()
    await conn.close()


async def test_server_error_during_query_keeps_the_connection(nursery: trio.Nursery) -> None:
    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        await _login(stream, codec)
        await _read(stream, codec)
        await stream.send_all(codec.send(b"\xff\x7a\x04#42S02no such table"))
        await _read(stream, codec)
        await stream.send_all(codec.send(OK))

    port = await _with_server(script, nursery)
    async with await Connection.open(ConnectOptions(port=port)) as conn:
        with pytest.raises(ServerError):
            await conn.query("SELECT * FROM nope")
        await conn.ping()


def _one_column_result(value: bytes) -> list[bytes]:
    column = (lenenc_bytes(b"def") + lenenc_bytes(b"") * 3 + lenenc_bytes(b"x")
              + lenenc_bytes(b"") + b"\x0c\x21\x00\x01\x00\x00\x00\xfd\x00\x00\x00\x00\x00")
    return [lenenc_int(1), column, lenenc_bytes(value), b"\xfe\x00\x00\x02\x00\x00\x00"]


async def test_pipelined_statement_is_read_after_a_result_and_after_an_error(
        nursery: trio.Nursery) -> None:
    """The second statement is sent before the first's response is read (the server here
    reads both before it answers either), and each response is read in order with the
    sequence ids the server gives it — also when the first is an error."""
    seen: list[bytes] = []

    async def script(stream: trio.SocketStream, codec: PacketCodec) -> None:
        await _login(stream, codec)
        for first in (_one_column_result(b"rows"), [b"\xff\x7a\x04#42S02no such table"]):
            seen.extend([await _read(stream, codec), await _read(stream, codec)])
            for response in (first, _one_column_result(b"end")):
                for i, packet in enumerate(response):
                    await stream.send_all(codec.send(packet, sequence=1 if i == 0 else None))
        seen.append(await _read(stream, codec))
        await stream.send_all(codec.send(OK, sequence=1))

    port = await _with_server(script, nursery)
    with trio.fail_after(10):
        async with await Connection.open(ConnectOptions(port=port)) as conn:
            await conn.send_query("SELECT x")
            await conn.send_query_after("SHOW y")
            assert (await conn.read_columns(keep=True)).kept_rows == 1
            assert (await conn.read_result_after()).rows == [("end",)]
            await conn.send_query("SELECT * FROM nope")
            await conn.send_query_after("SHOW y")
            with pytest.raises(ServerError):
                await conn.read_columns()
            assert (await conn.read_result_after()).rows == [("end",)]
            await conn.ping()
    assert seen == [b"\x03SELECT x", b"\x03SHOW y", b"\x03SELECT * FROM nope", b"\x03SHOW y",
                    b"\x0e"]


async def test_connect_refused() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    with pytest.raises(ConnectError):
        await Connection.open(ConnectOptions(port=port))
    with pytest.raises(ConnectError):
        await Connection.open(ConnectOptions(unix_socket="/nonexistent/binlake.sock"))


def test_options() -> None:
    assert ConnectOptions(host="db.example").effective_tls_mode == "required"
    assert ConnectOptions(host="127.0.0.1").effective_tls_mode == "preferred"
    assert ConnectOptions(unix_socket="/s").effective_tls_mode == "preferred"
    assert ConnectOptions(tls_mode="disabled").effective_tls_mode == "disabled"
    with pytest.raises(ValueError):
        ConnectOptions(tls_mode="bogus")
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("10.0.0.1")
    assert "hunter2" not in repr(ConnectOptions(password="hunter2"))


def test_options_from_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from replica.config import Secret, ServerConfig

    key = tmp_path / "key.pem"
    key.write_bytes(b"-----BEGIN PUBLIC KEY-----\n")
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-file\n")
    options = ConnectOptions.from_config(ServerConfig(
        host="db.example", port=3307, user="repl", password=Secret("s3cret"),
        tls_mode="verify-ca", tls_ca="/ca.pem", server_public_key_file=str(key),
        get_server_public_key=True, connect_timeout=3.0, read_timeout=4.0))
    assert (options.host, options.port, options.user, options.password) == (
        "db.example", 3307, "repl", "s3cret")
    assert options.tls_mode == "verify-ca" and options.tls_ca == "/ca.pem"
    assert options.rsa_public_key == b"-----BEGIN PUBLIC KEY-----\n"
    assert options.get_server_public_key and options.connect_timeout == 3.0
    assert "s3cret" not in repr(options)
    from_file = ConnectOptions.from_config(ServerConfig(password_file=str(secret_file)),
                                           read_timeout=None)
    assert from_file.password == "from-file" and from_file.read_timeout is None


def test_connection_lost_always_says_why() -> None:
    """trio's BrokenResourceError around an SSL EOF has no text: the line names the cause."""
    import ssl

    from replica.core.connection import _translate_stream_errors
    from replica.errors import describe

    with pytest.raises(ConnectionLost) as lost:
        with _translate_stream_errors("reading"):
            try:
                raise ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError from exc
    assert str(lost.value) == ("connection lost while reading: SSLEOFError: EOF occurred in "
                               "violation of protocol")
    with pytest.raises(ConnectionLost) as bare:
        with _translate_stream_errors("reading"):
            raise trio.BrokenResourceError
    assert str(bare.value) == ("connection lost while reading: BrokenResourceError (the peer "
                               "closed the connection)")
    assert describe(bare.value).startswith("ConnectionLost: connection lost while reading: B")
    empty = ConnectionLost("")
    assert describe(empty) == "ConnectionLost"
