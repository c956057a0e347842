# keepstate: `make run` serves the API on SQLite, `make test` runs everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean install screenshots

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "keepstate needs Python 3.11+"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,postgres,redis]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/keepstate serve --store sqlite:///keepstate.db --host 127.0.0.1 --port 8420

TYPED_TESTS := tests tests/client tests/conformance tests/console tests/harness tests/server tests/sessions

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	@# the tests too, a folder at a time: each has its own conftest and imports its siblings by name
	@for dir in $(TYPED_TESTS); do MYPYPATH=tests:$$dir $(BIN)/mypy $$dir/*.py || exit 1; done
	MYPYPATH=tests:tests/console $(BIN)/mypy bench

test: $(STAMP) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench

# the console's browser tests, writing their screenshots to docs/console/ (needs Debian's chromium)
screenshots: $(STAMP)
	KEEPSTATE_SCREENSHOTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/console/test_console_browser.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
