# The two commands a newcomer needs: `make crawl URL=...` and `make test`.
# Both create and use the virtual environment at .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
URL ?= https://example.com/
# Handed to the recipe through the environment, so that no character of it (&, ;, quotes,
# spaces) is read by the shell.
export URL
# The oldest Scrapy pyproject.toml accepts, and a second virtualenv that has exactly it.
SCRAPY_MIN := $(shell sed -n 's/^ *"scrapy>=\([0-9.]*\)".*/\1/p' pyproject.toml)
MIN_BIN := .venv-scrapy-min/bin
# What the minimum version is checked on: where the project meets Scrapy's APIs.
MIN_TESTS := tests/test_addon.py tests/test_dupefilter_contract.py tests/test_own_project.py \
	tests/test_site_crawl.py tests/test_redirects.py tests/test_serialize.py \
	tests/test_politeness.py tests/test_ssrf.py tests/test_compat.py

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

$(MIN_BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv .venv-scrapy-min
	$(MIN_BIN)/pip install -q --upgrade pip
	$(MIN_BIN)/pip install -q -e '.[test]' 'scrapy==$(SCRAPY_MIN)'
	touch $@

.PHONY: venv crawl test test-min lint
venv: $(BIN)/.installed

crawl: $(BIN)/.installed
	$(BIN)/scrapy crawl site -a start_url="$$URL"

test: $(BIN)/.installed
	$(BIN)/python -m tests.services ensure
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest
	$(MAKE) test-min

# The tests of MIN_TESTS again on the oldest Scrapy the project declares (docs/scrapy-support.md).
test-min: $(MIN_BIN)/.installed
	$(MIN_BIN)/python -c 'import scrapy; assert scrapy.__version__ == "$(SCRAPY_MIN)", scrapy.__version__'
	$(MIN_BIN)/pytest -q $(MIN_TESTS)

lint: $(BIN)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
