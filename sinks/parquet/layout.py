"""Where things live in the lake. The only module that spells out paths.

::

    <lake>/_checkpoint.json                        every transaction up to here is landed
    <lake>/_commit.json                            roll-forward record of a commit in progress
    <lake>/_lock                                   the writer's flock (one writer per lake)
    <lake>/_binlake_demo_lake                      marks a lake `binlake demo` made (and may replace)
    <lake>/_snapshot_requests/<id>.json            `binlake snapshot` asks the running daemon
    <lake>/_staging/                               files being written (emptied at start)
    <lake>/_staging/tree-<k>/                      a new directory being built (trees.py)
    <lake>/_xa/xa-<seq>-<k>.arrow                  rows of XA transactions prepared, not yet ended
    <lake>/_ddl/<db>/ddl-<first seq>.jsonl         the DDL log, one file per commit that had DDL
                                                   (<db> = _no_database for DDL without one)
    <lake>/<db>/<table>/_schema/v<N>.json          schema version N of the table
    <lake>/<db>/<table>/schema_version=<N>/commit_date=<YYYY-MM-DD>/part-<first seq>-<k>.parquet
    <lake>/<db>/<table>/schema_version=<N>/commit_date=<YYYY-MM-DD>/compacted-g<gen>-<first seq>-<k>.parquet
    <lake>/<db>/<table>/_state/seq=<S>/                 materialised current state as of _seq S
    <lake>/<db>/<table>/_state/seq=<S>/_covered.json    change files whose rows are all <= S
    <lake>/<db>/<table>/_compacted/g<gen>-<N>-<date>.json  the daemon files a compaction replaced
    <lake>/<db>/<table>/_retention.json                 the largest _seq retention removed
    <lake>/_publish.lock, _compact.lock                 see sinks/parquet/compact.py
    <lake>/_compact.json, _compact_staging/, _compacted_trash/   compaction's own commit files
    <lake>/_pins/<made>-<id>/<db>/<table>/…            hard links a reader's DataFrame reads
                                                   (sinks/parquet/pins.py)

Everything that is not data starts with ``_``, which Spark skips when it lists a directory
(:func:`is_hidden`). Code elsewhere (the commands, the Spark readers) names these paths through
this module, never by spelling them.
Database and table names are used verbatim except for characters a path or Spark would read
differently (``/``, ``\\``, ``%``, NUL, and a leading ``_`` or ``.``), which are
percent-encoded: a table called ``_audit`` lives in ``%5Faudit``.
"""

from __future__ import annotations

import functools
import posixpath
from urllib.parse import unquote

CHECKPOINT = "_checkpoint.json"
MANIFEST = "_commit.json"
LOCK = "_lock"
STAGING = "_staging"
DDL_DIR = "_ddl"
XA_DIR = "_xa"
SCHEMA_DIR = "_schema"
STATE_DIR = "_state"
PUBLISH_LOCK = "_publish.lock"
COMPACT_LOCK = "_compact.lock"
COMPACT_MANIFEST = "_compact.json"
COMPACT_GENERATION = "_compact_generation.json"
COMPACT_STAGING = "_compact_staging"
COMPACT_TRASH = "_compacted_trash"
COMPACTION_LOG = "_compacted"
RETENTION_RECORD = "_retention.json"
STATE_STAGING = "_state_staging"
DEMO_MARKER = "_binlake_demo_lake"
SNAPSHOT_REQUESTS_DIR = "_snapshot_requests"
TYPES_RECORD = "_types.json"  # the [types] choices the lake was created with (type_record.py)
DATA_SUFFIX = ".parquet"
VERSION_PREFIX = "schema_version="
DATE_PREFIX = "commit_date="
STATE_PREFIX = "seq="
#: In a ``_state/seq=S/`` directory: the change files whose rows are all at or before S.
STATE_COVERED = "_covered.json"
PINS_DIR = "_pins"

#: Data files the daemon writes, and those compaction writes: readers tell them apart by name.
ORIGINAL_PREFIX = "part-"
COMPACTED_PREFIX = "compacted-g"

_ALWAYS_ESCAPED = frozenset("/\\%\x00")


def dir_name(name: str) -> str:
    """A database or table name as a directory name (see the module docstring)."""
    if name and name[0] not in "_." and _ALWAYS_ESCAPED.isdisjoint(name):
        return name  # the usual name, kept as it is: no loop per character (a dozen per table)
    out = []
    for i, ch in enumerate(name):
        if ch in _ALWAYS_ESCAPED or (i == 0 and ch in "_."):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out) or "%00"


def name_of_dir(directory: str) -> str:
    """The database or table name a directory holds (the inverse of :func:`dir_name`)."""
    return unquote(directory)


def is_hidden(name: str) -> bool:
    """Not data: a file or directory that Spark skips when it lists the lake."""
    return name.startswith(("_", "."))


def is_data_file(name: str) -> bool:
    return name.endswith(DATA_SUFFIX) and not is_hidden(name)


def table_dir(database: str, table: str) -> str:
    # Spelled as posixpath.join would (no name is empty or starts with "/": see dir_name),
    # without its checks: every new table names its directory several times.
    return f"{dir_name(database)}/{dir_name(table)}"


def version_dir(version: int) -> str:
    """The partition directory of a schema version, under the table's directory."""
    return f"{VERSION_PREFIX}{version}"


def schema_file_name(version: int) -> str:
    """A schema version's file name, under the table's ``_schema`` directory."""
    return f"v{version}.json"


def schema_version_of(file_name: str) -> int | None:
    """The version a ``_schema`` file name holds; None for any other name."""
    if file_name.startswith("v") and file_name.endswith(".json") and file_name[1:-5].isdigit():
        return int(file_name[1:-5])
    return None


def schema_file(database: str, table: str, version: int) -> str:
    return f"{table_dir(database, table)}/{SCHEMA_DIR}/{schema_file_name(version)}"


def date_dir(commit_date: str) -> str:
    """The partition directory of a commit date, under a schema version's directory."""
    return f"{DATE_PREFIX}{commit_date}"


def is_version_dir(name: str) -> bool:
    return name.startswith(VERSION_PREFIX)


def is_date_dir(name: str) -> bool:
    return name.startswith(DATE_PREFIX)


def date_of_dir(name: str) -> str:
    """``YYYY-MM-DD`` of a ``commit_date=`` directory name."""
    return name[len(DATE_PREFIX):]


def part_file(database: str, table: str, version: int, commit_date: str, first_seq: int,
              index: int) -> str:
    """A data file's name: unique because ``first_seq`` only grows from commit to commit."""
    return (f"{table_dir(database, table)}/{version_dir(version)}/{date_dir(commit_date)}"
            f"/part-{first_seq:016d}-{index:03d}{DATA_SUFFIX}")


#: Staged trees: ``_staging/tree-<k>``, renamed whole onto a directory new to the lake.
STAGED_TREE_PREFIX = f"{STAGING}/tree-"


def staged_tree(count: int) -> str:
    """A new directory being built in staging, until a commit renames it into the lake."""
    return f"{STAGED_TREE_PREFIX}{count}"


def staged_file(count: int) -> str:
    """A Parquet file being written, in staging until a commit renames it to its part file."""
    return f"{STAGING}/part-{count:08d}{DATA_SUFFIX}"


def staged_schema(count: int) -> str:
    """A schema version's file being written, in staging until a commit renames it."""
    return f"{STAGING}/schema-{count:08d}.json"


def _staged(stem: str, suffix: str, count: int) -> str:
    return f"{STAGING}/{stem}-{count:08d}{suffix}"


#: A flush's DDL log file for one database, in staging until a commit renames it.
staged_ddl = functools.partial(_staged, "ddl", ".jsonl")
#: A prepared XA part's rows of one table version, until a commit moves it to ``_xa``.
staged_xa = functools.partial(_staged, "xa", ".arrow")
#: An open transaction's rows of one table version, spilled (Arrow IPC); never committed.
staged_spill = functools.partial(_staged, "spill", ".arrow")
#: A piece of a snapshot chunk read but not landed yet (Arrow IPC; see ``pieces.py``).
staged_piece = functools.partial(_staged, "snapshot", ".arrow")


#: The DDL log's directory for statements run without a default database that name none
#: (CREATE USER, GRANT …): a leading ``_`` is escaped in real names, so it cannot collide.
NO_DATABASE = "_no_database"


def ddl_file(database: str, first_seq: int) -> str:
    directory = dir_name(database) if database else NO_DATABASE
    return posixpath.join(DDL_DIR, directory, f"ddl-{first_seq:016d}.jsonl")


def xa_file(seq: int, index: int) -> str:
    """A prepared XA part's rows (one file per table version): ``seq`` is the prepare's."""
    return posixpath.join(XA_DIR, f"xa-{seq:016d}-{index:03d}.arrow")


def compacted_file(partition: str, generation: int, first_seq: int, index: int) -> str:
    """A compacted file's name: unique because no two compactions share a generation."""
    return posixpath.join(partition,
                          f"{COMPACTED_PREFIX}{generation:08d}-{first_seq:016d}-{index:03d}"
                          f"{DATA_SUFFIX}")


def is_original(name: str) -> bool:
    """A file the daemon landed (not yet replaced by compaction)."""
    return name.startswith(ORIGINAL_PREFIX) and name.endswith(DATA_SUFFIX)


def compacted_generation(name: str) -> int | None:
    """The compaction generation of a compacted file's name; ``None`` for any other file."""
    if not (name.startswith(COMPACTED_PREFIX) and name.endswith(DATA_SUFFIX)):
        return None
    digits = name[len(COMPACTED_PREFIX):].split("-", 1)[0]
    return int(digits) if digits.isdigit() else None


def compaction_record(partition: str, generation: int) -> str:
    """``<db>/<table>/_compacted/g<gen>-<version>-<date>.json``: which daemon files one
    compaction replaced in one partition (``stream_changes`` checks a query had read them)."""
    db, table, version, date = partition.split("/")
    return posixpath.join(db, table, COMPACTION_LOG, f"{generation_dir(generation)}-"
                          f"{version.split('=', 1)[1]}-{date.split('=', 1)[1]}.json")


def generation_dir(generation: int) -> str:
    """One compaction's directory under ``_compact_staging/`` and ``_compacted_trash/``."""
    return f"g{generation:08d}"


def retired_dir(stamp: int) -> str:
    """One retention run's directory under ``_compacted_trash/``."""
    return f"retired-{stamp}"


def compact_staged(generation: int, partition: str) -> str:
    """Where compaction builds a partition's new directory."""
    return posixpath.join(COMPACT_STAGING, generation_dir(generation), partition)


def compact_trashed(generation: int, partition: str) -> str:
    """Where a partition's replaced directory waits out the grace period."""
    return posixpath.join(COMPACT_TRASH, generation_dir(generation), partition)


def state_dir_name(seq: int) -> str:
    """A materialised state's directory name, under the table's ``_state``."""
    return f"{STATE_PREFIX}{seq}"


def state_seq_of(name: str) -> int | None:
    """The ``_seq`` a ``_state`` directory name is as of; None for any other name."""
    digits = name[len(STATE_PREFIX):]
    return int(digits) if name.startswith(STATE_PREFIX) and digits.isdigit() else None


def state_dir(database: str, table: str, seq: int) -> str:
    return posixpath.join(table_dir(database, table), STATE_DIR, state_dir_name(seq))


def first_seq_of(name: str) -> int | None:
    """The first ``_seq`` a data file's name gives (its rows are at or after it); ``None`` for
    a name binlake did not make."""
    if not name.endswith(DATA_SUFFIX):
        return None
    if name.startswith(ORIGINAL_PREFIX):
        digits = name[len(ORIGINAL_PREFIX):].split("-", 1)[0]
    elif name.startswith(COMPACTED_PREFIX):
        parts = name[len(COMPACTED_PREFIX):].split("-")
        digits = parts[1] if len(parts) > 2 else ""
    else:
        return None
    return int(digits) if digits.isdigit() else None
