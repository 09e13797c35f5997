"""Agents that tests serve with `agentjournal serve --agent agents_for_tests:NAME` (the child gets
this directory on PYTHONPATH). Not a test module: pytest collects nothing here."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from agentjournal.demo.order_agent import FALLBACK, SCRIPTS, build
from agentjournal.errors import ModelError
from agentjournal.runtime import (
    Agent,
    ModelChunk,
    ModelReply,
    Script,
    ScriptedModel,
    TextDelta,
    Tool,
)

DOWN = "the model is down (a test's model that always fails)"
BROKEN = "the model's stream broke off (a test's fault)"


class DownModel:
    """A model that never answers, like an unreachable API."""

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        raise ModelError(DOWN)


def down() -> Agent:
    return Agent(DownModel(), [], name="down")


def scripted() -> Agent:
    """The demo agent ("demo": it answers the demo's sessions) on a `ScriptedModel` that streams
    one character per delta, shaped by the environment: `AGENTJOURNAL_TEST_CHUNK_DELAY` seconds
    before each chunk; at chunk `AGENTJOURNAL_TEST_STALL_AT` (counted from 0) it stalls until
    its call is cancelled; at chunk `AGENTJOURNAL_TEST_FAIL_AT` it fails with a `ModelError`."""
    delay = float(os.environ.get("AGENTJOURNAL_TEST_CHUNK_DELAY", "0"))
    stall_at = int(os.environ.get("AGENTJOURNAL_TEST_STALL_AT", "-1"))
    fail_at = int(os.environ.get("AGENTJOURNAL_TEST_FAIL_AT", "-1"))

    async def shape(number: int, chunk: ModelChunk) -> None:
        if delay:
            await asyncio.sleep(delay)
        if number == stall_at:
            await asyncio.Event().wait()  # never set: only a cancel (or a kill) ends it
        if number == fail_at:
            raise ModelError(BROKEN)

    tools = list(build().tools.values())
    model = ScriptedModel(SCRIPTS, FALLBACK, chunk_chars=1, on_chunk=shape)
    return Agent(model, tools, name="demo")


def _fake_url() -> str:
    return os.environ["AGENTJOURNAL_TEST_MODEL_URL"]


def openai_fake() -> Agent:
    """The demo's tools on `OpenAIChatModel` (the official client) talking to the fake OpenAI
    server at `AGENTJOURNAL_TEST_MODEL_URL`; no retries, so each turn takes one queued reply."""
    from agentjournal.runtime.openai_model import OpenAIChatModel

    model = OpenAIChatModel("fake", base_url=_fake_url(), api_key="k", retries=0)
    return Agent(model, list(build().tools.values()), name="demo")


def anthropic_fake() -> Agent:
    """As `openai_fake`, on `AnthropicModel` and the fake Anthropic server."""
    from agentjournal.runtime.anthropic_model import AnthropicModel

    model = AnthropicModel("fake", base_url=_fake_url(), api_key="k", retries=0)
    return Agent(model, list(build().tools.values()), name="demo")


STALL = "请稍等"  # `stalling`'s message whose reply stalls until the turn is cancelled


def stalling() -> Agent:
    """The demo agent ("demo"), plus one message, `STALL`, whose reply stalls before its first
    delta until the turn is cancelled: a turn that is surely running while a test looks at it."""
    marker = "⏳"

    async def stall(number: int, chunk: ModelChunk) -> None:
        if isinstance(chunk, TextDelta) and chunk.text.startswith(marker):
            await asyncio.Event().wait()  # never set: only a cancel (or a kill) ends it

    demo = build()
    model = ScriptedModel({**SCRIPTS, STALL: Script(marker + " 还在想")}, FALLBACK, on_chunk=stall)
    return Agent(model, list(demo.tools.values()), name=demo.name, task_handlers=demo.task_handlers)
