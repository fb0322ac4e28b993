"""The one exception hierarchy of the sans-I/O protocol layer.

Everything `protocol/` raises derives from :class:`ProtocolError`. Parsers never let a bare
``IndexError``/``struct.error``/``UnicodeDecodeError`` escape: bad or truncated bytes become a
:class:`MalformedPacket` (or a more specific subclass) that says *what* was being parsed.

Error text never contains a password, a scramble-derived secret or a private key: callers put
user-supplied secrets into no exception here, and the classes below only carry codes, names,
positions and server-supplied messages.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Root of every error raised by ``protocol/``."""


# --- bytes that do not parse -------------------------------------------------------------------


class MalformedPacket(ProtocolError):
    """Bytes that do not form a valid packet, field or event (truncated, overlong, nonsense)."""


class TruncatedData(MalformedPacket):
    """A field ran past the end of its packet or event."""


class PacketSequenceError(MalformedPacket):
    """A packet arrived with a sequence id other than the expected one."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"packet sequence id {got}, expected {expected}")
        self.expected = expected
        self.got = got


class PacketTooLarge(MalformedPacket):
    """A (joined) packet exceeded the configured maximum size."""


class NotMySQLServer(MalformedPacket):
    """The peer's first bytes are not a MySQL/MariaDB greeting: the address is some other
    service (HTTP, SSH, a TLS-only port). Permanent: retrying reaches the same service."""


# --- errors reported by the server -------------------------------------------------------------


class ServerError(ProtocolError):
    """An ERR packet from the server: its code, SQLSTATE and message, verbatim."""

    def __init__(self, code: int, sqlstate: str, message: str) -> None:
        super().__init__(f"({code}, {sqlstate!r}) {message}" if sqlstate else f"({code}) {message}")
        self.code = code
        self.sqlstate = sqlstate
        self.message = message


class AccessDenied(ServerError):
    """Authentication refused by the server (1045 and friends)."""


class MissingPrivilege(ServerError):
    """Logged in, but the user lacks a privilege the command needs (1227, 1142, 1044, ...)."""


# --- authentication, decided on the client side ------------------------------------------------


class AuthError(ProtocolError):
    """The client refuses to continue authentication (unknown plugin, insecure channel, bad data)."""


class InsecureTransport(AuthError):
    """A plugin would send the password in clear over a channel that is neither TLS nor a socket.

    ``fix`` is the one line that applies to this plugin (an RSA key helps caching_sha2/sha256,
    never mysql_clear_password), so the command line shows it instead of a generic hint.
    """

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


class UnsupportedAuthPlugin(AuthError):
    """The server asked for an authentication plugin binlake does not implement."""

    def __init__(self, plugin: str) -> None:
        super().__init__(f"authentication plugin {plugin!r} is not supported")
        self.plugin = plugin


class TlsError(ProtocolError):
    """TLS was required but cannot be had, or the server's certificate cannot be trusted."""


# --- replication stream ------------------------------------------------------------------------


class ReplicationError(ProtocolError):
    """Base for errors of the binlog stream and the replica registration."""


class BinlogDumpError(ServerError, ReplicationError):
    """The server ended the dump with an error (1236 and others); subclasses say which case."""


class GtidNotInBinlog(BinlogDumpError):
    """The requested GTID was never in the master's binlog."""


class GtidDiverged(BinlogDumpError):
    """The server lacks transactions the replica holds: their histories diverged (a failover
    promoted a server that never received them).

    Raised for the server's own refusal (1236, "… has diverged", "… has more GTIDs than …"),
    and by the replica itself when it compares its GTID state with the server's before the
    dump (``code`` 0: the message is then the replica's own, with no server code in front).
    ``missing`` names the GTIDs the server lacks, when known.
    """

    def __init__(self, code: int, sqlstate: str, message: str, *, missing: str = "") -> None:
        super().__init__(code, sqlstate, message)
        if not code:
            self.args = (message,)
        self.missing = missing


class GtidPurged(BinlogDumpError):
    """The binlog files holding the requested GTID state have been purged."""


class GtidStrictModeHole(BinlogDumpError):
    """Strict mode: the requested GTID falls in a hole of the master's binlog."""


class BinlogPositionError(BinlogDumpError):
    """The requested file/position does not exist or is not an event boundary."""


class DuplicateServerId(BinlogDumpError):
    """Another replica with the same server_id connected (4052): server ids must be unique."""


class ChecksumUnsupported(BinlogDumpError):
    """The server refused to stream: it logs checksums and the replica did not declare that it
    handles them (``@master_binlog_checksum`` was not set)."""


class EventTooLarge(BinlogDumpError):
    """An event exceeds the server's ``max_allowed_packet`` for the dump (raise it on the server)."""


class BinlogNotEnabled(ReplicationError):
    """The server has no binary log (``log_bin`` is OFF): there is nothing to replicate."""


class BinlogFormatNotRow(ReplicationError):
    """The server's ``binlog_format`` is not ROW: changes would arrive as SQL text, not rows."""


class ServerIdConflict(ReplicationError):
    """The replica's configured server_id equals the server's own ``@@server_id``."""


class ServerChanged(ReplicationError):
    """A binlog file/position recorded on one server was to be resumed on another: offsets
    mean nothing in another server's binlog, and a server without GTIDs offers no other way."""


class ChecksumMismatch(ReplicationError):
    """An event's CRC32 does not match its bytes."""

    def __init__(self, file: str, position: int, expected: int, actual: int) -> None:
        super().__init__(
            f"CRC32 mismatch in {file} at {position}: event says {expected:#010x}, "
            f"bytes give {actual:#010x}"
        )
        self.file = file
        self.position = position
        self.expected = expected
        self.actual = actual


class SemiSyncError(ReplicationError):
    """The semi-sync header or an ACK request did not make sense."""


# --- binlog event decoding ---------------------------------------------------------------------


class EventDecodeError(MalformedPacket):
    """An event's body does not match its type's layout. Names the event type and position."""

    def __init__(self, message: str, *, type_code: int | None = None, file: str | None = None,
                 position: int | None = None) -> None:
        where = []
        if type_code is not None:
            where.append(f"event type {type_code}")
        if file is not None:
            where.append(f"in {file}")
        if position is not None:
            where.append(f"at {position}")
        super().__init__(f"{message} ({' '.join(where)})" if where else message)
        self.type_code = type_code
        self.file = file
        self.position = position


class UnknownEventType(EventDecodeError):
    """An event type binlake does not know and that is not flagged LOG_EVENT_IGNORABLE_F."""


class RowDecodeError(EventDecodeError):
    """A row image does not match its TABLE_MAP (wrong length, impossible value)."""


class UnknownTable(EventDecodeError):
    """A rows event refers to a table id with no preceding TABLE_MAP_EVENT."""


# --- GTIDs ---------------------------------------------------------------------------------------


class GtidError(ProtocolError):
    """A GTID, GTID position or Gtid_set text or encoding that does not parse."""
