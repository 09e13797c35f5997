"""The fake model servers speak what the official clients expect: each is read here by the
`openai` or `anthropic` package itself, streamed and not, with each fault on demand."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from fake_model_servers import Call, FakeAnthropic, FakeOpenAI, Reply, parse_stamps, split


@pytest.fixture
def oai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def ant() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def test_split() -> None:
    assert split("abcdefg", 3) == ["abc", "de", "fg"]
    assert split("ab", 5) == ["a", "b"]
    assert split("", 2) == [""]


def test_openai_stream_is_read_by_the_official_client(oai: FakeOpenAI) -> None:
    oai.answer(Reply(["Hel", "lo"], [Call("call_1", "lookup", '{"id": 3}')], usage=(12, 7)))
    client = openai.OpenAI(base_url=oai.base_url, api_key="k", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    fragments = [
        call for c in chunks if c.choices for call in (c.choices[0].delta.tool_calls or ())
    ]
    assert text == "Hello"
    assert fragments[0].id == "call_1"
    assert fragments[0].function is not None
    assert fragments[0].function.name == "lookup"
    assert "".join(f.function.arguments or "" for f in fragments if f.function) == '{"id": 3}'
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls"
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (12, 7)
    [request] = oai.received
    assert request.path == "/v1/chat/completions"
    assert request.body["stream"] is True
    oai.wait_until(lambda got: got[0].finished)  # the client may read [DONE] before it is set
    assert not request.disconnected


def test_openai_whole_reply_and_faults(oai: FakeOpenAI) -> None:
    client = openai.OpenAI(base_url=oai.base_url, api_key="k", max_retries=0)
    oai.answer(Reply("whole"), Reply(status=500), Reply(["a", "b"], error_after=1))
    oai.answer(Reply(["a", "b"], drop_after=1))
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": "hi"}
    ]
    done = client.chat.completions.create(model="m", messages=messages)
    assert done.choices[0].message.content == "whole"
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=messages)
    with pytest.raises(openai.APIError, match="told to answer 500"):
        list(client.chat.completions.create(model="m", messages=messages, stream=True))
    with pytest.raises(openai.APIConnectionError):
        list(client.chat.completions.create(model="m", messages=messages, stream=True))


def test_openai_stall_and_a_client_that_leaves(oai: FakeOpenAI) -> None:
    oai.answer(Reply(["a", "b"], stall=30, stall_after=1))
    client = openai.OpenAI(base_url=oai.base_url, api_key="k", max_retries=0)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    iterator = iter(stream)
    next(iterator)  # the role chunk
    assert next(iterator).choices[0].delta.content == "a"
    stream.close()
    oai.wait_until(lambda got: got[0].disconnected)
    assert not oai.received[0].finished


def test_stamps(oai: FakeOpenAI) -> None:
    oai.answer(Reply(["x"] * 3, stamp=True))
    client = openai.OpenAI(base_url=oai.base_url, api_key="k", max_retries=0)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        if c.choices
    )
    stamps = parse_stamps(text)
    assert len(stamps) == 3
    assert stamps == sorted(stamps)


def test_anthropic_stream_is_read_by_the_official_client(ant: FakeAnthropic) -> None:
    ant.answer(Reply(["Hel", "lo"], [Call("toolu_1", "lookup", '{"id": 3}')], usage=(12, 7)))
    client = anthropic.Anthropic(base_url=ant.base_url, api_key="k", max_retries=0)
    with client.messages.stream(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello"
    assert final.content[0].type == "text"
    tool = final.content[1]
    assert tool.type == "tool_use"
    assert (tool.id, tool.name, tool.input) == ("toolu_1", "lookup", {"id": 3})
    assert (final.usage.input_tokens, final.usage.output_tokens) == (12, 7)
    assert final.stop_reason == "tool_use"
    [request] = ant.received
    assert request.path == "/v1/messages"
    assert "anthropic-version" in request.headers
    # The key travels as x-api-key or (newer clients) as a bearer token.
    assert request.headers.get("x-api-key", request.headers.get("authorization")) in (
        "k",
        "Bearer k",
    )


def test_anthropic_whole_reply_and_faults(ant: FakeAnthropic) -> None:
    client = anthropic.Anthropic(base_url=ant.base_url, api_key="k", max_retries=0)
    ant.answer(Reply("whole"), Reply(status=500), Reply(["a", "b"], error_after=1))
    ant.answer(Reply(["a", "b"], drop_after=1))
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
    done = client.messages.create(model="m", max_tokens=10, messages=messages)
    assert done.content[0].type == "text"
    assert done.content[0].text == "whole"
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(model="m", max_tokens=10, messages=messages)
    with pytest.raises(anthropic.APIStatusError, match="overloaded"):
        list(client.messages.create(model="m", max_tokens=10, messages=messages, stream=True))
    with pytest.raises(anthropic.APIConnectionError):
        list(client.messages.create(model="m", max_tokens=10, messages=messages, stream=True))


def test_nothing_scripted_is_a_500_and_unknown_paths_404(oai: FakeOpenAI) -> None:
    assert httpx.post(f"{oai.base_url}/chat/completions", json={}).status_code == 500
    assert httpx.post(f"{oai.url}/v1/other", json={}).status_code == 404
    oai.always(Reply("again"))
    for _ in range(2):
        answer = httpx.post(f"{oai.base_url}/chat/completions", json={"model": "m"})
        assert answer.json()["choices"][0]["message"]["content"] == "again"


def test_keyed_replies_go_only_to_their_text(ant: FakeAnthropic) -> None:
    ant.answer(Reply("queued"))
    ant.answer_to("mine", Reply("for mine"))
    client = anthropic.Anthropic(base_url=ant.base_url, api_key="k", max_retries=0)

    def ask(*content: anthropic.types.MessageParam) -> str:
        answer = client.messages.create(model="m", max_tokens=10, messages=list(content))
        block = answer.content[0]
        assert block.type == "text"
        return block.text

    tool_result: anthropic.types.MessageParam = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}],
    }
    # The latest user message with text decides; a tool result alone has none.
    history: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "mine"},
        {"role": "assistant", "content": "x"},
        tool_result,
    ]
    assert ask(*history) == "for mine"
    with pytest.raises(anthropic.InternalServerError):  # its replies ran out: not the queue's
        ask({"role": "user", "content": [{"type": "text", "text": "mine"}]})
    assert ask({"role": "user", "content": "other"}) == "queued"
