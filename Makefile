# The two commands a newcomer needs: `make crawl URL=...` and `make test`.
# Both create and use the virtual environment at .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
URL ?= https://example.com/

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

.PHONY: venv crawl test lint
venv: $(BIN)/.installed

crawl: $(BIN)/.installed
	$(BIN)/scrapy crawl site -a start_url=$(URL)

test: $(BIN)/.installed
	$(BIN)/python -m tests.services ensure
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
