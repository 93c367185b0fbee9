# Quick start: `make demo`, then `make test`. Both create .venv at the project root on first use
# and reuse it afterwards (delete .venv, or run `make clean`, to start over).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORE   := $(VENV)/.rankgate-core
DEV    := $(VENV)/.rankgate-dev

.PHONY: demo test check lint typecheck docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(CORE)

DEMO_HTML ?= build/demo-report.html

## demo: score the bundled example traces against the example gates; the HTML report goes to
## $(DEMO_HTML)
demo: $(CORE)
	@mkdir -p $(dir $(DEMO_HTML))
	$(BIN)/rankgate eval examples/traces.jsonl --config examples/rankgate.toml --html $(DEMO_HTML)

## test: lint, type-check and run the whole test suite
test: $(DEV) check
	$(BIN)/python -m pytest

check: lint typecheck

lint: $(DEV)
	$(BIN)/ruff check src tests examples

typecheck: $(DEV)
	$(BIN)/mypy src

## docs: regenerate docs/metrics.md from the metric registry
docs: $(CORE)
	$(BIN)/rankgate metrics --format markdown > docs/metrics.md

clean:
	rm -rf $(VENV) build test-output .pytest_cache .mypy_cache .ruff_cache .hypothesis src/*.egg-info
