"""`demo`, `serve` and `keys`: running the service and managing who may call it."""

from __future__ import annotations

import errno
import importlib
import logging
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentjournal.arguments import check_id
from agentjournal.cli.app import app, keys_app
from agentjournal.cli.common import (
    EXIT_PROBLEMS,
    DbOption,
    JsonOption,
    fail,
    opened,
    print_json,
    require_extra,
)
from agentjournal.cli.mcp_server import mcp_mode
from agentjournal.cli.otel import traces_url
from agentjournal.errors import InvalidArgument

if TYPE_CHECKING:
    import uvicorn

    from agentjournal.journal import Journal
    from agentjournal.otel.background import BackgroundExport
    from agentjournal.runtime import Agent


@app.command()
def demo(
    db: Annotated[
        str | None, typer.Option(help="Database file to create (default: a temporary one).")
    ] = None,
    keep: Annotated[bool, typer.Option(help="Keep the database file afterwards.")] = False,
) -> None:
    """Run the scripted order agent as a server, SIGKILL it mid-turn and mid-task, and resume.

    Example: agentjournal demo --db /tmp/demo.db --keep
    """
    # The demo's server is a child process: check here that it can start, rather than let the
    # child die with a traceback in its log and the demo report only "did not start".
    require_extra("server", "demo", "uvicorn", "agentjournal.server", "agentjournal.demo.run")
    if db is not None:
        _check_new_file(db)
    from agentjournal.demo.run import main as run_demo

    raise typer.Exit(run_demo(db, keep=keep))


@app.command()
def serve(
    db: Annotated[
        str,
        typer.Option(
            envvar="AGENTJOURNAL_DB",
            help="SQLite file (created if missing) or postgresql:// URL (env AGENTJOURNAL_DB).",
        ),
    ] = "agent.db",
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="TCP port (0: any free one, shown at start).")
    ] = 8000,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body.")] = 4 * 1024 * 1024,
    max_event_bytes: Annotated[int, typer.Option(help="Largest event payload.")] = 1024 * 1024,
    max_streams_per_key: Annotated[int, typer.Option(help="Open SSE streams per key.")] = 100,
    rate_limit: Annotated[float, typer.Option(help="Requests per second per key.")] = 500.0,
    agent: Annotated[
        str | None,
        typer.Option(
            help="Run an agent for POST /v1/sessions/{id}/turns: 'demo' (the scripted order"
            " agent), 'openai' (the order tools on an OpenAI-compatible model: OPENAI_BASE_URL,"
            " OPENAI_API_KEY, AGENTJOURNAL_MODEL) or 'package.module:name' (an Agent, or a"
            " function returning one). Cut turns are finished before the first request."
        ),
    ] = None,
    mcp_servers: Annotated[
        Path | None,
        typer.Option(
            help="Give the agent the tools of these MCP servers: a JSON file in the shape MCP"
            ' clients use ({"mcpServers": {...}}, docs/runtime.md). Needs --agent.'
        ),
    ] = None,
    task_lease: Annotated[
        float, typer.Option(help="Lease (seconds) of the agent's task worker; renewed at 1/3.")
    ] = 10.0,
    metrics_public: Annotated[
        bool,
        typer.Option(
            help="Serve GET /metrics without a key (for a Prometheus scraper). Its counts are"
            " the whole server's, every tenant's: without this flag, once keys exist, it needs"
            " a valid key like every route."
        ),
    ] = False,
    mcp: Annotated[
        str, typer.Option(help="MCP at /mcp (docs/mcp.md): read, write or off.")
    ] = "read",
    access_log: Annotated[
        bool, typer.Option(help="Print a line per request to stdout (uvicorn's access log).")
    ] = False,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            help="Also export every tenant's turns as OpenTelemetry spans to this OTLP/HTTP"
            " receiver, once a second, as `otel-export` does (docs/observability.md).",
            show_default=False,
        ),
    ] = None,
    otlp_capture_content: Annotated[
        bool, typer.Option(help="With --otlp-endpoint: message content on the spans.")
    ] = False,
) -> None:
    """Serve the HTTP API (JSON + SSE) over the database.

    Once it listens it prints where (and the inspector's address), the database, who may call
    it and the agent, to stderr.

    Example: agentjournal serve --db agent.db --port 8000 --agent demo
    """
    require_extra("server", "serve", "uvicorn", "agentjournal.server")
    if otlp_endpoint is not None:
        require_extra("otel", "serve --otlp-endpoint", "agentjournal.otel.background")
        otlp_endpoint = traces_url(otlp_endpoint)
    if agent == "openai":
        require_extra("openai", "serve --agent openai", "openai")
    import uvicorn

    from agentjournal.journal import Journal
    from agentjournal.keys import active_keys_exist
    from agentjournal.server import Limits, create_app
    from agentjournal.server.service import is_loopback, open_bind_refusal

    hosted = None if agent is None else _load_agent(agent)
    if mcp_servers is not None:
        if hosted is None:
            fail("--mcp-servers gives an agent tools: it needs --agent")
        _add_mcp_servers(hosted, mcp_servers)
    # Refused before the journal is opened: opening creates the database and migrates it.
    keys_exist = not is_loopback(host) and active_keys_exist(db)
    refusal = open_bind_refusal(host, keys_exist=keys_exist)
    if refusal is not None:
        fail(refusal)
    # A port in use is refused before the database is touched, too.
    with _bound(host, port) as listening:
        journal = Journal.open(db, max_payload_bytes=max_event_bytes)
        limits = Limits(
            max_body_bytes=max_body_bytes,
            max_streams_per_key=max_streams_per_key,
            requests_per_second=rate_limit,
            burst=max(1, int(rate_limit * 2)),
        )
        # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler
        # it found; a no-op one makes an asked-for stop exit 0, as process supervisors expect.
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        app = create_app(
            journal,
            limits=limits,
            agent=hosted,
            task_lease_seconds=task_lease,
            metrics_public=metrics_public,
            mcp=mcp_mode(mcp),
        )
        described = agent
        if hosted is not None and hosted.mcp_servers:
            names = ", ".join(server.name for server in hosted.mcp_servers)
            described = f"{agent} (MCP servers: {names})"
        banner = _banner(
            _url(listening), Journal.describe(db), app.state.service.open, described, access_log
        )
        config = uvicorn.Config(app, log_level="warning", access_log=access_log)
        if access_log:  # uvicorn files its access lines at INFO, below the warnings it shows
            logging.getLogger("uvicorn.access").setLevel(logging.INFO)
        export = None
        if otlp_endpoint is not None:
            export = _start_export(journal, otlp_endpoint, otlp_capture_content)
            banner.append(f"  otel       every tenant's turns to {otlp_endpoint}")
        try:
            _run(config, listening, banner)
        finally:
            if export is not None:
                export.stop()


def _start_export(journal: Journal, endpoint: str, capture_content: bool) -> BackgroundExport:
    from agentjournal.otel.background import BackgroundExport
    from agentjournal.otel.exporter import otlp_http_exporter

    export = BackgroundExport(
        journal, otlp_http_exporter(endpoint), capture_content=capture_content
    )
    export.start()
    return export


def _banner(
    base: str, database: str, open_mode: bool, agent: str | None, access_log: bool
) -> list[str]:
    """What `serve` prints once it listens: where, over what, for whom (never a password)."""
    if open_mode:
        auth = "open: no API keys yet, so loopback callers only, all tenant 'default'"
    else:
        auth = "API keys: every request needs one"
    log = "on (stdout)" if access_log else "off (--access-log shows each request)"
    return [
        f"agentjournal is serving {base} (the API under {base}/v1)",
        f"  inspector  {base}/",
        f"  database   {database}",
        f"  auth       {auth}",
        f"  agent      {agent or 'none'}",
        f"  access log {log}",
    ]


def _load_agent(spec: str) -> Agent:
    from agentjournal.demo.order_agent import build
    from agentjournal.runtime import Agent, OpenAIChatModel

    if spec == "demo":
        return build()
    if spec == "openai":
        demo = build()
        if not (os.environ.get("AGENTJOURNAL_MODEL") or os.environ.get("OPENAI_MODEL")):
            # The model's own message speaks to Python callers ("pass model=..."); here the
            # only way to name it is the environment.
            fail("--agent openai needs a model name: set AGENTJOURNAL_MODEL (or OPENAI_MODEL)")
        try:
            model = OpenAIChatModel()
        except InvalidArgument as exc:  # a timeout or URL out of range: it says which
            fail(f"--agent openai: {exc}")
        return Agent(model, list(demo.tools.values()), name="openai")
    module_name, _, attribute = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise typer.BadParameter(
            f"{spec!r}: not 'demo', 'openai' or an importable 'module:name' ({exc})",
            param_hint="--agent",
        ) from exc
    made = found if isinstance(found, Agent) else found()
    if not isinstance(made, Agent):
        raise typer.BadParameter(
            f"{spec!r} gave {type(made).__name__}, not an Agent", param_hint="--agent"
        )
    return made


def _add_mcp_servers(agent: Agent, path: Path) -> None:
    from agentjournal.runtime import load_mcp_servers

    try:
        agent.add_mcp_servers(load_mcp_servers(path))
    except InvalidArgument as exc:  # a mistake in the file, or the mcp extra missing
        fail(f"--mcp-servers: {exc}")


def _check_new_file(db: str) -> None:
    """The demo's `--db` must be a SQLite file it can create, so that it cannot fail halfway."""
    if "://" in db:
        fail(f"--db {db!r}: a URL is not supported here; the demo writes a new SQLite file")
    path = Path(db)
    if path.exists():
        fail(f"--db {db!r} exists; the demo needs a new file: pass another name")
    if not path.parent.is_dir():
        fail(f"--db {db!r}: there is no folder {str(path.parent)!r} to create it in")


@contextmanager
def _bound(host: str, port: int) -> Iterator[list[socket.socket]]:
    """Sockets bound to every address of `host` (as uvicorn would bind them), closed when the
    block ends; a port in use, a port that needs privileges or a host that is not this
    machine's end the command here."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        fail(f"--host {host!r} is not an address of this machine: {exc.strerror}")
    bound: list[socket.socket] = []
    for family, kind, proto, _, address in dict.fromkeys(found):
        sock = socket.socket(family, kind, proto)
        bound.append(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
        except OSError as exc:
            for opened_socket in bound:
                opened_socket.close()
            if exc.errno == errno.EADDRINUSE:
                fail(f"port {port} on {host} is in use: stop what listens there or pass --port")
            if exc.errno == errno.EACCES:
                fail(f"port {port} needs privileges this user lacks: pass --port above 1023")
            fail(f"cannot listen on {host}:{port}: {exc.strerror} (check --host and --port)")
    try:
        yield bound
    finally:
        for sock in bound:
            sock.close()


def _url(sockets: list[socket.socket]) -> str:
    host, port = sockets[0].getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _run(config: uvicorn.Config, sockets: list[socket.socket], banner: list[str]) -> None:
    """uvicorn's server on `sockets`; `banner` goes to stderr once it listens (after start-up
    finished the turns a crash cut), so that what it says is already true."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                typer.echo("\n".join(banner), err=True)

    Server(config).run(sockets=sockets)


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for.")],
    db: DbOption = "agent.db",
    label: Annotated[str, typer.Option(help="A note to tell keys apart.")] = "",
    as_json: JsonOption = False,
) -> None:
    """Create a key and print it once (only a hash is stored); creates the database if missing.

    The key alone goes to stdout; --json prints {key, key_id, tenant} instead.

    Example: agentjournal keys create --tenant acme --db agent.db
    """

    check_id(tenant, "--tenant")  # before opening: a refused key must not create the database
    with opened(db, create=True) as journal:
        row, key = journal.keys.create(tenant, label)
    if as_json:
        print_json({"key": key, "key_id": row.key_id, "tenant": row.tenant})
    else:
        typer.echo(key)
    typer.echo(f"key id {row.key_id} for tenant {row.tenant}; it is not shown again", err=True)


@keys_app.command("list")
def keys_list(
    db: DbOption = "agent.db",
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List keys (ids, tenants, labels; never secrets); exit 1 if there are none.

    One key a line: key id, tenant, active or revoked, label (tab-separated).
    --json prints one array of {key_id, tenant, label, status, created_at, revoked_at}.

    Example: agentjournal keys list --db agent.db --tenant acme
    """

    with opened(db) as journal:
        rows = journal.keys.list(tenant)
    listed = [
        {
            "key_id": row.key_id,
            "tenant": row.tenant,
            "label": row.label,
            "status": "revoked" if row.revoked_at else "active",
            "created_at": row.created_at,
            "revoked_at": row.revoked_at,
        }
        for row in rows
    ]
    if as_json:
        print_json(listed)
    else:
        for item in listed:
            typer.echo(f"{item['key_id']}\t{item['tenant']}\t{item['status']}\t{item['label']}")
    if not rows:
        raise typer.Exit(EXIT_PROBLEMS)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (the part after aj_).")],
    db: DbOption = "agent.db",
) -> None:
    """Revoke a key; requests with it answer 401 within seconds. Exit 1 if no such active key.

    Example: agentjournal keys revoke ms4la5a66b --db agent.db
    """

    with opened(db) as journal:
        revoked = journal.keys.revoke(key_id)
    if not revoked:
        typer.echo(f"no active key {key_id}", err=True)
        raise typer.Exit(EXIT_PROBLEMS)
