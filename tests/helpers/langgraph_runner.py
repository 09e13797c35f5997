"""The child of tests/integrations/test_langgraph_durability.py: runs a LangGraph graph over
`JournalSaver`, in one of two modes.

    python langgraph_runner.py crash URL THREAD
    python langgraph_runner.py steps URL THREAD STEPS

The graph (`build`) loops forever: each step runs nodes `a` and `b` in parallel, then `join`;
every node appends `<node><k>` to the `log` channel, k being the joins the log held when the
step began, and prints "ran <node> <k>" (flushed) as it starts. It runs with
`durability="sync"`: a step's checkpoint is durable before the next step starts.

`crash`: a fork server. Importing LangGraph takes a while, so this process imports it once and,
for every line "run" on stdin, forks a child that opens the saver, prints "started <pid>", and
runs the thread on from where it stands (`invoke(None)` once it has a checkpoint, else an input)
until it is killed. The server reaps each child and prints "exited <pid> <code>" (-9 for SIGKILL)
after all the child's lines. It ends at the end of its stdin; a child not killed within a minute
stops by itself.

`steps`: runs STEPS whole steps on THREAD and prints "done" (two of these run at once on one file
in the test of two processes).

The saver is opened only after forking: no SQLite connection crosses a fork.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
from typing import Annotated, Any, TypedDict

from langgraph.graph import START, StateGraph

from agentjournal.integrations.langgraph import JournalSaver

GIVE_UP_AFTER = 60.0


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def build(saver: Any, say: Any = None, stop_after: int | None = None) -> Any:
    def node(name: str) -> Any:
        def run(state: State) -> dict[str, Any]:
            k = sum(1 for entry in state["log"] if entry.startswith("j"))
            if say is not None:
                say(f"ran {name} {k}")
            return {"log": [f"{name}{k}"]}

        return run

    def fan_out(state: State) -> list[str]:
        joins = sum(1 for entry in state["log"] if entry.startswith("j"))
        if stop_after is not None and joins >= stop_after:
            return []
        return ["a", "b"]

    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.add_node("b", node("b"))
    builder.add_node("j", node("j"))
    builder.add_conditional_edges(START, fan_out, ["a", "b"])
    builder.add_edge(["a", "b"], "j")
    builder.add_conditional_edges("j", fan_out, ["a", "b"])
    return builder.compile(checkpointer=saver)


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 1_000_000}


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def child(url: str, thread: str) -> None:
    timer = threading.Timer(GIVE_UP_AFTER, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    with JournalSaver.from_conn_string(url) as saver:
        graph = build(saver, say)
        # The graph never ends: a thread with a checkpoint is resumed (`next` would not do, it
        # leaves out the tasks whose writes were saved before the kill).
        started = saver.get_tuple(config(thread)) is not None
        say(f"started {os.getpid()}")
        graph.invoke(None if started else {"log": []}, config(thread), durability="sync")


def crash(url: str, thread: str) -> None:
    for line in sys.stdin:
        if line.strip() != "run":
            continue
        pid = os.fork()
        if pid == 0:
            try:
                child(url, thread)
            except BaseException as exc:  # the test prints it
                say(f"error {type(exc).__name__}: {exc}")
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        say(f"exited {pid} {os.waitstatus_to_exitcode(status)}")


def steps(url: str, thread: str, count: int) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        build(saver, stop_after=count).invoke({"log": []}, config(thread), durability="sync")
    say("done")


if __name__ == "__main__":
    mode, url, thread = sys.argv[1:4]
    if mode == "crash":
        crash(url, thread)
    else:
        steps(url, thread, int(sys.argv[4]))
