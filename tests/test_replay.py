"""The pure fold: replay (OpenAI and Anthropic shapes) and fit_context."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal.errors import ContextTooLarge
from agentjournal.events import Event
from agentjournal.replay import ContextFit, estimate_tokens, fit_context, replay, responses_items
from expected import SEED_MESSAGES, a, t, u

PROMPT = "你是订单客服助手。"
SYSTEM = {"role": "system", "content": PROMPT}


def ev(seq: int, type_: str, **payload: Any) -> Event:
    return Event(
        event_id=1000 + seq,
        session_id="s1",
        seq=seq,
        type=type_,
        payload=payload,
        created_at=1_700_000_000_000 + seq,
    )


def created(prompt: str | None = PROMPT) -> Event:
    if prompt is None:
        return ev(1, "session_created", title="订单客服")
    return ev(1, "session_created", title="订单客服", system_prompt=prompt)


def user(seq: int, text: str, **extra: Any) -> Event:
    return ev(seq, "user_message", content=text, **extra)


def assistant(seq: int, text: str, **extra: Any) -> Event:
    return ev(seq, "assistant_message", content=text, **extra)


def call(seq: int, call_id: str, name: str = "query_order_count", args: str = "{}") -> Event:
    return ev(seq, "tool_call", call_id=call_id, name=name, arguments=args)


def result(seq: int, call_id: str, content: str, **extra: Any) -> Event:
    return ev(seq, "tool_result", call_id=call_id, content=content, **extra)


def seed() -> list[Event]:
    """The seed's order conversation, seq 2-7 after session_created."""
    return [
        created(),
        user(2, "你好"),
        assistant(3, "你好！我是订单客服助手，可以帮你查询订单数量。"),
        user(4, "帮我查一下订单数量"),
        call(5, "call_1"),
        result(6, "call_1", "42"),
        assistant(7, "你当前有 42 个订单。"),
    ]


SEED_OPENAI = [SYSTEM, *SEED_MESSAGES]

QUERY = ("call_1", "query_order_count", "{}")


# --- estimate_tokens ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "user", "content": ""}, 4),
        ({"role": "user", "content": "abc"}, 5),
        ({"role": "user", "content": "abcd"}, 6),
        ({"role": "user", "content": "你好"}, 6),  # 6 UTF-8 bytes
        ({"role": "assistant", "content": None}, 4),
        # "ab" + name "query_order_count" (17) + arguments "{}" (2) = 21 bytes
        (a("ab", QUERY), 11),
        (t("call_1", "42"), 5),
    ],
)
def test_estimate_tokens(message: dict[str, Any], expected: int) -> None:
    assert estimate_tokens(message) == expected


# --- replay: the basic fold --------------------------------------------------------------------


def test_seed_conversation_replays_as_openai_messages() -> None:
    assert replay(seed()) == SEED_OPENAI


def test_no_system_prompt_means_no_system_message() -> None:
    assert replay([created(None), *seed()[1:]]) == SEED_OPENAI[1:]
    assert replay([created(""), *seed()[1:]]) == SEED_OPENAI[1:]


def test_system_prompt_argument_overrides_session_created() -> None:
    other = {"role": "system", "content": "other"}
    assert replay(seed(), system_prompt="other") == [other, *SEED_OPENAI[1:]]
    # A suffix without seq 1 gets its prompt only from the argument.
    assert replay(seed()[3:], system_prompt=PROMPT) == [SYSTEM, *SEED_OPENAI[3:]]
    assert replay(seed()[3:]) == SEED_OPENAI[3:]


@pytest.mark.parametrize(
    ("until", "expected"),
    [
        (0, []),
        (1, [SYSTEM]),
        (2, SEED_OPENAI[:2]),
        (4, SEED_OPENAI[:4]),
        (5, SEED_OPENAI[:4]),  # the call has no result as of seq 5: left out
        (6, SEED_OPENAI[:6]),
        (7, SEED_OPENAI),
        (99, SEED_OPENAI),
    ],
)
def test_until_is_time_travel(until: int, expected: list[dict[str, Any]]) -> None:
    assert replay(seed(), until=until) == expected


def test_events_replay_does_not_show_produce_nothing() -> None:
    events = [
        created(),
        ev(2, "session_updated", title="renamed"),
        ev(3, "task_created", task_id="t1", type="x"),
        user(4, "hi"),
        ev(5, "myapp.memory_saved", note="n"),
        ev(6, "task_progress", task_id="t1", progress=0.5),
        ev(7, "session_forked", from_session_id="s0", at_seq=3),
        assistant(8, "hello"),
    ]
    assert replay(events) == [SYSTEM, u("hi"), a("hello")]


def test_system_message_keeps_its_position() -> None:
    events = [created(), user(2, "hi"), ev(3, "system_message", content="be brief"), user(4, "x")]
    assert replay(events) == [SYSTEM, u("hi"), {"role": "system", "content": "be brief"}, u("x")]


# --- tool calls ----------------------------------------------------------------------------------


def test_text_and_calls_of_one_response_merge_into_one_assistant_message() -> None:
    events = [
        created(),
        user(2, "查订单"),
        assistant(3, "我来查一下。"),
        ev(4, "myapp.trace", span="x"),  # not shown, so it does not separate them
        call(5, "c1"),
        ev(6, "task_started", task_id="t"),
        call(7, "c2", "lookup", '{"id": 7}'),
        result(8, "c1", "42"),
        result(9, "c2", "ok"),
    ]
    assert replay(events) == [
        SYSTEM,
        u("查订单"),
        a("我来查一下。", ("c1", "query_order_count", "{}"), ("c2", "lookup", '{"id": 7}')),
        t("c1", "42"),
        t("c2", "ok"),
    ]


def test_parallel_results_follow_in_call_order_whatever_order_they_arrived() -> None:
    events = [
        user(1, "go"),
        call(2, "c1", "f1"),
        call(3, "c2", "f2"),
        call(4, "c3", "f3"),
        result(5, "c3", "three"),
        result(6, "c1", "one"),
        result(7, "c2", "two"),
    ]
    assert replay(events) == [
        u("go"),
        a(None, ("c1", "f1", "{}"), ("c2", "f2", "{}"), ("c3", "f3", "{}")),
        t("c1", "one"),
        t("c2", "two"),
        t("c3", "three"),
    ]


def test_late_result_is_placed_right_after_its_call() -> None:
    events = [
        user(1, "start"),
        call(2, "c1"),
        user(3, "still there?"),
        assistant(4, "waiting"),
        result(5, "c1", "42"),
    ]
    assert replay(events) == [
        u("start"),
        a(None, ("c1", "query_order_count", "{}")),
        t("c1", "42"),
        u("still there?"),
        a("waiting"),
    ]


def test_a_result_between_calls_splits_them_into_two_responses() -> None:
    events = [call(1, "c1", "f"), result(2, "c1", "r1"), call(3, "c2", "g"), result(4, "c2", "r2")]
    assert replay(events) == [
        a(None, ("c1", "f", "{}")),
        t("c1", "r1"),
        a(None, ("c2", "g", "{}")),
        t("c2", "r2"),
    ]


def test_missing_results_are_left_out() -> None:
    partly = [user(1, "q"), call(2, "c1", "f"), call(3, "c2", "g"), result(4, "c2", "r2")]
    assert replay(partly) == [u("q"), a(None, ("c2", "g", "{}")), t("c2", "r2")]

    text_only = [user(1, "q"), assistant(2, "let me see"), call(3, "c1", "f")]
    assert replay(text_only) == [u("q"), a("let me see")]

    nothing = [user(1, "q"), call(2, "c1", "f"), call(3, "c2", "g"), user(4, "hello?")]
    assert replay(nothing) == [u("q"), u("hello?")]


def test_a_result_for_an_unknown_call_is_ignored() -> None:
    assert replay([user(1, "q"), result(2, "nope", "r")]) == [u("q")]


# --- corrections ---------------------------------------------------------------------------------


def corrected() -> list[Event]:
    return [
        created(),
        user(2, "helo"),
        assistant(3, "hi"),
        user(4, "hello", supersedes=2),
        user(5, "hello!", supersedes=2),
        assistant(6, "hi there", supersedes=3),
    ]


def test_newest_correction_shows_at_the_original_position() -> None:
    assert replay(corrected()) == [SYSTEM, u("hello!"), a("hi there")]


def test_until_before_a_correction_shows_the_original() -> None:
    assert replay(corrected(), until=3) == [SYSTEM, u("helo"), a("hi")]
    assert replay(corrected(), until=4) == [SYSTEM, u("hello"), a("hi")]
    assert replay(corrected(), until=5) == [SYSTEM, u("hello!"), a("hi")]


def test_correction_without_its_original_is_ignored() -> None:
    window = corrected()[3:]  # seq 4-6: their originals are not in the input
    assert replay(window) == []
    compacted = [*corrected(), ev(7, "context_compacted", summary="S", until_seq=2)]
    summary = {"role": "system", "content": "S"}
    assert replay(compacted) == [SYSTEM, summary, a("hi there")]


def test_correction_of_merged_text_keeps_the_calls() -> None:
    events = [
        assistant(1, "lookin"),
        call(2, "c1"),
        result(3, "c1", "42"),
        assistant(4, "looking", supersedes=1),
    ]
    assert replay(events) == [a("looking", ("c1", "query_order_count", "{}")), t("c1", "42")]


def test_a_correction_is_not_text_that_calls_merge_with() -> None:
    events = [
        assistant(1, "a"),
        assistant(2, "b", supersedes=1),
        call(3, "c1"),
        result(4, "c1", "r"),
    ]
    assert replay(events) == [a("b"), a(None, ("c1", "query_order_count", "{}")), t("c1", "r")]


# --- compaction ----------------------------------------------------------------------------------


def test_compaction_replaces_the_prefix_with_its_summary() -> None:
    events = [*seed(), ev(8, "context_compacted", summary="用户有 42 个订单。", until_seq=5 + 1)]
    events.append(user(9, "谢谢"))
    assert replay(events) == [
        SYSTEM,
        {"role": "system", "content": "用户有 42 个订单。"},
        a("你当前有 42 个订单。"),
        u("谢谢"),
    ]
    # Before the compaction existed, replay is the plain fold.
    assert replay(events, until=7) == SEED_OPENAI


def test_newest_of_two_compactions_wins() -> None:
    events = [
        *seed(),
        ev(8, "context_compacted", summary="first", until_seq=3),
        user(9, "more"),
        ev(10, "context_compacted", summary="second", until_seq=6),
        user(11, "last"),
    ]
    assert replay(events) == [
        SYSTEM,
        {"role": "system", "content": "second"},
        a("你当前有 42 个订单。"),
        u("more"),
        u("last"),
    ]
    assert replay(events, until=9) == [
        SYSTEM,
        {"role": "system", "content": "first"},
        *SEED_OPENAI[3:],
        u("more"),
    ]


def test_result_whose_call_was_compacted_is_dropped() -> None:
    events = [user(1, "q"), call(2, "c1"), ev(3, "context_compacted", summary="S", until_seq=2)]
    events.append(result(4, "c1", "42"))
    assert replay(events) == [{"role": "system", "content": "S"}]


# --- anthropic -----------------------------------------------------------------------------------


def test_seed_conversation_as_anthropic() -> None:
    assert replay(seed(), format="anthropic") == {
        "system": PROMPT,
        "messages": [
            u("你好"),
            a("你好！我是订单客服助手，可以帮你查询订单数量。"),
            u("帮我查一下订单数量"),
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "call_1", "name": "query_order_count", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "42"}],
            },
            a("你当前有 42 个订单。"),
        ],
    }


def test_anthropic_system_joins_all_system_text() -> None:
    events = [
        created(),
        user(2, "a"),
        ev(3, "context_compacted", summary="S", until_seq=2),
        ev(4, "system_message", content="be brief"),
        user(5, "b"),
    ]
    assert replay(events, format="anthropic") == {
        "system": f"{PROMPT}\n\nS\n\nbe brief",
        "messages": [u("b")],
    }
    assert replay([user(1, "x")], format="anthropic") == {"system": None, "messages": [u("x")]}


def test_anthropic_tool_use_text_inputs_and_errors() -> None:
    events = [
        user(1, "go"),
        assistant(2, "checking"),
        call(3, "c1", "f", '{"a": 1}'),
        call(4, "c2", "g", "[1, 2]"),
        call(5, "c3", "h", "not json"),
        result(6, "c1", "r1"),
        result(7, "c2", "boom", is_error=True),
        result(8, "c3", "r3", is_error=False),
        user(9, "thanks"),
        user(10, "bye"),
        assistant(11, ""),
        call(12, "c4", "k", "NaN"),
        result(13, "c4", "r4"),
    ]
    out = replay(events, format="anthropic")
    assert isinstance(out, dict)
    assert out["messages"] == [
        u("go"),
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "c2", "name": "g", "input": {"arguments": "[1, 2]"}},
                {"type": "tool_use", "id": "c3", "name": "h", "input": {"arguments": "not json"}},
            ],
        },
        {
            # The results and the two user messages after them alternate as one user message.
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
                {"type": "tool_result", "tool_use_id": "c2", "content": "boom", "is_error": True},
                {"type": "tool_result", "tool_use_id": "c3", "content": "r3"},
                {"type": "text", "text": "thanks"},
                {"type": "text", "text": "bye"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c4", "name": "k", "input": {"arguments": "NaN"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c4", "content": "r4"}],
        },
    ]


def test_anthropic_merges_consecutive_assistant_messages() -> None:
    events = [user(1, "q"), assistant(2, "one"), assistant(3, "two")]
    out = replay(events, format="anthropic")
    assert isinstance(out, dict)
    assert out["messages"] == [
        u("q"),
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
    ]


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="format"):
        replay(seed(), format="gemini")  # type: ignore[arg-type]


# --- fit_context ---------------------------------------------------------------------------------


def tokens_of(messages: list[dict[str, Any]]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def test_everything_fits_when_the_budget_allows() -> None:
    total = tokens_of(SEED_OPENAI)
    fit = fit_context(seed(), max_tokens=total, complete=True)
    assert fit == ContextFit(SEED_OPENAI, None, total)


def test_cut_lands_before_a_user_message_never_between_call_and_result() -> None:
    total = tokens_of(SEED_OPENAI)
    second_turn = [SYSTEM, *SEED_OPENAI[3:]]
    fit = fit_context(seed(), max_tokens=total - 1, complete=True)
    assert fit == ContextFit(second_turn, 4, tokens_of(second_turn))
    # A budget that would hold the call, its result and the reply, but not the user message
    # before them, cannot cut there: nothing fits.
    after_user = [SYSTEM, *SEED_OPENAI[4:]]
    with pytest.raises(ContextTooLarge, match=rf"{tokens_of(second_turn)} tokens.*budget is"):
        fit_context(seed(), max_tokens=tokens_of(after_user), complete=True)


def test_budget_counts_the_system_prompt_and_summary() -> None:
    without_system = tokens_of(SEED_OPENAI[3:])
    with pytest.raises(ContextTooLarge, match=f"budget is {without_system}"):
        fit_context(seed(), max_tokens=without_system, complete=True)
    assert fit_context(seed()[1:], max_tokens=without_system, complete=True).cut_seq == 4

    events = [*seed(), ev(8, "context_compacted", summary="x" * 30, until_seq=3), user(9, "hi")]
    kept = [SYSTEM, {"role": "system", "content": "x" * 30}, *SEED_OPENAI[3:], u("hi")]
    assert fit_context(events, max_tokens=tokens_of(kept), complete=True) == ContextFit(
        kept, None, tokens_of(kept)
    )
    smaller = fit_context(events, max_tokens=tokens_of(kept) - 1, complete=True)
    assert smaller.cut_seq == 9
    assert smaller.messages == [SYSTEM, {"role": "system", "content": "x" * 30}, u("hi")]


def test_tokenizer_counts_instead_of_the_estimate() -> None:
    seen: list[dict[str, Any]] = []

    def one_per_message(message: dict[str, Any]) -> int:
        seen.append(message)
        return 1

    fit = fit_context(seed(), max_tokens=5, complete=True, tokenizer=one_per_message)
    assert fit == ContextFit([SYSTEM, *SEED_OPENAI[3:]], 4, 5)
    assert SYSTEM in seen  # the system prompt is counted by the tokenizer too
    with pytest.raises(ContextTooLarge, match="5 tokens; the budget is 4"):
        fit_context(seed(), max_tokens=4, complete=True, tokenizer=one_per_message)


def test_window_never_claims_it_cut_nothing() -> None:
    window = seed()[2:]  # seq 3-7: the greeting reply is there, its user message is not
    fit = fit_context(window, max_tokens=10_000, complete=False, system_prompt=PROMPT)
    # The assistant message before the window's first user message is dropped: it may be half a
    # turn. The cut is the window's earliest user message, so the caller reads further back.
    assert fit == ContextFit([SYSTEM, *SEED_OPENAI[3:]], 4, tokens_of([SYSTEM, *SEED_OPENAI[3:]]))
    complete = fit_context(seed(), max_tokens=10_000, complete=True)
    assert complete.cut_seq is None


def test_window_with_compaction_and_no_user_message() -> None:
    compaction = ev(9, "context_compacted", summary="S", until_seq=4)
    window = [compaction, call(5, "c1"), result(6, "c1", "42"), assistant(7, "done")]
    with pytest.raises(ValueError, match="user message"):
        fit_context(window, max_tokens=100, complete=False)
    # The same events are the complete history after the compaction.
    fit = fit_context(window, max_tokens=100, complete=True)
    assert fit.cut_seq is None
    assert fit.messages == [
        {"role": "system", "content": "S"},
        a(None, ("c1", "query_order_count", "{}")),
        t("c1", "42"),
        a("done"),
    ]


def test_fit_context_renders_anthropic() -> None:
    total = tokens_of(SEED_OPENAI)
    fit = fit_context(seed(), max_tokens=total - 1, complete=True, format="anthropic")
    assert fit.cut_seq == 4
    assert fit.tokens == tokens_of([SYSTEM, *SEED_OPENAI[3:]])  # counted in the OpenAI shape
    full = replay(seed(), format="anthropic")
    assert isinstance(full, dict)
    assert fit.messages == {"system": PROMPT, "messages": full["messages"][2:]}


def test_max_tokens_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        fit_context(seed(), max_tokens=0, complete=True)


def test_empty_history_costs_only_the_system_prompt() -> None:
    fit = fit_context([created()], max_tokens=100, complete=True)
    assert fit == ContextFit([SYSTEM], None, estimate_tokens(SYSTEM))


# --- properties over random sessions -------------------------------------------------------------


@st.composite
def sessions(draw: st.DrawFn) -> list[Event]:
    """A random session roughly as the store allows it, with compactions anywhere."""
    prompt = draw(st.sampled_from([None, "sys", "系统提示"]))
    events = [created(prompt)]
    originals: dict[str, list[int]] = {"user_message": [], "assistant_message": []}
    open_calls: list[str] = []
    floor = 0
    for _ in range(draw(st.integers(0, 30))):
        seq = len(events) + 1
        kind = draw(
            st.sampled_from(
                [
                    "user",
                    "user",
                    "assistant",
                    "calls",
                    "result",
                    "result",
                    "fix",
                    "other",
                    "compact",
                ]
            )
        )
        text = draw(st.text(alphabet="ab好 ", max_size=12))
        if kind in ("user", "assistant"):
            type_ = f"{kind}_message"
            events.append(ev(seq, type_, content=text))
            originals[type_].append(seq)
        elif kind == "calls":
            for _ in range(draw(st.integers(1, 3))):
                call_id = f"c{len(events) + 1}"
                args = draw(st.sampled_from(["{}", '{"x": 1}', "[]", "oops"]))
                events.append(call(len(events) + 1, call_id, "f", args))
                open_calls.append(call_id)
        elif kind == "result" and open_calls:
            call_id = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            events.append(result(seq, call_id, text, is_error=draw(st.booleans())))
        elif kind == "fix":
            type_ = draw(st.sampled_from(sorted(originals)))
            if originals[type_]:
                target = draw(st.sampled_from(originals[type_]))
                events.append(ev(seq, type_, content=text, supersedes=target))
        elif kind == "other":
            events.append(ev(seq, draw(st.sampled_from(["myapp.note", "task_progress"]))))
        elif kind == "compact":
            floor = draw(st.integers(floor, seq - 1))
            events.append(ev(seq, "context_compacted", summary=f"summary {seq}", until_seq=floor))
    return events


def assert_valid_openai(messages: list[dict[str, Any]]) -> None:
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"tool message without its call at {i}"
        calls = message.get("tool_calls")
        if calls is not None:
            assert calls, "an assistant message with an empty tool_calls list"
            ids = [c["id"] for c in calls]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert [m["role"] for m in following] == ["tool"] * len(ids)
            assert [m["tool_call_id"] for m in following] == ids
            i += len(ids)
        i += 1


def header_length(events: list[Event]) -> int:
    prompt = events[0].payload.get("system_prompt")
    compacted = any(e.type == "context_compacted" for e in events)
    return int(bool(prompt)) + int(compacted)


@settings(max_examples=300, deadline=None)
@given(sessions(), st.data())
def test_replay_is_always_valid_model_input(events: list[Event], data: st.DataObject) -> None:
    until = data.draw(st.one_of(st.none(), st.integers(0, len(events) + 1)))
    out = replay(events, until=until)
    assert isinstance(out, list)
    assert_valid_openai(out)


@settings(max_examples=300, deadline=None)
@given(sessions(), st.data())
def test_anthropic_roles_alternate(events: list[Event], data: st.DataObject) -> None:
    until = data.draw(st.one_of(st.none(), st.integers(0, len(events) + 1)))
    out = replay(events, until=until, format="anthropic")
    assert isinstance(out, dict)
    messages = out["messages"]
    roles = [m["role"] for m in messages]
    assert all(role in ("user", "assistant") for role in roles)
    assert all(x != y for x, y in pairwise(roles))
    for i, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if uses:
            # Every tool_use is answered by the very next message, whose results come first.
            after = messages[i + 1]["content"]
            assert [b.get("tool_use_id") for b in after[: len(uses)]] == uses


@settings(max_examples=300, deadline=None)
@given(sessions(), st.data())
def test_fit_context_is_the_longest_fitting_suffix(
    events: list[Event], data: st.DataObject
) -> None:
    full = replay(events)
    assert isinstance(full, list)
    head = header_length(events)
    body = full[head:]
    budget = data.draw(st.integers(1, tokens_of(full) + 5))
    try:
        fit = fit_context(events, max_tokens=budget, complete=True)
    except ContextTooLarge:
        # Only if not even the newest user turn (or, without users, the whole replay) fits.
        users = [i for i, m in enumerate(body) if m["role"] == "user"]
        smallest = body[users[-1] :] if users else body
        assert tokens_of(full[:head] + smallest) > budget
        return
    assert isinstance(fit.messages, list)
    assert fit.messages[:head] == full[:head]
    kept = fit.messages[head:]
    assert kept == body[len(body) - len(kept) :]
    assert fit.tokens == tokens_of(fit.messages) <= budget
    if fit.cut_seq is None:
        assert kept == body
    else:
        assert kept[0]["role"] == "user"
        # The next longer cut (the previous user message, or the start) would not have fitted.
        start = len(body) - len(kept)
        earlier = [i for i, m in enumerate(body[:start]) if m["role"] == "user"]
        longer = body[earlier[-1] :] if earlier else body
        assert tokens_of(full[:head] + longer) > budget


@settings(max_examples=300, deadline=None)
@given(sessions(), st.data())
def test_window_agrees_with_complete_history(events: list[Event], data: st.DataObject) -> None:
    start = data.draw(st.integers(1, len(events)))
    compactions = [e for e in events if e.type == "context_compacted"]
    window = events[start - 1 :]
    if compactions and compactions[-1].seq < start:
        window = [compactions[-1], *window]
    prompt = events[0].payload.get("system_prompt")
    budget = data.draw(st.integers(1, 300))
    kwargs: dict[str, Any] = {"max_tokens": budget, "system_prompt": prompt}
    floor = compactions[-1].payload["until_seq"] if compactions else 0
    window_users = [
        e.seq
        for e in window
        if e.type == "user_message" and "supersedes" not in e.payload and e.seq > floor
    ]
    if not window_users:
        with pytest.raises(ValueError, match="user message"):
            fit_context(window, complete=False, **kwargs)
        return
    try:
        partial = fit_context(window, complete=False, **kwargs)
    except ContextTooLarge:
        with pytest.raises(ContextTooLarge):
            fit_context(events, complete=True, **kwargs)
        return
    assert partial.cut_seq in window_users
    whole = fit_context(events, complete=True, **kwargs)
    if partial.cut_seq != window_users[0]:
        # An older turn did not fit in the window, so none fits in the whole history either.
        assert whole == partial
    else:
        # The caller would read further back; what it has is what the whole history gives
        # for the same budget (cut_seq None when that suffix happens to be the whole replay).
        assert whole.tokens >= partial.tokens
        same = fit_context(events, complete=True, **{**kwargs, "max_tokens": partial.tokens})
        assert (same.messages, same.tokens) == (partial.messages, partial.tokens)
        assert same.cut_seq in (partial.cut_seq, None)


# -- the responses format, and history hidden by replay.item_removed / replay.cleared ----------


def test_a_journal_conversation_as_responses_input_items() -> None:
    """The runtime's and the HTTP API's sessions carry no items: each event becomes the
    equivalent Responses item, so the conversation can go on through the Agents SDK."""
    assert replay(seed(), format="responses") == [
        SYSTEM,
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！我是订单客服助手，可以帮你查询订单数量。"},
        {"role": "user", "content": "帮我查一下订单数量"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "query_order_count",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"role": "assistant", "content": "你当前有 42 个订单。"},
    ]


def test_responses_items_leave_out_an_unanswered_call_and_apply_corrections() -> None:
    events = [
        created(None),
        user(2, "typo"),
        call(3, "c1"),
        user(4, "fixed", supersedes=2),
    ]
    assert responses_items(events) == [{"role": "user", "content": "fixed"}]


def test_an_event_made_from_an_item_gives_the_item_back_verbatim() -> None:
    item = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "hi", "annotations": []}],
    }
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    events = [created(None), assistant(2, "hi", item=item), ev(3, "responses.item", item=reasoning)]
    assert replay(events, format="responses") == [item, reasoning]
    assert replay(iter(events), format="responses") == [item, reasoning], "any iterable"
    assert replay(events) == [{"role": "assistant", "content": "hi"}]  # chat formats skip others


def removal(seq: int, removed: int) -> Event:
    return Event(1000 + seq, "s1", seq, "replay.item_removed", {"seq": removed}, 0)


def test_removed_and_cleared_events_are_left_out_of_every_format() -> None:
    events = [
        *seed(),
        removal(8, 7),  # the reply
        removal(9, 6),  # the tool's result: its call goes too
    ]
    assert replay(events) == [
        SYSTEM,
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！我是订单客服助手，可以帮你查询订单数量。"},
        {"role": "user", "content": "帮我查一下订单数量"},
    ]
    assert responses_items(events)[-1] == {"role": "user", "content": "帮我查一下订单数量"}
    cleared = [*events, ev(10, "replay.cleared"), user(11, "again")]
    assert replay(cleared) == [SYSTEM, {"role": "user", "content": "again"}]  # the prompt stays
    claude = replay(cleared, format="anthropic")
    assert claude == {"system": PROMPT, "messages": [{"role": "user", "content": "again"}]}
    assert replay(cleared, format="responses") == [SYSTEM, {"role": "user", "content": "again"}]
    assert replay(cleared, until=9) == replay(events), "time travel goes back before the clear"
