"""Capability flags, server status flags and the command bytes the client sends.

Capabilities are one 64-bit set: the low 32 bits are common to MySQL and MariaDB; MariaDB
carries bits 32..63 in the "extended capabilities" field, which exists only when the server
does *not* set bit 0 (``CLIENT_MYSQL``, MySQL's ``CLIENT_LONG_PASSWORD``). A MariaDB server
clears that bit precisely to say "I am MariaDB and read the extended field".
"""

from __future__ import annotations

import enum

__all__ = ["Capability", "ServerStatus", "Command", "CLIENT_CAPABILITIES"]


class Capability(enum.IntFlag):
    CLIENT_MYSQL = 1  # MySQL: CLIENT_LONG_PASSWORD
    FOUND_ROWS = 1 << 1
    LONG_FLAG = 1 << 2
    CONNECT_WITH_DB = 1 << 3
    NO_SCHEMA = 1 << 4
    COMPRESS = 1 << 5
    ODBC = 1 << 6
    LOCAL_FILES = 1 << 7
    IGNORE_SPACE = 1 << 8
    PROTOCOL_41 = 1 << 9
    INTERACTIVE = 1 << 10
    SSL = 1 << 11
    IGNORE_SIGPIPE = 1 << 12
    TRANSACTIONS = 1 << 13
    RESERVED = 1 << 14
    SECURE_CONNECTION = 1 << 15
    MULTI_STATEMENTS = 1 << 16
    MULTI_RESULTS = 1 << 17
    PS_MULTI_RESULTS = 1 << 18
    PLUGIN_AUTH = 1 << 19
    CONNECT_ATTRS = 1 << 20
    PLUGIN_AUTH_LENENC_CLIENT_DATA = 1 << 21
    CAN_HANDLE_EXPIRED_PASSWORDS = 1 << 22
    SESSION_TRACK = 1 << 23
    DEPRECATE_EOF = 1 << 24
    OPTIONAL_RESULTSET_METADATA = 1 << 25
    ZSTD_COMPRESSION_ALGORITHM = 1 << 26
    QUERY_ATTRIBUTES = 1 << 27
    MULTI_FACTOR_AUTHENTICATION = 1 << 28
    CAPABILITY_EXTENSION = 1 << 29
    SSL_VERIFY_SERVER_CERT = 1 << 30
    REMEMBER_OPTIONS = 1 << 31
    # MariaDB extended capabilities (only meaningful when CLIENT_MYSQL is not set)
    MARIADB_PROGRESS = 1 << 32
    MARIADB_COM_MULTI = 1 << 33
    MARIADB_STMT_BULK_OPERATIONS = 1 << 34
    MARIADB_EXTENDED_METADATA = 1 << 35
    MARIADB_CACHE_METADATA = 1 << 36
    MARIADB_BULK_UNIT_RESULTS = 1 << 37


#: What binlake asks for; the negotiated set is this AND what the server offers.
#: No MULTI_STATEMENTS (one statement per COM_QUERY keeps result parsing simple and safe), no
#: compression, no LOCAL_FILES (a server must never be able to read client files).
CLIENT_CAPABILITIES = (
    Capability.LONG_FLAG
    | Capability.CONNECT_WITH_DB
    | Capability.PROTOCOL_41
    | Capability.TRANSACTIONS
    | Capability.SECURE_CONNECTION
    | Capability.MULTI_RESULTS
    | Capability.PLUGIN_AUTH
    | Capability.CONNECT_ATTRS
    | Capability.PLUGIN_AUTH_LENENC_CLIENT_DATA
    | Capability.SESSION_TRACK
    | Capability.DEPRECATE_EOF
)


class ServerStatus(enum.IntFlag):
    IN_TRANS = 1
    AUTOCOMMIT = 2
    MORE_RESULTS_EXISTS = 8
    NO_GOOD_INDEX_USED = 16
    NO_INDEX_USED = 32
    CURSOR_EXISTS = 64
    LAST_ROW_SENT = 128
    DB_DROPPED = 1 << 8
    NO_BACKSLASH_ESCAPES = 1 << 9
    METADATA_CHANGED = 1 << 10
    QUERY_WAS_SLOW = 1 << 11
    PS_OUT_PARAMS = 1 << 12
    IN_TRANS_READONLY = 1 << 13
    SESSION_STATE_CHANGED = 1 << 14


class Command(enum.IntEnum):
    """First byte of a client command packet."""

    QUIT = 0x01
    INIT_DB = 0x02
    QUERY = 0x03
    PING = 0x0E
    BINLOG_DUMP = 0x12
    REGISTER_SLAVE = 0x15
    BINLOG_DUMP_GTID = 0x1E
