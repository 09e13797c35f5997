"""The verbs the edges (CLI, server, integrations) use instead of reaching past `Journal`:
tenants, API keys, the database's identity, opening without creating, and import."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentjournal import InvalidArgument, Journal
from agentjournal.transfer import export_lines
from helpers.private import private_journal


def test_tenants_lists_every_tenant_with_a_session_from_any_tenant(journal: Journal) -> None:
    assert journal.tenants() == []
    journal.for_tenant("zeta").create_session("z")
    journal.create_session("d")
    journal.for_tenant("acme").create_session("a")
    expected = ["acme", "default", "zeta"]
    assert journal.tenants() == journal.for_tenant("zeta").tenants() == expected


def test_keys_belong_to_the_database_and_name_their_tenant(journal: Journal) -> None:
    row, key = journal.keys.create("acme", "ci")
    assert journal.for_tenant("beta").keys.tenant_of(key) == "acme"
    assert [r.key_id for r in journal.keys.list("acme")] == [row.key_id]
    assert journal.keys.any_active()
    assert journal.keys.revoke(row.key_id)
    assert journal.keys.tenant_of(key) is None
    assert not journal.keys.any_active()


def test_the_database_identity_is_shared_by_tenant_views_and_opens_of_one_file(
    journal: Journal, journal_url: str
) -> None:
    """A database (a SQLite file, a PostgreSQL URL) has one open storage per process, whoever
    opens it; a private storage (tests/helpers/private.py) is another."""
    assert journal.for_tenant("other").database == journal.database
    with Journal.open(journal_url) as second, private_journal(journal_url) as private:
        assert second.database == journal.database
        assert private.database != journal.database


def test_open_without_create_refuses_a_missing_file_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    with pytest.raises(InvalidArgument, match="no database at"):
        Journal.open(missing, create=False)
    assert list(tmp_path.iterdir()) == []
    Journal.open(missing).close()  # created
    with Journal.open(missing, create=False) as journal:
        assert journal.tenants() == []


def test_import_lines_is_a_verb_of_the_journal(journal: Journal, tmp_path: Path) -> None:
    with Journal.open(tmp_path / "source.db") as source:
        sid = source.create_session("copied").session_id
        source.append(sid, "user_message", {"content": "hello"})
        lines = list(export_lines(source))
    seen: list[int] = []
    report = journal.import_lines(lambda: lines, progress=seen.append)
    assert (report.events, report.sessions_created, report.sessions_extended) == (2, 1, 0)
    assert seen == [2]
    assert [m.content for m in journal.messages(sid)] == ["hello"]
