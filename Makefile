# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the test suite).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1

.PHONY: demo test bench setup clean-venv

$(STAMP): pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/devops-rl train --mode ci-fast

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean-venv:
	rm -rf $(VENV)
