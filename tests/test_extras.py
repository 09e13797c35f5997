"""`pip install agentjournal` without extras: the library and the CLI's journal commands work,
and a command that needs an extra says which one to install instead of printing a traceback.

No extra can be uninstalled from the test environment, so a child interpreter hides them: a
`sys.meta_path` finder, installed before anything is imported, refuses every module an extra
brings (the integrations' frameworks included), the way a missing package would. Everything the
child sees is reported back as one JSON document and checked here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

BLOCKED = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sse_starlette",
    "prometheus_client",
    "httpx",
    "httpx_sse",
    "httptools",
    "uvloop",
    "psycopg",
    "psycopg_pool",
    "agents",
    "langgraph",
    "openai",
    "anthropic",
    "mcp",
    "mcp_types",
    "pydantic_ai",
    "google",
    "opentelemetry",
)

CHILD = r"""
import contextlib, importlib.abc, io, json, sys

BLOCKED = frozenset(sys.argv[2].split(","))
refused = []


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            refused.append(name)
            raise ImportError(f"No module named {name!r} (blocked: not installed)", name=name)
        return None


already = sorted(BLOCKED & {m.partition(".")[0] for m in sys.modules})
sys.meta_path.insert(0, NotInstalled())
report = {"already_imported": already}

try:
    import fastapi  # noqa: F401  the blocker must work, or the rest proves nothing
except ImportError:
    report["blocker_works"] = True
else:
    report["blocker_works"] = False

import agentjournal
import agentjournal.runtime  # the runtime imports without any extra; its models ask for theirs
from agentjournal import Journal
from agentjournal.cli import main

db = sys.argv[1]
with Journal.open(db) as journal:
    session = journal.create_session("no extras").session_id
    journal.append(session, "user_message", {"content": "你好"})
    journal.append(session, "assistant_message", {"content": "你好！"})
    report["session"] = session
    report["replay"] = journal.replay(session)
    report["events"] = [e.type for e in journal.events(session)]

try:
    Journal.open("postgresql://127.0.0.1:1/none")
except agentjournal.JournalError as exc:
    report["postgres_error"] = [type(exc).__name__, str(exc)]
except BaseException as exc:
    report["postgres_error"] = ["not a JournalError: " + type(exc).__name__, str(exc)]

for name in ("OpenAIChatModel", "AnthropicModel"):
    try:
        getattr(agentjournal.runtime, name)("some-model", api_key="k")
    except agentjournal.JournalError as exc:
        report[name] = [type(exc).__name__, str(exc)]
    except BaseException as exc:
        report[name] = ["not a JournalError: " + type(exc).__name__, str(exc)]

try:  # an agent's MCP servers need the SDK's client: asking for them names the extra
    agentjournal.runtime.Agent(
        agentjournal.runtime.ScriptedModel({}, "hi"),
        mcp_servers=[agentjournal.runtime.MCPServer("files", command="files-server")],
    )
except agentjournal.JournalError as exc:
    report["mcp_servers"] = [type(exc).__name__, str(exc)]
except BaseException as exc:
    report["mcp_servers"] = ["not a JournalError: " + type(exc).__name__, str(exc)]


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["agentjournal", *args]
    code = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # a traceback is what must not happen: report it
            import traceback

            err.write("Traceback (most recent call last):\n" + traceback.format_exc())
            code = "raised " + type(exc).__name__
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


export = db + ".jsonl"
report["cli"] = {
    "sessions": cli("sessions", "--db", db, "--json"),
    "show": cli("show", session, "--db", db, "--json"),
    "replay": cli("replay", session, "--db", db, "--json"),
    "verify": cli("verify", "--db", db, "--json"),
    "export": cli("export", export, "--db", db),
    "import": cli("import", export, "--db", db + ".copy", "--json"),
    "keys create": cli("keys", "create", "--tenant", "acme", "--db", db),
    "keys list": cli("keys", "list", "--db", db, "--json"),
    "serve": cli("serve", "--db", db, "--port", "1"),
    "demo": cli("demo"),
    "sessions on postgresql": cli("sessions", "--db", "postgresql://127.0.0.1:1/none"),
    "otel-export": cli("otel-export", "--db", db, "--otlp-endpoint", "http://127.0.0.1:1"),
}
report["refused"] = sorted({name.partition(".")[0] for name in refused})
report["imported"] = sorted(BLOCKED & {m.partition(".")[0] for m in sys.modules})
print(json.dumps(report, ensure_ascii=False))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db = tmp_path_factory.mktemp("extras") / "journal.db"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), ",".join(BLOCKED)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert report["already_imported"] == [], "imported before the blocker was in place"
    assert report["blocker_works"] is True
    return report


def test_the_library_works_without_any_extra(child: dict[str, Any]) -> None:
    assert child["events"] == ["session_created", "user_message", "assistant_message"]
    assert child["replay"] == [
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！"},
    ]
    assert child["imported"] == []


def test_postgresql_without_psycopg_is_a_typed_error_naming_the_extra(
    child: dict[str, Any],
) -> None:
    kind, message = child["postgres_error"]
    assert kind == "InvalidArgument"
    assert "pip install 'agentjournal[postgres]'" in message


@pytest.mark.parametrize(
    ("model", "extra"), [("OpenAIChatModel", "openai"), ("AnthropicModel", "anthropic")]
)
def test_a_model_without_its_client_is_a_typed_error_naming_the_extra(
    child: dict[str, Any], model: str, extra: str
) -> None:
    kind, message = child[model]
    assert kind == "InvalidArgument"
    assert f"pip install 'agentjournal[{extra}]'" in message


def test_mcp_servers_without_the_sdk_are_a_typed_error_naming_the_extra(
    child: dict[str, Any],
) -> None:
    kind, message = child["mcp_servers"]
    assert kind == "InvalidArgument"
    assert "pip install 'agentjournal[mcp]'" in message


@pytest.mark.parametrize(
    "command", ["sessions", "show", "replay", "verify", "export", "import", "keys create"]
)
def test_the_journal_commands_need_no_extra(child: dict[str, Any], command: str) -> None:
    run = child["cli"][command]
    assert run["code"] in (0, None), run
    assert "Traceback" not in run["err"], run["err"]


def test_the_commands_read_what_the_library_wrote(child: dict[str, Any]) -> None:
    runs = child["cli"]
    [listed] = json.loads(runs["sessions"]["out"])
    assert (listed["session_id"], listed["title"]) == (child["session"], "no extras")
    assert json.loads(runs["replay"]["out"]) == child["replay"]
    assert json.loads(runs["import"]["out"])["events"] == 3
    assert runs["keys create"]["out"].startswith("aj_")
    assert [key["tenant"] for key in json.loads(runs["keys list"]["out"])] == ["acme"]


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_the_server_commands_name_the_extra_to_install(child: dict[str, Any], command: str) -> None:
    run = child["cli"][command]
    assert run["code"] == 2, run
    assert "Traceback" not in run["err"], run["err"]
    assert "pip install 'agentjournal[server]'" in run["err"], run["err"]
    assert run["out"] == ""
    assert {"uvicorn", "fastapi"} & set(child["refused"])  # it asked, and was refused


def test_a_postgresql_url_without_psycopg_names_the_extra(child: dict[str, Any]) -> None:
    run = child["cli"]["sessions on postgresql"]
    assert run["code"] == 2, run
    assert "Traceback" not in run["err"], run["err"]
    assert "pip install 'agentjournal[postgres]'" in run["err"], run["err"]


def test_otel_export_names_the_extra_to_install(child: dict[str, Any]) -> None:
    run = child["cli"]["otel-export"]
    assert run["code"] == 2, run
    assert "Traceback" not in run["err"], run["err"]
    assert "pip install 'agentjournal[otel]'" in run["err"], run["err"]
