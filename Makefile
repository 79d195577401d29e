# Every target creates or updates the project's virtualenv (.venv) first, with what it needs:
# `make run` the base package only (plus EXTRAS, e.g. EXTRAS=ml for the ML rules), `make test` the dev stack.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PREFIX ?=
EXTRAS ?=

.PHONY: venv run test lint bench clean

define install
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.$(1)'
	touch $@
endef

$(BIN)/.installed-run-$(EXTRAS): pyproject.toml
	$(call install,$(if $(EXTRAS),[$(EXTRAS)]))

$(BIN)/.installed-dev: pyproject.toml
	$(call install,[dev])

venv: $(BIN)/.installed-dev

run: $(BIN)/.installed-run-$(EXTRAS)  ## the main job: build the hello_world tutorial target
	$(BIN)/marinbuild //experiments/tutorials:hello_world $(if $(PREFIX),--prefix $(PREFIX))

test: $(BIN)/.installed-dev  ## the test suite
	$(BIN)/python -m pytest -q

lint: $(BIN)/.installed-dev
	$(BIN)/ruff check marinbuild tests bench experiments rules

bench: $(BIN)/.installed-run-$(EXTRAS)
	$(BIN)/python bench/engine_bench.py

clean:
	rm -rf $(VENV) local_store .pytest_cache
