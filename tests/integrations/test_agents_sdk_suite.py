"""The OpenAI Agents SDK's own session tests, run against `JournalSession`.

The tests come from the SDK's published source distribution of exactly the installed version,
fetched from the package index at test time (`pip download --no-binary :all:`) and kept in the
user's cache directory, never in this repository. They run in a pytest of their own inside that
source tree, with the SDK's own configuration and plugins (pytest-asyncio, pytest-mock,
inline-snapshot: the dev extra), and with agents_sdk_swap.py turning every `SQLiteSession` they
build into a `JournalSession`. Everything passes except the tests listed below, each with why.

Without the network (or a plugin), the test is skipped with the reason, or fails under CI.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

import agentjournal

pytest.importorskip("agents")

VERSION = importlib.metadata.version("openai-agents")

# The SDK's session tests (tests/memory/ but the server-side conversations and SQLAlchemy ones),
# and its runner tests that build a SQLiteSession.
FILES = [
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_session_context_wrapper.py",
    "tests/memory/test_session_persistence_sanitize.py",
    "tests/memory/test_openai_responses_compaction_session.py",
    "tests/memory/test_compaction_suffix.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_max_turns.py",
    "tests/test_native_tool_failure_history.py",
    "tests/test_tool_batch_failure_history.py",
    "tests/test_programmatic_tool_calling.py",
    "tests/test_run_impl_resume_paths.py",
    "tests/test_tool_failure_boundaries.py",
    "tests/test_soft_cancel.py",
]

SESSION = "tests/memory/test_session.py::test_sqlite_session_"
COMPACTION = "tests/memory/test_openai_responses_compaction_session.py::"
COMPACTION += "TestOpenAIResponsesCompactionSession::test_"
SUFFIX = "tests/memory/test_compaction_suffix.py::test_"
VISIBILITY = "tests/memory/test_compaction_model_visibility.py::test_"

# Tests of SQLiteSession's internals: they reach into its connections, locks, tables or
# `_insert_items`, or write rows with sqlite3 beside it. A JournalSession has none of these.
SQLITE_INTERNALS = [
    SESSION + "close_closes_worker_thread_connections",  # its per-thread connections
    SESSION + "reaps_connections_from_exited_worker_threads",
    SESSION + "closes_retired_connections_before_the_next_allocation",
    SESSION + "keeps_connections_of_live_worker_threads",
    SESSION + "close_retries_quarantined_connection",
    SESSION + "rollback_failure_evicts_connection",
    SESSION + "file_lock_is_shared_across_instances",  # its per-file lock
    SESSION + "pop_item_skips_corrupt_most_recent",  # invalid JSON rows written with sqlite3
    SESSION + "pop_item_returns_none_after_dropping_only_corrupt_rows",
    SESSION + "get_items_limit_skips_corrupt_newest_rows",
    SESSION + "get_items_session_settings_limit_skips_corrupt_rows",
    # A failed write releases SQLite's write lock, probed with sqlite3 on its tables (an item
    # JSON cannot hold is refused by JournalSession with InvalidEvent, a ValueError).
    SESSION + "failed_add_items_releases_write_lock",
    SESSION + "failed_clear_session_rolls_back",  # patches its connection
    SESSION + "failed_pop_item_releases_write_lock",
    SESSION + "post_commit_cancellation_propagates_after_known_outcome",
    # Its message "SQLiteSession is closed": an empty add_items on a JournalSession touches
    # no journal, open or closed.
    SESSION + "closed_rejects_empty_add_items",
    COMPACTION + "settled_pop_failure_invalidates_response_chain",  # patches _get_connection
    COMPACTION + "settled_clear_failure_invalidates_response_chain",
    SUFFIX + "suffix_transaction_rolls_back_failed_insert",  # a trigger on agent_messages
    SUFFIX + "cancelled_suffix_transaction_settles_before_newer_append",  # patches _insert_items
    "tests/test_run_impl_resume_paths.py::test_handoff_resume_after_cancelled_compaction_commits",
]

# The SDK's encrypted-session TTL tests patch `cryptography.fernet.time`, a module that
# cryptography 51 no longer has: they fail over SQLiteSession too. The SDK pins cryptography<51
# for its own tests; where an older one is installed they run here.
CRYPTOGRAPHY_51 = [
    COMPACTION + "rollback_does_not_revive_items_expired_during_compaction",
    SUFFIX + "expired_prefix_does_not_block_full_live_window",
    SUFFIX + "failed_encrypted_suffix_transaction_preserves_original_tokens",
    SUFFIX + "prefix_cleanup_stops_before_retained_history",
    SUFFIX + "repeated_ttl_bursts_do_not_accumulate_expired_rows",
    VISIBILITY + "automatic_compaction_does_not_reload_unbounded_hidden_history",
    VISIBILITY + "automatic_compaction_recovers_after_encrypted_history_expires",
    VISIBILITY + "expired_read_overhead_does_not_authorize_hidden_history",
    VISIBILITY + "manual_compaction_refreshes_expired_encrypted_history",
]

PLUGINS = ("pytest_asyncio", "pytest_mock", "inline_snapshot")
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check"]
PIP_DOWNLOAD += ["--no-deps", "--no-binary", ":all:"]
PYTEST = [sys.executable, "-m", "pytest", "-p", "agents_sdk_swap", "-p", "no:cacheprovider", "-q"]


def unavailable(reason: str) -> None:
    """Under CI the suite must run; elsewhere (no network, no dev extra) it is skipped."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def cryptography_51() -> bool:
    try:
        major = importlib.metadata.version("cryptography").split(".")[0]
    except importlib.metadata.PackageNotFoundError:
        return False
    return int(major) >= 51


def sdk_tests() -> Path:
    """The SDK's source tree of the installed version (its tests and pyproject.toml), fetched
    once into the user's cache directory."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentjournal"
    root = cache / f"openai-agents-{VERSION}-sdist"
    if (root / "pyproject.toml").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        done = subprocess.run(
            [*PIP_DOWNLOAD, "--dest", scratch, f"openai-agents=={VERSION}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = list(Path(scratch).glob("*.tar.gz"))
        if done.returncode != 0 or len(archives) != 1:
            unavailable(
                f"could not download the openai-agents {VERSION} sdist: {done.stderr[-500:]}"
            )
        with tarfile.open(archives[0]) as archive:
            top = archive.getnames()[0].split("/")[0]
            wanted = [
                member
                for member in archive.getmembers()
                if member.name == f"{top}/pyproject.toml" or member.name.startswith(f"{top}/tests/")
            ]
            archive.extractall(scratch, members=wanted, filter="data")
        # Whole or not at all: a run cut short leaves no half tree to be taken for the sdist.
        shutil.rmtree(root, ignore_errors=True)
        (Path(scratch) / top).rename(root)
    return root


def test_the_sdks_session_tests_pass_with_journal_session(tmp_path: Path) -> None:
    missing = [name for name in PLUGINS if importlib.util.find_spec(name) is None]
    if missing:
        unavailable(f"the SDK's tests need {', '.join(missing)} (the dev extra)")
    root = sdk_tests()
    deselected = SQLITE_INTERNALS + (CRYPTOGRAPHY_51 if cryptography_51() else [])
    here = Path(__file__).parent
    source = Path(agentjournal.__file__).parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), str(source), os.environ.get("PYTHONPATH", "")]),
        "AGENTJOURNAL_SDK_SUITE_TMP": str(tmp_path),
        "AGENTJOURNAL_SDK_SUITE_DESELECT": "\n".join(deselected),  # agents_sdk_swap checks them
    }
    env.pop("PYTEST_ADDOPTS", None)
    command = [*PYTEST, "-rfE", "--timeout=120", *FILES]
    done = subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-20_000:] + done.stderr[-5_000:]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    assert counts.get("passed", 0) > 1000, summary
    assert counts.get("deselected", 0) >= len(deselected), summary
    assert "failed" not in counts, summary
    assert "error" not in counts, summary
    assert "errors" not in counts, summary
