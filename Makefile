# Quick start: `make demo`, then `make test`. Both create .venv at the project root on first use
# and reuse it afterwards (delete .venv, or run `make clean`, to start over).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORE   := $(VENV)/.rankgate-core
DEV    := $(VENV)/.rankgate-dev

.PHONY: demo test check lint typecheck docs clean bench bench-10m bench-store fuzz

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The compiled kernels are rebuilt when their sources change.
NATIVE := setup.py src/rankgate/_join.c src/rankgate/_jsonl.c src/rankgate/_cells.c src/rankgate/_sqlite_read.c \
	src/rankgate/_arrow_offsets.h

$(CORE): pyproject.toml $(NATIVE) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEV): pyproject.toml $(NATIVE) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(CORE)

DEMO_HTML  ?= build/demo-report.html
DEMO_STORE := build/traces.db

## demo: the nightly path on the bundled examples: record the traces into a SQLite trace store,
## import the annotators' labels, then score the day's traces against the example gates (the
## HTML report goes to $(DEMO_HTML))
demo: $(CORE)
	@mkdir -p build $(dir $(DEMO_HTML))
	@rm -f $(DEMO_STORE) $(DEMO_STORE)-wal $(DEMO_STORE)-shm
	$(BIN)/rankgate trace import examples/traces.jsonl --store sqlite:///$(DEMO_STORE) --no-labels
	$(BIN)/rankgate label import examples/labels.jsonl --store sqlite:///$(DEMO_STORE)
	$(BIN)/rankgate eval sqlite:///$(DEMO_STORE) --since 2026-11-30 --until 2026-12-01 \
		--config examples/rankgate.toml --html $(DEMO_HTML)

## test: lint, type-check and run the whole test suite
test: $(DEV) check
	$(BIN)/python -m pytest

check: lint typecheck

## fuzz: the adversarial suite (hostile records through every reader, hostile requests to the
## monitor) with many more generated examples than `make test` runs (FUZZ_EXAMPLES per reader)
FUZZ_EXAMPLES ?= 30
fuzz: $(DEV)
	RANKGATE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/adversarial -q

lint: $(DEV)
	$(BIN)/ruff check src tests examples bench docs/gen_reference.py

typecheck: $(DEV)
	$(BIN)/mypy src

## bench: seeded synthetic traces (QUERIES x 100 retrieved, graded labels) as JSON Lines and
## Parquet, scored by rankgate, ranx and pytrec_eval in one run (wall time, peak memory, ratios,
## rankgate against a bare pyarrow read); in the same run the same traces from a SQLite and a
## PostgreSQL store (PostgreSQL on localhost, or RANKGATE_BENCH_POSTGRES), compare paired and
## unpaired, struct-grade Parquet and a pandas DataFrame, then issue 16's target table (exits 1 on
## a missed target or a disagreement; QUERIES=20000 for a quick look); then the start-up cost of
## `rankgate eval` on 10 traces, and the monitor's HTTP intake rate (fails below 5,000 events/s)
bench: $(DEV)
	@mkdir -p build
	$(BIN)/python bench/targets.py --queries $(QUERIES)
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/monitor_load.py --seconds 10 --min-rate 5000

## bench-10m: peak memory of `rankgate eval` on 10M traces as JSON Lines and as Parquet (target
## 1.5 GB); the 19 GB of generated files are deleted afterwards
bench-10m: $(DEV)
	@mkdir -p build
	$(BIN)/python bench/targets.py --big --queries 10000000

## bench-store: fill a SQLite store with 1M synthetic traces and time `rankgate eval` on it
## (STORE=postgresql://... for PostgreSQL; QUERIES=N for another size)
STORE   ?= sqlite:///build/bench-store.db
QUERIES ?= 1000000
bench-store: $(DEV)
	@mkdir -p build
	$(BIN)/python bench/store_read.py --store $(STORE) --queries $(QUERIES)

## docs: the documentation site: regenerate the generated pages (the CLI reference from the
## parser, the Python API from the docstrings of rankgate.__all__, the metrics from the registry),
## then build docs/ with MkDocs (Material theme) in strict mode into build/site: a broken link or
## anchor, or any other warning, fails it. MkDocs comes with the `docs` extra, installed on first use.
## (NO_MKDOCS_2_WARNING quiets the Material theme's notice about its own end of life.)
docs: $(CORE)
	$(BIN)/python -c 'import mkdocs, material' 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[docs]'
	$(BIN)/python docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) build test-output .pytest_cache .mypy_cache .ruff_cache .hypothesis src/*.egg-info
