"""PydanticAI messages of every part kind, for the property tests of
tests/integrations/test_pydantic_ai*.py."""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    CompactionPart,
    DocumentUrl,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage


def round_trip(messages: list[ModelMessage]) -> list[ModelMessage]:
    """What PydanticAI itself gives back for `messages` after a JSON round trip."""
    return ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))


# Text the journal stores: JSON has no U+0000 and no lone surrogates.
text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
ids = st.text("abcdefghij0123456789_", min_size=1, max_size=12)
times = st.datetimes(
    min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2030, 1, 1), timezones=st.just(dt.UTC)
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
arguments = st.none() | text.map(json.dumps) | st.dictionaries(text, json_values, max_size=3)
user_content = st.lists(
    text
    | st.builds(ImageUrl, url=text.map(lambda t: f"https://example.com/{t}.png"))
    | st.builds(DocumentUrl, url=text.map(lambda t: f"https://example.com/{t}.pdf"))
    | st.builds(BinaryContent, data=st.binary(max_size=32), media_type=st.just("image/png")),
    min_size=1,
    max_size=3,
)
request_parts = st.one_of(
    st.builds(SystemPromptPart, text, timestamp=times),
    st.builds(UserPromptPart, text | user_content, timestamp=times),
    st.builds(
        ToolReturnPart,
        tool_name=ids,
        content=json_values,
        tool_call_id=ids,
        timestamp=times,
        outcome=st.sampled_from(["success", "failed", "denied"]),
    ),
    st.builds(
        RetryFeedbackPart,
        text,
        retry=st.builds(RetryInfo, st.just("model_retry")),
        timestamp=times,
    ),
)
response_parts = st.one_of(
    st.builds(TextPart, text),
    st.builds(ThinkingPart, text, signature=st.none() | ids),
    st.builds(ToolCallPart, tool_name=ids, args=arguments, tool_call_id=ids),
    st.builds(NativeToolCallPart, tool_name=ids, args=arguments, tool_call_id=ids),
    st.builds(NativeToolReturnPart, tool_name=ids, content=json_values, tool_call_id=ids),
    st.builds(
        FilePart,
        st.builds(BinaryContent, data=st.binary(max_size=32), media_type=st.just("image/png")),
    ),
    st.builds(CompactionPart, st.none() | text),
)
requests = st.builds(
    ModelRequest,
    st.lists(request_parts, max_size=4),
    timestamp=times,
    instructions=st.none() | text,
    run_id=st.none() | ids,
)
responses = st.builds(
    ModelResponse,
    st.lists(response_parts, max_size=4),
    usage=st.builds(
        RequestUsage, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6)
    ),
    model_name=st.none() | ids,
    timestamp=times,
    provider_details=st.none() | st.dictionaries(ids, json_values, max_size=2),
)
conversations = st.lists(st.one_of(requests, responses), max_size=8)
