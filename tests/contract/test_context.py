"""context(): the longest replay suffix within the budget, cut only before a user message."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentjournal import ContextTooLarge, InvalidArgument, Journal, JournalError
from agentjournal.replay import estimate_tokens
from helpers.contract import PROMPT, SEED_REPLAY, SUMMARY, call, msg, result, seed, state, sys_


def header_length(replayed: list[dict[str, Any]]) -> int:
    """Leading system messages: the prompt and the compaction summary (no system_message here)."""
    count = 0
    while count < len(replayed) and replayed[count]["role"] == "system":
        count += 1
    return count


def brute_context(replayed: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]] | None:
    """The longest suffix of the replay that fits, cut only before a user message."""
    head = header_length(replayed)
    header, body = replayed[:head], replayed[head:]
    fixed = sum(estimate_tokens(m) for m in header)
    suffix = [0] * (len(body) + 1)
    for i in range(len(body) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + estimate_tokens(body[i])
    for start in [0] + [i for i, m in enumerate(body) if m["role"] == "user"]:
        if fixed + suffix[start] <= max_tokens:
            return header + body[start:]
    return None


def check_context(journal: Journal, sid: str, budgets: list[int]) -> None:
    replayed = journal.replay(sid)
    assert isinstance(replayed, list)
    for budget in budgets:
        expected = brute_context(replayed, budget)
        if expected is None:
            with pytest.raises(ContextTooLarge):
                journal.context(sid, max_tokens=budget)
        else:
            got = journal.context(sid, max_tokens=budget)
            assert got == expected, budget
            body = got[header_length(got) :]
            assert body == replayed[len(replayed) - len(body) :]
            if len(body) < len(replayed) - header_length(replayed):
                assert body[0]["role"] == "user"


def total_tokens(journal: Journal, sid: str) -> int:
    return sum(estimate_tokens(m) for m in journal.replay(sid))


def test_context_cuts_only_before_user_messages(journal: Journal) -> None:
    sid = seed(journal)
    # A result appended after the next user message still stays with its call.
    journal.append_many(
        sid,
        [
            msg("user_message", "再查一次"),
            call("call_2"),
            msg("user_message", "快一点"),
            result("call_2", "43"),
            msg("assistant_message", "现在有 43 个。"),
        ],
    )
    total = total_tokens(journal, sid)
    check_context(journal, sid, list(range(1, total + 3)))
    assert journal.context(sid, max_tokens=total) == journal.replay(sid)
    fitted = journal.context(sid, max_tokens=total - 1)
    assert isinstance(fitted, list)
    assert fitted[0] == sys_(PROMPT)
    assert fitted[1]["role"] == "user"


def test_context_too_large_when_nothing_fits(journal: Journal) -> None:
    sid = seed(journal)
    before = state(journal)
    with pytest.raises(ContextTooLarge) as caught:
        journal.context(sid, max_tokens=1)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, JournalError)
    smallest = estimate_tokens(sys_(PROMPT)) + sum(estimate_tokens(m) for m in SEED_REPLAY[3:])
    assert journal.context(sid, max_tokens=smallest) == [SEED_REPLAY[0], *SEED_REPLAY[3:]]
    with pytest.raises(ContextTooLarge):
        journal.context(sid, max_tokens=smallest - 1)
    assert state(journal) == before
    with pytest.raises(InvalidArgument):
        journal.context(sid, max_tokens=0)


def test_context_counts_the_compaction_summary(journal: Journal, long_seed: str) -> None:
    sid = long_seed
    journal.compact(sid, 7, SUMMARY * 5)
    replayed = journal.replay(sid)
    assert replayed[1] == sys_(SUMMARY * 5)
    total = total_tokens(journal, sid)
    assert journal.context(sid, max_tokens=total) == replayed
    with pytest.raises(ContextTooLarge):
        journal.context(sid, max_tokens=total - 1)  # the only user message is the first
    check_context(journal, sid, list(range(1, total + 2)))


def test_context_with_a_tokenizer(journal: Journal) -> None:
    sid = seed(journal)
    assert journal.context(sid, max_tokens=7, tokenizer=lambda m: 1) == SEED_REPLAY
    assert journal.context(sid, max_tokens=6, tokenizer=lambda m: 1) == [
        SEED_REPLAY[0],
        *SEED_REPLAY[3:],
    ]


def build_long_session(journal: Journal, turns: int, rng: random.Random) -> str:
    sid = journal.create_session("long", system_prompt=PROMPT).session_id
    batch: list[dict[str, Any]] = []
    for turn in range(turns):
        batch.append(msg("user_message", "问" * rng.randint(1, 40)))
        if rng.random() < 0.4:
            calls = [f"c{turn}_{i}" for i in range(rng.randint(1, 2))]
            batch += [call(c, "lookup", "x" * rng.randint(0, 30)) for c in calls]
            batch += [result(c, "r" * rng.randint(0, 60)) for c in calls]
        batch.append(msg("assistant_message", "答" * rng.randint(0, 80)))
        if len(batch) >= 200:
            journal.append_many(sid, batch)
            batch = []
    if batch:
        journal.append_many(sid, batch)
    return sid


def test_context_of_a_long_session_is_the_right_suffix(journal: Journal) -> None:
    rng = random.Random(20240601)
    sid = build_long_session(journal, 700, rng)
    assert journal.get_session(sid).last_seq >= 2000
    total = total_tokens(journal, sid)
    budgets = [1, 10, 30, 60, 100, 250, 1000, 4000, total // 3, total // 2, total - 1, total]
    budgets += [rng.randint(1, total) for _ in range(10)]
    check_context(journal, sid, budgets)
    # With a compaction in the middle, the summary leads and counts.
    events = journal.events(sid, limit=10_000)
    until = next(e.seq for e in events[1000:] if e.type == "user_message") - 1
    journal.compact(sid, until, "summary of the first thousand events")
    total = total_tokens(journal, sid)
    check_context(journal, sid, [1, 50, 500, 3000, total // 2, total - 1, total, total + 1])
