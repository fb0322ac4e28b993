"""The environment is made of declared dependencies only: every third-party module that binlake,
its tests, its developer tools or its benchmark import is declared in pyproject.toml, and
scripts/setup.sh makes a virtual environment that cannot see the machine's own site packages.

A module found only in the machine's Python would make the suite pass here and fail on a fresh
machine; this finds it without one. Imports written inside code strings (a test's subprocess)
count too."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
import sys
import textwrap
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"protocol", "sinks", "replica", "tests", "bench", "devtools"}
#: Modules whose distribution may not be installed here (the benchmark peer lives in its own
#: venv), so ``packages_distributions`` cannot name it.
KNOWN_DISTRIBUTIONS = {"pymysqlreplication": "mysql-replication", "pymysql": "pymysql"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return _normal(match.group(1))


def declared() -> dict[str, set[str]]:
    """Distribution names per scope: what product code, tests and the benchmark may import."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {_requirement_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    # the Spark readers (sinks/spark) are the product's optional part: the spark extra
    product = runtime | {_requirement_name(r) for r in extras["spark"]}
    test = product | {_requirement_name(r) for r in extras["test"]}
    return {"product": product, "test": test,
            "bench": test | {_requirement_name(r) for r in extras["bench-peer"]}}


def imported_modules(path: Path) -> set[str]:
    """Top-level modules ``path`` imports: import statements, and those of strings that are
    Python code (what a test hands ``python -c``)."""
    return _imports(ast.parse(path.read_text(encoding="utf-8")))


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "import " in node.value:
            try:
                code = ast.parse(textwrap.dedent(node.value))
            except SyntaxError:
                continue  # prose that mentions an import
            # A string may import a module that exists nowhere on purpose (a test of a broken
            # build); only one this machine has can be a hidden dependency.
            names |= {n for n in _imports(code) if importlib.util.find_spec(n) is not None}
    return names


def third_party(names: set[str]) -> set[str]:
    return {n for n in names if n not in FIRST_PARTY and n not in sys.stdlib_module_names
            and not n.startswith("_native")}


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distribution_of(module: str) -> str:
    found = _distributions().get(module)
    if found:
        return _normal(found[0])
    return _normal(KNOWN_DISTRIBUTIONS.get(module, module))


def test_every_imported_module_is_declared() -> None:
    scopes = declared()
    rooms = {"protocol": "product", "sinks": "product", "replica": "product",
             "tests": "test", "devtools": "test", "bench": "bench"}
    undeclared = []
    for room, scope in rooms.items():
        for path in sorted((REPO / room).rglob("*.py")):
            for module in sorted(third_party(imported_modules(path))):
                if distribution_of(module) not in scopes[scope]:
                    undeclared.append(f"{path.relative_to(REPO)}: {module} "
                                      f"(distribution {distribution_of(module)})")
    assert not undeclared, ("imported but not declared in pyproject.toml (dependencies, or the "
                            "test extra): " + "; ".join(undeclared))


def test_imports_inside_strings_are_seen(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    # built from pieces, so that this file itself imports nothing in a string
    probe = "; ".join(["import sys", "import " + "numpy", "from " + "pytest import x",
                       "import " + "binlake_nowhere_at_all"])
    source.write_text(f'code = "{probe}"\n'
                      'text = "the import of nothing, from which import follows"\n')
    assert third_party(imported_modules(source)) == {"numpy", "pytest"}  # not the missing one


def test_setup_makes_an_isolated_venv() -> None:
    """The venv never sees the machine's site packages, and one made with them is made again."""
    script = (REPO / "scripts" / "setup.sh").read_text()
    commands = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in commands if "--system-site-packages" in line]
    assert any("python3 -m venv .venv" in line for line in commands)
    assert "include-system-site-packages = true" in script
