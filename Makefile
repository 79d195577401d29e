# Every target creates or updates the project's virtualenv (.venv) first, with what it needs:
# `make run` the base package only (plus EXTRAS, e.g. EXTRAS=ml for the ML rules), `make check` and the tests the
# dev stack.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PREFIX ?=
EXTRAS ?=

LINTED := marinbuild tests bench experiments rules
# Without the suites that start a Ray cluster, fake-gcs-server or levanter (markers set in tests/conftest.py);
# their three folders are wholly marked, so they are not even imported.
FAST := -m "not ray and not gcs and not ml and not soak" --ignore=tests/ray --ignore=tests/gcs --ignore=tests/ml
# test-fast runs in JOBS processes (pytest-xdist; auto: one a core); `make test-fast JOBS=0` runs it in this
# process, for a debugger, `-x` or reading output in order. `make test` stays serial: the Ray and GCS suites
# share one cluster and one fake-gcs-server a session.
JOBS ?= auto

.PHONY: venv run check lint format test test-fast rehearsal rehearsal-test bench clean

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

check: $(BIN)/.installed-dev  ## ruff lint, ruff format --check, mypy, the import layers (what CI runs before the tests)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports

lint: $(BIN)/.installed-dev  ## ruff lint only
	$(BIN)/ruff check $(LINTED)

format: $(BIN)/.installed-dev  ## rewrite the code in ruff format's style and apply ruff's safe fixes
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

test: $(BIN)/.installed-dev  ## the whole test suite (what CI runs)
	$(BIN)/python -m pytest -q --durations=25

test-fast: $(BIN)/.installed-dev  ## the inner loop: without the Ray, GCS-emulator, training and kill-soak tests
	$(BIN)/python -m pytest -q -n $(JOBS) $(FAST)

rehearsal: $(BIN)/.installed-dev  ## tootsie_8b's macro at toy scale on a local Ray cluster of simulated TPU hosts and fake GCS
	$(BIN)/python experiments/tootsie_rehearsal/rehearse.py

rehearsal-test: $(BIN)/.installed-dev  ## the rehearsal with its checks alone (tests/ray/test_rehearsal.py, also in `make test`)
	$(BIN)/python -m pytest -q tests/ray/test_rehearsal.py

bench: $(BIN)/.installed-run-$(EXTRAS)
	$(BIN)/python bench/engine_bench.py

clean:
	rm -rf $(VENV) local_store .pytest_cache .mypy_cache .ruff_cache
