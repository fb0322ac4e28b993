"""A reader of a binlake lake written from docs/lake-format.md alone.

It imports pyarrow and the standard library only — nothing of binlake — so that what it gets
right, the specification says; ``tests/integration/test_lake_format_spec.py`` checks that it
reproduces binlake's own ``read_current_state``. Each step names the rule of the format it
follows. It implements format 1 except two rules a type-matrix lake does not exercise (and says
so, loudly, if a lake needs them): ``ADD COLUMN … DEFAULT`` back-filling and MySQL
``_json_diff`` documents.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow.parquet as pq

#: The highest format this reader implements ("Versions and compatibility").
FORMAT = 1
_ESCAPED = "/\\%\x00"


class FormatError(Exception):
    """The lake is of a format this reader does not implement, or breaks the specification."""


class NotImplementedRule(FormatError):
    """The lake needs a rule of the format this reader leaves out."""


def dir_name(name: str) -> str:
    """"Names": `/`, `\\`, `%`, NUL anywhere and a leading `_` or `.` percent-encoded (UTF-8);
    the empty name is `%00`."""
    def escape(ch: str) -> str:
        return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))

    encoded = "".join(escape(ch) if ch in _ESCAPED else ch for ch in name)
    if encoded[:1] in ("_", "."):
        encoded = escape(encoded[0]) + encoded[1:]
    return encoded or "%00"


def _checked(doc: dict[str, Any], what: str) -> dict[str, Any]:
    """"Versions and compatibility": refuse a higher format, naming both numbers."""
    found = int(doc["format"])
    if found > FORMAT:
        raise FormatError(f"{what} is lake format {found}; this reader implements up to {FORMAT}")
    return doc


def _visible(names: Sequence[str]) -> list[str]:
    """"Layout": entries starting with `_` or `.` are not data."""
    return sorted(n for n in names if not n.startswith(("_", ".")))


def checkpoint(lake: str) -> dict[str, Any]:
    """"The checkpoint"."""
    with open(os.path.join(lake, "_checkpoint.json"), encoding="utf-8") as f:
        return _checked(json.load(f), "_checkpoint.json")


def table_dir(lake: str, database: str, table: str) -> str:
    return os.path.join(lake, dir_name(database), dir_name(table))


def schema_versions(lake: str, database: str, table: str) -> dict[int, dict[str, Any]]:
    """"Schema versions": `_schema/v<N>.json`, by N."""
    directory = os.path.join(table_dir(lake, database, table), "_schema")
    versions = {}
    for name in os.listdir(directory):
        match = re.fullmatch(r"v(\d+)\.json", name)
        if match:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                versions[int(match.group(1))] = _checked(json.load(f), f"{table}/_schema/{name}")
    return dict(sorted(versions.items()))


def data_files(lake: str, database: str, table: str) -> Iterator[tuple[int, str, str]]:
    """"Layout" and "Partitions": (schema version, commit date, path) of every data file."""
    base = table_dir(lake, database, table)
    for version_dir in _visible(os.listdir(base)):
        match = re.fullmatch(r"schema_version=(\d+)", version_dir)
        if not match:
            raise FormatError(f"unexpected entry {version_dir!r} in {base}")
        for date_dir in _visible(os.listdir(os.path.join(base, version_dir))):
            if not date_dir.startswith("commit_date="):
                raise FormatError(f"unexpected entry {date_dir!r} in {version_dir}")
            directory = os.path.join(base, version_dir, date_dir)
            for name in _visible(os.listdir(directory)):
                if re.fullmatch(r"(part-\d{16}|compacted-g\d{8}-\d{16})-\d{3}\.parquet", name):
                    yield int(match.group(1)), date_dir.split("=", 1)[1], \
                        os.path.join(directory, name)


def read_changes(lake: str, database: str, table: str) -> list[dict[str, Any]]:
    """"Reading a table", the change log: every version's rows aligned by column name (a
    column a version lacks is None), in `(_seq, _row)` order, up to the checkpoint read first
    (invariant I5)."""
    upto = int(checkpoint(lake)["seq"])
    versions = schema_versions(lake, database, table)
    names = [c["name"] for doc in versions.values() for c in doc["columns"]]
    columns = list(dict.fromkeys(names))
    rows = []
    for version, date, path in data_files(lake, database, table):
        expected = [c["name"] for c in versions[version]["columns"]]
        found = pq.read_table(path)
        if found.column_names[:len(expected)] != expected:
            raise FormatError(f"{path}: columns {found.column_names} are not v{version}'s")
        for row in found.to_pylist():
            if row["_seq"] > upto:
                continue  # a commit in progress
            aligned = {c: row.get(c) for c in columns}
            aligned.update({k: v for k, v in row.items() if k not in aligned})
            aligned["schema_version"], aligned["commit_date"] = version, date
            rows.append(aligned)
    rows.sort(key=lambda r: (r["_seq"], r["_row"]))
    return rows


def ddl_entries(lake: str, database: str, table: str) -> list[dict[str, Any]]:
    """"The DDL log": the entries naming the table, by `seq`."""
    root = os.path.join(lake, "_ddl")
    entries = []
    for directory in os.listdir(root) if os.path.isdir(root) else []:
        for name in sorted(os.listdir(os.path.join(root, directory))):
            if not name.endswith(".jsonl"):
                continue
            with open(os.path.join(root, directory, name), encoding="utf-8") as f:
                entries += [e for e in map(json.loads, f) if [database, table] in e["tables"]]
    return sorted(entries, key=lambda e: int(e["seq"]))


def current_state(lake: str, database: str, table: str,
                  key: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """"Reading a table", the current state, steps 1–5; rows ordered by key."""
    versions = schema_versions(lake, database, table)
    latest = list(versions.values())[-1]
    key = list(key or latest["primary_key"])
    if not key:
        raise FormatError(f"{database}.{table} has no key: no current state")
    columns = [c["name"] for c in latest["columns"]]
    entries = ddl_entries(lake, database, table)
    reset = max((int(e["seq"]) for e in entries if e["resets_table"]), default=0)  # step 1
    for entry in entries:  # step 2
        if int(entry["seq"]) > reset and re.search(r"\bADD\b.*\bDEFAULT\b", entry["query"],
                                                   re.IGNORECASE | re.DOTALL):
            raise NotImplementedRule(f"ADD COLUMN … DEFAULT back-filling: {entry['query']!r}")
    state: dict[tuple[Any, ...], dict[str, Any]] = {}
    removed: dict[tuple[int, int], dict[str, Any]] = {}  # by the D's (_seq, _row)
    for change in read_changes(lake, database, table):
        if change["_seq"] <= reset:
            continue
        if change.get("_json_diff") is not None:
            raise NotImplementedRule("MySQL partial JSON documents (_json_diff)")
        missing = set(change["_missing"] or ())
        before = change["_before"] or {}
        row_key = tuple(before.get(k) if k in missing else change[k] for k in key)  # step 3
        op = change["_op"]
        if op == "D":
            gone = state.pop(row_key, None)
            if gone is not None:
                removed[(change["_seq"], change["_row"])] = gone
            continue
        if op not in ("I", "U", "R"):
            raise FormatError(f"unknown _op {op!r}")
        if op == "U":
            previous = state.get(row_key, {})
        elif op == "I" and change["_before"] is not None:  # step 4: a key change's I
            previous = removed.get((change["_seq"], change["_row"] - 1), {})
        else:
            previous = {}
        state[row_key] = {c: previous.get(c) if c in missing else change.get(c)
                          for c in columns}
    return [state[k] for k in sorted(state, key=lambda k: tuple(
        (v is None, v) for v in k))]  # step 5
