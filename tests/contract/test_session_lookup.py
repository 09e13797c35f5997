"""Unknown and other tenants' sessions look alike to every verb; tenants see nothing shared."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentjournal import Journal, JournalError, SessionNotFound
from expected import settled_feed
from helpers.contract import SEED_REPLAY, msg, rejected, seed

VERBS: dict[str, Callable[[Journal, str], object]] = {
    "get_session": lambda j, s: j.get_session(s),
    "update_session": lambda j, s: j.update_session(s, title="x"),
    "archive": lambda j, s: j.update_session(s, status="archived"),
    "undelete": lambda j, s: j.update_session(s, status="active"),
    "delete_session": lambda j, s: j.delete_session(s),
    "purge_session": lambda j, s: j.purge_session(s),
    "append": lambda j, s: j.append(s, "user_message", {"content": "hi"}),
    "append_retry": lambda j, s: j.append(
        s, "user_message", {"content": "你好"}, idempotency_key="k2"
    ),
    "append_expected_seq": lambda j, s: j.append(
        s, "user_message", {"content": "hi"}, expected_seq=7
    ),
    "append_many": lambda j, s: j.append_many(s, [msg("user_message", "hi")]),
    "append_custom": lambda j, s: j.append(s, "myapp.note", {"x": 1}),
    "tool_result": lambda j, s: j.append(s, "tool_result", {"call_id": "call_1", "content": "x"}),
    "compact": lambda j, s: j.compact(s, 6, "summary"),
    "fork": lambda j, s: j.fork(s, 4),
    "fork_whole": lambda j, s: j.fork(s),
    "events": lambda j, s: j.events(s),
    "events_page": lambda j, s: j.events(s, after=2, limit=2),
    "messages": lambda j, s: j.messages(s),
    "messages_last": lambda j, s: j.messages(s, last=2),
    "tool_calls": lambda j, s: j.tool_calls(s),
    "replay": lambda j, s: j.replay(s),
    "replay_until": lambda j, s: j.replay(s, until=4),
    "replay_anthropic": lambda j, s: j.replay(s, format="anthropic"),
    "context": lambda j, s: j.context(s, max_tokens=100_000),
    "subscribe": lambda j, s: next(j.subscribe(s)),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_unknown_session_is_session_not_found(journal: Journal, verb: str) -> None:
    seed(journal)
    error = rejected(journal, SessionNotFound, lambda: VERBS[verb](journal, "sess_missing"))
    assert isinstance(error, LookupError)
    assert isinstance(error, JournalError)
    assert error.session_id == "sess_missing"


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_another_tenants_session_looks_exactly_like_a_missing_one(
    journal: Journal, verb: str
) -> None:
    sid = seed(journal)
    other = journal.for_tenant("b")
    with pytest.raises(SessionNotFound) as missing:
        VERBS[verb](other, "sess_missing")
    error = rejected(journal, SessionNotFound, lambda: VERBS[verb](other, sid))
    assert type(error) is type(missing.value)
    assert str(error) == str(missing.value).replace("sess_missing", sid)
    # Tenant A's session is whole afterwards.
    assert journal.replay(sid) == SEED_REPLAY


def test_tenants_see_nothing_of_each_other(journal: Journal) -> None:
    sid = seed(journal)
    other = journal.for_tenant("b")
    assert other.sessions(status="all") == []
    assert other.events_all() == []
    report = other.verify()
    assert report.ok
    assert (report.sessions_checked, report.events_checked) == (0, 0)
    mine = other.create_session("b's", idempotency_key="same-key")
    theirs = journal.create_session("a's", idempotency_key="same-key")
    assert mine.session_id != theirs.session_id
    assert mine.tenant == "b"
    assert [s.session_id for s in other.sessions()] == [mine.session_id]
    assert {e.session_id for e in settled_feed(other)} == {mine.session_id}
    assert {e.session_id for e in settled_feed(journal)} == {sid, theirs.session_id}
    assert sid not in {s.session_id for s in other.sessions(status="all")}
