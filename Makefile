# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the test suite).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1

.PHONY: demo test lint bench setup clean-venv

$(STAMP): pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/devops-rl train --mode ci-fast

# The style and layer checks first (seconds), then every test.
test: lint
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean-venv:
	rm -rf $(VENV)
