# Every target creates or updates the project's virtualenv (.venv) first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PREFIX ?=
EXTRAS ?= dev

.PHONY: venv run test lint bench clean

$(BIN)/.installed-$(EXTRAS): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

venv: $(BIN)/.installed-$(EXTRAS)

run: venv  ## the main job: build the hello_world tutorial target
	$(BIN)/marinbuild //experiments/tutorials:hello_world $(if $(PREFIX),--prefix $(PREFIX))

test: venv  ## the test suite
	$(BIN)/python -m pytest -q

lint: venv
	$(BIN)/ruff check marinbuild tests bench experiments rules

bench: venv
	$(BIN)/python bench/engine_bench.py

clean:
	rm -rf $(VENV) local_store .pytest_cache
