"""Agents that tests serve with `agentjournal serve --agent agents_for_tests:NAME` (the child gets
this directory on PYTHONPATH). Not a test module: pytest collects nothing here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentjournal.errors import ModelError
from agentjournal.runtime import Agent, ModelReply, Tool

DOWN = "the model is down (a test's model that always fails)"


class DownModel:
    """A model that never answers, like an unreachable API."""

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        raise ModelError(DOWN)


def down() -> Agent:
    return Agent(DownModel(), [], name="down")
