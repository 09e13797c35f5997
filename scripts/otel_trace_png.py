"""Renders docs/observability.png: one turn of the demo agent, exported by `FeedExporter` to the
SDK's in-memory exporter, drawn as a trace waterfall (the view every tracing UI has) and
photographed with Debian's /usr/bin/chromium, headless.

    python scripts/otel_trace_png.py [docs/observability.png]

The spans are the exporter's own (names, parents, attributes); only the drawing is this
script's. The tool is slowed a little so that the bars have widths worth seeing.
"""

from __future__ import annotations

import html
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from playwright.sync_api import sync_playwright

from agentjournal import Journal
from agentjournal.otel.exporter import FeedExporter
from agentjournal.runtime import Agent, Invocation, ModelReply, RequestedCall, Tool

SHOWN = (
    "gen_ai.request.model",
    "gen_ai.tool.name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.conversation.id",
)


class Slow:
    """Two model responses, each taking a moment, like a real model's."""

    def __init__(self) -> None:
        self.replies = [
            ModelReply(
                "Let me count them.",
                (RequestedCall("call_1", "count_orders", "{}"),),
                usage={"prompt_tokens": 112, "completion_tokens": 14},
            ),
            ModelReply("You have 42 orders.", usage={"prompt_tokens": 140, "completion_tokens": 8}),
        ]

    def complete(self, messages: list[dict[str, Any]], tools: Any) -> ModelReply:
        time.sleep(0.35)
        return self.replies.pop(0)


def count_orders(arguments: dict[str, Any], invocation: Invocation) -> str:
    time.sleep(0.2)
    return "42"


def spans() -> list[ReadableSpan]:
    with tempfile.TemporaryDirectory() as tmp, Journal.open(Path(tmp) / "j.db") as journal:
        agent = Agent(Slow(), [Tool("count_orders", count_orders, True)], name="orders")
        session = agent.create_session(journal, model="gpt-4o").session_id
        agent.run_turn(journal, session, "How many orders do I have?")
        memory = InMemorySpanExporter()
        FeedExporter(journal, memory).run()
        return sorted(
            memory.get_finished_spans(), key=lambda s: (s.start_time or 0, s.parent is not None)
        )


def page(found: list[ReadableSpan]) -> str:
    start = min(s.start_time or 0 for s in found)
    end = max(s.end_time or 0 for s in found)
    width = max(end - start, 1)
    rows = []
    for span in found:
        left = ((span.start_time or 0) - start) / width * 100
        size = max(((span.end_time or 0) - (span.start_time or 0)) / width * 100, 0.6)
        depth = 0 if span.parent is None else 1
        ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        attrs = span.attributes or {}
        shown = " · ".join(f"{k.removeprefix('gen_ai.')}={attrs[k]}" for k in SHOWN if k in attrs)
        error = span.status.status_code.name == "ERROR"
        rows.append(
            f'<div class="row"><div class="name" style="padding-left:{8 + depth * 18}px">'
            f"{html.escape(span.name)}<small>{html.escape(shown)}</small></div>"
            f'<div class="lane"><div class="bar{" err" if error else ""}" '
            f'style="left:{left:.2f}%;width:{size:.2f}%"></div>'
            f'<span class="ms" style="left:{min(left + size, 88):.2f}%">{ms:.0f} ms</span>'
            "</div></div>"
        )
    trace = f"{found[0].context.trace_id:032x}" if found else ""
    return f"""<!doctype html><meta charset="utf-8"><style>
body{{font:13px system-ui,sans-serif;margin:0;background:#fff;color:#222;width:980px}}
h1{{font-size:14px;margin:0;padding:10px 12px;background:#f3f4f6;border-bottom:1px solid #ddd}}
h1 code{{font-weight:normal;color:#555}}
.row{{display:flex;border-bottom:1px solid #eee;height:44px;align-items:center}}
.name{{width:430px;white-space:nowrap;overflow:hidden}}
small{{display:block;color:#777;font-size:11px}}
.lane{{position:relative;flex:1;height:100%}}
.bar{{position:absolute;top:14px;height:14px;background:#4f7fd6;border-radius:3px}}
.bar.err{{background:#d64f4f}}
.ms{{position:absolute;top:13px;margin-left:6px;font-size:11px;color:#555}}
</style>
<h1>invoke_agent orders · trace <code>{trace}</code> · exported by agentjournal otel-export</h1>
{"".join(rows)}"""


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/observability.png")
    content = page(spans())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
        view = browser.new_page(viewport={"width": 980, "height": 300})
        view.set_content(content)
        view.locator("body").screenshot(path=str(target))
        browser.close()
    print(f"{target}: {target.stat().st_size} bytes")


if __name__ == "__main__":
    main()
