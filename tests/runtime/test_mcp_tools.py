"""The runtime with MCP servers as tool sources: a real server (tests/runtime/mcp_ledger_server.py,
on the official SDK) started over stdio, and agentjournal's own `/mcp` over streamable HTTP
with a bearer key. Their tools are offered beside Python tools, every call is journaled naming
its server, and whatever goes wrong (a tool error, bad arguments, a timeout, a server that does
not start, a huge result) is an error result the model reads while the turn goes on."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Event, Journal
from agentjournal.runtime import (
    Agent,
    MCPServer,
    ModelReply,
    RequestedCall,
    Script,
    ScriptedModel,
    TextDelta,
    Tool,
)
from agentjournal.runtime.agent import ERROR_PREFIX, INTERRUPTED
from agentjournal.runtime.mcp_tools import MAX_RESULT_CHARS
from server.conftest import create_keys, launch

LEDGER_SERVER = Path(__file__).with_name("mcp_ledger_server.py")
TURN = ["user_message", "tool_call", "tool_result", "assistant_message"]


def ledger_server(ledger: Path, **options: Any) -> MCPServer:
    return MCPServer(
        "ledger",
        command=sys.executable,
        args=[str(LEDGER_SERVER)],
        env={"LEDGER": str(ledger)},
        **options,
    )


def lines(ledger: Path) -> list[str]:
    return ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []


class PlanModel:
    """Calls the planned tools one step at a time, then answers with every result it read;
    records the tools it was offered."""

    def __init__(self, plan: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.plan = list(plan)
        self.offered: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        self.offered.append([tool.schema() for tool in tools])
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if len(results) < len(self.plan):
            name, arguments = self.plan[len(results)]
            call = RequestedCall(f"step_{len(results) + 1}", name, json.dumps(arguments))
            return ModelReply(tool_calls=(call,))
        return ModelReply(" | ".join(results))


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal.open(tmp_path / "journal.db") as opened:
        yield opened


def test_a_turn_uses_mcp_tools_beside_python_tools(journal: Journal, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    noted: list[str] = []
    note = Tool("note", lambda args, inv: noted.append(args["text"]) or "noted", idempotent=True)
    model = PlanModel(
        [
            ("ledger__lookup", {"sku": "book"}),
            ("ledger__place_order", {"item": "book", "quantity": 2}),
            ("note", {"text": "ordered"}),
        ]
    )
    agent = Agent(model, [note], mcp_servers=[ledger_server(ledger)])
    try:
        sid = agent.create_session(journal).session_id
        result = agent.run_turn(journal, sid, "order two books if in stock")
    finally:
        agent.close()
    lookup, order, noted_reply = result.reply.split(" | ")
    assert json.loads(lookup) == {"sku": "book", "in_stock": True, "count": 3}
    assert order == "ordered 2 x book (order #1)"
    assert noted_reply == "noted"
    assert lines(ledger) == ["order book x2"]
    assert noted == ["ordered"]
    # The model saw the server's tools, schemas and descriptions, beside the Python tool.
    offered = {tool["function"]["name"]: tool["function"] for tool in model.offered[0]}
    assert {"note", "ledger__place_order", "ledger__lookup", "ledger__refuse"} <= set(offered)
    order_tool = offered["ledger__place_order"]
    assert "not idempotent" in order_tool["description"]
    assert order_tool["parameters"]["required"] == ["item"]
    # Each call is journaled before it runs, naming its server and the server's own tool name.
    calls = [e.payload for e in journal.events(sid) if e.type == "tool_call"]
    assert calls[1] == {
        "call_id": "step_2",
        "name": "ledger__place_order",
        "arguments": '{"item": "book", "quantity": 2}',
        "mcp_server": "ledger",
        "mcp_tool": "place_order",
    }
    assert "mcp_server" not in calls[2]
    assert [c.status for c in journal.tool_calls(sid)] == ["ok", "ok", "ok"]
    assert journal.verify().ok


def test_calls_from_turns_on_many_threads_share_one_connection(
    journal: Journal, tmp_path: Path
) -> None:
    """As `serve` runs turns: several at once, each on its own thread and session; each call
    carries its invocation key (stable across reruns of the call) in `_meta`."""
    ledger = tmp_path / "ledger"
    scripts = {
        "order": Script("{result}", tool="ledger__place_order", arguments={"item": "cup"}),
        "key": Script("{result}", tool="ledger__invocation"),
    }
    agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[ledger_server(ledger)])
    sids = [agent.create_session(journal).session_id for _ in range(6)]
    try:
        with ThreadPoolExecutor(len(sids)) as pool:
            replies = list(pool.map(lambda sid: agent.run_turn(journal, sid, "order"), sids))
        key = agent.run_turn(journal, sids[0], "key").reply
    finally:
        agent.close()
    # (The order numbers are the ledger's line counts, which calls running at once may share.)
    assert all(r.reply.startswith("ordered 1 x cup (order #") for r in replies)
    assert lines(ledger) == ["order cup x1"] * len(sids)
    assert key == f"{sids[0]}:call_2"


def test_a_streamed_turn_journals_mcp_calls_the_same_way(journal: Journal, tmp_path: Path) -> None:
    scripts = {"look": Script("found {result}", tool="ledger__lookup", arguments={"sku": "x"})}
    agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[ledger_server(tmp_path / "ledger")])
    try:
        sid = agent.create_session(journal).session_id
        items = list(agent.stream_turn(journal, sid, "look"))
    finally:
        agent.close()
    events = [item for item in items if isinstance(item, Event)]
    assert [e.type for e in events] == TURN
    assert events[1].payload["mcp_server"] == "ledger"
    assert json.loads(events[2].payload["content"])["sku"] == "x"
    assert any(isinstance(item, TextDelta) for item in items)


def test_failures_are_error_results_the_model_reads(journal: Journal, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    scripts = {
        "refuse": Script("{result}", tool="ledger__refuse", arguments={"reason": "closed today"}),
        "bad": Script("{result}", tool="ledger__place_order", arguments={"item": ["x"] * 3}),
        "slow": Script("{result}", tool="ledger__slow", arguments={"seconds": 5}),
        "unknown": Script("{result}", tool="ledger__teleport", arguments={}),
        "huge": Script("{result}", tool="ledger__huge", arguments={"chars": 300_000}),
        "after": Script("{result}", tool="ledger__place_order", arguments={"item": "pen"}),
    }
    agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[ledger_server(ledger, timeout=1)])
    try:
        sid = agent.create_session(journal).session_id
        replies = {text: agent.run_turn(journal, sid, text).reply for text in scripts}
    finally:
        agent.close()
    # The server's own words, as it sent them (isError).
    assert replies["refuse"] == f"{ERROR_PREFIX}Error executing tool refuse: closed today"
    assert replies["bad"].startswith(ERROR_PREFIX)
    assert "item" in replies["bad"]
    assert replies["slow"] == (
        f"{ERROR_PREFIX}MCP server 'ledger' did not answer slow within 1 s"
        " (it may or may not have taken effect)"
    )
    assert replies["unknown"] == f"{ERROR_PREFIX}MCP server 'ledger' has no tool 'teleport'"
    assert len(replies["huge"]) < MAX_RESULT_CHARS + 100
    assert replies["huge"].endswith("[... 200000 more characters cut]")
    # The server still serves after all that, and nothing ran that should not have.
    assert replies["after"] == "ordered 1 x pen (order #1)"
    assert lines(ledger) == ["order pen x1"]
    statuses = [c.status for c in journal.tool_calls(sid)]
    assert statuses == ["error", "error", "error", "error", "ok", "ok"]
    assert journal.verify().ok


def test_a_server_that_dies_mid_call_is_started_again(journal: Journal, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    scripts = {
        "crash": Script("{result}", tool="ledger__crash"),
        "order": Script("{result}", tool="ledger__place_order", arguments={"item": "pen"}),
    }
    agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[ledger_server(ledger)])
    try:
        sid = agent.create_session(journal).session_id
        crashed = agent.run_turn(journal, sid, "crash").reply
        ordered = agent.run_turn(journal, sid, "order").reply
    finally:
        agent.close()
    assert crashed.startswith(f"{ERROR_PREFIX}MCP server 'ledger' failed during crash: ")
    assert crashed.endswith("(it may or may not have taken effect)")
    assert ordered == "ordered 1 x pen (order #1)"  # by a new server process


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("/nonexistent/mcp-server", []),  # cannot be started
        (sys.executable, ["-c", "import sys; sys.exit(3)"]),  # starts, and exits at once
    ],
    ids=["missing", "exits"],
)
def test_a_server_that_does_not_start_costs_its_tools_not_the_turn(
    journal: Journal, command: str, args: list[str]
) -> None:
    echo = Tool("echo", lambda args, inv: args["text"], idempotent=True)
    scripts = {
        "echo": Script("echoed {result}", tool="echo", arguments={"text": "hi"}),
        "down": Script("{result}", tool="broken__anything", arguments={}),
    }
    broken = MCPServer("broken", command=command, args=args, start_timeout=10)
    agent = Agent(ScriptedModel(scripts, "?"), [echo], mcp_servers=[broken])
    try:
        sid = agent.create_session(journal).session_id
        assert agent.run_turn(journal, sid, "echo").reply == "echoed hi"
        down = agent.run_turn(journal, sid, "down").reply
    finally:
        agent.close()
    assert down.startswith(f"{ERROR_PREFIX}MCP server 'broken' is not available: ")
    assert list(agent.offered_tools()) == ["echo"]


@pytest.mark.parametrize(("tool", "idempotent"), [("place_order", False), ("count_visit", True)])
def test_a_cut_mcp_call_resumes_by_the_python_tools_rules(
    journal: Journal, tmp_path: Path, tool: str, idempotent: bool
) -> None:
    """A `tool_call` journaled without its result (the process died): a tool declared
    idempotent runs again, any other gets the interrupted error and does not."""
    ledger = tmp_path / "ledger"
    server = ledger_server(ledger, idempotent={"count_visit"})
    scripts = {"go": Script("after: {result}", tool=f"ledger__{tool}")}
    agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[server])
    sid = agent.create_session(journal).session_id
    journal.append(sid, "user_message", {"content": "go"})
    arguments = json.dumps({"item": "book"} if tool == "place_order" else {"page": "home"})
    call = {"call_id": "call_1", "name": f"ledger__{tool}", "arguments": arguments}
    journal.append(sid, "tool_call", {**call, "mcp_server": "ledger", "mcp_tool": tool})
    try:
        finished = agent.finish_turn(journal, sid)
    finally:
        agent.close()
    assert finished is not None
    if idempotent:
        assert finished.reply == "after: visit #1 of home"
        assert lines(ledger) == ["visit home"]
    else:
        assert finished.reply == f"after: {INTERRUPTED}"
        assert lines(ledger) == []


def test_agentjournals_own_mcp_over_http_with_a_bearer_key(tmp_path: Path) -> None:
    """The agent recalls through `/mcp` of a keyed `serve`: the key in `headers` decides the
    tenant; without one the server refuses the connection, and its tools are unavailable."""
    db = tmp_path / "served.db"
    with Journal.open(db, tenant="acme") as journal:
        old = journal.create_session("refunds")
        journal.append(old.session_id, "user_message", {"content": "refund order 4711 please"})
    keys = create_keys(db, ["acme"])
    running = launch(db, keys=keys)
    url = f"{running.base_url}/mcp"
    scripts = {"recall": Script("{result}", tool="memory__search", arguments={"query": "4711"})}
    keyed = MCPServer("memory", url=url, headers={"Authorization": f"Bearer {keys['acme']}"})
    unkeyed = MCPServer("memory", url=url, start_timeout=10)
    try:
        for server in (keyed, unkeyed):
            agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[server])
            with Journal.open(tmp_path / f"agent-{id(server)}.db") as journal:
                sid = agent.create_session(journal).session_id
                try:
                    reply = agent.run_turn(journal, sid, "recall").reply
                finally:
                    agent.close()
            if server is keyed:
                [hit] = json.loads(reply)["hits"]
                assert hit["session_id"] == old.session_id
                payload = journal_calls(tmp_path / f"agent-{id(server)}.db", sid)[0]
                assert payload["mcp_server"] == "memory"
            else:
                assert reply == (
                    f"{ERROR_PREFIX}MCP server 'memory' is not available: it answered HTTP 401"
                    " (check its headers: a key, a token?)"
                )
    finally:
        running.stop()


def journal_calls(db: Path, sid: str) -> list[dict[str, Any]]:
    with Journal.open(db) as journal:
        return [e.payload for e in journal.events(sid) if e.type == "tool_call"]


def test_two_tenants_sessions_of_one_id_send_different_invocation_keys(
    journal: Journal, tmp_path: Path
) -> None:
    """A session is (tenant, id): two tenants may both have a session `s1` whose model numbers
    its calls alike. The key a shared server sees must not be the same for both, or a server that
    makes its side effects idempotent by it answers one tenant's call with the other's result."""
    scripts = {"key": Script("{result}", tool="ledger__invocation")}
    agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[ledger_server(tmp_path / "ledger")])
    keys = []
    try:
        for tenant in ("acme", "globex"):
            scoped = journal.for_tenant(tenant)
            agent.create_session(scoped, session_id="s1")
            keys.append(agent.run_turn(scoped, "s1", "key").reply)
    finally:
        agent.close()
    assert keys[0] != keys[1]
    assert all(key.endswith("s1:call_1") for key in keys)


def test_a_result_the_journal_cannot_store_as_it_is_does_not_cut_the_turn(
    journal: Journal, tmp_path: Path
) -> None:
    """A server is not trusted to send text the journal stores: U+0000 in a result (or in the
    error text of a failed call) is replaced, and the turn ends as any other."""
    scripts = {"nul": Script("got {result}", tool="ledger__nul")}
    agent = Agent(ScriptedModel(scripts, "?"), mcp_servers=[ledger_server(tmp_path / "ledger")])
    try:
        sid = agent.create_session(journal).session_id
        turn = agent.run_turn(journal, sid, "nul")
    finally:
        agent.close()
    assert turn.reply == "got before\ufffdafter"
    assert [e.type for e in journal.events(sid)][1:] == TURN
    assert [c.status for c in journal.tool_calls(sid)] == ["ok"]


def test_a_late_failure_on_a_dropped_connection_leaves_the_new_one_up(tmp_path: Path) -> None:
    """A call whose connection broke drops it; calls still in flight on it then fail too, and
    their failures come after a next turn connected again: they must not drop the connection
    that replaced theirs (every call on it would then fail "not connected")."""
    from agentjournal.runtime import Invocation
    from agentjournal.runtime.mcp_tools import MCPTools

    mcp = MCPTools([ledger_server(tmp_path / "ledger")])
    try:
        hang = mcp.tools()["ledger__hang"]
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(hang.function, {"seconds": 30}, Invocation("s", "c1"))
            while lines(tmp_path / "ledger") != ["hang"]:  # the server is running the call
                time.sleep(0.01)
            # Another call's transport broke: that connection is dropped.
            mcp._drop("ledger", mcp._connections["ledger"])
            lookup = mcp.tools()["ledger__lookup"]  # the next turn connects again
            with pytest.raises(Exception, match="may or may not have taken effect"):
                in_flight.result(timeout=60)  # the call in flight on the old one failed
        # A call of that turn goes to the new connection, which is still up.
        assert "in_stock" in lookup.function({"sku": "x"}, Invocation("s", "c2"))
    finally:
        mcp.close()


class Unanswering:
    """A TCP server on loopback that hangs up on its first connection (a start that fails at
    once) and holds every later one open without answering (a start that hangs)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/mcp"
        self.held: list[socket.socket] = []
        self.holding = threading.Event()  # a later connection sent its request and waits
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        first = True
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if first:
                first = False
                conn.close()
                continue
            self.held.append(conn)
            if conn.recv(65536):
                self.holding.set()

    def still_held(self) -> bool:
        """Whether every held connection is still open at the client's end."""
        for conn in self.held:
            conn.setblocking(False)
            try:
                if conn.recv(65536) == b"":
                    return False
            except BlockingIOError:
                pass
            finally:
                conn.setblocking(True)
        return bool(self.held)

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


def test_a_server_tried_again_holds_up_no_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose start failed is started again in the background: while that start hangs
    (up to its `start_timeout`), every turn lists the other servers' tools at once."""
    from agentjournal.runtime import mcp_tools

    monkeypatch.setattr(mcp_tools, "RETRY_SECONDS", 0.0)
    hanging = Unanswering()
    mcp = mcp_tools.MCPTools(
        [ledger_server(tmp_path / "ledger"), MCPServer("flaky", url=hanging.url, start_timeout=120)]
    )
    try:
        first = mcp.tools()  # waits for both first starts: the ledger is up, flaky hung up
        assert "ledger__lookup" in first
        assert not [name for name in first if name.startswith("flaky")]
        assert (mcp.missing("flaky__anything") or "").startswith("MCP server 'flaky' is not avail")
        assert mcp.tools() == first  # starts flaky again, and does not wait for it
        assert hanging.holding.wait(60)  # that start is under way: it sent its request
        with ThreadPoolExecutor(4) as pool:  # turns on other threads meanwhile
            listed = list(pool.map(lambda _: mcp.tools(), range(4)))
        assert listed == [first] * 4
        assert hanging.still_held()  # none of them waited for the start to give up
    finally:
        hanging.close()
        mcp.close()
