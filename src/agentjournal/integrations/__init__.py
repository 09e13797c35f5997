"""agentjournal as the memory of agent frameworks. Each integration is a module of its own, imported
by name, with its framework as an optional extra; `import agentjournal` never imports one.

- `agentjournal.integrations.openai_agents.JournalSession`: the OpenAI Agents SDK's `Session`
  (`pip install 'agentjournal[openai-agents]'`).
- `agentjournal.integrations.responses`: Responses API input items as journal events (pure, no
  framework), what the session above stores.
- `agentjournal.integrations.langgraph.JournalSaver` / `AsyncJournalSaver`: LangGraph's
  checkpointer (`pip install 'agentjournal[langgraph]'`); `langgraph_events` holds its events
  (pure), `langgraph_store` finds a thread's checkpoints and values in the journal.
- `agentjournal.integrations.pydantic_ai.JournalHistory`: PydanticAI's message history, and
  `pydantic_ai_store.JournalConversationStore` its `ConversationStore`
  (`pip install 'agentjournal[pydantic-ai]'`); `pydantic_ai_events` holds their events (pure).
- `agentjournal.integrations.adk.JournalSessionService`: Google ADK's session service
  (`pip install 'agentjournal[adk]'`); `adk_events` holds its events (pure), `adk_store` finds
  sessions, state and directories in the journal.
- `worker`: what the integrations taking a `Journal` or an `AsyncJournal` share (which journal,
  which worker thread).
"""
