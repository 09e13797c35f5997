"""Idempotency keys: a retry returns the original, a key reused for anything else conflicts."""

from __future__ import annotations

import threading
from typing import Any

from agentjournal import Conflict, Journal, JournalError
from helpers.contract import PROMPT, SEED, call, msg, rejected, result, seed, state


def test_idempotency_key_reused_for_another_event_is_a_conflict(journal: Journal) -> None:
    sid = seed(journal)
    for type_, payload in [
        ("user_message", {"content": "你好!"}),  # other payload
        ("system_message", {"content": "你好"}),  # other type
        ("user_message", {"content": "你好", "extra": 1}),
    ]:
        rejected(
            journal,
            Conflict,
            lambda type_=type_, payload=payload: journal.append(
                sid, type_, payload, idempotency_key="k2"
            ),
        )


def test_a_partial_batch_key_match_writes_nothing(journal: Journal) -> None:
    sid = seed(journal)
    original = msg("user_message", "你好", "k2")
    for batch in (
        [original, msg("user_message", "new", "fresh")],
        [original, msg("user_message", "new")],
        [msg("user_message", "new", "fresh"), original],
        [
            original,
            msg("assistant_message", "你好！我是订单客服助手，可以帮你查询订单数量。", "kX"),
        ],
    ):
        rejected(journal, Conflict, lambda batch=batch: journal.append_many(sid, batch))


def test_retry_with_the_same_key_returns_the_original(journal: Journal) -> None:
    sid = seed(journal)
    first = journal.append(sid, "myapp.note", {"b": 1, "a": [1, 2]}, idempotency_key="note-1")
    journal.append(sid, "user_message", {"content": "later"})
    before = state(journal)
    again = journal.append(sid, "myapp.note", {"a": [1, 2], "b": 1}, idempotency_key="note-1")
    assert again == first
    assert (again.event_id, again.seq, again.position) == (first.event_id, 8, first.position)
    assert state(journal) == before
    # The seed's own keys work the same way.
    first_seed = SEED[0]
    retried = journal.append(sid, first_seed.type, first_seed.payload, idempotency_key="k2")
    assert retried == journal.events(sid)[1]
    assert state(journal) == before


def test_retry_of_a_whole_batch_returns_the_original_batch(journal: Journal) -> None:
    sid = seed(journal)
    batch = [
        msg("user_message", "再查一次", "t2-u"),
        {**call("call_2"), "idempotency_key": "t2-c"},
        {**result("call_2", "43"), "idempotency_key": "t2-r"},
    ]
    first = journal.append_many(sid, batch, expected_seq=7)
    assert [e.seq for e in first] == [8, 9, 10]
    journal.append(sid, "assistant_message", {"content": "43"})
    before = state(journal)
    # Keys are checked before expected_seq: a retry with the now stale expected_seq is a retry.
    assert journal.append_many(sid, batch, expected_seq=7) == first
    assert journal.append_many(sid, batch) == first
    assert journal.append(sid, **{**batch[0], "expected_seq": 7}) == first[0]
    assert state(journal) == before


def test_a_retry_must_repeat_the_batch_as_it_was(journal: Journal) -> None:
    sid = seed(journal)
    one = msg("user_message", "first", "k-one")
    two = msg("user_message", "second", "k-two")
    three = msg("user_message", "third", "k-three")
    journal.append_many(sid, [one, two])
    journal.append(sid, "assistant_message", {"content": "between"})
    journal.append_many(sid, [three])
    # Same keys, same payloads, but not one run of events in this order: not a retry.
    rejected(journal, Conflict, lambda: journal.append_many(sid, [two, one]), "appended together")
    rejected(journal, Conflict, lambda: journal.append_many(sid, [two, three]), "appended together")


def test_keys_are_per_session(journal: Journal) -> None:
    one = seed(journal)
    two = journal.create_session().session_id
    event = journal.append(two, "user_message", {"content": "你好"}, idempotency_key="k2")
    assert (event.session_id, event.seq) == (two, 2)
    assert journal.events(one)[1].idempotency_key == "k2"


def test_create_session_with_an_idempotency_key(journal: Journal) -> None:
    kwargs: dict[str, Any] = {"model": "m", "system_prompt": PROMPT, "metadata": {"agent": "o"}}
    first, created = journal.create_session_ex("订单客服", idempotency_key="c1", **kwargs)
    assert created
    before = state(journal)
    again, created = journal.create_session_ex("订单客服", idempotency_key="c1", **kwargs)
    assert not created
    assert again == first
    assert journal.create_session("订单客服", idempotency_key="c1", **kwargs) == first
    assert state(journal) == before
    rejected(journal, Conflict, lambda: journal.create_session("另一个", idempotency_key="c1"))
    rejected(
        journal,
        Conflict,
        lambda: journal.create_session(
            "订单客服", idempotency_key="c1", **{**kwargs, "system_prompt": "other"}
        ),
    )
    assert journal.events(first.session_id)[0].idempotency_key == "c1"


def test_fork_with_an_idempotency_key(journal: Journal) -> None:
    sid = seed(journal)
    other = seed(journal, "other")
    fork = journal.fork(sid, 4, idempotency_key="f1")
    before = state(journal)
    assert journal.fork(sid, 4, idempotency_key="f1") == fork
    assert state(journal) == before
    rejected(journal, Conflict, lambda: journal.fork(sid, 6, idempotency_key="f1"))
    rejected(journal, Conflict, lambda: journal.fork(other, 4, idempotency_key="f1"))
    rejected(journal, Conflict, lambda: journal.create_session("x", idempotency_key="f1"))


def test_fork_with_a_key_used_by_create_session_is_a_conflict(journal: Journal) -> None:
    sid = seed(journal)
    journal.create_session("made", idempotency_key="c1")
    rejected(journal, Conflict, lambda: journal.fork(sid, 4, idempotency_key="c1"))


def test_one_session_when_processes_race_to_create_it_with_one_key(journal_url: str) -> None:
    """Two processes (two journals) start the same conversation at once, with the same session
    id and idempotency key: each gets the same session, and exactly one of them created it.
    On PostgreSQL the loser once saw the winner's row half-way through its own checks and was
    told the id was taken."""

    def create(journal: Journal, name: str, start: threading.Barrier, out: list[Any]) -> None:
        start.wait()
        try:
            session, created = journal.create_session_ex(
                "same", session_id=name, idempotency_key=name
            )
        except JournalError as exc:
            out.append(exc)
        else:
            out.append((session.session_id, created))

    with Journal.open(journal_url) as first, Journal.open(journal_url) as second:
        for round_ in range(40):
            name, start, results = f"race-{round_}", threading.Barrier(4), []
            threads = [
                threading.Thread(target=create, args=(journal, name, start, results))
                for journal in (first, second) * 2
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(results, key=repr) == [(name, False)] * 3 + [(name, True)]
