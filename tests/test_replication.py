"""Replication (agentjournal.replication): a source journal's tenant applied to a target exactly
once, on SQLite -> SQLite, SQLite -> PostgreSQL and PostgreSQL -> SQLite. The target comes out as
if the events had been appended there (projections, search, verify); a replicator stopped
anywhere resumes without a gap or a duplicate; conflicts and refusals are per session; purges
follow."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, ReplicationReport, replicate
from agentjournal.backends import ReplicatedSession
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound, SourceDiverged
from agentjournal.replication import CATCH_UP_SECONDS, MAX_BATCH, BatchReport, _Replicator
from agentjournal.replication_apply import ReplicationBatch
from agentjournal.transfer import committed_events
from expected import settled_feed, settled_purges
from postgres_fixtures import fresh_schema, url_for
from test_transfer import build_rich, snapshot

PAIRS = ["sqlite-sqlite", "sqlite-postgres", "postgres-sqlite"]


def open_url(kind: str, tmp_path: Path, name: str, stack: ExitStack) -> str:
    if kind == "sqlite":
        return str(tmp_path / f"{name}.db")
    return url_for(stack.enter_context(fresh_schema(name)))


@pytest.fixture(params=PAIRS)
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(source URL, target URL) of two empty journals of the pair's backends."""
    source_kind, target_kind = str(request.param).split("-")
    with ExitStack() as stack:
        yield (
            open_url(source_kind, tmp_path, "source", stack),
            open_url(target_kind, tmp_path, "target", stack),
        )


@pytest.fixture
def source(urls: tuple[str, str]) -> Iterator[Journal]:
    with Journal.open(urls[0]) as journal:
        yield journal


@pytest.fixture
def target(urls: tuple[str, str]) -> Iterator[Journal]:
    with Journal.open(urls[1]) as journal:
        yield journal


def feed(journal: Journal) -> list[tuple[str, int, str, Any, int, str | None]]:
    """Every event of the tenant as a reader compares them: no ids or positions."""
    return [
        (e.session_id, e.seq, e.type, e.payload, e.created_at, e.idempotency_key)
        for e in committed_events(journal)
    ]


def per_session(journal: Journal) -> dict[str, list[tuple[Any, ...]]]:
    sessions: dict[str, list[tuple[Any, ...]]] = {}
    for event in feed(journal):
        sessions.setdefault(event[0], []).append(event)
    return sessions


def fates(journal: Journal) -> dict[str, str]:
    rows = journal.replicated_sessions()
    return {row.session_id: row.state for row in rows}


def test_a_rich_journal_replicates_as_if_appended_there(source: Journal, target: Journal) -> None:
    session_ids = build_rich(source)

    batches: list[BatchReport] = []
    report = replicate(source, target, batch_size=7, on_batch=batches.append)

    assert report.events_read == report.appended == len(feed(source))
    # Catching up, batches start at batch_size and may grow (never shrink below it).
    assert report.batches == len(batches) <= -(-report.events_read // 7)
    assert batches[0].events_read == 7
    assert all(b.events_read >= 7 for b in batches[:-1])
    assert sum(b.events_read for b in batches) == report.events_read
    assert (report.conflicts, report.stopped, report.skipped) == ([], {}, 0)
    assert snapshot(target, session_ids) == snapshot(source, session_ids)
    assert per_session(target) == per_session(source)
    assert target.verify().ok
    assert source.verify().ok
    assert [h.session_id for h in target.search("订单").hits] == [
        h.session_id for h in source.search("订单").hits
    ]
    assert set(fates(target).values()) == {"ok"}
    # Caught up: a second run reads nothing and writes nothing.
    again = replicate(source, target)
    assert (again.batches, again.events_read) == (0, 0)
    assert again.position == report.position


def test_batches_grow_while_behind_within_their_time_and_shrink_once_caught_up(
    source: Journal, target: Journal
) -> None:
    replicator = _Replicator(source, target, 10)

    def after(events: int, size: int, seconds: float) -> int:
        caught_up = events < size
        report = BatchReport(events, events, 0, 0, [], {}, [], "1", 0, caught_up)
        replicator.resize(report, size, seconds)
        return replicator.size

    assert after(10, 10, 0.01) == 20  # full and quick: doubles
    assert after(20, 20, 0.01) == 40
    assert after(40, 40, CATCH_UP_SECONDS) == 40  # at its time: stays
    assert after(40, 40, CATCH_UP_SECONDS * 2) == 20  # too long: halves
    assert after(20, 20, CATCH_UP_SECONDS * 2) == 10
    assert after(10, 10, CATCH_UP_SECONDS * 2) == 10  # never below batch_size
    assert after(8000, 8000, 0.01) == MAX_BATCH
    assert after(MAX_BATCH, MAX_BATCH, 0.01) == MAX_BATCH
    assert after(3, MAX_BATCH, 0.01) == 10  # a short page: caught up, small batches again


def test_it_resumes_where_the_target_says_without_gap_or_duplicate(
    source: Journal, target: Journal
) -> None:
    build_rich(source)

    class Interrupted(Exception):
        pass

    def interrupt_after(count: int) -> Any:
        seen = []

        def on_batch(batch: BatchReport) -> None:
            seen.append(batch)
            if len(seen) == count:
                raise Interrupted

        return on_batch

    for stop_after in (1, 2, 1, 3):
        with pytest.raises(Interrupted):
            replicate(source, target, batch_size=3, on_batch=interrupt_after(stop_after))
        sid = source.sessions(limit=1)[0].session_id
        source.append(sid, "myapp.tick", {"n": stop_after})
    replicate(source, target, batch_size=3)

    assert feed(target) == feed(source)
    assert target.verify().ok
    (progress,) = target.replication_status()
    assert progress.events == len(feed(source))


def test_concurrent_replicators_apply_each_batch_once(source: Journal, target: Journal) -> None:
    sid = source.create_session("busy").session_id
    for n in range(60):
        source.append(sid, "user_message", {"content": f"m{n}"})
    reports: list[ReplicationReport] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reports.append(replicate(source, target, batch_size=4))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sum(r.appended for r in reports) == 61
    assert feed(target) == feed(source)


def test_a_session_id_taken_in_the_target_is_a_conflict_and_the_rest_goes_on(
    source: Journal, target: Journal
) -> None:
    taken = source.create_session("mine", session_id="user-42").session_id
    source.append(taken, "user_message", {"content": "from the laptop"})
    other = source.create_session("other").session_id
    source.append(other, "user_message", {"content": "fine"})
    target.create_session("already here", session_id="user-42")

    report = replicate(source, target)
    source.append(taken, "user_message", {"content": "later"})
    later = replicate(source, target)

    assert report.conflicts == ["user-42"]
    assert later.conflicts == []
    assert (report.skipped, later.skipped) == (2, 1)
    assert target.get_session("user-42").title == "already here"
    assert target.get_session("user-42").last_seq == 1
    assert per_session(target)[other] == per_session(source)[other]
    assert fates(target) == {"user-42": "conflict", other: "ok"}
    (row,) = target.replicated_sessions(state="conflict")
    assert row.error == "the session id is another session's in the target"
    assert target.verify().ok


def test_two_sources_share_a_target_and_a_taken_id_is_the_second_ones_conflict(
    tmp_path: Path, target: Journal
) -> None:
    with Journal.open(tmp_path / "a.db") as a, Journal.open(tmp_path / "b.db") as b:
        assert a.source_id() != b.source_id()
        a.create_session("a's", session_id="shared")
        a_own = a.create_session("a only").session_id
        b.create_session("b's", session_id="shared")
        b_own = b.create_session("b only").session_id

        assert replicate(a, target).conflicts == []
        assert replicate(b, target).conflicts == ["shared"]

        assert target.get_session("shared").title == "a's"
        assert {a_own, b_own} <= {s.session_id for s in target.sessions()}
        statuses = {s.source_id for s in target.replication_status()}
        assert statuses == {a.source_id(), b.source_id()}


def test_the_target_names_each_replicated_sessions_source_within_its_tenant(
    source: Journal, target: Journal
) -> None:
    mine = source.create_session("edge").session_id
    taken = source.create_session("taken", session_id="taken-here").session_id
    fleet = target.for_tenant("fleet")
    fleet.create_session("written here", session_id=taken)
    local = fleet.create_session("local").session_id

    replicate(source, target, tenant="fleet")

    sid = source.source_id()
    # "taken-here" was already the target's own (a conflict): it names no source, nor does a
    # session written here; another tenant sees none of fleet's.
    assert fleet.session_sources([mine, taken, local, "nowhere"]) == {mine: sid}
    assert target.session_sources([mine, taken]) == {}
    assert target.for_tenant("other").session_sources([mine]) == {}
    assert target.session_sources([]) == {}
    with pytest.raises(InvalidArgument):
        target.session_sources("not-a-list")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        target.session_sources([""])


def test_sessions_keep_their_ids_in_the_chosen_tenant(source: Journal, target: Journal) -> None:
    sid = source.create_session("edge").session_id

    report = replicate(source, target, tenant="fleet")

    assert report.tenant == "fleet"
    assert target.for_tenant("fleet").get_session(sid).title == "edge"
    with pytest.raises(SessionNotFound):
        target.get_session(sid)


def test_an_event_the_target_refuses_stops_that_session_only(
    source: Journal, target: Journal
) -> None:
    hijacked = source.create_session("written into at the target").session_id
    source.append(hijacked, "user_message", {"content": "one"})
    fine = source.create_session("fine").session_id
    replicate(source, target)
    # Someone appends to the replica directly: the source's next seq no longer fits.
    target.append(hijacked, "user_message", {"content": "written at the target"})
    source.append(hijacked, "user_message", {"content": "two"})
    source.append(hijacked, "user_message", {"content": "three"})
    source.append(fine, "user_message", {"content": "still flows"})

    report = replicate(source, target)

    assert list(report.stopped) == [hijacked]
    assert report.stopped[hijacked].startswith("seq 3 (user_message): Conflict: expected_seq=2")
    assert report.skipped == 2
    assert report.appended == 1
    assert per_session(target)[fine] == per_session(source)[fine]
    source.append(hijacked, "user_message", {"content": "four"})
    assert replicate(source, target).skipped == 1  # stopped stays stopped
    assert fates(target)[hijacked] == "stopped"
    assert target.verify().ok


def test_a_payload_too_large_for_the_target_stops_its_session(
    urls: tuple[str, str], source: Journal
) -> None:
    sid = source.create_session("big").session_id
    source.append(sid, "user_message", {"content": "x" * 5000})
    small = source.create_session("small").session_id
    with Journal.open(urls[1], max_payload_bytes=1024) as target:
        report = replicate(source, target)
        assert list(report.stopped) == [sid]
        assert "PayloadTooLarge" in report.stopped[sid]
        assert target.get_session(sid).last_seq == 1
        assert target.get_session(small).last_seq == 1


def test_a_purge_follows_and_the_session_is_never_created_again(
    source: Journal, target: Journal
) -> None:
    sid = source.create_session("private").session_id
    source.append(sid, "user_message", {"content": "my secret"})
    kept = source.create_session("kept").session_id
    replicate(source, target)
    assert target.get_session(sid).last_seq == 2

    source.purge_session(sid, actor="alice")
    report = replicate(source, target)

    assert (report.purged, report.purges_followed) == ([sid], 1)
    with pytest.raises(SessionNotFound):
        target.get_session(sid)
    assert target.search("secret").hits == []
    assert target.get_session(kept).title == "kept"
    # The same id made again at the source is not brought back.
    source.create_session("again", session_id=sid)
    again = replicate(source, target)
    assert again.skipped == 1
    with pytest.raises(SessionNotFound):
        target.get_session(sid)
    assert fates(target)[sid] == "purged"
    assert target.verify().ok
    assert source.verify().ok


def test_a_session_purged_before_it_reached_the_target_is_never_created(
    source: Journal, target: Journal
) -> None:
    sid = source.create_session("short-lived").session_id
    source.purge_session(sid)

    report = replicate(source, target)

    assert report.purges_followed == 1
    assert report.purged == []
    assert fates(target) == {sid: "purged"}
    with pytest.raises(SessionNotFound):
        target.get_session(sid)


def test_a_late_batch_read_before_a_purge_does_not_outlive_it(
    source: Journal, target: Journal
) -> None:
    sid = source.create_session("racing").session_id
    source.append(sid, "user_message", {"content": "read, then purged"})
    replicator = _Replicator(source, target, 100)
    expected = replicator.progress()
    # The page is read, then the source purges the session, then the purges are read (each
    # once PostgreSQL shows it: another client's transaction can hold it back for a moment).
    page = settled_feed(source)
    source.purge_session(sid)
    purges = settled_purges(source, 1)
    prepared = [replicator.prepare(event) for event in page]
    batch = target.apply_replication_batch(
        ReplicationBatch(replicator.source_id, "default", expected, page, prepared, purges, 100)
    )

    assert batch.purged == [sid]
    with pytest.raises(SessionNotFound):
        target.get_session(sid)
    assert replicate(source, target).events_read == 0
    assert target.verify().ok


def test_catch_up_follows_a_purge_an_older_transaction_holds_back(tmp_path: Path) -> None:
    import psycopg

    from postgres_fixtures import ADMIN_URL

    with fresh_schema("held") as schema, Journal.open(url_for(schema)) as source:
        sid = source.create_session("purged while held").session_id
        target_path = tmp_path / "target.db"
        replicate(source, target_path)
        with psycopg.connect(ADMIN_URL) as older:
            older.execute("SELECT pg_current_xact_id()")  # an open transaction with an id
            source.purge_session(sid)
            # Committed, yet not shown until `older` ends; its head says it is there.
            assert source.purges() == []
            assert source.purge_head() is not None
            # Catch-up waits for it: `older` ends half a second into the call.
            ending = threading.Timer(0.5, older.rollback)
            ending.start()
            report = replicate(source, target_path)
            ending.join()
        assert (report.purged, report.purges_followed) == ([sid], 1)
        with Journal.open(target_path) as target, pytest.raises(SessionNotFound):
            target.get_session(sid)


def test_replicating_a_database_into_itself_is_refused(source: Journal) -> None:
    with pytest.raises(InvalidArgument, match="same database"):
        replicate(source, source)
    with pytest.raises(InvalidArgument, match="same database"):
        replicate(source, source.for_tenant("copy"))


def test_urls_open_and_close_their_journals(urls: tuple[str, str], source: Journal) -> None:
    sid = source.create_session("by url").session_id

    report = replicate(urls[0], urls[1])

    assert report.appended == 1
    with Journal.open(urls[1]) as target:
        assert target.get_session(sid).title == "by url"
        rows = target.replicated_sessions(source_id=report.source_id)
        assert rows == [
            ReplicatedSession(sid, "default", report.source_id, "ok", None, rows[0].updated_at)
        ]


def test_bad_arguments_are_typed_errors_and_write_nothing(source: Journal, target: Journal) -> None:
    source.create_session("one")
    for call in (
        lambda: replicate(source, target, batch_size=0),
        lambda: replicate(source, target, tenant="*"),
        lambda: replicate(source, target, poll_interval=0),
        lambda: source.purges(after="not a position"),
        lambda: source.purges(limit=0),
        lambda: target.replicated_sessions(state="merged"),
    ):
        with pytest.raises(InvalidArgument):
            call()
    assert target.replication_status() == []
    assert target.sessions() == []


def test_the_purge_audit_reads_in_commit_order_and_resumes(source: Journal) -> None:
    ids = [source.create_session(f"s{n}").session_id for n in range(3)]
    for sid in ids:
        source.purge_session(sid, actor="ops")
    settled_purges(source, 3)  # on PostgreSQL, once every older transaction has ended

    first = source.purges(limit=2)
    rest = source.purges(after=first[-1].position)

    assert [p.session_id for p in first + rest] == ids
    assert {(p.purged_by, p.event_count) for p in first + rest} == {("ops", 1)}
    assert source.purges(after=rest[-1].position) == []
    assert source.purge_head() == rest[-1].position
    assert source.purge_head(after=first[-1].position) == rest[-1].position
    assert source.purge_head(after=rest[-1].position) is None


def test_a_batch_the_database_refuses_is_narrowed_to_its_session(
    source: Journal, target: Journal
) -> None:
    # One source into two tenants of one target: task ids are unique across a database's
    # tenants, so the second copy of the task is refused by the database, not by a rule.
    sid = source.create_session("with a task").session_id
    source.create_task(sid, "report")
    others = [source.create_session(f"plain {n}").session_id for n in range(3)]
    replicate(source, target, tenant="first")

    report = replicate(source, target, tenant="second", batch_size=4)

    assert list(report.stopped) == [sid]
    assert "task" in report.stopped[sid].lower()
    second = target.for_tenant("second")
    assert second.get_session(sid).last_seq == 1
    assert [second.get_session(o).title for o in others] == ["plain 0", "plain 1", "plain 2"]
    assert second.verify().ok


def backup(source: Path, to: Path) -> None:
    """A consistent copy of a SQLite journal file (its id and all), as a backup makes."""
    with closing(sqlite3.connect(source)) as original, closing(sqlite3.connect(to)) as copy:
        original.backup(copy)


def test_a_source_restored_from_an_older_backup_is_refused(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "edge.db") as edge, Journal.open(tmp_path / "hub.db") as hub:
        sid = edge.create_session("desk").session_id
        edge.append(sid, "user_message", {"content": "before the backup"})
        backup(tmp_path / "edge.db", tmp_path / "backup.db")
        edge.append(sid, "user_message", {"content": "after the backup"})
        newer = edge.create_session("made after the backup").session_id
        replicate(edge, hub)
    with Journal.open(tmp_path / "backup.db") as restored, Journal.open(tmp_path / "hub.db") as hub:
        before = feed(hub)
        with pytest.raises(SourceDiverged, match="older backup"):
            replicate(restored, hub)
        # Written again after the restore, past where the target was: the same seq now holds
        # another event.
        restored.append(sid, "user_message", {"content": "a different third event"})
        restored.append(sid, "user_message", {"content": "and a fourth"})
        with pytest.raises(SourceDiverged, match=f"session {sid} holds a different event"):
            replicate(restored, hub)
        assert feed(hub) == before
        assert newer in {s.session_id for s in hub.sessions()}
        assert hub.verify().ok


def test_a_copy_of_a_source_that_went_its_own_way_is_refused(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "a.db") as a, Journal.open(tmp_path / "hub.db") as hub:
        sid = a.create_session("shared history").session_id
        replicate(a, hub)
        backup(tmp_path / "a.db", tmp_path / "b.db")
        a.append(sid, "user_message", {"content": "from a"})
        replicate(a, hub)
        with Journal.open(tmp_path / "b.db") as b:
            assert b.source_id() == a.source_id()
            b.append(sid, "user_message", {"content": "from b"})
            b.append(sid, "user_message", {"content": "b again"})
            with pytest.raises(SourceDiverged) as refused:
                replicate(b, hub)
            assert isinstance(refused.value, Conflict)
            assert f"session {sid} holds a different event at seq 2" in str(refused.value)
            # Into a target tenant of its own, the copy replicates.
            assert replicate(b, hub, tenant="copy-b").appended == 3
        # The original carries on, and a source whose history is intact is never refused.
        a.append(sid, "user_message", {"content": "a again"})
        assert replicate(a, hub).appended == 1
        assert [m.content for m in hub.messages(sid)] == ["from a", "a again"]


def test_the_targets_own_write_to_a_replicated_session_is_not_a_divergence(
    source: Journal, target: Journal
) -> None:
    sid = source.create_session("desk").session_id
    replicate(source, target)
    target.update_session(sid, status="archived")  # seq 2 at the hub
    source.append(sid, "user_message", {"content": "seq 2 at the edge"})

    report = replicate(source, target)
    again = replicate(source, target)

    assert list(report.stopped) == [sid]
    assert again.events_read == 0
    assert target.get_session(sid).status == "archived"


@pytest.mark.parametrize("hub_kind", ["sqlite", "postgres"])
def test_a_copy_diverging_in_a_session_long_inactive_is_refused(
    tmp_path: Path, hub_kind: str
) -> None:
    # The start-up check covers every session the target holds of the source, not only the
    # most recently active ones: here 150 sessions were active after the one that differs.
    with ExitStack() as stack:
        hub_url = open_url(hub_kind, tmp_path, "hub", stack)
        with Journal.open(tmp_path / "a.db") as a, Journal.open(hub_url) as hub:
            old = a.create_session("old history").session_id
            backup(tmp_path / "a.db", tmp_path / "b.db")
            a.append(old, "user_message", {"content": "from a"})
            for n in range(150):
                a.create_session(f"newer {n}")
            replicate(a, hub, batch_size=1000)
            recent = {s.session_id for s in hub.sessions(status="all", limit=100)}
            assert old not in recent
            before = feed(hub)
            with Journal.open(tmp_path / "b.db") as b:
                # The copy's own history, at positions the target has passed (and past them,
                # so that its feed does not end early).
                b.append(old, "user_message", {"content": "from b"})
                for n in range(200):
                    b.create_session(f"b's own {n}")
                with pytest.raises(SourceDiverged, match=f"session {old} holds a different"):
                    replicate(b, hub)
            assert feed(hub) == before
            a.append(old, "user_message", {"content": "a again"})
            assert replicate(a, hub).appended == 1
