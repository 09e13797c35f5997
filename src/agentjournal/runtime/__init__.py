"""The durable agent runtime: an agent loop that journals each step before it acts, finishes
turns a crash cut, and workers that run tasks under leases."""

from agentjournal.runtime.agent import (
    Agent,
    Invocation,
    Model,
    ModelReply,
    RequestedCall,
    Tool,
    TurnResult,
)
from agentjournal.runtime.anthropic_model import AnthropicModel
from agentjournal.runtime.mcp_servers import MCPServer, load_mcp_servers
from agentjournal.runtime.model_loop import TurnControl
from agentjournal.runtime.models import OpenAIChatModel, Script, ScriptedModel
from agentjournal.runtime.resume import ResumeReport, UnfinishedTurn, resume_incomplete
from agentjournal.runtime.shapes import ToolFailed
from agentjournal.runtime.streaming import (
    Completed,
    ModelChunk,
    StreamingModel,
    TextDelta,
    ToolCallDelta,
)
from agentjournal.runtime.turn_stream import AsyncTurnStream, TurnItem, TurnStream
from agentjournal.runtime.worker import Handler, PermanentFailure, TaskRun, Worker

__all__ = [
    "Agent",
    "AnthropicModel",
    "AsyncTurnStream",
    "Completed",
    "Handler",
    "Invocation",
    "MCPServer",
    "Model",
    "ModelChunk",
    "ModelReply",
    "OpenAIChatModel",
    "PermanentFailure",
    "RequestedCall",
    "ResumeReport",
    "Script",
    "ScriptedModel",
    "StreamingModel",
    "TaskRun",
    "TextDelta",
    "Tool",
    "ToolCallDelta",
    "ToolFailed",
    "TurnControl",
    "TurnItem",
    "TurnResult",
    "TurnStream",
    "UnfinishedTurn",
    "Worker",
    "load_mcp_servers",
    "resume_incomplete",
]
