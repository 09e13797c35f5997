"""The documentation is part of the product: the README's first screen shows the two commands a
newcomer needs; docs/cli.md names every command the CLI has (and none it lacks); every relative
link resolves; and nothing in the repository cites a file that ships outside it. That every
example runs as written is test_doc_snippets.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main

from agentjournal.cli import app

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def test_readme_first_screen_has_the_two_commands() -> None:
    first_screen = README.read_text(encoding="utf-8").splitlines()[:30]
    assert any("make demo" in line for line in first_screen)
    assert any("make test" in line for line in first_screen)


# -- the CLI reference ------------------------------------------------------------------------


def _command_paths(command: Any, prefix: str = "") -> list[str]:
    """Every command and subcommand of the CLI, as typed after `agentjournal`. Groups are found
    by their `commands` (Typer builds on its own copy of click's classes, not click's)."""
    paths = []
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if sub.hidden:
            continue
        path = f"{prefix} {name}".strip()
        paths.append(path)
        paths += _command_paths(sub, path)
    return paths


def _documented_commands(text: str) -> set[str]:
    """The commands docs/cli.md gives a heading: `agentjournal <words> [ARGUMENTS]`."""
    found = set()
    for line in text.splitlines():
        if line.startswith("#"):
            for words in re.findall(
                r"`agentjournal ((?:[a-z][a-z0-9-]*)(?: [a-z][a-z0-9-]*)*)", line
            ):
                found.add(words)
    return found


def test_cli_reference_names_every_command() -> None:
    paths = _command_paths(typer.main.get_command(app))
    # The walk reaches commands and subcommands, so an empty walk cannot pass.
    assert "serve" in paths
    assert "keys create" in paths
    documented = _documented_commands((DOCS / "cli.md").read_text(encoding="utf-8"))
    missing = [path for path in paths if path not in documented]
    assert missing == [], f"docs/cli.md has no heading for: {missing}"
    unknown = sorted(documented - set(paths))
    assert unknown == [], f"docs/cli.md documents commands the CLI does not have: {unknown}"


# -- links and citations ----------------------------------------------------------------------


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def _broken_links(page: Path) -> list[str]:
    # Code blocks hold shell and JSON, not links.
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no such heading)")
    return broken


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda page: page.name)
def test_relative_links_resolve(page: Path) -> None:
    assert _broken_links(page) == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading) [web](https://example.com)\n"
        "[gone](missing.md) [no anchor](there.md#nowhere)\n",
        encoding="utf-8",
    )
    assert _broken_links(page) == [
        "missing.md (no such file)",
        "there.md#nowhere (no such heading)",
    ]


# Written in two parts so that this file does not cite them itself.
FORBIDDEN = ("DESIGN" + ".md", "../" + "shared")
SCANNED = ("README.md", "docs", "src", "bench", "tests")


def _tracked_files() -> list[Path]:
    """The repository's files under SCANNED: git's list in a checkout, else a walk."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", *SCANNED],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8")
        return [ROOT / name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        found = [ROOT / "README.md"]
        for folder in SCANNED[1:]:
            found += [p for p in (ROOT / folder).rglob("*") if "__pycache__" not in p.parts]
        return [p for p in found if p.is_file()]


def _citing_outside(files: list[Path]) -> list[str]:
    offending = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary (the inspector's screenshot), or deleted in the work tree
        hits = [pattern for pattern in FORBIDDEN if pattern in text]
        if hits:
            offending.append(f"{path.relative_to(ROOT)}: {', '.join(hits)}")
    return offending


def test_nothing_cites_files_outside_the_repository() -> None:
    files = _tracked_files()
    assert README in files  # the scan sees the documentation
    assert DOCS / "concepts.md" in files
    offending = _citing_outside(files)
    assert offending == [], "cite files that do not ship with the repository:\n" + "\n".join(
        offending
    )
