"""Request bodies that Python's `json` can or cannot parse, against a real `agentjournal serve`:
whatever the text, every POST and PATCH route answers with a status below 500, and an error as
problem+json — before authentication (no key), with a bad key, and with a good one.

The texts are the ones Python's decoder turns into exceptions of its own or into values nothing
else accepts: integers past its 4,300-digit conversion limit, numbers that overflow a float
(`1e400` is infinity), nesting past the recursion limit, lone surrogates, bytes that are not
UTF-8, a byte order mark; spliced into the places a route reads a value from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from http_checks import PROBLEM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Texts of single JSON values (or almost: the point is what the parser makes of them).
_HOSTILE_VALUES = st.one_of(
    st.integers(min_value=4301, max_value=20_000).map(lambda n: "9" * n),
    st.integers(min_value=4301, max_value=6000).map(lambda n: "-" + "1" * n),
    st.integers(min_value=19, max_value=400).map(lambda n: "9" * n),  # past 64 bits, parseable
    st.sampled_from(
        [
            "1e400",
            "-1e400",
            "1e-400",
            "1.5e308",
            "123456789012345678901234567890.5e300",
            "9223372036854775808",
            "-9223372036854775809",
            "18446744073709551616",
            "NaN",
            "Infinity",
            "-Infinity",
            '"\\ud800"',
            '"\\udfff\\ud800"',
            '"\\u0000"',
            '{"\\ud800": 1}',
            '"\\uDBFF"',
            "[1, 2,]",
            "{,}",
            "tru",
            "",
        ]
    ),
    st.integers(min_value=65, max_value=60_000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(min_value=65, max_value=30_000).map(
        lambda depth: '{"a":' * depth + "1" + "}" * depth
    ),
    st.integers(min_value=1000, max_value=60_000).map(lambda depth: "[" * depth),
)

# Where a route reads a value: each template's {} is replaced with a hostile value's text.
_TEMPLATES = [
    "{}",
    '{{"type": "user_message", "payload": {{"content": "x", "n": {}}}}}',
    '{{"type": "assistant_message", "payload": {{"content": "x", "usage": {{"prompt_tokens":'
    " {}}}}}}}",
    '{{"type": "user_message", "payload": {{"content": {}}}}}',
    '{{"type": "user_message", "payload": {{"content": "x"}}, "expected_seq": {}}}',
    '{{"events": [{{"type": "user_message", "payload": {{"content": "x"}}}}], "expected_seq": {}}}',
    '{{"type": "myapp.note", "payload": {{"content": "x"}}, "idempotency_key": {}}}',
    '{{"type": {}, "payload": {{}}}}',
    '{{"title": {}}}',
    '{{"title": "t", "metadata": {{"k": {}}}}}',
    '{{"at_seq": {}}}',
    '{{"until_seq": {}, "summary": "s"}}',
    '{{"until_seq": 1, "summary": {}}}',
    '{{"type": "report", "input": {}}}',
    '{{"type": "report", "max_retries": {}}}',
    '{{"worker": "w", "lease_seconds": {}}}',
    '{{"attempt": {}, "progress": 0.5}}',
    '{{"attempt": 1, "progress": {}}}',
    '{{"attempt": 1, "output": {}}}',
    '{{"attempt": 1, "error": {}}}',
    '{{"reason": {}}}',
    '{{"content": {}}}',
    '{{"n": {}, "n": 1}}',
]

_RAW = st.sampled_from(
    [
        b"\xff\xfe{}",
        b'{"title": "\xc3\x28"}',
        b"\xef\xbb\xbf{}",
        b'{"title": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8 bytes
        b"\x00",
        b"{" * 100_000,
    ]
)


def _bodies() -> st.SearchStrategy[bytes]:
    spliced = st.tuples(st.sampled_from(_TEMPLATES), _HOSTILE_VALUES).map(
        lambda pair: pair[0].format(pair[1]).encode("utf-8", "surrogatepass")
    )
    return st.one_of(spliced, _HOSTILE_VALUES.map(str.encode), _RAW)


@pytest.fixture(scope="module")
def routes(keyed_server: Any) -> list[tuple[str, str]]:
    """(method, path) of every route that takes a JSON body, from the app's own spec, with the
    path's ids filled in with a session and a task of tenant acme."""
    headers = keyed_server.headers("acme")
    with httpx.Client(base_url=keyed_server.base_url, timeout=10.0, headers=headers) as http:
        session = http.post("/v1/sessions", json={"title": "hostile"})
        assert session.status_code == 201, session.text
        sid = session.json()["session_id"]
        task = http.post(f"/v1/sessions/{sid}/tasks", json={"type": "report"})
        assert task.status_code == 201, task.text
        ids = {"session_id": sid, "task_id": task.json()["task_id"], "turn": "2"}
        spec = http.get("/openapi.json").json()
    found = []
    for path, operations in spec["paths"].items():
        for method in operations:
            if method in ("post", "patch", "put"):
                found.append((method.upper(), path.format(**ids)))
    assert ("POST", "/v1/sessions") in found
    assert ("POST", f"/v1/sessions/{ids['session_id']}/events") in found
    return found


@pytest.fixture(scope="module")
def http(keyed_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=keyed_server.base_url, timeout=30.0) as client:
        yield client


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), body=_bodies(), who=st.sampled_from(["acme", "none", "bad"]))
def test_no_json_text_reaches_a_500_on_any_route(
    http: httpx.Client,
    keyed_server: Any,
    routes: list[tuple[str, str]],
    data: st.DataObject,
    body: bytes,
    who: str,
) -> None:
    method, path = data.draw(st.sampled_from(routes), label="route")
    headers = {"Content-Type": "application/json"}
    if who == "acme":
        headers.update(keyed_server.headers("acme"))
    elif who == "bad":
        headers["Authorization"] = "Bearer aj_aaaaaaaaaa_" + "b" * 43
    response = http.request(method, path, content=body, headers=headers)
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        assert response.headers["content-type"].split(";")[0] == PROBLEM, response.text
        problem = response.json()
        assert problem["status"] == response.status_code
        assert problem["detail"].strip()


def test_a_huge_integer_is_400_before_authentication(http: httpx.Client) -> None:
    body = b'{"n": ' + b"1" * 4301 + b"}"
    response = http.post("/v1/sessions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    problem = response.json()
    assert response.headers["content-type"].split(";")[0] == PROBLEM
    assert "digits" in problem["detail"]


def test_a_number_past_a_double_is_refused_not_read_as_infinity(http: httpx.Client) -> None:
    body = json.dumps({"title": "t"}).replace('"t"}', '"t", "metadata": {"x": 1e400}}')
    response = http.post(
        "/v1/sessions", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code in (400, 422), response.text
    assert "1e400" in response.json()["detail"]


@pytest.mark.parametrize(
    "value", ["1" * 4301, "18446744073709551616", "1e400", '"\\ud800"', "[" * 70 + "]" * 70]
)
def test_every_route_and_field_answers_below_500(
    http: httpx.Client, keyed_server: Any, routes: list[tuple[str, str]], value: str
) -> None:
    # Every pairing, which the property above only samples: a field one route bounds and
    # another passes on to the database unbounded is found here.
    headers = {"Content-Type": "application/json", **keyed_server.headers("acme")}
    for method, path in routes:
        for template in _TEMPLATES:
            body = template.format(value).encode("utf-8", "surrogatepass")
            response = http.request(method, path, content=body, headers=headers)
            assert response.status_code < 500, (method, path, body[:200], response.text)


def test_token_counts_out_of_range_are_422_and_the_largest_is_201(
    http: httpx.Client, keyed_server: Any
) -> None:
    headers = keyed_server.headers("acme")
    sid = http.post("/v1/sessions", json={}, headers=headers).json()["session_id"]
    url = f"/v1/sessions/{sid}/events"

    def reply(count: int) -> httpx.Response:
        usage = {"prompt_tokens": count, "completion_tokens": 1}
        body = {"type": "assistant_message", "payload": {"content": "x", "usage": usage}}
        return http.post(url, json=body, headers=headers)

    for count in (2**31, 2**63 - 1, 2**63, 2**64):
        response = reply(count)
        assert response.status_code == 422, response.text
        assert "2147483647" in response.json()["detail"]
    assert reply(2**31 - 1).status_code == 201
    session = http.get(f"/v1/sessions/{sid}", headers=headers).json()
    assert (session["last_seq"], session["prompt_tokens"]) == (2, 2**31 - 1)
