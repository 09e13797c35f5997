"""The PostgreSQL global feed under the stress harness (`bench/feed_stress.py`): writer processes
appending, batching, sleeping inside their transactions, forking, running tasks and importing,
with the cores kept busy, while a reader resumes after its last position with random page sizes.
Every stored event is read exactly once, positions ascend, each session's seqs ascend, and every
position is the stored (tx, event_id). `make bench-feed` runs the same harness for minutes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from postgres_fixtures import ADMIN_URL, HOST, ROLE, require_postgres

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import feed_stress

pytestmark = pytest.mark.slow


def test_every_event_once_in_position_order_under_mixed_writers_and_load() -> None:
    require_postgres()
    reports = feed_stress.run(
        ADMIN_URL,  # creates and drops the schema, and reads what is stored
        tenant_url=f"postgresql://{ROLE}@{HOST}",  # the journal: an ordinary role, under RLS
        rounds=2,
        writers=6,
        ops=12,
        burners=2,
        seed=7,
    )
    for report in reports:
        assert report.writer_errors == []
        assert report.events > 300, "the writers wrote what they were asked to"
        assert report.pages > 10, "the reader resumed many times"
        assert report.duplicates == [], "events read twice"
        assert report.missed == [], "events never read"
        assert report.out_of_order == 0, "positions not ascending"
        assert report.seq_violations == 0, "a session's events out of seq order"
        assert report.wrong_positions == 0, "a position other than the stored (tx, event_id)"
