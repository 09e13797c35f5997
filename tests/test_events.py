"""Event shape validation: `prepare` and `loads_strict`, pure functions, no database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentjournal.errors import InvalidArgument, InvalidEvent, JournalError, PayloadTooLarge
from agentjournal.events import (
    CORE_TYPES,
    RESERVED_TYPES,
    _check_json_value,
    canonical_json,
    loads_strict,
    prepare,
)

# --- valid payloads of every core type ---------------------------------------------------------

VALID: dict[str, list[dict[str, Any]]] = {
    "session_created": [
        {"title": "订单客服"},
        {"title": "", "model": "m", "system_prompt": "be kind", "metadata": {"agent": "order"}},
        {"title": "t", "model": None, "system_prompt": None},
    ],
    "session_updated": [
        {"title": "renamed"},
        {"metadata": {}},
        {"status": "active"},
        {"status": "archived"},
        {"status": "deleted", "title": "gone"},
    ],
    "session_forked": [{"from_session_id": "sess_a", "at_seq": 3}],
    "user_message": [{"content": "你好"}, {"content": ""}, {"content": "fixed", "supersedes": 2}],
    "assistant_message": [
        {"content": "hi"},
        {"content": "hi", "usage": {"prompt_tokens": 10, "completion_tokens": 3}},
        {"content": "hi", "usage": {"prompt_tokens": 0}},
        {"content": "hi", "usage": None},
    ],
    "system_message": [{"content": "be brief"}],
    "tool_call": [
        {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"},
        {"call_id": "c", "name": "n", "arguments": ""},
        {"call_id": "c", "name": "n", "arguments": "not json at all"},
    ],
    "tool_result": [
        {"call_id": "call_1", "content": "42"},
        {"call_id": "call_1", "content": "", "is_error": True},
        {"call_id": "call_1", "content": "x", "is_error": False},
    ],
    "context_compacted": [{"summary": "the user asked for orders", "until_seq": 5}],
    "task_created": [
        {"task_id": "task_1", "type": "report", "input": {"a": [1]}, "max_retries": 3},
        {"task_id": "t", "type": "x", "input": None, "max_retries": 0, "parent_task_id": "p"},
    ],
    "task_started": [
        {
            "task_id": "t",
            "attempt": 1,
            "worker": "w@host",
            "lease_seconds": 30,
            "lease_expires_at": 1700000000000,
        },
        {"task_id": "t", "attempt": 2, "worker": "w", "lease_seconds": 0.5, "lease_expires_at": 0},
    ],
    "task_progress": [
        {"task_id": "t", "attempt": 1, "progress": 0.5, "lease_expires_at": 1},
        {"task_id": "t", "attempt": 1, "progress": 1, "message": "done", "lease_expires_at": 1},
    ],
    "task_completed": [
        {"task_id": "t", "attempt": 1, "output": {"rows": 3}},
        {"task_id": "t", "attempt": 1, "output": None},
    ],
    "task_failed": [
        {"task_id": "t", "attempt": 1, "error": "boom", "retry": True, "retry_count": 1},
        {"task_id": "t", "attempt": 4, "error": "", "retry": False, "retry_count": 3},
    ],
    "task_cancelled": [{"task_id": "t"}, {"task_id": "t", "reason": "session deleted"}],
}


def test_valid_table_covers_every_core_type() -> None:
    assert set(VALID) == set(CORE_TYPES)


@pytest.mark.parametrize(
    ("type_", "payload"), [(t, p) for t, payloads in VALID.items() for p in payloads]
)
def test_every_core_type_accepts_its_valid_payloads(type_: str, payload: dict[str, Any]) -> None:
    prepared = prepare(type_, payload, "key-1", allow_reserved=True)
    assert prepared.type == type_
    assert prepared.payload == payload
    assert json.loads(prepared.payload_json) == payload
    assert prepared.idempotency_key == "key-1"


@pytest.mark.parametrize("type_", sorted(RESERVED_TYPES))
def test_reserved_types_need_the_journals_verbs(type_: str) -> None:
    payload = VALID[type_][0]
    with pytest.raises(InvalidEvent, match=type_):
        prepare(type_, payload)
    assert prepare(type_, payload, allow_reserved=True).type == type_


def test_reserved_types_are_the_session_and_task_types() -> None:
    assert {t for t in CORE_TYPES if t.startswith(("session_", "task_"))} == set(RESERVED_TYPES)


# --- invalid shapes: rejected with a message naming the field -----------------------------------

INVALID = [
    ("user_message", {}, "content"),
    ("user_message", {"content": 1}, "content"),
    ("user_message", {"content": None}, "content"),
    ("system_message", {"content": ["x"]}, "content"),
    ("assistant_message", {"text": "hi"}, "content"),
    ("user_message", {"content": "x", "supersedes": 0}, "supersedes"),
    ("user_message", {"content": "x", "supersedes": "2"}, "supersedes"),
    ("user_message", {"content": "x", "supersedes": True}, "supersedes"),
    ("user_message", {"content": "x", "supersedes": 2.0}, "supersedes"),
    ("user_message", {"content": "x", "usage": {"prompt_tokens": 1}}, "usage"),
    ("system_message", {"content": "x", "usage": {"prompt_tokens": 1}}, "usage"),
    ("assistant_message", {"content": "x", "usage": "lots"}, "usage"),
    ("assistant_message", {"content": "x", "usage": {"prompt_tokens": -1}}, "usage"),
    ("assistant_message", {"content": "x", "usage": {"completion_tokens": 1.5}}, "usage"),
    ("assistant_message", {"content": "x", "usage": {"prompt_tokens": True}}, "usage"),
    ("tool_call", {"name": "n", "arguments": "{}"}, "call_id"),
    ("tool_call", {"call_id": "", "name": "n", "arguments": "{}"}, "call_id"),
    ("tool_call", {"call_id": 7, "name": "n", "arguments": "{}"}, "call_id"),
    ("tool_call", {"call_id": "c" * 256, "name": "n", "arguments": "{}"}, "call_id"),
    ("tool_call", {"call_id": "c", "arguments": "{}"}, "name"),
    ("tool_call", {"call_id": "c", "name": "", "arguments": "{}"}, "name"),
    ("tool_call", {"call_id": "c", "name": "n"}, "arguments"),
    ("tool_call", {"call_id": "c", "name": "n", "arguments": {"a": 1}}, "arguments"),
    ("tool_result", {"content": "42"}, "call_id"),
    ("tool_result", {"call_id": "c"}, "content"),
    ("tool_result", {"call_id": "c", "content": {"n": 42}}, "content"),
    ("tool_result", {"call_id": "c", "content": "x", "is_error": "yes"}, "is_error"),
    ("tool_result", {"call_id": "c", "content": "x", "is_error": 1}, "is_error"),
    ("context_compacted", {"until_seq": 3}, "summary"),
    ("context_compacted", {"summary": "s"}, "until_seq"),
    ("context_compacted", {"summary": "s", "until_seq": 0}, "until_seq"),
    ("context_compacted", {"summary": "s", "until_seq": "3"}, "until_seq"),
    ("session_created", {}, "title"),
    ("session_created", {"title": 5}, "title"),
    ("session_created", {"title": "t", "model": 1}, "model"),
    ("session_created", {"title": "t", "system_prompt": ["x"]}, "system_prompt"),
    ("session_created", {"title": "t", "metadata": [1]}, "metadata"),
    ("session_updated", {}, "title"),
    ("session_updated", {"status": "gone"}, "status"),
    ("session_updated", {"metadata": "x"}, "metadata"),
    ("session_updated", {"title": 3}, "title"),
    ("session_forked", {"at_seq": 2}, "from_session_id"),
    ("session_forked", {"from_session_id": "s", "at_seq": 0}, "at_seq"),
    ("task_created", {}, "task_id"),
    ("task_progress", {"task_id": 3}, "task_id"),
    ("task_created", {"task_id": "t", "input": 1, "max_retries": 3}, "type"),
    ("task_created", {"task_id": "t", "type": "x", "max_retries": 3}, "input"),
    ("task_created", {"task_id": "t", "type": "x", "input": 1, "max_retries": -1}, "max_retries"),
    ("task_created", {"task_id": "t", "type": "x", "input": 1, "max_retries": 101}, "max_retries"),
    ("task_started", {"task_id": "t", "attempt": 0, "worker": "w"}, "attempt"),
    ("task_started", {"task_id": "t", "attempt": 1, "lease_expires_at": 1}, "worker"),
    (
        "task_started",
        {"task_id": "t", "attempt": 1, "worker": "w", "lease_expires_at": 1, "lease_seconds": 0},
        "lease_seconds",
    ),
    ("task_progress", {"task_id": "t", "attempt": 1, "progress": 1.5}, "progress"),
    ("task_progress", {"task_id": "t", "attempt": 1, "progress": True}, "progress"),
    ("task_completed", {"task_id": "t", "attempt": 1}, "output"),
    ("task_failed", {"task_id": "t", "attempt": 1, "error": "e", "retry_count": 0}, "retry"),
    ("task_cancelled", {"task_id": "t", "reason": 5}, "reason"),
]


@pytest.mark.parametrize(("type_", "payload", "field"), INVALID)
def test_invalid_shapes_are_rejected_naming_the_field(
    type_: str, payload: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidEvent, match=field):
        prepare(type_, payload, allow_reserved=True)


@pytest.mark.parametrize("payload", [None, [], ["content"], "text", 3, b"{}", ("a", 1)])
def test_payload_must_be_an_object(payload: Any) -> None:
    with pytest.raises(InvalidEvent, match="JSON object"):
        prepare("myapp.thing", payload)


@pytest.mark.parametrize(
    "payload",
    [
        {"x": float("nan")},
        {"x": float("inf")},
        {"x": float("-inf")},
        {"x": [1.0, {"y": float("nan")}]},
        {"x": "a\x00b"},
        {"a\x00": 1},
        {"x": {"nested\x00key": "v"}},
        {"x": ["ok", "bad\x00"]},
        {1: "x"},
        {"x": {None: 1}},
        {"x": {1.5: 1}},
        {"x": b"bytes"},
        {"x": {1, 2}},
        {"x": object()},
        {"x": "\ud800"},  # a lone surrogate is not Unicode text
    ],
)
def test_values_json_cannot_hold_are_rejected(payload: dict[Any, Any]) -> None:
    with pytest.raises(InvalidEvent):
        prepare("myapp.thing", payload)


def test_nul_in_message_content_is_rejected() -> None:
    with pytest.raises(InvalidEvent, match="U\\+0000"):
        prepare("user_message", {"content": "hi\x00"})


def test_deep_nesting_is_rejected_but_moderate_nesting_is_fine() -> None:
    def nest(depth: int) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for _ in range(depth):
            value = {"a": value}
        return value

    assert prepare("myapp.deep", nest(30)).payload == nest(30)
    with pytest.raises(InvalidEvent, match="deeper"):
        prepare("myapp.deep", nest(100))


def test_tuples_are_stored_as_lists_and_the_payload_is_a_private_copy() -> None:
    original: dict[str, Any] = {"xs": (1, 2), "inner": {"k": [3]}}
    prepared = prepare("myapp.thing", original)
    assert prepared.payload == {"xs": [1, 2], "inner": {"k": [3]}}
    original["inner"]["k"].append(4)
    assert prepared.payload["inner"]["k"] == [3]


# --- types --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "type_",
    ["myapp.memory_saved", "a.b", "a.b.c", "app2.event_9", "x.y_z.w", "a." + "b" * 62],
)
def test_namespaced_custom_types_are_accepted(type_: str) -> None:
    assert len(type_) <= 64
    assert prepare(type_, {"any": ["thing", 1]}).type == type_


@pytest.mark.parametrize(
    "type_",
    [
        "memory_saved",  # not namespaced
        "custom",
        "MyApp.saved",
        "myapp.Saved",
        "myapp.",
        ".saved",
        "myapp..saved",
        "1app.saved",
        "myapp.9saved",
        "my-app.saved",
        "myapp.saved!",
        "myapp saved.x",
        " myapp.saved",
        "a." + "b" * 63,  # 65 characters
        "",
        "user_message.",
        "USER_MESSAGE",
    ],
)
def test_unknown_and_badly_named_types_are_rejected(type_: str) -> None:
    with pytest.raises(InvalidEvent, match="type"):
        prepare(type_, {})


@pytest.mark.parametrize("type_", [None, 1, b"myapp.x", ["myapp.x"]])
def test_type_must_be_a_string(type_: Any) -> None:
    with pytest.raises(InvalidEvent, match="type"):
        prepare(type_, {})


# --- idempotency keys ---------------------------------------------------------------------------


def test_idempotency_key_shape() -> None:
    assert prepare("myapp.x", {}, "k" * 255).idempotency_key == "k" * 255
    assert prepare("myapp.x", {}, None).idempotency_key is None
    for bad in ("", "k" * 256, 5, b"key", "a\x00b"):
        with pytest.raises(InvalidEvent, match="idempotency_key"):
            prepare("myapp.x", {}, bad)


# --- canonical JSON and size --------------------------------------------------------------------


def test_canonical_json_does_not_depend_on_key_order() -> None:
    one = prepare("myapp.x", {"b": 1, "a": {"d": [1, {"f": 2, "e": 3}], "c": None}})
    two = prepare("myapp.x", {"a": {"c": None, "d": [1, {"e": 3, "f": 2}]}, "b": 1})
    assert one.payload_json == two.payload_json
    assert one.payload_json == '{"a":{"c":null,"d":[1,{"e":3,"f":2}]},"b":1}'


def test_canonical_json_keeps_non_ascii_text_as_is() -> None:
    assert prepare("user_message", {"content": "你好"}).payload_json == '{"content":"你好"}'


def test_size_is_utf8_bytes_of_compact_json() -> None:
    # '{"content":"' + 10 × 'é' (2 bytes each) + '"}' = 14 + 20 = 34 bytes, 24 characters.
    payload = {"content": "é" * 10}
    assert prepare("user_message", payload, max_payload_bytes=34).payload == payload
    with pytest.raises(PayloadTooLarge) as caught:
        prepare("user_message", payload, max_payload_bytes=33)
    assert (caught.value.size, caught.value.limit) == (34, 33)
    # One more byte than the limit fails.
    with pytest.raises(PayloadTooLarge) as caught:
        prepare("user_message", {"content": "é" * 10 + "a"}, max_payload_bytes=34)
    assert caught.value.size == 35


def test_size_ignores_the_whitespace_of_non_compact_json() -> None:
    payload = {"a": 1, "b": [1, 2]}
    compact = len('{"a":1,"b":[1,2]}')
    assert len(json.dumps(payload)) > compact
    prepare("myapp.x", payload, max_payload_bytes=compact)
    with pytest.raises(PayloadTooLarge):
        prepare("myapp.x", payload, max_payload_bytes=compact - 1)


def test_default_limit_is_one_mebibyte() -> None:
    overhead = len('{"content":""}')
    fits = {"content": "x" * (1024 * 1024 - overhead)}
    assert prepare("user_message", fits).payload == fits
    with pytest.raises(PayloadTooLarge):
        prepare("user_message", {"content": "x" * (1024 * 1024 - overhead + 1)})


def test_shape_errors_come_before_size_errors() -> None:
    with pytest.raises(InvalidEvent):
        prepare("user_message", {"content": 5, "pad": "x" * 100}, max_payload_bytes=10)


def test_error_classes_resemble_builtins() -> None:
    with pytest.raises(PayloadTooLarge) as too_large:
        prepare("myapp.x", {"a": "xx"}, max_payload_bytes=2)
    assert isinstance(too_large.value, ValueError)
    assert isinstance(too_large.value, JournalError)
    with pytest.raises(InvalidEvent) as invalid:
        prepare("nope", {})
    assert isinstance(invalid.value, ValueError)
    assert isinstance(invalid.value, InvalidArgument)
    assert isinstance(invalid.value, JournalError)


# --- loads_strict --------------------------------------------------------------------------------


def test_loads_strict_parses_rfc_8259_json() -> None:
    text = '{"a": [1, 2.5, "x", null, true], "b": {"c": "你好"}}'
    assert loads_strict(text) == json.loads(text)
    assert loads_strict(text.encode("utf-8")) == json.loads(text)
    assert loads_strict("[]") == []


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"a": 1, "b": {"c": 1, "c": 1}}',
        '[{"x": 1, "x": 1}]',
    ],
)
def test_loads_strict_rejects_duplicate_keys(text: str) -> None:
    with pytest.raises(InvalidEvent, match="twice"):
        loads_strict(text)


@pytest.mark.parametrize(
    "text", ["NaN", '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', "[1, Infinity]"]
)
def test_loads_strict_rejects_nan_and_infinity(text: str) -> None:
    with pytest.raises(InvalidEvent, match=r"NaN|Infinity"):
        loads_strict(text)


@pytest.mark.parametrize(
    "text", ["", "{", "{'a': 1}", '{"a": 1,}', '{"a" 1}', "undefined", b"\xff\xfe{", '{"a": 01}']
)
def test_loads_strict_rejects_invalid_json(text: str | bytes) -> None:
    with pytest.raises(InvalidEvent, match="not valid JSON"):
        loads_strict(text)


# --- any JSON object round-trips -----------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=20,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=6)


def _loads_strict_as_before(text: str | bytes) -> Any:
    """loads_strict as it was written before its decoder was made once: `json.loads` with the
    hooks per call, and a Python loop over every object's pairs (with the number limits added
    since: nothing past a double, no integer past Python's digit limit)."""

    def reject(name: str) -> Any:
        raise InvalidEvent(f"JSON must not contain {name} (RFC 8259 has no such number)")

    def finite(number: str) -> float:
        value = float(number)
        if value in (float("inf"), float("-inf")):
            raise InvalidEvent(f"the number {number[:40]} is out of range (past a 64-bit float)")
        return value

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise InvalidEvent(f"JSON object has the key {key!r} twice")
            result[key] = value
        return result

    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(
            text, parse_constant=reject, parse_float=finite, object_pairs_hook=pairs_hook
        )
    except InvalidEvent:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidEvent(f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidEvent("JSON nests too deep (the limit for a payload is 64 levels)") from exc
    except ValueError as exc:
        raise InvalidEvent("not valid JSON: a number has more than 4300 digits") from exc


def _strict_outcome(text: str | bytes) -> tuple[str, Any]:
    try:
        return "value", loads_strict(text)
    except InvalidEvent as exc:
        return "refused", str(exc)


def _strict_outcome_before(text: str | bytes) -> tuple[str, Any]:
    try:
        return "value", _loads_strict_as_before(text)
    except InvalidEvent as exc:
        return "refused", str(exc)


# JSON-ish text: the tokens of JSON and of what loads_strict refuses (NaN, Infinity, a key twice,
# a byte-order mark, a leading zero, a control character in a string, a trailing comma).
JSONISH_TOKENS = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        " ",
        '"a"',
        '"b"',
        '"\\u00e9"',
        '"\t"',
        '"\x01"',
        "1",
        "-0",
        "01",
        "2.5e3",
        "NaN",
        "Infinity",
        "-Infinity",
        "null",
        "true",
        "false",
        "\ufeff",
    ]
)
JSONISH = st.lists(JSONISH_TOKENS, max_size=16).map("".join)


@given(JSONISH)
def test_loads_strict_answers_any_text_as_before(text: str) -> None:
    """The decoder made once at import accepts and refuses (with the same words) exactly what
    the per-call one did: text or its UTF-8 bytes."""
    assert _strict_outcome(text) == _strict_outcome_before(text)
    assert _strict_outcome(text.encode("utf-8")) == _strict_outcome_before(text.encode("utf-8"))


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "é"]), JSON_VALUES), max_size=6))
def test_loads_strict_refuses_a_key_twice_as_before(pairs: list[tuple[str, Any]]) -> None:
    """Objects written with repeated keys, at any depth: the first key seen twice is named."""
    members = ", ".join(f"{json.dumps(key)}: {json.dumps(value)}" for key, value in pairs)
    for text in ("{" + members + "}", '[{"x": {' + members + "}}]"):
        assert _strict_outcome(text) == _strict_outcome_before(text)
        if len({key for key, _ in pairs}) < len(pairs):
            assert _strict_outcome(text)[0] == "refused"


@given(JSON_OBJECTS)
def test_any_json_object_round_trips_through_prepare(payload: dict[str, Any]) -> None:
    prepared = prepare("test.any", payload)
    assert json.loads(prepared.payload_json) == payload
    assert prepared.payload == payload
    assert loads_strict(prepared.payload_json) == payload
    reordered = dict(reversed(list(payload.items())))
    assert prepare("test.any", reordered).payload_json == prepared.payload_json


def test_loads_strict_refuses_nesting_past_the_recursion_limit() -> None:
    with pytest.raises(InvalidEvent, match="nests too deep"):
        loads_strict("[" * 100_000 + "]" * 100_000)


def test_loads_strict_takes_only_utf8_bytes() -> None:
    assert loads_strict('{"a": "é"}'.encode()) == {"a": "é"}
    with pytest.raises(InvalidEvent, match="not valid JSON"):
        loads_strict('{"a": 1}'.encode("utf-16"))


@pytest.mark.parametrize(
    ("type_", "payload"),
    [
        ("replay.item_removed", {}),
        ("replay.item_removed", {"seq": 0}),
        ("replay.item_removed", {"seq": "3"}),
        ("responses.item", {}),
        ("responses.item", {"item": "a string"}),
        ("user_message", {"content": "hi", "item": ["not", "an", "object"]}),
    ],
)
def test_the_types_replay_understands_have_their_shape_checked(
    type_: str, payload: dict[str, object]
) -> None:
    """replay.item_removed hides one event from every replay and responses.item is given back by
    the responses format: a malformed one would change what a model is sent, so it is refused."""
    with pytest.raises(InvalidEvent):
        prepare(type_, payload)


def test_the_types_replay_understands_accept_their_shape() -> None:
    assert prepare("replay.item_removed", {"seq": 3}).payload == {"seq": 3}
    assert prepare("replay.cleared", {}).type == "replay.cleared"
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    assert prepare("responses.item", {"item": item}).payload == {"item": item}


# -- the C encoder's fast check and the Python walk agree on every payload ---------------------

_KEYS = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["\x00", "a\x00", "\ud800", "\\u0000", "1"]),
    st.integers(-2, 2),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, width=16),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included
    st.text(max_size=6),
    st.sampled_from(["\x00", "x\x00y", "\ud83d", "\\u0000", "\\\\u0000", "\\\x00"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=3),
    ),
    max_leaves=12,
)


def _walked(payload: dict[Any, Any]) -> tuple[str, Any]:
    """What `prepare` gave before the fast check: the walk, then canonical text and its copy."""
    _check_json_value(payload, "payload")
    text = canonical_json(payload)
    return text, json.loads(text)


def _outcome(make: Any, payload: dict[Any, Any]) -> tuple[str, Any]:
    try:
        return ("ok", make(payload))
    except InvalidEvent as exc:
        return ("refused", str(exc))


@given(st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_the_fast_check_accepts_and_refuses_exactly_what_the_walk_does(
    payload: dict[Any, Any],
) -> None:
    def prepared(p: dict[Any, Any]) -> tuple[str, Any]:
        event = prepare("x.item", p)
        return event.payload_json, event.payload

    assert _outcome(prepared, payload) == _outcome(_walked, payload)


def test_many_brackets_go_to_the_walk_which_decides_by_depth() -> None:
    wide = {"v": [[] for _ in range(70)]}  # 72 brackets, 3 levels: the fast check defers
    assert prepare("x.item", wide).payload == wide
    deepest: Any = "leaf"
    for _ in range(63):
        deepest = [deepest]
    assert prepare("x.item", {"v": deepest}).payload == {"v": deepest}
    with pytest.raises(InvalidEvent, match="nests deeper than 64 levels"):
        prepare("x.item", {"v": [deepest]})
