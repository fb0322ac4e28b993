"""A loopback TCP proxy that tests can use to break the network between binlake and a server.

The daemon connects to the proxy's port instead of the server's; the proxy forwards bytes both
ways and, on request:

* :meth:`TcpProxy.drop` resets every open connection (what a restarted load balancer or a
  firewall's connection-table flush does): the daemon sees a broken connection at once;
* :meth:`TcpProxy.stall` stops forwarding while keeping connections open (a black-holed network
  path): nothing tells the daemon, which must notice the missing heartbeats by itself;
  :meth:`TcpProxy.resume` forwards again;
* :meth:`TcpProxy.hold_open` stalls only the connections open now (one black-holed stream
  while the rest of the network works: new connections flow);
* :meth:`TcpProxy.throttle` limits what flows from the server to the client, in bytes per
  second (a slow link, to make a catch-up last);
* :meth:`TcpProxy.corrupt_once` flips one bit in the first server-to-client chunk holding a
  given byte string (a damaged event: its CRC32 no longer matches);
* :meth:`TcpProxy.before_request` runs a function before forwarding each client-to-server
  request holding a given byte string (a query: to force what the server does just before it;
  plaintext connections only, ``tls_mode = "disabled"``). A client may pipeline requests (send
  the next before the reply to the last): the proxy then holds the marked request until the
  server has begun replying to the one before it, so the function runs after that one began
  running on the server, as if the client had waited.

Threads rather than trio, because the tests around it are synchronous (subprocesses and the
stock client). Two pump threads per connection; each forwards one direction in chunks and holds
a chunk while the proxy is stalled.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["TcpProxy"]

_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``(upstream_host, upstream_port)``.

    Use as a context manager (or call :meth:`close`)::

        with TcpProxy("127.0.0.1", server.port) as proxy:
            ... daemon configured with port=proxy.port ...
            proxy.drop()
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        #: Connections accepted so far (a reconnecting client makes it grow).
        self.accepted = 0
        self._held: set[int] = set()  # ids of connections held by hold_open()
        self._open_ids: set[int] = set()
        self._rate: float | None = None
        self._corrupt: bytes | None = None
        self._before: tuple[bytes, Callable[[bytes, bytes], None]] | None = None
        #: Per connection: the last request bytes forwarded, and whether the server has sent
        #: anything since (before_request's wait for a pipelined request's predecessor).
        self._last_request: dict[int, bytes] = {}
        self._replied: dict[int, threading.Event] = {}
        #: Chunks corrupt_once() has damaged.
        self.corrupted = 0
        self._acceptor = threading.Thread(target=self._accept_loop, name="proxy-accept",
                                          daemon=True)
        self._acceptor.start()

    # --- control ---------------------------------------------------------------------------------

    def drop(self) -> int:
        """Reset every open connection; returns how many pairs were cut."""
        with self._lock:
            sockets = list(self._sockets)
            self._sockets.clear()
        for sock in sockets:
            _reset(sock)
        return len(sockets) // 2

    def stall(self) -> None:
        """Stop forwarding in both directions (connections stay open, new ones are accepted
        and stalled too)."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again: after stall() and hold_open()."""
        with self._lock:
            self._held.clear()
        self._flowing.set()

    def hold_open(self) -> int:
        """Stall the connections open now (new ones flow); returns how many."""
        with self._lock:
            self._held = set(self._open_ids)
            return len(self._held)

    def throttle(self, bytes_per_second: float | None) -> None:
        """Limit server-to-client bytes per second (None: no limit)."""
        self._rate = bytes_per_second

    def corrupt_once(self, marker: bytes) -> None:
        """Flip the low bit of ``marker``'s first byte in the next server-to-client chunk that
        holds it."""
        self._corrupt = marker

    def before_request(self, marker: bytes,
                       action: Callable[[bytes, bytes], None] | None) -> None:
        """Call ``action(request, previous)`` before forwarding each client-to-server request
        (MySQL packets) holding ``marker``: ``request`` is the bytes from its packet on,
        ``previous`` the request bytes this connection forwarded before it. It runs in the
        forwarding thread, once the server has begun replying to ``previous`` (waited for
        when the client pipelined the request), and the request waits for it. None stops it."""
        self._before = None if action is None else (marker, action)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._sockets) // 2

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- forwarding ------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _address = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                _reset(client)  # the upstream is down: so is the proxy, to the client
                continue
            with self._lock:
                self.accepted += 1
                conn_id = self.accepted
                self._open_ids.add(conn_id)
                self._sockets.update((client, server))
            for source, sink, name in ((client, server, "up"), (server, client, "down")):
                threading.Thread(target=self._pump, args=(source, sink, conn_id, name == "down"),
                                 daemon=True, name=f"proxy-{name}-{conn_id}").start()

    def _pump(self, source: socket.socket, sink: socket.socket, conn_id: int,
              down: bool) -> None:
        try:
            while True:
                rate = self._rate if down else None
                chunk = source.recv(4096 if rate else 65536)
                if not chunk:
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)
                    return
                self._flowing.wait()
                while conn_id in self._held:
                    time.sleep(0.05)
                if not down:
                    before = self._before
                    if before is not None and before[0] in chunk:
                        chunk = self._before_marked(chunk, before, sink, conn_id)
                    self._forwarded_request(conn_id, chunk)
                else:
                    self._replied.setdefault(conn_id, threading.Event()).set()
                marker = self._corrupt if down else None
                if marker is not None and marker in chunk:
                    self._corrupt = None
                    at = chunk.index(marker)
                    chunk = chunk[:at] + bytes([chunk[at] ^ 1]) + chunk[at + 1:]
                    self.corrupted += 1
                sink.sendall(chunk)
                if rate:
                    time.sleep(len(chunk) / rate)
        except OSError:
            _reset(sink)
        finally:
            with self._lock:
                self._sockets.discard(source)
                other_done = sink not in self._sockets
                if other_done:
                    self._open_ids.discard(conn_id)
            if other_done:  # both directions are over
                _reset(source)
                _reset(sink)


    def _forwarded_request(self, conn_id: int, request: bytes) -> None:
        """Note ``request`` as the connection's last, not replied to yet (set before it is
        sent: the reply cannot come first)."""
        self._last_request[conn_id] = request
        self._replied.setdefault(conn_id, threading.Event()).clear()

    def _before_marked(self, chunk: bytes, before: tuple[bytes, Callable[[bytes, bytes], None]],
                       sink: socket.socket, conn_id: int) -> bytes:
        """Run the action for the request holding the marker; what is left to forward. The
        requests ahead of it in the chunk (pipelined) are forwarded first; the action waits
        until the server has begun replying to the request before it."""
        marker, action = before
        start = _packet_at(chunk, chunk.index(marker))
        if start:
            self._forwarded_request(conn_id, chunk[:start])
            sink.sendall(chunk[:start])
            chunk = chunk[start:]
        replied = self._replied.get(conn_id)
        if replied is not None and not replied.wait(30):
            raise AssertionError("the server sent nothing back for 30 s to the request "
                                 "before a marked one")
        action(chunk, self._last_request.get(conn_id, b""))
        return chunk


def _packet_at(chunk: bytes, offset: int) -> int:
    """Where the MySQL packet holding ``offset`` starts in ``chunk`` (read from its first
    packet's header on; 0 if the framing does not add up)."""
    start = 0
    while start + 4 <= len(chunk):
        end = start + 4 + int.from_bytes(chunk[start:start + 3], "little")
        if offset < end:
            return start
        start = end
    return 0


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
