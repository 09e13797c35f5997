"""An offline ADK model for the tests: a `BaseLlm` that answers from the request it is given, so
any number of turns run without a network or a key.

The rule, per model call: if the newest content is a function response, it answers with the
response's result in words; if the newest user text names a tool (`use <tool> <json args>`), it
calls that tool; otherwise it echoes the text, numbered by how many user texts the request holds
(so a test sees that the history reached the model).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field


class ScriptedLlm(BaseLlm):
    """Answers as the module says; `requests` keeps what it was sent."""

    model: str = "scripted"
    requests: list[LlmRequest] = Field(default_factory=list)
    calls: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        self.calls += 1
        yield LlmResponse(content=self.answer(llm_request.contents), turn_complete=True)

    def answer(self, contents: list[types.Content]) -> types.Content:
        newest = contents[-1] if contents else None
        for part in newest.parts or [] if newest else []:
            if part.function_response is not None:
                result = json.dumps(part.function_response.response, sort_keys=True)
                return _text(f"{part.function_response.name} says {result}")
        texts = [
            part.text
            for content in contents
            if content.role == "user"
            for part in content.parts or []
            if part.text
        ]
        said = texts[-1] if texts else ""
        if said.startswith("use "):
            _, name, arguments = said.split(" ", 2)
            call = types.FunctionCall(
                id=f"call-{self.calls}", name=name, args=json.loads(arguments)
            )
            return types.Content(role="model", parts=[types.Part(function_call=call)])
        return _text(f"#{len(texts)}: {said}")


def _text(text: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=text)])


def user_text(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def texts_of(events: list[Any]) -> list[str]:
    """The text parts of ADK events, in order."""
    return [
        part.text
        for event in events
        if event.content is not None
        for part in event.content.parts or []
        if part.text
    ]
