"""The web inspector on long sessions: how soon a person opening a session sees its newest event,
and what the page holds then, at 1,000, 100,000 and 1,000,000 events.

For each size, one session of turns (a user message, a tool call, its result and a reply, ~150
characters each) is written with `append_many` at durability="normal" (the file is kept in
--dir and reused by later runs), served by `agentjournal serve`, and opened in Debian's headless
chromium at `/#/sessions/{id}`. Measured, each a median of --runs fresh page loads (after one
load not counted, which warms the server and the browser):

- open: ms from the start of the navigation until the timeline's last item shows the newest
  event (a MutationObserver notes the moment; the page's own scripts are loaded in that time);
- items: the timeline's items in the DOM then;
- heap: the page's JS heap then, after a forced garbage collection (MB).

A second table times `Journal.events` reading 200 events at the start, at the end (`last=200`)
and around the middle of each session, in this process: the pages the inspector asks for.

The baseline is the inspector as it was before it read sessions a window at a time (git revision
--baseline-rev, its page files served in place of the current ones by the same server, in the
same run), up to --baseline-max events: it loads the whole history first, so it is not run on
the largest sessions (its time grows ~linearly with the events).

    python bench/inspector_bench.py            # 1k, 100k, 1M (the 1M file takes ~30 s once)
    python bench/inspector_bench.py --quick    # 1k only, one run: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from playwright.sync_api import Browser, Route, sync_playwright

from agentjournal import Journal, NewEvent

ROOT = Path(__file__).resolve().parent.parent
STATIC = "src/agentjournal/inspector/static"
CHROMIUM = "/usr/bin/chromium"
FILLER = "lorem ipsum dolor sit amet, " * 5
BASELINE_REV = "a63a61e"  # main before the windowed timeline
TARGET_MS = 1000.0  # open a session of 1,000,000 events in under a second

# Notes when the timeline's last item first shows `#LAST` (its seq, or a call's "#a → #b").
WATCH = """(() => {
    const wanted = "#%d";
    const check = () => {
        const last = document.getElementById("timeline")?.lastElementChild;
        if (window.__shownAt === undefined && last && last.textContent.includes(wanted))
            window.__shownAt = performance.now();
    };
    new MutationObserver(check).observe(document, { childList: true, subtree: true });
})()"""


def build(path: Path, events: int) -> str:
    """The session of `events` events in `path`, written once and reused by later runs."""
    if path.exists():
        with Journal.open(path) as journal:
            found = [s for s in journal.sessions(limit=1) if s.last_seq == events]
            if found:
                return found[0].session_id
        for stale in path.parent.glob(path.name + "*"):
            stale.unlink()
    started = time.perf_counter()
    with Journal.open(path, durability="normal") as journal:
        session_id = journal.create_session("long run", model="scripted").session_id
        batch: list[NewEvent] = []
        for index in range(events - 1):
            turn, kind = divmod(index, 4)
            if kind == 0:
                batch.append(NewEvent("user_message", {"content": f"question {turn}: {FILLER}"}))
            elif kind == 1:
                call = {"call_id": f"c{turn}", "name": "lookup", "arguments": '{"n": 1}'}
                batch.append(NewEvent("tool_call", call))
            elif kind == 2:
                result = {"call_id": f"c{turn}", "content": f"result {turn}: {FILLER}"}
                batch.append(NewEvent("tool_result", result))
            else:
                batch.append(NewEvent("assistant_message", {"content": f"answer {turn}: {FILLER}"}))
            if len(batch) == 5000:
                journal.append_many(session_id, batch)
                batch = []
        if batch:
            journal.append_many(session_id, batch)
    took = time.perf_counter() - started
    print(f"  built {events:,} events in {took:.1f} s ({path})", file=sys.stderr)
    return session_id


def page_reads(path: Path, session_id: str, size: int) -> tuple[float, float, float]:
    """Median ms of `Journal.events` reading 200 events: the first, the newest, around the middle
    (in this process, the server's cost of each page the inspector asks for)."""

    def median_ms(read: Callable[[], object]) -> float:
        times = []
        for _ in range(25):
            started = time.perf_counter()
            read()
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    with Journal.open(path) as journal:
        return (
            median_ms(lambda: journal.events(session_id, limit=200)),
            median_ms(lambda: journal.events(session_id, last=200)),
            median_ms(lambda: journal.events(session_id, around=size // 2, limit=200)),
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(db: Path) -> Iterator[str]:
    """`agentjournal serve` on `db` (open mode, loopback), until the block ends."""
    port = free_port()
    log = db.with_suffix(".log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.cli", "serve", "--db", str(db), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                raise RuntimeError(f"the server did not start: see {log.name}")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def baseline_files(rev: str) -> dict[str, bytes] | None:
    """The page's files at `rev`, by URL path; None where git or the revision is missing."""
    try:
        names = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:{STATIC}"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout.split()
        files = {}
        for name in names:
            shown = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{rev}:{STATIC}/{name}"],
                capture_output=True,
                check=True,
            )
            files["/" if name == "index.html" else f"/inspector/{name}"] = shown.stdout
        return files
    except (OSError, subprocess.CalledProcessError):
        return None


def measure(
    browser: Browser, base: str, session_id: str, last: int, files: dict[str, bytes] | None
) -> tuple[float, int, float]:
    """One fresh page load: (ms until the newest event shows, timeline items, JS heap MB)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        if files is not None:

            def old_file(route: Route) -> None:
                path = "/" + route.request.url.split("/", 3)[3].split("#")[0].split("?")[0]
                if path not in files:
                    route.continue_()
                    return
                kind = {"js": "text/javascript", "css": "text/css"}.get(path.rsplit(".", 1)[-1])
                route.fulfill(body=files[path], content_type=kind or "text/html")

            page.route(f"{base}/", old_file)
            page.route(f"{base}/inspector/*", old_file)
        page.add_init_script(WATCH % last)
        page.goto(f"{base}/#/sessions/{session_id}")
        page.wait_for_function("() => window.__shownAt !== undefined", timeout=600_000, polling=100)
        shown_at: float = page.evaluate("window.__shownAt")
        items: int = page.locator("#timeline > li").count()
        cdp = context.new_cdp_session(page)
        cdp.send("HeapProfiler.collectGarbage")
        heap = cdp.send("Runtime.getHeapUsage")["usedSize"] / 2**20
        cdp.detach()
        return shown_at, items, heap
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k events, one run: a smoke run")
    parser.add_argument("--dir", type=Path, help="where the session files are kept")
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    parser.add_argument("--baseline-max", type=int, default=100_000)
    parser.add_argument("--baseline-runs", type=int, default=1)
    args = parser.parse_args()
    sizes = [1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    runs = 1 if args.quick else args.runs
    directory = args.dir or Path(tempfile.gettempdir()) / "agentjournal-inspector-bench"
    directory.mkdir(parents=True, exist_ok=True)
    old = baseline_files(args.baseline_rev)
    load = os.getloadavg()
    rows = []
    reads: list[tuple[int, tuple[float, float, float]]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--enable-precise-memory-info"]
        )
        try:
            for size in sizes:
                db = directory / f"long-{size}.db"
                session_id = build(db, size)
                with serving(db) as base:
                    measure(browser, base, session_id, size, None)  # warm-up, not counted
                    new = [measure(browser, base, session_id, size, None) for _ in range(runs)]
                    before = None
                    if old is not None and size <= args.baseline_max:
                        count = 1 if args.quick else args.baseline_runs
                        before = [
                            measure(browser, base, session_id, size, old) for _ in range(count)
                        ]
                rows.append((size, new, before))
                reads.append((size, page_reads(db, session_id, size)))
        finally:
            browser.close()
    print_table(rows, args.baseline_rev)
    print(f"load average (1 min) at the start and the end: {load[0]:.1f}, {os.getloadavg()[0]:.1f}")
    print("\n| events | first 200 | newest 200 (last=200) | 200 around the middle |")
    print("| ---: | ---: | ---: | ---: |")
    for size, (first, newest, middle) in reads:
        print(f"| {size:,} | {first:.2f} ms | {newest:.2f} ms | {middle:.2f} ms |")


def _median(values: list[float]) -> float:
    return statistics.median(values)


def print_table(
    rows: list[tuple[int, list[tuple[float, int, float]], list[tuple[float, int, float]] | None]],
    rev: str,
) -> None:
    print(
        "| events | open, now | open, before | before ÷ now | items, now | items, before "
        "| JS heap, now | JS heap, before |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, new, before in rows:
        open_now = _median([r[0] for r in new])
        items_now = max(r[1] for r in new)
        heap_now = _median([r[2] for r in new])
        if before:
            open_before = _median([r[0] for r in before])
            cells = [
                f"{open_before:,.0f} ms",
                f"{open_before / open_now:,.1f}×",
                f"{max(r[1] for r in before):,}",
                f"{_median([r[2] for r in before]):.1f} MB",
            ]
        else:
            cells = ["not run", "", "", ""]
        print(
            f"| {size:,} | {open_now:,.0f} ms | {cells[0]} | {cells[1]} | {items_now:,} "
            f"| {cells[2]} | {heap_now:.1f} MB | {cells[3]} |"
        )
    largest = rows[-1]
    met = _median([r[0] for r in largest[1]]) < TARGET_MS
    print(
        f"\nopen < {TARGET_MS:.0f} ms at {largest[0]:,} events: {'met' if met else 'missed'}"
        f" · before = the inspector at git {rev} · {json.dumps({'cpus': os.cpu_count()})}"
    )


if __name__ == "__main__":
    main()
