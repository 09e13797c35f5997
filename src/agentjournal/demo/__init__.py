"""`agentjournal demo` and the scripted agent it serves; demo code only, kept out of the library.

`order_agent` is the scripted order-service agent (`agentjournal serve --agent demo`), with the
knobs the demo and the tests turn through the environment; `run` starts that server, SIGKILLs
it and checks what survived. This module imports nothing, so `serve --agent demo` loads the
agent without the demo's HTTP client.
"""
