"""OpenTelemetry export: every journaled turn as GenAI semantic-convention spans, sent over
OTLP by the official SDK (`pip install 'agentjournal[otel]'`; docs/observability.md).

`turns` folds a session's events into turns and tasks, `spans` maps them to span data (pure),
`checkpoint` keeps the last exported position in the journal itself, and `exporter` follows the
global feed from there and sends each finished turn once.
"""
