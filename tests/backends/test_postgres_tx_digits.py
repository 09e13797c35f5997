"""Positions whose transaction ids straddle a power of ten (tx 999 and tx 1000): the feed's head,
the purges and their head must order them as numbers, not as text ('999' sorts after '1000').
A fresh private cluster (tests/helpers/pg_cluster.py) hands out transaction ids from a few
hundred, so a test can write on both sides of 1000; the shared server's ids are past any such
boundary for long stretches, which is how this hid there."""

from __future__ import annotations

import psycopg

from agentjournal import Journal
from agentjournal.transfer import committed_events
from helpers.pg_cluster import private_cluster


def test_feed_head_and_purges_order_transactions_as_numbers_across_1000() -> None:
    with private_cluster() as cluster, Journal.open(cluster.app_url) as journal:
        early = [journal.create_session(f"early {n}").session_id for n in range(3)]
        journal.purge_session(early[0], actor="test")
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            while int(admin.execute("SELECT pg_current_xact_id()::text").fetchone()[0]) < 1000:
                pass  # each autocommit statement here takes a transaction id of its own
        late = [journal.create_session(f"late {n}").session_id for n in range(3)]
        journal.purge_session(early[1], actor="test")
        journal.purge_session(late[0], actor="test")

        events = list(committed_events(journal))
        assert [e.session_id for e in events] == [early[2], *late[1:]]
        assert journal.feed_head() == events[-1].position
        purges = journal.purges(limit=10)
        assert [p.session_id for p in purges] == [early[0], early[1], late[0]]
        assert journal.purge_head() == purges[-1].position
        assert journal.purges(after=purges[0].position) == purges[1:]
