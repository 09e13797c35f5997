"""The agent tests serve with `agentjournal serve --agent mcp_shop_agent:shop --mcp-servers ...`
(the child gets this directory on PYTHONPATH): no Python tools of its own; its model orders
through the ledger server's `place_order` the config file names. Not a test module."""

from __future__ import annotations

from agentjournal.runtime import Agent, Script, ScriptedModel

SCRIPTS = {
    "order a book": Script(
        "done: {result}",
        tool="ledger__place_order",
        arguments={"item": "book"},
        on_error="could not order: {result}",
    )
}


def shop() -> Agent:
    return Agent(ScriptedModel(SCRIPTS, "I can order books."), name="shop")
