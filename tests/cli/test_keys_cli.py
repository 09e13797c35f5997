"""`agentjournal keys create | list | revoke` in-process: the `--json` shapes, the exit codes, and
that a secret is printed once and never listed. (tests/server/test_serve_cli.py drives the same
commands as processes against a running server.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from agentjournal import Journal
from agentjournal.cli import app
from agentjournal.keys import ApiKeys


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> Result:
    result = run(*args, env=env)
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


@pytest.mark.parametrize("command", ["create", "list", "revoke"])
def test_help_shows_an_example(command: str) -> None:
    assert f"Example: agentjournal keys {command} " in ok("keys", command, "--help").stdout


def test_create_json_prints_a_working_key_once(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")  # created by the command
    result = ok("keys", "create", "--tenant", "acme", "--label", "ci", "--db", db, "--json")
    assert len(result.stdout.splitlines()) == 1
    created = json.loads(result.stdout)
    assert set(created) == {"key", "key_id", "tenant"}
    assert created["tenant"] == "acme"
    assert created["key"].startswith(f"aj_{created['key_id']}_")
    assert "not shown again" in result.stderr
    with Journal.open(db) as journal:
        assert ApiKeys(journal.storage).tenant_of(created["key"]) == "acme"


def test_create_without_json_prints_the_key_alone(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    result = ok("keys", "create", "--tenant", "acme", "--db", db)
    key = result.stdout.strip()
    assert result.stdout == key + "\n"
    with Journal.open(db) as journal:
        assert ApiKeys(journal.storage).tenant_of(key) == "acme"


def test_list_json_shows_status_and_never_a_secret(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    acme = json.loads(
        ok("keys", "create", "--tenant", "acme", "--label", "ci", "--db", db, "--json").stdout
    )
    beta = json.loads(ok("keys", "create", "--tenant", "beta", "--db", db, "--json").stdout)
    ok("keys", "revoke", beta["key_id"], "--db", db)

    result = ok("keys", "list", "--db", db, "--json")
    listed = {row["key_id"]: row for row in json.loads(result.stdout)}
    assert set(listed) == {acme["key_id"], beta["key_id"]}
    for row in listed.values():
        assert set(row) == {"key_id", "tenant", "label", "status", "created_at", "revoked_at"}
    assert listed[acme["key_id"]]["status"] == "active"
    assert listed[acme["key_id"]]["label"] == "ci"
    assert listed[acme["key_id"]]["revoked_at"] is None
    assert listed[beta["key_id"]]["status"] == "revoked"
    assert isinstance(listed[beta["key_id"]]["revoked_at"], int)
    for created in (acme, beta):
        assert created["key"].split("_", 2)[2] not in result.stdout

    only_acme = json.loads(ok("keys", "list", "--tenant", "acme", "--db", db, "--json").stdout)
    assert [row["key_id"] for row in only_acme] == [acme["key_id"]]
    text = ok("keys", "list", "--db", db).stdout.splitlines()
    assert f"{acme['key_id']}\tacme\tactive\tci" in text
    assert f"{beta['key_id']}\tbeta\trevoked\t" in text


def test_list_with_no_keys_exits_1(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    Journal.open(db).close()
    assert run("keys", "list", "--db", db).exit_code == 1
    empty = run("keys", "list", "--db", db, "--json")
    assert empty.exit_code == 1
    assert json.loads(empty.stdout) == []


@pytest.mark.parametrize("args", [["list"], ["revoke", "abcdefghij"]])
def test_a_missing_database_exits_2_and_creates_no_file(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "typo.db"
    result = run("keys", *args, "--db", str(missing))
    assert result.exit_code == 2
    assert "no database" in result.stderr
    assert not missing.exists()


def test_revoking_an_unknown_key_exits_1(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    Journal.open(db).close()
    result = run("keys", "revoke", "abcdefghij", "--db", db)
    assert result.exit_code == 1
    assert "abcdefghij" in result.stderr


def test_a_bad_tenant_exits_2_without_a_key_or_a_database(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    result = run("keys", "create", "--tenant", "bad tenant", "--db", str(db))
    assert result.exit_code == 2
    assert "tenant must be" in result.stderr
    assert "aj_" not in result.stdout
    assert not db.exists()


def test_the_database_may_come_from_the_environment(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    env = {"AGENTJOURNAL_DB": db}
    created = json.loads(ok("keys", "create", "--tenant", "acme", "--json", env=env).stdout)
    listed = json.loads(ok("keys", "list", "--json", env=env).stdout)
    assert [row["key_id"] for row in listed] == [created["key_id"]]
