"""Every code block of README.md and docs/*.md runs, as a reader would run it: each page in a new
empty directory, its blocks in page order. Python blocks run with this environment's Python, and
sh, bash and console blocks with bash (`set -euo pipefail`), this environment's bin first on
PATH, so `agentjournal` is the one under test.

A block that cannot run here says so in the Markdown, on the line just before its fence, with a
comment that a reader of the rendered page does not see:

- `<!-- snippet: skip (why) -->`: not run, for a reason given (a real model's key, a host that
  is not here, an install). SKIPPED below lists them all, so a new one is a visible change.
- `<!-- snippet: serve -->`: the block starts `agentjournal serve` and runs until stopped. It runs
  in the background from there to the end of its page; the test waits until the server answers
  and stops it afterwards.

The ports the docs use (`localhost:8000`, `--port 8001`, ...) are replaced by free ones, a new
one for each port a page names. Nothing leaves the machine: `curl` is this test's wrapper, which
connects only to 127.0.0.1 and fails on an HTTP error status (`--fail-with-body`), and every
Python process loads tests/helpers/loopback_only/sitecustomize.py, which refuses to resolve or
connect to anything but a loopback address. A block that leaves a process running fails.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GUARD = Path(__file__).parent / "helpers" / "loopback_only"
REFUSED = "snippet tests: refused to contact"  # what GUARD prints when it refuses

PYTHON = {"python", "py"}
SHELL = {"sh", "bash", "console"}
NOT_RUN = {"json", "text", "sql"}  # data and output shown, and SQL for a DBA's psql
BLOCK_SECONDS = 60
SERVER_START_SECONDS = 30

# Every block that does not run, and why. Keep it short: each is a promise nothing checks.
SKIPPED = {
    ("README.md", 1): "installs packages from the package index",
    ("cli.md", 2): "sess_abc123 stands for a session of yours",
    ("integrations.md", 1): "needs OPENAI_API_KEY",
    ("postgres.md", 1): "needs a PostgreSQL server at db.internal",
    ("postgres.md", 2): "needs a PostgreSQL server at db.internal",
    ("postgres.md", 5): "needs a PostgreSQL server at db.internal",
    ("replication.md", 3): "needs a PostgreSQL server at db.internal",
    ("runtime.md", 4): "needs OPENAI_API_KEY",
    ("observability.md", 1): "installs packages from the package index",
    ("observability.md", 2): "needs an OTLP receiver at 127.0.0.1:4318",
    ("observability.md", 3): "starts a long-running service",
    ("observability.md", 4): "starts two long-running services",
}

_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!-- snippet: (.*) -->$")
_SKIP = re.compile(r"skip \((.+)\)")
_PORT = re.compile(r"(?<=localhost:|127\.0\.0\.1:)(80\d\d)\b|(?<=--port )(80\d\d)\b")


@dataclass(frozen=True)
class Block:
    page: str
    number: int  # 1-based, counting every fenced block of the page
    line: int  # of the opening fence
    lang: str
    source: str
    marker: str | None  # "skip", "serve" or None
    reason: str | None  # a skip's

    @property
    def where(self) -> str:
        return f"{self.page} block {self.number} (line {self.line}, {self.lang or 'no language'})"


def blocks(text: str, page: str) -> list[Block]:
    """The page's fenced blocks in order, with the marker on the line before each. A marker
    that is malformed or precedes no fence is an error, so a typo cannot silently do nothing."""
    lines = text.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        marker_match = _MARKER.match(lines[index])
        if marker_match and not _FENCE.match(lines[index + 1] if index + 1 < len(lines) else ""):
            raise ValueError(f"{page}:{index + 1}: a snippet marker must precede a fence")
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{index + 1}: the fence is never closed")
        marker = reason = None
        before = _MARKER.match(lines[index - 1]) if index else None
        if before:
            spec = before.group(1)
            if spec == "serve":
                marker = "serve"
            elif skip := _SKIP.fullmatch(spec):
                marker, reason = "skip", skip.group(1)
            else:
                raise ValueError(f"{page}:{index}: unknown snippet marker {spec!r}")
        source = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(Block(page, len(found) + 1, index + 1, fence.group(1), source, marker, reason))
        index = end + 1
    return found


def _page_blocks(page: Path) -> list[Block]:
    return blocks(page.read_text(encoding="utf-8"), page.name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_ports(source: str, ports: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        doc_port = match.group(0)
        if doc_port not in ports:
            ports[doc_port] = str(_free_port())
        return ports[doc_port]

    return _PORT.sub(replace, source)


def _environment(home: Path, bin_dir: Path) -> dict[str, str]:
    """A clean environment: no proxies, keys or AGENTJOURNAL_* settings of the machine's."""
    real_curl = shutil.which("curl")
    if real_curl:  # without it, a block that calls curl fails as it would for a reader
        curl = bin_dir / "curl"
        curl.write_text(
            "#!/bin/sh\n"
            "# Only this machine: every connection goes to 127.0.0.1, whatever the URL's host.\n"
            f"exec {real_curl} --fail-with-body --noproxy '*' --connect-to ::127.0.0.1: \"$@\"\n",
            encoding="utf-8",
        )
        curl.chmod(0o755)
    venv_bin = Path(sys.executable).parent
    return {
        "PATH": os.pathsep.join([str(bin_dir), str(venv_bin), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(GUARD), str(ROOT / "src")]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }


def _command(block: Block, source: str, scripts: Path) -> list[str]:
    script = scripts / f"block_{block.number}.{'py' if block.lang in PYTHON else 'sh'}"
    if block.lang in PYTHON:
        script.write_text(source, encoding="utf-8")
        return [sys.executable, str(script)]
    script.write_text("set -euo pipefail\n" + source, encoding="utf-8")
    return ["bash", str(script)]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a block's process group (the block and whatever it started): SIGTERM, and after
    10 s SIGKILL for what is left."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _group_alive(process.pid) and time.monotonic() < deadline:
        with suppress(subprocess.TimeoutExpired):
            process.wait(0.1)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _answers(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


@contextmanager
def _servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for process in started:
            _stop(process)


def _failure(block: Block, source: str, why: str, output: str) -> str:
    return f"{block.where} {why}\n--- block ---\n{source}--- output ---\n{output}"


def run_page(page: Path, workdir: Path) -> list[Block]:
    """Run the page's blocks in order in `workdir`; fail at the first that fails. Returns the
    blocks that ran."""
    cwd, scripts, home, bin_dir = (workdir / name for name in ("page", "blocks", "home", "bin"))
    for folder in (cwd, scripts, home, bin_dir):
        folder.mkdir()
    env = _environment(home, bin_dir)
    ports: dict[str, str] = {}
    ran = []
    with _servers() as servers:
        for block in _page_blocks(page):
            if block.lang in NOT_RUN or block.marker == "skip":
                continue
            source = _with_ports(block.source, ports)
            command = _command(block, source, scripts)
            if block.marker == "serve":
                log = workdir / f"serve_{block.number}.log"
                with log.open("wb") as out:
                    server = subprocess.Popen(
                        command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )  # fmt: skip
                servers.append(server)
                port = re.findall(r"--port (\d+)", source)
                assert len(port) == 1, f"{block.where}: a serve block names one --port"
                deadline = time.monotonic() + SERVER_START_SECONDS
                while not _answers(int(port[0])):
                    if server.poll() is not None or time.monotonic() > deadline:
                        output = log.read_text(encoding="utf-8", errors="replace")
                        pytest.fail(_failure(block, source, "did not start serving", output))
                    time.sleep(0.1)
                ran.append(block)
                continue
            # Output goes to a file, not a pipe: a process the block leaves behind would hold
            # a pipe open, and reading it would wait for that process instead of the block.
            log = workdir / f"block_{block.number}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            try:
                process.wait(BLOCK_SECONDS)
            except subprocess.TimeoutExpired:
                _stop(process)
                output = log.read_text(encoding="utf-8", errors="replace")
                pytest.fail(_failure(block, source, f"ran past {BLOCK_SECONDS} s", output))
            output = log.read_text(encoding="utf-8", errors="replace")
            if process.returncode != 0:
                pytest.fail(_failure(block, source, f"exited {process.returncode}", output))
            if REFUSED in output:
                pytest.fail(_failure(block, source, "tried to leave the machine", output))
            if _group_alive(process.pid):
                _stop(process)
                pytest.fail(_failure(block, source, "left a process running", output))
            ran.append(block)
    return ran


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_page_runs(page: Path, tmp_path: Path) -> None:
    runnable = [
        block
        for block in _page_blocks(page)
        if block.lang not in NOT_RUN and block.marker != "skip"
    ]
    if shutil.which("curl") is None and any("curl " in block.source for block in runnable):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{page.name}'s examples call curl, which is missing")
        pytest.skip(f"{page.name}'s examples call curl, which is missing")
    assert run_page(page, tmp_path) == runnable


def test_every_block_is_run_or_known() -> None:
    """A block in a language neither run nor listed as data is a mistake (a typo'd `pyhton`
    would otherwise never run), and the skips are exactly SKIPPED."""
    skipped = {}
    for page in PAGES:
        for block in _page_blocks(page):
            assert block.lang in PYTHON | SHELL | NOT_RUN, f"{block.where}: unknown language"
            if block.marker == "skip":
                assert block.lang not in NOT_RUN, f"{block.where}: skips a block never run"
                skipped[(block.page, block.number)] = block.reason
            if block.marker == "serve":
                assert block.lang in SHELL, f"{block.where}: only a shell block can serve"
    assert skipped == SKIPPED


# -- the runner itself ------------------------------------------------------------------------


def test_blocks_read_markers_and_numbers() -> None:
    text = (
        "Intro.\n\n```python\nprint(1)\n```\n\n"
        "<!-- snippet: skip (needs OPENAI_API_KEY) -->\n```sh\ncurl https://api.openai.com\n```\n"
        "<!-- snippet: serve -->\n```sh\nagentjournal serve --port 8000\n```\n"
        "```json\n{}\n```\n"
    )
    found = blocks(text, "page.md")
    assert [(b.number, b.line, b.lang, b.marker, b.reason) for b in found] == [
        (1, 3, "python", None, None),
        (2, 8, "sh", "skip", "needs OPENAI_API_KEY"),
        (3, 12, "sh", "serve", None),
        (4, 15, "json", None, None),
    ]
    assert found[0].source == "print(1)\n"


@pytest.mark.parametrize(
    "text",
    [
        "<!-- snippet: skip -->\n```sh\ntrue\n```\n",  # no reason
        "<!-- snippet: later -->\n```sh\ntrue\n```\n",  # no such marker
        "<!-- snippet: serve -->\n\n```sh\ntrue\n```\n",  # not right before the fence
        "```sh\ntrue\n",  # never closed
    ],
)
def test_blocks_refuse_a_marker_that_would_do_nothing(text: str) -> None:
    with pytest.raises(ValueError, match=r"page\.md"):
        blocks(text, "page.md")


def test_ports_are_replaced_consistently() -> None:
    ports: dict[str, str] = {}
    source = "serve --port 8000 &\ncurl localhost:8000/x\ncurl 127.0.0.1:8001/y\nmax 18000\n"
    replaced = _with_ports(source, ports)
    assert set(ports) == {"8000", "8001"}
    assert replaced == (
        f"serve --port {ports['8000']} &\ncurl localhost:{ports['8000']}/x\n"
        f"curl 127.0.0.1:{ports['8001']}/y\nmax 18000\n"
    )


def test_a_failing_block_names_its_page_and_number(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\necho fine\n```\n\n```python\nprint('here'); raise SystemExit(3)\n```\n")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_page(page, tmp_path)
    message = str(failed.value)
    assert "page.md block 2 (line 5, python) exited 3" in message
    assert "here" in message


def test_a_block_cannot_leave_the_machine(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport socket\ntry:\n    socket.create_connection(('192.0.2.1', 80), 1)\n"
        "except OSError:\n    pass\n```\n"
    )
    with pytest.raises(pytest.fail.Exception, match="tried to leave the machine"):
        run_page(page, tmp_path)


def test_a_block_that_leaves_a_server_running_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\nsleep 30 &\n```\n")
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="left a process running"):
        run_page(page, tmp_path)
    assert time.monotonic() - started < 15
