"""The user documentation (README.md and docs/) holds together: every relative link reaches a
file and every ``#anchor`` a heading of it, and no page names what only a developer of binlake
could look up (commit hashes, issue numbers, test files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def test_the_documents_exist() -> None:
    names = {p.name for p in USER_DOCS}
    assert {"README.md", "configuration.md", "lake-format.md", "operations.md",
            "benchmarks.md"} <= names


def test_slug_follows_github() -> None:
    assert slug("Why the two flavors differ") == "why-the-two-flavors-differ"
    assert slug("`[server]`") == "server"
    assert slug("Offline: `binlake decode`") == "offline-binlake-decode"
    assert slug("R rows' metadata") == "r-rows-metadata"


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: — not checked offline
            continue
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target}: no file {destination}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


#: Words that look like abbreviated commit hashes but are not.
_NOT_HASHES = frozenset({"ed25519"})
_DEVELOPER_ONLY = [
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"), "a commit hash"),
    (re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w&])#\d+\b"), "an issue number"),
    (re.compile(r"\btest_\w+\.py\b|\btests/(unit|integration)/"), "a test file"),
]


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_developer_references(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [f"{what}: {match.group(0)!r}" for pattern, what in _DEVELOPER_ONLY
             for match in pattern.finditer(text) if match.group(0) not in _NOT_HASHES]
    assert not found, f"{page.name} names what only binlake's developers can look up: {found}"


def test_operations_lists_every_command_and_exit_code() -> None:
    """docs/operations.md is the operator's one home of the commands and the exit codes: it
    names every subcommand and explains exactly the codes replica.cli exits with."""
    from replica import cli

    text = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    commands = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    assert {name for name in cli.COMMANDS if f"binlake {name}" not in commands} == set()
    codes = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", codes, re.MULTILINE)}
    assert documented == {cli.EXIT_OK, cli.EXIT_FAILURE, cli.EXIT_USAGE, cli.EXIT_PERMANENT,
                          cli.EXIT_LAKE, cli.EXIT_INTERRUPTED}
