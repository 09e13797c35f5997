# Two commands a newcomer needs: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck bench bench-ops bench-postgres bench-feed bench-agents bench-langgraph bench-peers bench-anatomy bench-stream bench-wrk clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "agentjournal needs Python 3.11+"'
	@echo "Setting up $(VENV): installing agentjournal and its dev tools with pip."
	@echo "The first time takes a minute or two, without output until it is done."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)
	@echo "$(VENV) is ready."

demo: $(STAMP)
	$(BIN)/agentjournal demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/python scripts/gen_aio.py --check

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python bench/journal_bench.py
	$(BIN)/python bench/recover_bench.py

bench-ops: $(STAMP)  # the WAL under 1,000,000 events; export/import of 1,000,000 events
	cd bench && ../$(BIN)/python wal_bench.py
	cd bench && ../$(BIN)/python transfer_bench.py

bench-postgres: $(STAMP)  # needs a PostgreSQL: --url, default postgresql://127.0.0.1:5432/test
	$(BIN)/python bench/postgres_bench.py

bench-feed: $(STAMP)  # the PostgreSQL feed under stress writers: every event once, in order
	$(BIN)/python bench/feed_stress.py --seconds 300

bench-agents: $(STAMP)  # JournalSession beside the Agents SDK's SQLiteSession: one, then 16 at once
	$(BIN)/python bench/agents_session_bench.py
	$(BIN)/python bench/agents_concurrency_bench.py

bench-langgraph: $(STAMP)  # JournalSaver beside LangGraph's SqliteSaver and PostgresSaver
	$(BIN)/python bench/langgraph_bench.py

bench-peers: $(STAMP)  # one agent turn: agentjournal, raw sqlite3, SQLiteSession, eventsourcing
	$(BIN)/python bench/peers_bench.py

bench-wrk: $(STAMP) ; $(BIN)/python bench/http_wrk_bench.py  # appends under wrk: floor, service, 0.1.0
bench-stream: $(STAMP)  # a model's deltas through /turns beside the model server streamed directly
	$(BIN)/python bench/stream_bench.py

bench-anatomy: $(STAMP)  # where one append's time goes: SQL, Python, pages per commit
	$(BIN)/python bench/write_anatomy.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache

.PHONY: bench-adk
bench-adk: $(STAMP)  # JournalSessionService beside Google ADK's DatabaseSessionService
	$(BIN)/python bench/adk_bench.py

.PHONY: bench-replication
bench-replication: $(STAMP)  # SQLite -> PostgreSQL catch-up beside export+import, lag; the SIGKILL soak
	cd bench && ../$(BIN)/python replication_bench.py
	$(BIN)/python bench/replication_soak.py

.PHONY: bench-agents-postgres
bench-agents-postgres: $(STAMP)  # JournalSession on PostgreSQL beside the SDK's SQLAlchemySession (--url)
	$(BIN)/python bench/agents_postgres_bench.py
