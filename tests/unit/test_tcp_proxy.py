"""The test bed's TCP proxy (``tests/integration/proxy.py``) forces an interleaving exactly even
when the client pipelines: a marked request sent in the same chunk as the request before it is
held until the server has begun replying to that one, and its action sees both in order."""

from __future__ import annotations

import socket
import threading

from tests.integration.proxy import TcpProxy


def _packet(text: bytes) -> bytes:
    """A MySQL COM_QUERY packet (3-byte length, sequence id, command byte 0x03)."""
    return (len(text) + 1).to_bytes(3, "little") + b"\x00\x03" + text


def test_a_pipelined_request_waits_for_the_reply_to_the_one_before() -> None:
    events: list[str] = []
    upstream = socket.create_server(("127.0.0.1", 0))
    first, second = _packet(b"SELECT 1 LIMIT 10"), _packet(b"SHOW BINARY LOG STATUS")

    def serve() -> None:
        conn, _ = upstream.accept()
        with conn:
            received = b""
            while len(received) < len(first):
                received += conn.recv(65536)
            events.append("server ran the first")
            conn.sendall(b"rows")
            while len(received) < len(first) + len(second):
                received += conn.recv(65536)
            events.append("server got the second")
            conn.sendall(b"end")

    def action(request: bytes, previous: bytes) -> None:
        events.append(f"action: previous is the first {previous == first}, "
                      f"request is the second {request == second}")

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    with TcpProxy("127.0.0.1", upstream.getsockname()[1]) as proxy:
        proxy.before_request(b"SHOW BINARY LOG STATUS", action)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(first + second)  # one chunk: the second is pipelined
            replies = b""
            while not replies.endswith(b"end"):
                replies += client.recv(65536)
    server.join(10)
    upstream.close()
    assert replies == b"rowsend"
    assert events == ["server ran the first",
                      "action: previous is the first True, request is the second True",
                      "server got the second"]
