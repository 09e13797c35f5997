"""Tool calls: a result needs its call, a call takes one result; the tool_calls projection."""

from __future__ import annotations

from agentjournal import Conflict, Journal, JournalError, UnknownToolCall
from expected import a, t
from helpers.contract import call, msg, rejected, result, seed


def test_result_without_a_call_is_unknown_tool_call(journal: Journal) -> None:
    sid = seed(journal)
    other = seed(journal, "other")
    journal.append(other, "tool_call", {"call_id": "only_there", "name": "n", "arguments": ""})
    for call_id in ("nope", "only_there"):
        error = rejected(
            journal,
            UnknownToolCall,
            lambda call_id=call_id: journal.append(
                sid, "tool_result", {"call_id": call_id, "content": "x"}
            ),
            match=call_id,
        )
        assert isinstance(error, LookupError)
        assert isinstance(error, JournalError)
    # A result before its call in one batch is no better.
    rejected(
        journal,
        UnknownToolCall,
        lambda: journal.append_many(sid, [result("c9", "x"), call("c9")]),
    )


def test_a_call_takes_one_result_and_a_call_id_is_used_once(journal: Journal) -> None:
    sid = seed(journal)
    rejected(
        journal,
        Conflict,
        lambda: journal.append(sid, "tool_result", {"call_id": "call_1", "content": "43"}),
    )
    rejected(
        journal,
        Conflict,
        lambda: journal.append(
            sid, "tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": ""}
        ),
    )
    # Within one batch.
    rejected(journal, Conflict, lambda: journal.append_many(sid, [call("c2"), call("c2")]))
    rejected(
        journal,
        Conflict,
        lambda: journal.append_many(sid, [call("c3"), result("c3", "a"), result("c3", "b")]),
    )
    # The same call_id in another session is fine: ids are per session.
    other = journal.create_session().session_id
    journal.append_many(other, [call("call_1"), result("call_1", "1")])
    assert [c.status for c in journal.tool_calls(other)] == ["ok"]


def test_tool_calls_projection(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(
        sid,
        [
            msg("user_message", "再查两次"),
            call("call_2", "lookup", '{"id": 2}'),
            call("call_3", "lookup", '{"id": 3}'),
            result("call_3", "boom", is_error=True),
        ],
    )
    rows = journal.tool_calls(sid)
    assert [
        (c.call_id, c.name, c.arguments, c.status, c.result, c.call_seq, c.result_seq) for c in rows
    ] == [
        ("call_1", "query_order_count", "{}", "ok", "42", 5, 6),
        ("call_2", "lookup", '{"id": 2}', "pending", None, 9, None),
        ("call_3", "lookup", '{"id": 3}', "error", "boom", 10, 11),
    ]
    assert {c.session_id for c in rows} == {sid}
    journal.append(sid, "tool_result", {"call_id": "call_2", "content": "fine", "is_error": False})
    row = journal.tool_calls(sid)[1]
    assert (row.status, row.result, row.result_seq) == ("ok", "fine", 12)
    # The pending call was left out of the replay; with its result it is in, in call order.
    assert journal.replay(sid)[-3:] == [
        a(None, ("call_2", "lookup", '{"id": 2}'), ("call_3", "lookup", '{"id": 3}')),
        t("call_2", "fine"),
        t("call_3", "boom"),
    ]
    assert journal.replay(sid, until=11)[-2:] == [
        a(None, ("call_3", "lookup", '{"id": 3}')),
        t("call_3", "boom"),
    ]
