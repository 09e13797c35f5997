"""The layout is the architecture: dependencies point inward, and the public surface is exactly
what `__all__` says."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import agentjournal

SRC = Path(agentjournal.__file__).parent

# module -> the agentjournal modules it may import (pure core first, faces last)
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "events": {"errors"},
    "replay": {"errors", "events"},
    "projection": {"events", "replay"},
    "rules": {"errors", "events"},
    "verify": {"events", "projection", "search_text"},
    # What is searchable and how a query reads: pure, shared by both backends and the journal.
    "search_text": {"errors"},
    "search": {"arguments", "backends", "errors", "events", "search_text"},
    "backends": {"events", "projection", "rules", "backends.group_commit", "search_text"},
    "backends.sqlite_search": {"backends.sqlite_index_follower", "search_text"},
    "backends.sqlite_index_follower": set(),
    "backends.group_commit": {"errors"},
    "backends.sqlite": {
        "backends",
        "backends.group_commit",
        "backends.projection_rows",
        "backends.turn_holds",
        "backends.sqlite_index_follower",
        "backends.sqlite_lock",
        "backends.sqlite_rows",
        "backends.sqlite_search",
        "backends.sqlite_wal",
        "backends.sqlite_write",
        "errors",
        "events",
        "projection",
        "search_text",
    },
    "backends.sqlite_rows": {"backends.projection_rows", "errors", "events", "projection"},
    "backends.sqlite_wal": set(),
    "backends.sqlite_lock": {"errors"},
    "backends.sqlite_backup": {"backends.sqlite", "errors"},
    "backends.sqlite_write": {
        "backends",
        "backends.projection_rows",
        "backends.sqlite_lock",
        "backends.sqlite_rows",
        "backends.sqlite_search",
        "backends.sqlite_wal",
        "errors",
        "events",
        "projection",
        "rules",
    },
    "backends.projection_rows": {"events", "projection"},
    "backends.turn_holds": set(),
    "backends.postgres": {
        "backends",
        "backends.group_commit",
        "backends.postgres_roles",
        "backends.projection_rows",
        "backends.turn_holds",
        "backends.postgres_rows",
        "backends.postgres_search",
        "backends.postgres_write",
        "errors",
        "events",
        "projection",
        "search_text",
    },
    "backends.postgres_search": set(),
    "backends.postgres_roles": {"errors"},
    "backends.postgres_rows": {"backends.projection_rows", "errors", "events", "projection"},
    "backends.postgres_write": {
        "backends",
        "backends.group_commit",
        "backends.postgres_rows",
        "backends.projection_rows",
        "errors",
        "events",
        "projection",
        "rules",
        "search_text",
    },
    "appends": {"backends", "errors", "events", "rules"},
    "keys": {"arguments", "backends", "backends.peek", "errors"},
    # Export and import sit on the library's face and append through the same rules.
    "transfer": {"appends", "arguments", "backends", "errors", "events"},
    # Replication: the target's transaction appends through the rules; the verbs `Journal`
    # inherits run it; the replicator itself stands on the journal's face (it opens URLs).
    "replication_apply": {"appends", "arguments", "backends", "errors", "events"},
    "replication_verbs": {
        "arguments",
        "backends",
        "backends.group_commit",
        "errors",
        "replication_apply",
        "task_verbs",
    },
    "replication": {
        "arguments",
        "backends",
        "errors",
        "events",
        "journal",
        "replication_apply",
    },
    "tasks": {"errors", "projection"},
    "arguments": {"errors"},
    # What every verb stands on, then the read verbs, the task verbs; `Journal` (a face) on all.
    "journal_core": {"appends", "arguments", "backends", "errors", "events", "rules"},
    "read_verbs": {
        "arguments",
        "errors",
        "events",
        "journal_core",
        "projection",
        "replay",
        "search",
    },
    "task_verbs": {
        "arguments",
        "backends",
        "errors",
        "events",
        "projection",
        "read_verbs",
        "tasks",
    },
    "backends.urls": {
        "backends",
        "backends.postgres",
        "backends.shared",
        "backends.sqlite",
        "errors",
    },
    # One storage per SQLite file and process: knows the protocol, no backend.
    "backends.shared": {"backends"},
    "backends.peek": {"backends.postgres", "backends.urls", "errors"},
    "backup": {"backends", "backends.sqlite_backup", "backends.urls", "errors"},
    "live": {"events"},
    # The agent runtime sits on the library's face (`Journal`), never on a backend.
    "runtime.agent": {
        "errors",
        "events",
        "journal",
        "projection",
        "runtime.mcp_servers",
        "runtime.mcp_tools",
        "runtime.model_loop",
        "runtime.shapes",
        "runtime.turn_stream",
    },
    "runtime.shapes": {"events"},
    # MCP servers as tools: their specs are plain data; connecting them needs the mcp extra.
    "runtime.mcp_servers": {"errors"},
    "runtime.mcp_tools": {"errors", "runtime.mcp_servers", "runtime.shapes"},
    # Streaming stands on the shapes, not on the loop (which offers it: stream_turn).
    "runtime.model_loop": {"errors", "runtime.shapes", "runtime.streaming"},
    "runtime.turn_stream": {
        "errors",
        "events",
        "journal",
        "runtime.model_loop",
        "runtime.shapes",
        "runtime.streaming",
    },
    "runtime.models": {"errors", "runtime.agent", "runtime.openai_model", "runtime.streaming"},
    "runtime.streaming": {"runtime.shapes"},
    "runtime.sdk_clients": {"errors", "runtime.shapes", "runtime.streaming"},
    "runtime.openai_model": {"errors", "runtime.agent", "runtime.sdk_clients", "runtime.streaming"},
    "runtime.anthropic_model": {
        "errors",
        "replay",
        "runtime.agent",
        "runtime.sdk_clients",
        "runtime.streaming",
    },
    "runtime.resume": {"errors", "journal", "runtime.agent"},
    "runtime.worker": {"errors", "journal", "projection", "tasks"},
    "runtime": {
        "runtime.agent",
        "runtime.anthropic_model",
        "runtime.mcp_servers",
        "runtime.model_loop",
        "runtime.models",
        "runtime.shapes",
        "runtime.resume",
        "runtime.streaming",
        "runtime.turn_stream",
        "runtime.worker",
    },
    # The demo is a user of the runtime's face; only its runner talks to the journal itself.
    "demo.order_agent": {"runtime"},
    "demo.run": {"demo.order_agent", "events", "journal"},
    # Integrations sit on the library's face, like the runtime; the item mapping stays pure.
    "integrations": set(),
    "integrations.responses": {"errors", "events"},
    "integrations.known_state": {"events", "integrations.responses"},
    "integrations.langgraph_events": {"errors", "events"},
    "integrations.langgraph_store": {
        "errors",
        "events",
        "integrations.langgraph_events",
        "journal",
    },
    "integrations.langgraph": {
        "aio",
        "errors",
        "events",
        "integrations.langgraph_events",
        "integrations.langgraph_store",
        "journal",
    },
    "integrations.openai_agents": {
        "aio",
        "errors",
        "events",
        "integrations.known_state",
        "integrations.responses",
        "integrations.worker",
        "journal",
        "replay",
    },
    "integrations.pydantic_ai_events": {"events", "replay"},
    "integrations.pydantic_ai": {
        "aio",
        "errors",
        "events",
        "integrations.pydantic_ai_events",
        "integrations.worker",
        "journal",
        "replay",
    },
    "integrations.worker": {"aio", "errors", "journal"},
    "integrations.pydantic_ai_records": {
        "errors",
        "integrations.pydantic_ai",
        "integrations.pydantic_ai_events",
        "projection",
    },
    "integrations.pydantic_ai_store": {
        "aio",
        "errors",
        "events",
        "integrations.pydantic_ai",
        "integrations.pydantic_ai_events",
        "integrations.pydantic_ai_records",
        "integrations.worker",
        "journal",
        "projection",
    },
    "integrations.adk_events": {"events"},
    "integrations.adk_store": {"errors", "events", "integrations.adk_events", "journal"},
    "integrations.adk": {
        "aio",
        "errors",
        "events",
        "integrations.adk_events",
        "integrations.adk_store",
        "integrations.worker",
        "journal",
    },
    # The MCP server sits on the library's face; its transports serve it over stdio and HTTP.
    "mcp": {"aio", "mcp.resources", "mcp.tools"},
    "mcp.tools": {"aio", "errors", "events", "projection"},
    "mcp.resources": {"aio", "errors", "mcp.tools"},
    "mcp.transports": {"aio", "mcp"},
    # OpenTelemetry export: the fold and the span mapping are pure; the exporter and its
    # checkpoint sit on the library's face.
    "otel": set(),
    "otel.turns": {"events"},
    "otel.spans": {"events", "otel.turns"},
    "otel.checkpoint": {"arguments", "errors", "journal", "otel.turns"},
    "otel.exporter": {
        "errors",
        "events",
        "journal",
        "otel.checkpoint",
        "otel.spans",
        "otel.turns",
    },
    "otel.background": {"errors", "journal", "otel.exporter"},
}
# The pure modules touch no I/O: no database driver, no threads, no files.
PURE = {
    "errors",
    "events",
    "replay",
    "projection",
    "rules",
    "verify",
    "appends",
    "tasks",
    "arguments",
    "live",
    "integrations.responses",
    "integrations.known_state",
    "integrations.langgraph_events",
    "integrations.pydantic_ai_events",
    "integrations.adk_events",
    "otel.turns",
    "otel.spans",
}
# The faces may import any module. aio_verbs is the half of `AsyncJournal` that
# scripts/gen_aio.py writes from `Journal`: it imports whatever Journal's signatures name.
FACES = {"", "journal", "aio", "aio_verbs", "demo", "cli"}
IMPURE_STDLIB = {"sqlite3", "threading", "asyncio", "os", "subprocess", "socket", "pathlib"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


def imports_of(path: Path) -> tuple[set[str], set[str]]:
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "agentjournal":
            names = [
                f"agentjournal.{alias.name}" for alias in node.names
            ]  # from agentjournal import x
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            if name == "agentjournal" or name.startswith("agentjournal."):
                ours.add(name.removeprefix("agentjournal").lstrip("."))
            else:
                others.add(name.split(".")[0])
    return ours, others


def source_of(module: str) -> Path:
    path = SRC / (module.replace(".", "/") + ".py")
    return path if path.exists() else SRC / module.replace(".", "/") / "__init__.py"


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_dependencies_point_inward(module: str) -> None:
    ours, others = imports_of(source_of(module))
    assert ours <= ALLOWED[module], f"{module} imports {sorted(ours - ALLOWED[module])}"
    if module in PURE:
        assert not others & IMPURE_STDLIB, f"{module} does I/O: {sorted(others & IMPURE_STDLIB)}"


def test_no_module_imports_itself_through_others() -> None:
    # The faces may import anything, so the rules alone would let a module import a face that
    # imports it back (as the task verbs once imported `Journal`, which inherits them).
    library = set(ALLOWED) | FACES - {"cli"}  # cli's own `from agentjournal.cli import` is no cycle
    imported = {module: imports_of(source_of(module))[0] & library for module in library}

    def path_back(start: str) -> list[str] | None:
        paths = [[start, nxt] for nxt in sorted(imported[start])]
        seen: set[str] = set()
        while paths:
            path = paths.pop()
            if path[-1] == start:
                return path
            if path[-1] not in seen:
                seen.add(path[-1])
                paths += [[*path, nxt] for nxt in sorted(imported[path[-1]])]
        return None

    cycles = [" -> ".join(path) for m in sorted(library) if (path := path_back(m)) is not None]
    assert not cycles, f"import cycles: {cycles}"


def test_every_module_is_covered_by_the_rules_or_is_a_face() -> None:
    modules = {
        module_name(p)
        for p in SRC.rglob("*.py")
        if not {"server", "cli", "inspector"} & set(p.relative_to(SRC).parts)
    }
    assert modules - FACES == set(ALLOWED)


def test_all_lists_exactly_the_public_names() -> None:
    # Submodules show up as attributes once anything imports them; they are not the API.
    public = {
        name
        for name, value in vars(agentjournal).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == set(agentjournal.__all__)


def test_every_error_is_a_journal_error_and_exported() -> None:
    from agentjournal import errors

    for name in errors.__all__:
        error = getattr(errors, name)
        assert issubclass(error, agentjournal.JournalError)
        assert name in agentjournal.__all__
        assert name in (errors.__doc__ or "")


def test_the_server_reaches_the_journal_only_through_its_faces() -> None:
    # the runtime is a face too: the server hosts an agent through it; the inspector is static
    # files the server mounts
    allowed = {
        "aio",
        "journal",
        "keys",
        "errors",
        "events",
        "projection",
        "runtime",
        "search",  # the hit and page types `Journal.search` returns
        "mcp",  # /mcp: the MCP server, mounted behind the service's keys
        "server",
        "inspector",
    }
    for path in (SRC / "server").glob("*.py"):
        ours, _ = imports_of(path)
        outside = {name for name in ours if name.split(".")[0] not in allowed}
        assert not outside, f"server/{path.name} imports {sorted(outside)}"


# Feed positions are opaque outside the backends (their format is each backend's own): code
# orders them by `Journal.position_key`, never as numbers or as text. A position enters code as
# `.position`, `.last_position` or a name holding "position", and goes back to the journal as the
# `after=` of a feed verb; a conversion at either end is what the rule below refuses.
_FEED_VERBS = {"events_all", "subscribe_all", "feed_head", "committed_events", "export_lines"}
_ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _names_a_position(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr.endswith("position")) or (
        isinstance(node, ast.Name) and "position" in node.id
    )


def _builds_a_string(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.JoinedStr)
        or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod))
        or (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Name) and node.func.id in {"str", "repr", "format"})
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "format")
            )
        )
    )


def position_misuses(source: str) -> list[str]:
    """Where `source` reads a position as a number, compares positions themselves, or makes a
    feed cursor out of a number: `line: code` for each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        bad = False
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in {"int", "float"}:
                bad = any(_names_a_position(part) for arg in node.args for part in ast.walk(arg))
            elif name in _FEED_VERBS:
                cursors = [kw.value for kw in node.keywords if kw.arg == "after"]
                bad = any(_builds_a_string(cursor) for cursor in cursors)
        elif isinstance(node, ast.Compare):
            ordered = any(isinstance(op, _ORDERING) for op in node.ops)
            bad = ordered and any(map(_names_a_position, [node.left, *node.comparators]))
        if bad and isinstance(node, ast.expr):
            found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


@pytest.mark.parametrize(
    "code",
    [
        "key = int(event.position)",
        "page = read(int(session.last_position) + 1)",
        "newer = [e for e in page if float(e.position) > 3]",
        "if event.position <= last_position: pass",
        "page = journal.events_all(after=str(cursor), limit=10)",
        "stream = journal.subscribe_all(after=f'{cursor}')",
    ],
)
def test_the_position_rule_refuses_numbers_and_text_order(code: str) -> None:
    assert position_misuses(code), f"the rule lets {code!r} through"


def test_only_the_backends_know_what_a_position_is_made_of() -> None:
    misuses = {
        str(path.relative_to(SRC)): found
        for path in sorted(SRC.rglob("*.py"))
        if "backends" not in path.relative_to(SRC).parts
        and (found := position_misuses(path.read_text(encoding="utf-8")))
    }
    assert not misuses, f"positions read as numbers or text outside the backends: {misuses}"


def test_importing_agentjournal_imports_no_framework() -> None:
    # A fresh interpreter: this one has imported the integrations' frameworks for other tests.
    code = (
        "import sys, agentjournal, agentjournal.journal, agentjournal.aio, agentjournal.cli;"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'langgraph', 'langchain_core', 'agents', 'openai', 'mcp', 'google'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


# `Journal` is written in four modules (`JournalCore`, the read verbs, the task verbs, itself);
# with its async twin and the backends they are the only code that may hold a storage.
STORAGE_HOLDERS = {
    "journal",
    "journal_core",
    "read_verbs",
    "task_verbs",
    "replication_verbs",
    "aio",
    "aio_verbs",
}


def storage_uses(path: Path) -> list[int]:
    """The lines of `path` that read an attribute named `storage` (`journal.storage`, ...)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "storage"
    )


def test_only_the_journal_and_the_backends_touch_a_storage() -> None:
    # The edges (CLI, server, runtime, integrations, export and import) go through the façade's
    # verbs; a verb they need belongs on `Journal`, not in a reach past it.
    uses = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if module_name(path) not in STORAGE_HOLDERS
        and path.relative_to(SRC).parts[0] != "backends"
        and (lines := storage_uses(path))
    }
    assert uses == {}, f"reach past Journal to its storage: {uses}"
    assert storage_uses(SRC / "journal.py"), "the scan must see what it looks for"


def test_the_cli_imports_no_backend_module() -> None:
    found = {
        path.name: sorted(m for m in imports_of(path)[0] if m.split(".")[0] == "backends")
        for path in sorted((SRC / "cli").glob("*.py"))
    }
    assert {name: mods for name, mods in found.items() if mods} == {}


def test_every_test_module_has_a_name_of_its_own() -> None:
    """pytest imports test modules by their file name (tests/ has no packages), so a second
    test_http.py anywhere under tests/ shadows the first, and modules importing from it break."""
    tests = Path(__file__).parent
    names: dict[str, list[str]] = {}
    for path in tests.rglob("*.py"):
        if path.name != "conftest.py" and "__pycache__" not in path.parts:
            names.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
