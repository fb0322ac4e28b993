"""Classify the SQL text of a binlogged statement: which DDL it is and what it affects.

The transaction assembler uses this to tell DDL from statement-based DML, and sinks use the
kind and the affected tables to invalidate cached schemas, to label the lake's DDL log and to
emit TiCDC DDL events. It is binlake's one DDL classifier: nothing here decides what data lands
(the TABLE_MAP does), it only names what a statement did.
:class:`DdlKind` values *are* TiCDC Open Protocol DDL type codes (seed 000, "DDL Type Code"),
with ``OTHER = 0`` for DDL that has no TiCDC code (triggers, routines, grants, …).

This is a tokenizer, not a SQL parser: it reads the leading keywords and the first object
name, skipping comments (``/* */``, ``-- ``, ``#``) but entering MySQL executable comments
(``/*!50001 CREATE VIEW …*/``), and understands backquoted, double-quoted and dotted names.
What it cannot place it still reports as DDL with ``schema``/``table`` left empty.

It also reads the literal DEFAULTs of ``ALTER TABLE … ADD`` columns: the server fills the new
column of every existing row without logging a row event, so a change log cannot learn those
values any other way.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

__all__ = ["RESETS_TABLE", "DdlKind", "DdlStatement", "added_column_defaults", "classify", "is_ddl",
           "redact_secrets", "SECRET_MARKERS"]


class DdlKind(enum.IntEnum):
    OTHER = 0
    CREATE_SCHEMA = 1
    DROP_SCHEMA = 2
    CREATE_TABLE = 3
    DROP_TABLE = 4
    ADD_COLUMN = 5
    DROP_COLUMN = 6
    ADD_INDEX = 7
    DROP_INDEX = 8
    ADD_FOREIGN_KEY = 9
    DROP_FOREIGN_KEY = 10
    TRUNCATE_TABLE = 11
    MODIFY_COLUMN = 12
    REBASE_AUTO_ID = 13
    RENAME_TABLE = 14
    SET_DEFAULT_VALUE = 15
    MODIFY_TABLE_COMMENT = 17
    RENAME_INDEX = 18
    ADD_TABLE_PARTITION = 19
    DROP_TABLE_PARTITION = 20
    CREATE_VIEW = 21
    MODIFY_TABLE_CHARSET = 22
    TRUNCATE_TABLE_PARTITION = 23
    DROP_VIEW = 24
    MODIFY_SCHEMA_CHARSET = 26
    LOCK_TABLE = 27
    UNLOCK_TABLE = 28
    REPAIR_TABLE = 29
    ADD_PRIMARY_KEY = 32
    DROP_PRIMARY_KEY = 33
    CREATE_SEQUENCE = 34
    ALTER_SEQUENCE = 35
    DROP_SEQUENCE = 36


#: Kinds after which a table's earlier rows no longer describe it (it was emptied or replaced).
RESETS_TABLE = frozenset({DdlKind.CREATE_TABLE, DdlKind.DROP_TABLE, DdlKind.TRUNCATE_TABLE})

#: A column default a statement gives existing rows: a string, an integer or a float literal.
DefaultValue = str | int | float


@dataclass(frozen=True, slots=True)
class DdlStatement:
    """A classified DDL statement.

    ``schema`` is the object's schema (the session default when the statement does not
    qualify the name); ``table`` is empty for schema-level statements. For RENAME,
    ``new_schema``/``new_table`` name the target of the first pair. ``alters_table`` says the
    statement may change the column layout of ``schema.table`` (sinks must re-read it).

    ``tables`` lists every ``(schema, table)`` whose layout or rows the statement changes: all
    names of a multi-table DROP TABLE, both sides of every RENAME TABLE pair, the altered,
    truncated or indexed table; empty for schema-level statements, views, sequences and
    statements that change no table. ``added_defaults`` holds ``(column, value)`` for every
    column an ALTER TABLE adds with a value existing rows get: a literal DEFAULT, or the
    implicit ``0``/``''`` of a NOT NULL numeric/character column without DEFAULT (expression
    defaults such as ``CURRENT_TIMESTAMP`` are not knowable and are left out).
    """

    kind: DdlKind
    schema: str
    table: str
    new_schema: str = ""
    new_table: str = ""
    alters_table: bool = False
    tables: tuple[tuple[str, str], ...] = ()
    added_defaults: tuple[tuple[str, DefaultValue], ...] = ()

    @property
    def resets_table(self) -> bool:
        """Whether the statement empties or replaces its tables (CREATE/DROP/TRUNCATE TABLE)."""
        return self.kind in RESETS_TABLE


def _on_table(kind: DdlKind, schema: str, table: str, *, alters_table: bool = True) -> DdlStatement:
    """A statement about the one table ``schema.table``."""
    return DdlStatement(kind, schema, table, alters_table=alters_table,
                        tables=_named(((schema, table),)))


def _named(names: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The ``(schema, table)`` names that do name a table (the scanner found a name)."""
    return tuple(name for name in names if name[1])


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<bq>`(?:[^`]|``)*`)
      | (?P<dq>"(?:[^"\\]|\\.|"")*")
      | (?P<sq>'(?:[^'\\]|\\.|'')*')
      | (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![A-Za-z0-9_$\u0080-\uffff]))
      | (?P<word>[A-Za-z0-9_$\u0080-\uffff]+)
      | (?P<sym>.)
    )""",
    re.VERBOSE | re.DOTALL,
)
_COMMENT = re.compile(r"/\*(?!!).*?\*/|--[ \t][^\n]*|#[^\n]*", re.DOTALL)
_EXEC_COMMENT = re.compile(r"/\*!(?:M?\d{5,6})?(.*?)\*/", re.DOTALL)

# First keywords of statements that are not DDL (DML and transaction control).
_NOT_DDL = frozenset({
    "INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD", "SELECT", "DO", "CALL", "SET", "BEGIN",
    "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "XA", "START", "WITH", "VALUES", "TABLE",
    "HANDLER", "EXECUTE", "PREPARE", "DEALLOCATE", "USE",
})


def _tokens(query: str) -> list[tuple[str, str]]:
    text = _COMMENT.sub(" ", _EXEC_COMMENT.sub(r" \1 ", query))
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            break
        pos = match.end()
        kind = match.lastgroup or "sym"
        value = match.group(kind)
        if kind == "bq":
            value = value[1:-1].replace("``", "`")
        elif kind == "dq":
            value = value[1:-1].replace('""', '"')
        if kind == "sym" and value.isspace():
            continue
        out.append((kind, value))
    return out


class _Scanner:
    def __init__(self, tokens: list[tuple[str, str]], default_schema: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.default_schema = default_schema

    def peek(self, ahead: int = 0) -> str:
        index = self.pos + ahead
        if index >= len(self.tokens):
            return ""
        kind, value = self.tokens[index]
        return value.upper() if kind == "word" else value

    def accept(self, *words: str) -> bool:
        if self.peek() in words:
            self.pos += 1
            return True
        return False

    def skip_words(self, *words: str) -> None:
        while self.accept(*words):
            pass

    def skip_if_exists(self) -> None:
        if self.peek() == "IF":
            self.pos += 1
            self.accept("NOT")
            self.accept("EXISTS")

    def object_name(self) -> tuple[str, str]:
        """``[IF [NOT] EXISTS] name``: the object a CREATE/DROP/ALTER is about."""
        self.skip_if_exists()
        return self.name()

    def name(self) -> tuple[str, str]:
        """A possibly schema-qualified object name: ``(schema, name)``."""
        if self.pos >= len(self.tokens):
            return self.default_schema, ""
        kind, first = self.tokens[self.pos]
        if kind not in ("word", "bq", "dq"):
            return self.default_schema, ""
        self.pos += 1
        if self.peek() == "." and self.pos + 1 < len(self.tokens):
            self.pos += 1
            _, second = self.tokens[self.pos]
            self.pos += 1
            return first, second
        return self.default_schema, first


def classify(query: str, default_schema: str = "") -> DdlStatement | None:
    """Classify ``query``; ``None`` when it is not DDL (DML, BEGIN/COMMIT, SET, XA, …)."""
    scan = _Scanner(_tokens(query), default_schema)
    head = scan.peek()
    if head == "SET" and scan.peek(1) in ("PASSWORD", "DEFAULT"):
        # SET PASSWORD / SET DEFAULT ROLE change accounts, like ALTER USER: DDL, not DML
        return DdlStatement(DdlKind.OTHER, default_schema, "")
    if not head or head in _NOT_DDL:
        return None
    scan.pos += 1
    if head == "CREATE":
        return _create(scan)
    if head == "DROP":
        return _drop(scan)
    if head == "ALTER":
        return _alter(scan)
    if head == "TRUNCATE":
        scan.accept("TABLE")
        schema, table = scan.name()
        return _on_table(DdlKind.TRUNCATE_TABLE, schema, table, alters_table=False)
    if head == "RENAME":
        if scan.accept("TABLE", "TABLES"):
            return _rename_tables(scan)
        return DdlStatement(DdlKind.OTHER, default_schema, "")
    if head == "REPAIR":
        scan.skip_words("NO_WRITE_TO_BINLOG", "LOCAL")
        scan.accept("TABLE")
        schema, table = scan.name()
        return DdlStatement(DdlKind.REPAIR_TABLE, schema, table)
    if head == "LOCK":
        return DdlStatement(DdlKind.LOCK_TABLE, default_schema, "")
    if head == "UNLOCK":
        return DdlStatement(DdlKind.UNLOCK_TABLE, default_schema, "")
    return DdlStatement(DdlKind.OTHER, default_schema, "")


def is_ddl(query: str) -> bool:
    return classify(query) is not None


def added_column_defaults(query: str) -> dict[str, DefaultValue]:
    """The values an ``ALTER TABLE … ADD`` gives existing rows, by column (see DdlStatement)."""
    parsed = classify(query)
    return dict(parsed.added_defaults) if parsed is not None else {}


def _rename_tables(scan: _Scanner) -> DdlStatement:
    """``RENAME TABLE a TO b [, c TO d …]``: named by the first pair, ``tables`` lists them all."""
    pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
    while True:
        old = scan.object_name()
        _skip_wait(scan)
        scan.accept("TO")
        pairs.append((old, scan.name()))
        if not scan.accept(","):
            break
    (schema, table), (new_schema, new_table) = pairs[0]
    return DdlStatement(DdlKind.RENAME_TABLE, schema, table, new_schema, new_table,
                        alters_table=True, tables=_named(name for pair in pairs for name in pair))


def _skip_wait(scan: _Scanner) -> None:
    """MariaDB's lock-wait option: ``WAIT n`` or ``NOWAIT``."""
    if scan.accept("WAIT") and scan.peek().isdigit():
        scan.pos += 1
    scan.accept("NOWAIT")


_CREATE_OPTION_END = frozenset({"ALGORITHM", "DEFINER", "SQL", "VIEW", "TRIGGER", "PROCEDURE",
                                "FUNCTION", "EVENT", "AGGREGATE"})


def _create(scan: _Scanner) -> DdlStatement:
    if scan.accept("OR"):
        scan.accept("REPLACE")
    scan.skip_words("TEMPORARY", "UNIQUE", "FULLTEXT", "SPATIAL", "ONLINE", "OFFLINE")
    # CREATE [ALGORITHM=x] [DEFINER=u@h] [SQL SECURITY y] VIEW
    while True:
        option = scan.peek()
        if option in ("ALGORITHM", "DEFINER"):
            scan.pos += 1
            while scan.peek() and scan.peek() not in _CREATE_OPTION_END:
                scan.pos += 1
        elif option == "SQL":
            scan.pos += 1
            scan.accept("SECURITY")
            scan.accept("DEFINER", "INVOKER")
        else:
            break
    what = scan.peek()
    scan.pos += 1
    if what in ("DATABASE", "SCHEMA"):
        return DdlStatement(DdlKind.CREATE_SCHEMA, scan.object_name()[1], "")
    if what == "TABLE":
        return _on_table(DdlKind.CREATE_TABLE, *scan.object_name())
    if what == "INDEX":
        return _index_on_table(scan, DdlKind.ADD_INDEX)
    if what in ("VIEW", "SEQUENCE"):
        kind = DdlKind.CREATE_VIEW if what == "VIEW" else DdlKind.CREATE_SEQUENCE
        return DdlStatement(kind, *scan.object_name())
    return DdlStatement(DdlKind.OTHER, scan.default_schema, "")


def _drop(scan: _Scanner) -> DdlStatement:
    scan.skip_words("TEMPORARY", "ONLINE", "OFFLINE")
    what = scan.peek()
    scan.pos += 1
    if what in ("DATABASE", "SCHEMA"):
        return DdlStatement(DdlKind.DROP_SCHEMA, scan.object_name()[1], "")
    if what in ("TABLE", "TABLES"):
        names = [scan.object_name()]
        while scan.accept(","):
            names.append(scan.name())
        schema, table = names[0]
        return DdlStatement(DdlKind.DROP_TABLE, schema, table, alters_table=True,
                            tables=_named(names))
    if what == "INDEX":
        return _index_on_table(scan, DdlKind.DROP_INDEX)
    if what in ("VIEW", "SEQUENCE"):
        kind = DdlKind.DROP_VIEW if what == "VIEW" else DdlKind.DROP_SEQUENCE
        return DdlStatement(kind, *scan.object_name())
    return DdlStatement(DdlKind.OTHER, scan.default_schema, "")


def _index_on_table(scan: _Scanner, kind: DdlKind) -> DdlStatement:
    """``[IF [NOT] EXISTS] index ON table``: a statement about the indexed table."""
    scan.object_name()
    scan.accept("ON")
    return _on_table(kind, *scan.name())


def _alter(scan: _Scanner) -> DdlStatement:
    scan.skip_words("ONLINE", "OFFLINE", "IGNORE")
    what = scan.peek()
    scan.pos += 1
    if what in ("DATABASE", "SCHEMA"):
        token, value = scan.tokens[scan.pos] if scan.pos < len(scan.tokens) else ("", "")
        name = scan.default_schema
        if token in ("bq", "dq") or (token == "word" and value.upper() not in (
                "DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "COMMENT", "UPGRADE")):
            _, name = scan.name()
        return DdlStatement(DdlKind.MODIFY_SCHEMA_CHARSET, name, "")
    if what == "SEQUENCE":
        return DdlStatement(DdlKind.ALTER_SEQUENCE, *scan.object_name())
    if what != "TABLE":
        return DdlStatement(DdlKind.OTHER, scan.default_schema, "")
    schema, table = scan.object_name()
    _skip_wait(scan)
    specs = scan.pos
    kind, new_schema, new_table = _alter_spec(scan)
    return DdlStatement(kind, schema, table, new_schema, new_table, alters_table=True,
                        tables=_named(((schema, table),)),
                        added_defaults=_added_defaults(scan.tokens[specs:]))


def _alter_spec(scan: _Scanner) -> tuple[DdlKind, str, str]:
    """The kind of the first alter specification (multi-spec ALTERs are named by the first)."""
    word = scan.peek()
    scan.pos += 1
    nxt = scan.peek()
    if word == "ADD":
        if scan.accept("CONSTRAINT") and scan.peek() not in ("PRIMARY", "UNIQUE", "FOREIGN",
                                                             "CHECK"):
            scan.name()  # the constraint's name
        nxt = scan.peek()
        if nxt == "PRIMARY":
            return DdlKind.ADD_PRIMARY_KEY, "", ""
        if nxt == "FOREIGN":
            return DdlKind.ADD_FOREIGN_KEY, "", ""
        if nxt in ("INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "VECTOR"):
            return DdlKind.ADD_INDEX, "", ""
        if nxt == "PARTITION":
            return DdlKind.ADD_TABLE_PARTITION, "", ""
        if nxt == "CHECK":
            return DdlKind.OTHER, "", ""
        return DdlKind.ADD_COLUMN, "", ""
    if word == "DROP":
        if nxt == "PRIMARY":
            return DdlKind.DROP_PRIMARY_KEY, "", ""
        if nxt == "FOREIGN":
            return DdlKind.DROP_FOREIGN_KEY, "", ""
        if nxt in ("INDEX", "KEY"):
            return DdlKind.DROP_INDEX, "", ""
        if nxt == "PARTITION":
            return DdlKind.DROP_TABLE_PARTITION, "", ""
        if nxt in ("CONSTRAINT", "CHECK"):
            return DdlKind.OTHER, "", ""
        return DdlKind.DROP_COLUMN, "", ""
    if word in ("MODIFY", "CHANGE"):
        return DdlKind.MODIFY_COLUMN, "", ""
    if word == "ALTER":
        # ALTER [COLUMN] c SET DEFAULT x | DROP DEFAULT; other column alterations (SET
        # INVISIBLE, …) modify the column.
        scan.accept("COLUMN")
        scan.name()
        if scan.accept("SET", "DROP") and scan.peek() == "DEFAULT":
            return DdlKind.SET_DEFAULT_VALUE, "", ""
        return DdlKind.MODIFY_COLUMN, "", ""
    if word == "RENAME":
        if nxt in ("INDEX", "KEY"):
            return DdlKind.RENAME_INDEX, "", ""
        if nxt == "COLUMN":
            return DdlKind.MODIFY_COLUMN, "", ""
        scan.accept("TO", "AS")
        new_schema, new_table = scan.name()
        return DdlKind.RENAME_TABLE, new_schema, new_table
    if word == "COMMENT":
        return DdlKind.MODIFY_TABLE_COMMENT, "", ""
    if word in ("CONVERT", "CHARSET", "COLLATE", "CHARACTER") or (
            word == "DEFAULT" and nxt in ("CHARSET", "CHARACTER", "COLLATE")):
        return DdlKind.MODIFY_TABLE_CHARSET, "", ""
    if word == "AUTO_INCREMENT":
        return DdlKind.REBASE_AUTO_ID, "", ""
    if word == "TRUNCATE" and nxt == "PARTITION":
        return DdlKind.TRUNCATE_TABLE_PARTITION, "", ""
    return DdlKind.OTHER, "", ""


# --- defaults of added columns -----------------------------------------------------------------

_Token = tuple[str, str]

# Words after ADD that start something other than a column definition.
_NOT_A_COLUMN = frozenset({"INDEX", "KEY", "UNIQUE", "PRIMARY", "FOREIGN", "CONSTRAINT",
                           "FULLTEXT", "SPATIAL", "VECTOR", "PARTITION", "CHECK", "PERIOD",
                           "SYSTEM"})
# Types whose NOT NULL column without DEFAULT gives existing rows 0, and those that give ''.
_ZERO_TYPES = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "INTEGER", "BIGINT",
                         "DECIMAL", "NUMERIC", "DEC", "FLOAT", "DOUBLE", "REAL", "BIT", "BOOL",
                         "BOOLEAN", "YEAR"})
_EMPTY_TYPES = frozenset({"CHAR", "VARCHAR", "TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT",
                          "BINARY", "VARBINARY"})
# Column attributes under which the server computes the value instead of defaulting it.
_COMPUTED = frozenset({"AUTO_INCREMENT", "AS", "GENERATED"})
_STRING_ESCAPE = re.compile(r"''|\\(.)")


def _keyword(token: _Token) -> str:
    """The upper-cased word, or ``""`` for anything else (names, literals, symbols)."""
    kind, value = token
    return value.upper() if kind == "word" else ""


def _alter_specifications(tokens: list[_Token]) -> list[list[_Token]]:
    """The comma-separated specifications of an ALTER TABLE (commas inside parentheses kept)."""
    specs: list[list[_Token]] = [[]]
    depth = 0
    for token in tokens:
        if token[0] == "sym":
            if token[1] == "," and depth == 0:
                specs.append([])
                continue
            depth += {"(": 1, ")": -1}.get(token[1], 0)
        specs[-1].append(token)
    return specs


def _added_defaults(tokens: list[_Token]) -> tuple[tuple[str, DefaultValue], ...]:
    """``(column, value)`` for the ADD [COLUMN] specifications that give existing rows a value."""
    out: list[tuple[str, DefaultValue]] = []
    for spec in _alter_specifications(tokens):
        words = [_keyword(token) for token in spec]
        if not words or words[0] != "ADD":
            continue
        at = 2 if words[1:2] == ["COLUMN"] else 1
        if words[at:at + 3] == ["IF", "NOT", "EXISTS"]:
            at += 3
        if spec[at:at + 1] == [("sym", "(")] and spec[-1] == ("sym", ")"):
            columns = _alter_specifications(spec[at + 1:-1])  # ADD (a INT, b INT …)
        else:
            columns = [spec[at:]]
        for column in columns:
            added = _added_default(column)
            if added is not None:
                out.append(added)
    return tuple(out)


def _added_default(column: list[_Token]) -> tuple[str, DefaultValue] | None:
    """``name definition…`` → ``(name, value)`` when existing rows get a knowable value."""
    words = [_keyword(token) for token in column]
    if len(column) < 2 or column[0][0] not in ("word", "bq", "dq") or words[0] in _NOT_A_COLUMN:
        return None
    value = _column_default(column[1:], words[1:])
    return None if value is None else (column[0][1], value)


def _column_default(definition: list[_Token], words: list[str]) -> DefaultValue | None:
    """What existing rows get in a column so defined; None for NULL or what is not knowable."""
    if "DEFAULT" in words:
        return _literal(definition[words.index("DEFAULT") + 1:])
    not_null = ("NOT", "NULL") in pairwise(words)
    if not not_null or _COMPUTED.intersection(words):
        return None
    if words[0] in _ZERO_TYPES:
        return 0
    if words[0] in _EMPTY_TYPES:
        return ""
    return None


def _literal(tokens: list[_Token]) -> DefaultValue | None:
    """The literal the tokens start with: a string, a signed number, TRUE/FALSE; else None."""
    if not tokens:
        return None
    kind, value = tokens[0]
    if kind == "sq":
        return _STRING_ESCAPE.sub(lambda m: m.group(1) or "'", value[1:-1])
    if kind == "word" and value.upper() in ("TRUE", "FALSE"):
        return int(value.upper() == "TRUE")
    sign = ""
    if kind == "sym" and value in "+-" and len(tokens) > 1:
        sign = value
        kind, value = tokens[1]
    if kind != "num":
        return None
    number = sign + value
    return float(number) if any(c in value for c in ".eE") else int(number)

# --- secrets in account-management statements ------------------------------------------------------
#
# CREATE/ALTER USER, GRANT … IDENTIFIED BY, SET PASSWORD, the PASSWORD() function, CREATE/ALTER
# SERVER … OPTIONS (PASSWORD …), CHANGE MASTER/START SLAVE … PASSWORD and FEDERATED/CONNECT
# connection URLs reach the binlog with the password (or its hash) as a literal: MariaDB logs
# the statement as written, MySQL logs a rewritten one carrying the hash. Anything binlake
# writes for others to read (the lake's DDL log, Open Protocol DDL events, ``binlake decode``'s
# text, log lines) carries the statement with those literals replaced, so a change log never
# becomes a password store.
#
# These are regular expressions over the raw text, not a parse: between keywords they accept
# whitespace and ``/* … */`` comments, a literal may be single- or double-quoted, hex (``0x…``,
# ``X'…'``) or carry a charset introducer (``_binary'…'``). Whether ``\'`` ends a literal depends
# on the session's sql_mode (NO_BACKSLASH_ESCAPES), which the text does not say: every pattern
# is run under both readings, and the union of what either reading calls a secret is redacted —
# at worst a little more than the password, never less. A redacted literal keeps its quote
# character, so the statement stays well-formed even when the secret sat inside another string
# (Spider's ``COMMENT 'password "x"'``).

_GAP = r"(?:\s|/\*(?:[^*]|\*(?!/))*\*/)"  # whitespace or one /* comment */
_S = _GAP + "+"
_S0 = _GAP + "*"
_QUOTED = {
    "escapes": r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*\"""",  # the default sql_mode
    "no_escapes": r"""'(?:[^']|'')*'|"(?:[^"]|"")*\"""",  # NO_BACKSLASH_ESCAPES
}
# A quoted literal may also run to the end of the text (one that never closes under a reading).
_UNCLOSED = r"""|'[^']*\Z|"[^"]*\Z"""


def _secret_patterns(quoted: str) -> tuple[re.Pattern[str], ...]:
    literal = r"(?:_\w+\s*)?(?:" + quoted + _UNCLOSED + r"|0x[0-9a-f]+\b|x'[0-9a-f]*')"
    name = r"(?:\w+|" + literal + ")"
    secret = "(" + literal + ")"
    return tuple(re.compile(pattern, re.IGNORECASE | re.DOTALL) for pattern in (
        # IDENTIFIED BY [PASSWORD] 'x' | IDENTIFIED WITH plugin BY|AS 'x' | IDENTIFIED VIA p
        # USING 'x' (also after AND / INITIAL AUTHENTICATION / 2FACTOR: the keyword is the same)
        r"\bIDENTIFIED" + _S + r"(?:(?:WITH|VIA)" + _S + name + _S + r")?"
        r"(?:BY|AS|USING)" + _S + r"(?:PASSWORD" + _S0 + r")?" + secret,
        # MariaDB's alternatives: IDENTIFIED VIA a USING 'x' OR b USING 'y'
        r"\bOR" + _S + name + _S + r"(?:USING|AS|BY)" + _S + secret,
        # PASSWORD('x'), OLD_PASSWORD('x'), USING PASSWORD('x')
        r"\b(?:OLD_)?PASSWORD" + _S0 + r"\(" + _S0 + secret,
        # SET PASSWORD [FOR user] = 'x'
        r"\bSET" + _S + r"PASSWORD\b[^=]*=" + _S0 + secret,
        # MASTER_PASSWORD = 'x', SOURCE_PASSWORD = 'x' (CHANGE MASTER / REPLICATION SOURCE)
        r"\b(?:MASTER|SOURCE)_PASSWORD" + _S0 + "=" + _S0 + secret,
        # PASSWORD = 'x' (START SLAVE/REPLICA … PASSWORD='x'), PASSWORD 'x' (CREATE/ALTER
        # SERVER … OPTIONS (PASSWORD 'x'), Spider/CONNECT option strings)
        r"\bPASSWORD(?:" + _S0 + "=" + _S0 + "|" + _S + r")" + secret,
        # ALTER USER … IDENTIFIED BY 'new' REPLACE 'old', SET PASSWORD = 'new' REPLACE 'old'
        r"\bREPLACE" + _S + secret,
    ))


@functools.cache
def _all_secret_patterns() -> tuple[re.Pattern[str], ...]:
    """Both readings' patterns, compiled at the first statement that may hold a secret: their
    compilation (case-insensitive, with long character classes) is a noticeable part of a
    start-up, and most runs never see such a statement."""
    return _secret_patterns(_QUOTED["escapes"]) + _secret_patterns(_QUOTED["no_escapes"])


#: user:password@ in a URL (FEDERATED/FederatedX/CONNECT ``CONNECTION='mysql://u:p@h/db/t'``).
_URL_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:/@'\"]*:([^\s@'\"/]*)@", re.IGNORECASE)
_DOUBLE_QUOTED = re.compile(r'(?:_\w+\s*)?"')
REDACTED = "'<redacted>'"
#: What a statement must contain (in any letter case) for :func:`redact_secrets` to look further:
#: the one list of these markers. Upper-case ASCII.
SECRET_MARKERS: tuple[str, ...] = ("PASSWORD", "IDENTIFIED", "://")


def redact_secrets(query: str) -> str:
    """``query`` with password and password-hash literals replaced by ``'<redacted>'``.

    Returns ``query`` itself (the same object) when there is nothing to redact, so callers can
    tell cheaply whether anything changed.
    """
    upper = query.upper()
    if not any(marker in upper for marker in SECRET_MARKERS):
        return query
    # (start, end, is a literal): literals become a quoted '<redacted>', a URL's password bare
    spans = [(match.start(1), match.end(1), True)
             for pattern in _all_secret_patterns() for match in pattern.finditer(query)]
    spans += [(match.start(1), match.end(1), False) for match in _URL_PASSWORD.finditer(query)]
    if not spans:
        return query
    merged: list[tuple[int, int, bool]] = []
    for start, end, literal in sorted(spans):
        if merged and start < merged[-1][1]:  # overlapping readings: redact their union
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2] or literal)
        else:
            merged.append((start, end, literal))
    out, pos = [], 0
    for start, end, literal in merged:
        quote = '"' if _DOUBLE_QUOTED.match(query, start) else "'"
        out += [query[pos:start], f"{quote}<redacted>{quote}" if literal else "<redacted>"]
        pos = end
    out.append(query[pos:])
    return "".join(out)
