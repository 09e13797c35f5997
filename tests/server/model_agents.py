"""Agents for `agentjournal serve --agent model_agents:NAME` in the tests: the demo's tools on a
real model client, configured from the environment (the tests point it at a fake server)."""

from __future__ import annotations

from agentjournal.demo.order_agent import build
from agentjournal.runtime import Agent, AnthropicModel


def claude() -> Agent:
    """The demo's tools on `AnthropicModel()` (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`,
    `AGENTJOURNAL_MODEL`), bound to sessions whose `metadata.agent` is "claude"."""
    return Agent(AnthropicModel(retries=0), list(build().tools.values()), name="claude")
