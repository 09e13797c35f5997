"""The MCP servers an agent takes its tools from: what to start or where to connect, which of
their tools may be run again after a crash, how long a call may take. Plain data, checked when
made (`InvalidArgument`, naming the field); `load_mcp_servers` reads them from the JSON config
file MCP clients use (`{"mcpServers": {...}}`). Nothing here connects: runtime/mcp_tools.py does,
and only it needs the `mcp` extra."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentjournal.errors import InvalidArgument

__all__ = ["MCPServer", "load_mcp_servers"]

# A server's name is the first part of its tools' names as the model sees them
# (`{server}__{tool}`), so it keeps to the characters every model API accepts in a tool name,
# and it has no `__` of its own and does not end in `_` (`a_` + `__` + `x` is `a` + `__` + `_x`):
# a tool name has exactly one server it can belong to, the part before its first `__`.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_KEYS = {
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "idempotent",
    "timeout",
    "start_timeout",
    "disabled",
}


@dataclass(frozen=True, slots=True)
class MCPServer:
    """An MCP server whose tools an `Agent` offers its model beside its Python tools: a command
    it starts and talks to over stdio (`command`, `args`, `env`, `cwd`), or a streamable-HTTP
    `url` (with `headers`, a bearer token say). The model sees each tool as `{name}__{tool}`.

    `idempotent` says which tools may run again when a crash cut a turn between a call and its
    result: `True` (all), `False` (none, the default) or the names of those that may. A call of
    any other tool that may have run is not run again: it gets an error result saying so, as a
    Python `Tool` that is not idempotent does. A server's own annotations (`idempotentHint`) are
    hints from the server, not this promise, and are not used for it.

    `timeout` bounds each call (seconds); `start_timeout` bounds starting the server and listing
    its tools. A call that times out, a server that does not start and a tool that fails all
    become error results the model reads; the turn goes on."""

    name: str
    command: str | None = None
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool | Collection[str] = False
    timeout: float = 60.0
    start_timeout: float = 30.0

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not _NAME.match(name) or "__" in name or name[-1] == "_":
            raise InvalidArgument(
                f"MCP server name {name!r}: 1 to 32 letters, digits, '_' or '-', without"
                " '__' and not ending in '_' (it prefixes its tools' names)"
            )
        where = f"MCP server {self.name!r}"
        if (self.command is None) == (self.url is None):
            raise InvalidArgument(f"{where}: give either a command (stdio) or a url (HTTP)")
        if self.command is not None:
            _text(self.command, f"{where}: command", nonempty=True)
            if isinstance(self.args, str) or not isinstance(self.args, Sequence):
                raise InvalidArgument(f"{where}: args must be a list of strings")
            for arg in self.args:
                _text(arg, f"{where}: each of args")
            object.__setattr__(self, "args", tuple(self.args))
            if self.cwd is not None:
                _text(self.cwd, f"{where}: cwd", nonempty=True)
        if self.url is not None:
            _text(self.url, f"{where}: url", nonempty=True)
            if not self.url.startswith(("http://", "https://")):
                raise InvalidArgument(f"{where}: url must start with http:// or https://")
            if self.command is None and (self.env or self.cwd or self.args):
                raise InvalidArgument(f"{where}: env, cwd and args are for a command's server")
        elif self.headers:
            raise InvalidArgument(f"{where}: headers are for a url's server")
        for label, mapping in (("env", self.env), ("headers", self.headers)):
            if not isinstance(mapping, Mapping):
                raise InvalidArgument(f"{where}: {label} must map names to strings")
            for key, value in mapping.items():
                _text(key, f"{where}: each name in {label}", nonempty=True)
                _text(value, f"{where}: {label}[{key!r}]")
            object.__setattr__(self, label, dict(mapping))
        if not isinstance(self.idempotent, bool):
            names = self.idempotent
            if isinstance(names, str) or not isinstance(names, Collection):
                raise InvalidArgument(f"{where}: idempotent must be true, false or tool names")
            for tool in names:
                _text(tool, f"{where}: each tool named in idempotent", nonempty=True)
            object.__setattr__(self, "idempotent", frozenset(names))
        for label, seconds in (("timeout", self.timeout), ("start_timeout", self.start_timeout)):
            number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
            if not number or not math.isfinite(seconds) or seconds <= 0:
                raise InvalidArgument(f"{where}: {label} must be a positive number of seconds")

    def is_idempotent(self, tool: str) -> bool:
        """Whether the server's tool `tool` (its own name) may be run again after a crash."""
        if isinstance(self.idempotent, bool):
            return self.idempotent
        return tool in self.idempotent


def load_mcp_servers(path: str | os.PathLike[str]) -> list[MCPServer]:
    """The servers of a JSON config file in the shape MCP clients use:

        {"mcpServers": {"files": {"command": "npx", "args": ["-y", "some-server"]},
                        "search": {"type": "http", "url": "https://...",
                                   "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}}}}

    plus this runtime's own keys per server: `idempotent`, `timeout`, `start_timeout`.
    `${VAR}` (or `${VAR:-default}`) in a string is the environment variable's value. A server
    with `"disabled": true` is left out. `InvalidArgument` names what is wrong (a typo in a key
    included), and nothing is started."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read the MCP servers file {str(source)!r}: {exc}") from exc
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"{str(source)!r} is not JSON: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("mcpServers"), dict):
        raise InvalidArgument(f'{str(source)!r} needs an object "mcpServers": {{name: server}}')
    servers = []
    for name, entry in config["mcpServers"].items():
        server = _from_entry(name, _expand(entry, f"MCP server {name!r}"))
        if server is not None:
            servers.append(server)
    return servers


def _from_entry(name: str, entry: Any) -> MCPServer | None:
    where = f"MCP server {name!r}"
    if not isinstance(entry, dict):
        raise InvalidArgument(f"{where}: each server is a JSON object")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise InvalidArgument(f"{where}: unknown keys {unknown} (known: {sorted(_KEYS)})")
    if not isinstance(entry.get("disabled", False), bool):
        raise InvalidArgument(f"{where}: disabled must be true or false")
    if entry.get("disabled") is True:
        return None
    kind = entry.get("type", "http" if "url" in entry else "stdio")
    if kind == "sse":
        raise InvalidArgument(f"{where}: the SSE transport is not supported; use its HTTP url")
    if kind not in ("stdio", "http", "streamable-http", "streamableHttp"):
        raise InvalidArgument(f"{where}: type {kind!r} is not stdio or http")
    if (kind == "stdio") != ("command" in entry):
        raise InvalidArgument(f"{where}: a stdio server has a command, an http one a url")
    options = {key: value for key, value in entry.items() if key not in ("type", "disabled")}
    try:
        return MCPServer(name, **options)
    except TypeError as exc:  # a key given a value of the wrong kind that the checks missed
        raise InvalidArgument(f"{where}: {exc}") from exc


def _expand(value: Any, where: str) -> Any:
    """`value` with `${VAR}` and `${VAR:-default}` in its strings replaced from the environment."""
    if isinstance(value, str):

        def variable(match: re.Match[str]) -> str:
            found = os.environ.get(match[1])
            if found is not None:
                return found
            if match[2] is not None:
                return match[2]
            raise InvalidArgument(f"{where}: the environment has no {match[1]} (${{{match[1]}}})")

        return _VARIABLE.sub(variable, value)
    if isinstance(value, list):
        return [_expand(item, where) for item in value]
    if isinstance(value, dict):
        return {key: _expand(item, where) for key, item in value.items()}
    return value


def _text(value: Any, label: str, *, nonempty: bool = False) -> None:
    if not isinstance(value, str) or (nonempty and not value) or "\x00" in value:
        wanted = "a non-empty string" if nonempty else "a string"
        raise InvalidArgument(f"{label} must be {wanted} (without NUL)")
