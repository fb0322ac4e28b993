"""The rooms hold (ARCHITECTURE.md): protocol ← sinks ← replica, no import cycles, no dev tooling
in the product. Read from the source (every import statement, module-level, lazy inside a
function or under TYPE_CHECKING), so a violation fails here before it can hide in a code path
no test runs."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("protocol", "sinks", "replica")

#: What each room must not import (top-level package names).
FORBIDDEN = {
    # sans-I/O: bytes in, typed events out; no event loop, sockets, TLS or processes
    "protocol": {"sinks", "replica", "devtools", "trio", "socket", "ssl", "selectors",
                 "asyncio", "subprocess"},
    # landing knows protocol's types, never the daemon or its I/O
    "sinks": {"replica", "devtools", "trio", "socket", "ssl", "asyncio"},
    "replica": {"devtools"},
}
#: The one documented exception: `binlake demo` needs a sandbox server from a checkout's
#: developer tools, imported inside the function that starts it (never at import time).
ALLOWED = {("replica.commands.demo", "devtools.sandbox")}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import statement of a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(node) for node in ast.iter_child_nodes(tree)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                out.append((submodule if submodule in MODULES else target, node.lineno,
                            id(node) in top_level))
    return out


def test_the_walk_sees_the_product() -> None:
    assert {"protocol.packets", "protocol.binlog.stream", "sinks.parquet.writer",
            "replica.cli", "replica.core.daemon", "replica.commands.demo"} <= set(MODULES)
    imported = {target for target, _, _ in _imports("replica.core.daemon",
                                                    MODULES["replica.core.daemon"])}
    assert "sinks.factory" in imported and "trio" in imported


def test_no_import_cycles() -> None:
    graph = {module: sorted({target for target, _, _ in _imports(module, path)
                             if target in MODULES and target != module})
             for module, path in MODULES.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in graph[module]:
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module)
    assert cycles == [], "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


@pytest.mark.parametrize("room", PRODUCT)
def test_each_room_imports_only_what_it_may(room: str) -> None:
    violations = []
    for module, path in MODULES.items():
        if module.split(".")[0] != room:
            continue
        for target, line, top in _imports(module, path):
            if target.split(".")[0] not in FORBIDDEN[room]:
                continue
            if (module, target) in ALLOWED and not top:
                continue
            violations.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert violations == []


#: What the daemon core may import of ``sinks``: the contract and the factory, so that the sink
#: behind them can change (another format, another store) without touching the daemon.
CORE_MAY_USE = {"sinks.contract", "sinks.factory"}


def test_the_core_lands_through_the_contract_only() -> None:
    violations = []
    for module, path in MODULES.items():
        if not module.startswith("replica.core"):
            continue
        for target, line, _ in _imports(module, path):
            if target.split(".")[0] == "sinks" and target not in CORE_MAY_USE:
                violations.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert violations == []


def test_no_replica_code_reads_a_sinks_stats_by_key() -> None:
    """A sink's counters are a typed record (``sinks.contract.SinkStats``) read by attribute:
    ``….stats[...]`` anywhere in ``replica`` is a string-keyed read that a renamed counter
    would silently break."""
    violations = []
    for module, path in MODULES.items():
        if not module.startswith("replica"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "stats"):
                violations.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert violations == []


#: What the subcommands may import of ``sinks``: its public entry points — the contract and its
#: errors, the lake's status, compaction, the Spark readers, the Open Protocol encoder, the
#: column rules (decode prints rows as the lake lands them), opening a lake's object store
#: and probing it (check), and leaving a snapshot request there (snapshot) — never the sink's
#: insides (layout, DDL log, staged pieces, the writer).
COMMANDS_MAY_USE = {"sinks.contract", "sinks.errors", "sinks.parquet.status",
                    "sinks.parquet.compact", "sinks.openprotocol", "sinks.transform",
                    "sinks.objectstore.s3", "sinks.objectstore.probe",
                    "sinks.objectstore.compact", "sinks.objectstore.status",
                    "sinks.objectstore.requests"}
COMMANDS_MAY_USE_UNDER = ("sinks.spark",)


def test_the_commands_use_the_sinks_public_entry_points_only() -> None:
    violations = []
    for module, path in MODULES.items():
        if not module.startswith("replica.commands"):
            continue
        for target, line, _ in _imports(module, path):
            if target.split(".")[0] != "sinks" or target in COMMANDS_MAY_USE:
                continue
            if target.startswith(COMMANDS_MAY_USE_UNDER):
                continue
            violations.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert violations == []


def test_the_demo_imports_the_sandbox_lazily() -> None:
    """The exception above stays an exception: only inside a function, and only there."""
    uses = [(line, top) for target, line, top in _imports(
        "replica.commands.demo", MODULES["replica.commands.demo"]) if target.startswith("devtools")]
    assert uses and not any(top for _, top in uses)


def test_every_module_says_its_job_in_one_line() -> None:
    """A newcomer reads a module's first docstring line to know what it is for: every product
    and devtools module has one, and it stands alone (a summary line, then a blank line)."""
    missing = []
    for path in sorted([*MODULES.values(), *(ROOT / "devtools").rglob("*.py")]):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        lines = (doc or "").splitlines()
        if not lines or not lines[0].strip() or (len(lines) > 1 and lines[1].strip()):
            missing.append(os.fspath(path.relative_to(ROOT)))
    assert missing == []


def _lake_words() -> list[str]:
    """What only the lake knows: its metadata columns' names (read from the sink's schema, the
    one list of them) and the words that name the landing side."""
    from sinks.parquet.schema import METADATA_NAMES  # noqa: PLC0415

    return sorted(METADATA_NAMES) + ["parquet", "lake", "sink", "sinks", "landing", "landed"]


def test_the_protocol_rooms_c_names_no_lake_concept() -> None:
    """The layering holds in C too: a native extension under ``protocol/`` decodes bytes into
    typed values and buffers; the lake's metadata columns, its files and the sink's choices are
    the business of ``sinks/`` (its C included), so no C source of protocol names them — not in
    code, strings or comments — and none includes a header from another room."""
    words = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, _lake_words())) + r")(?![\w])",
                       re.IGNORECASE)
    found = []
    sources = sorted((ROOT / "protocol").rglob("*.c"))
    assert sources, "no C sources found under protocol/"
    for path in sources:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            name = os.fspath(path.relative_to(ROOT))
            if words.search(line) or re.search(r'#include\s+"(?:\.\./)*(?:sinks|replica)/',
                                                  line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []
