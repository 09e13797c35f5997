"""The HTTP service: `create_app(journal)` is an ASGI app; `agentjournal serve` runs it."""

from agentjournal.server.app import create_app
from agentjournal.server.service import Limits

__all__ = ["Limits", "create_app"]
