# keepstate: `make run` serves the API on SQLite, `make test` runs everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TS := sdk/typescript
TS_STAMP := $(TS)/node_modules/.installed

.PHONY: run test test-ts lint bench clean install screenshots coverage suite

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "keepstate needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,postgres,redis,langgraph,openai-agents,adk,embed]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/keepstate serve --store sqlite:///keepstate.db --host 127.0.0.1 --port 8420

TYPED_TESTS := tests tests/client tests/conformance tests/console tests/harness tests/server tests/sessions

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	@# the tests too, a folder at a time: each has its own conftest and imports its siblings by name
	@for dir in $(TYPED_TESTS); do MYPYPATH=tests:$$dir $(BIN)/mypy $$dir/*.py || exit 1; done
	MYPYPATH=tests:tests/integrations:tests/console $(BIN)/mypy bench

# The suite: the Python suite in TEST_WORKERS pytest-xdist workers (most tests wait on servers, processes
# and databases, so more workers than cores pays) while the TypeScript SDK tests and, for `make test`, the
# lint gates (BESIDE) run beside it, their output shown after the Python suite's; any of them failing fails
# `make test`. The 25 slowest tests are listed at the end. What a test must do to be safe in parallel:
# tests/conftest.py. `make coverage` runs the same suite with the line coverage of src/keepstate and its
# floor (pyproject's tool.coverage; servers and CLIs the tests start as processes of their own are not
# counted): tracing every line costs the in-process tests ~70% more CPU, which on two cores is minutes of
# the suite's wall time, so it is a run of its own.
TEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadgroup --durations=25

test: $(STAMP)
	@$(MAKE) --no-print-directory suite PYTEST_EXTRA= BESIDE="test-ts lint"

coverage: $(STAMP)
	@$(MAKE) --no-print-directory suite PYTEST_EXTRA="--cov=keepstate --cov-report=term:skip-covered" BESIDE=test-ts

BESIDE ?= test-ts
suite: $(STAMP)
	@logs=$$(mktemp -d); pids=""; \
	for target in $(BESIDE); do \
		$(MAKE) --no-print-directory $$target >"$$logs/$$target" 2>&1 & pids="$$pids $$target:$$!"; \
	done; \
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) $(PYTEST_EXTRA); \
	py_status=$$?; failed=""; [ $$py_status -eq 0 ] || failed=" pytest"; \
	for entry in $$pids; do \
		target=$${entry%%:*}; wait $${entry##*:} || failed="$$failed $$target"; \
		echo "--- make $$target ---"; cat "$$logs/$$target"; \
	done; \
	rm -rf "$$logs"; \
	if [ -n "$$failed" ]; then echo "make test failed in:$$failed"; exit 1; fi

# The TypeScript SDK against a real `keepstate serve` from this venv. Without npm it is skipped with
# one line, unless KEEPSTATE_REQUIRE_SERVICES=1 (CI), which fails instead.
test-ts: $(STAMP)
	@if command -v npm >/dev/null 2>&1; then \
		$(MAKE) $(TS_STAMP) && cd $(TS) && npm run build && KEEPSTATE_BIN="$(CURDIR)/$(BIN)/keepstate" npm test; \
	elif [ "$$KEEPSTATE_REQUIRE_SERVICES" = "1" ]; then \
		echo "npm is not installed and KEEPSTATE_REQUIRE_SERVICES=1: the TypeScript SDK tests must run"; exit 1; \
	else \
		echo "skipping the TypeScript SDK tests: npm is not installed (Node.js 18+ and npm)"; \
	fi

$(TS_STAMP): $(TS)/package.json $(TS)/package-lock.json
	cd $(TS) && npm ci --no-audit --no-fund
	touch $(TS_STAMP)

bench: $(STAMP)
	$(BIN)/python -m bench

# the console's browser tests, writing their screenshots to docs/console/ (needs Debian's chromium)
screenshots: $(STAMP)
	KEEPSTATE_SCREENSHOTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/console/test_console_browser.py \
		tests/console/test_console_registered.py tests/console/test_console_memory_browser.py \
		tests/console/test_console_semantic_browser.py tests/console/test_console_adapters.py \
		tests/console/test_console_people.py tests/console/test_console_events.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(TS)/node_modules $(TS)/dist $(TS)/build
