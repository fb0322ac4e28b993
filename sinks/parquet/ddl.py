"""A small DDL classifier for the DDL log: which kind of statement, and which tables it touches.

The type codes are TiCDC's DDL type codes (Create Schema 1 … Drop Sequence 36), so consumers
used to that change model can reuse them; 0 means "a DDL we could not classify". This is a
keyword classifier, not a SQL parser: it strips comments, looks at the leading keywords and the
first ALTER clause, and reads table names that are plain or back-quoted identifiers. It is
used to label the log and to notice TRUNCATE/DROP/CREATE (which reset a table's rows), never
to decide what data lands — the TABLE_MAP decides that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
ADD_PRIMARY_KEY = 32
DROP_PRIMARY_KEY = 33
CREATE_SEQUENCE = 34
ALTER_SEQUENCE = 35
DROP_SEQUENCE = 36
UNKNOWN = 0

#: DDL types after which a table's earlier rows no longer describe it.
RESETS_TABLE = frozenset({CREATE_TABLE, DROP_TABLE, TRUNCATE_TABLE})

_COMMENTS = re.compile(r"/\*(?!!).*?\*/|--[^\n]*|#[^\n]*", re.S)
_VERSIONED_COMMENT = re.compile(r"/\*!\d*(.*?)\*/", re.S)
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_NAME = rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)"
_IF = r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
_TABLE_OPTS = r"(?:(?:OR\s+REPLACE|TEMPORARY|ONLINE|IGNORE)\s+)*"

_ALTER_CLAUSES: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(pattern, re.I), code) for pattern, code in (
        (r"^ADD\s+(?:CONSTRAINT\s+\S*\s*)?PRIMARY\s+KEY", ADD_PRIMARY_KEY),
        (r"^DROP\s+PRIMARY\s+KEY", DROP_PRIMARY_KEY),
        (r"^ADD\s+(?:CONSTRAINT\s+\S*\s*)?FOREIGN\s+KEY", ADD_FOREIGN_KEY),
        (r"^DROP\s+FOREIGN\s+KEY", DROP_FOREIGN_KEY),
        (r"^ADD\s+(?:UNIQUE|INDEX|KEY|FULLTEXT|SPATIAL|CONSTRAINT)", ADD_INDEX),
        (r"^DROP\s+(?:INDEX|KEY)", DROP_INDEX),
        (r"^RENAME\s+(?:INDEX|KEY)", RENAME_INDEX),
        (r"^(?:ADD|REORGANIZE)\s+PARTITION", ADD_TABLE_PARTITION),
        (r"^DROP\s+PARTITION", DROP_TABLE_PARTITION),
        (r"^TRUNCATE\s+PARTITION", TRUNCATE_TABLE_PARTITION),
        (r"^ADD\b", ADD_COLUMN),
        (r"^DROP\b", DROP_COLUMN),
        (r"^ALTER\s+(?:COLUMN\s+)?\S+\s+(?:SET|DROP)\s+DEFAULT", SET_DEFAULT_VALUE),
        (r"^(?:MODIFY|CHANGE|ALTER)\b", MODIFY_COLUMN),
        (r"^RENAME\b", RENAME_TABLE),
        (r"^AUTO_INCREMENT\b", REBASE_AUTO_ID),
        (r"^COMMENT\b", MODIFY_TABLE_COMMENT),
        (r"^(?:CONVERT\s+TO\s+)?(?:DEFAULT\s+)?(?:CHARACTER\s+SET|CHARSET|COLLATE)\b",
         MODIFY_TABLE_CHARSET),
    )
)


@dataclass(frozen=True, slots=True)
class DdlInfo:
    """A classified DDL: its type code and the (database, table) pairs it names."""

    ddl_type: int
    tables: tuple[tuple[str, str], ...]


def _unquote(ident: str) -> str:
    ident = ident.strip()
    if ident.startswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _qualified(name: str, default_db: str) -> tuple[str, str]:
    parts = re.findall(_IDENT, name)
    if len(parts) == 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return default_db, _unquote(parts[0])


def _normalize(query: str) -> str:
    text = _VERSIONED_COMMENT.sub(r" \1 ", _COMMENTS.sub(" ", query))
    return " ".join(text.split())


def classify(query: str, default_db: str) -> DdlInfo:
    """Classify one DDL statement; unknown statements get type 0 and no tables."""
    text = _normalize(query)
    m = re.match(rf"CREATE\s+(?:DATABASE|SCHEMA)\s+{_IF}", text, re.I)
    if m:
        return DdlInfo(CREATE_SCHEMA, ())
    if re.match(r"DROP\s+(?:DATABASE|SCHEMA)\b", text, re.I):
        return DdlInfo(DROP_SCHEMA, ())
    if re.match(r"ALTER\s+(?:DATABASE|SCHEMA)\b", text, re.I):
        return DdlInfo(MODIFY_SCHEMA_CHARSET, ())
    m = re.match(rf"CREATE\s+{_TABLE_OPTS}TABLE\s+{_IF}{_NAME}", text, re.I)
    if m:
        return DdlInfo(CREATE_TABLE, (_qualified(m.group(1), default_db),))
    m = re.match(rf"DROP\s+(?:TEMPORARY\s+)?TABLE\s+{_IF}(.*)$", text, re.I)
    if m:
        names = re.findall(_NAME, re.sub(r"\s+(?:RESTRICT|CASCADE)\s*$", "", m.group(1), flags=re.I))
        return DdlInfo(DROP_TABLE, tuple(_qualified(n, default_db) for n in names))
    m = re.match(rf"TRUNCATE\s+(?:TABLE\s+)?{_NAME}", text, re.I)
    if m:
        return DdlInfo(TRUNCATE_TABLE, (_qualified(m.group(1), default_db),))
    m = re.match(r"RENAME\s+TABLES?\s+(.*)$", text, re.I)
    if m:
        names = re.findall(rf"{_NAME}\s+TO\s+{_NAME}", m.group(1), re.I)
        return DdlInfo(RENAME_TABLE, tuple(
            _qualified(n, default_db) for pair in names for n in pair))
    m = re.match(rf"ALTER\s+{_TABLE_OPTS}TABLE\s+{_IF}{_NAME}\s*(.*)$", text, re.I)
    if m:
        table = _qualified(m.group(1), default_db)
        clause = m.group(2)
        for pattern, code in _ALTER_CLAUSES:
            if pattern.match(clause):
                return DdlInfo(code, (table,))
        return DdlInfo(UNKNOWN, (table,))
    if re.match(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:ALGORITHM\s*=\s*\w+\s+)?"
                r"(?:DEFINER\s*=\s*\S+\s+)?(?:SQL\s+SECURITY\s+\w+\s+)?VIEW\b", text, re.I):
        return DdlInfo(CREATE_VIEW, ())
    if re.match(r"DROP\s+VIEW\b", text, re.I):
        return DdlInfo(DROP_VIEW, ())
    m = re.match(rf"CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+"
                 rf"{_IF}{_IDENT}\s+ON\s+{_NAME}", text, re.I)
    if m:
        return DdlInfo(ADD_INDEX, (_qualified(m.group(1), default_db),))
    m = re.match(rf"DROP\s+INDEX\s+{_IF}{_IDENT}\s+ON\s+{_NAME}", text, re.I)
    if m:
        return DdlInfo(DROP_INDEX, (_qualified(m.group(1), default_db),))
    for word, code in (("CREATE", CREATE_SEQUENCE), ("ALTER", ALTER_SEQUENCE),
                       ("DROP", DROP_SEQUENCE)):
        if re.match(rf"{word}\s+(?:OR\s+REPLACE\s+)?SEQUENCE\b", text, re.I):
            return DdlInfo(code, ())
    return DdlInfo(UNKNOWN, ())


_LITERAL = r"'(?:[^'\\]|\\.|'')*'|-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|NULL\b|TRUE\b|FALSE\b"
_ADD_CLAUSE = re.compile(
    rf"(?:^|,)\s*ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?({_IDENT})\s+(.*?)"
    r"(?=,\s*(?:ADD|DROP|MODIFY|CHANGE|ALTER|RENAME|ALGORITHM|LOCK)\b|$)", re.I)
_NOT_COLUMN = re.compile(r"(?:INDEX|KEY|UNIQUE|PRIMARY|FOREIGN|CONSTRAINT|FULLTEXT|SPATIAL|"
                         r"PARTITION|CHECK|PERIOD|SYSTEM)$", re.I)
_NUMERIC = re.compile(r"(?:TINY|SMALL|MEDIUM|BIG)?INT(?:EGER)?\b|DECIMAL\b|NUMERIC\b|DEC\b|"
                      r"FLOAT\b|DOUBLE\b|REAL\b|BIT\b|BOOL(?:EAN)?\b|YEAR\b", re.I)
_TEXTUAL = re.compile(r"(?:VAR)?CHAR\b|(?:TINY|MEDIUM|LONG)?TEXT\b|(?:VAR)?BINARY\b", re.I)


def _literal_value(text: str) -> str | int | float | None:
    upper = text.upper()
    if upper == "NULL":
        return None
    if upper in ("TRUE", "FALSE"):
        return int(upper == "TRUE")
    if text.startswith("'"):
        return re.sub(r"''|\\(.)", lambda m: m.group(1) or "'", text[1:-1])
    return float(text) if any(c in text for c in ".eE") else int(text)


def added_column_defaults(query: str) -> dict[str, str | int | float]:
    """Columns an ``ALTER TABLE … ADD`` gives existing rows a non-NULL value, and that value.

    Existing rows get the column's DEFAULT without any row event in the binlog, so a change log
    alone cannot know it; readers use this to fill it in. Covers literal DEFAULTs and the implicit
    0 / '' of a NOT NULL numeric / character column without DEFAULT; an expression default
    (``CURRENT_TIMESTAMP``, ``(uuid())``) is not knowable and is left out.
    """
    text = _normalize(query)
    m = re.match(rf"ALTER\s+{_TABLE_OPTS}TABLE\s+{_IF}{_NAME}\s*(.*)$", text, re.I)
    if not m:
        return {}
    out: dict[str, str | int | float] = {}
    for clause in _ADD_CLAUSE.finditer(m.group(2)):
        name, definition = _unquote(clause.group(1)), clause.group(2)
        if _NOT_COLUMN.match(name) or name.startswith("("):
            continue
        default = re.search(rf"\bDEFAULT\s+({_LITERAL})", definition, re.I)
        if default:
            value = _literal_value(default.group(1))
            if value is not None:
                out[name] = value
        elif re.search(r"\bNOT\s+NULL\b", definition, re.I) and not re.search(
                r"\b(?:AUTO_INCREMENT|AS|GENERATED)\b", definition, re.I):
            if _NUMERIC.match(definition):
                out[name] = 0
            elif _TEXTUAL.match(definition):
                out[name] = ""
    return out
