# offloadprobe: `make run` and `make test` set up everything on a fresh machine.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# A host without an NVIDIA driver gets the CPU build of torch (it lies on disk here);
# a GPU node gets the default (CUDA) build.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
TORCH_SPEC ?= $(if $(HAS_GPU),torch,torch==2.13.0)

$(BIN)/offloadprobe: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# bytecode for the package and the tests, once: every run, child and rank imports them
	# (where PYTHONDONTWRITEBYTECODE is set, as here, Python would compile them each time)
	$(BIN)/python -m compileall -q offloadprobe tests benchmarks examples
	touch $@

.PHONY: env
env: $(BIN)/offloadprobe ## Create the virtual environment if it is missing

# The problem and the fix side by side: naive (a fresh pinned copy every offload) breaks a
# 1.5x host-peak budget, as expected (the row says so and the exit code stays 0), lazy
# keeps to it; on a GPU, registered as well. About 24 CPU-seconds on a 2-core CPU host.
RUN_ROWS ?= $(strip naive lazy $(if $(HAS_GPU),registered))
RUN_MODEL ?= --payload 8MiB --cycles 2
RUN_BUDGETS ?= --max-host-peak 1.5x --expect naive=over-budget

.PHONY: run
run: env ## Compare naive (the problem) and lazy (the fix) on an 8 MiB model, 2 cycles
	$(BIN)/offloadprobe compare $(RUN_ROWS) $(RUN_MODEL) $(RUN_BUDGETS)

.PHONY: test
test: env ## Run the whole test suite (GPU tests skip without CUDA)
	$(BIN)/python -m pytest

.PHONY: lint
lint: env ## Ruff lint and format check, the layer check, and the type checker
	$(BIN)/ruff check offloadprobe tests benchmarks examples tools
	$(BIN)/ruff format --check offloadprobe tests benchmarks examples tools
	$(BIN)/python tools/check_layers.py
	$(BIN)/mypy

.PHONY: clean
clean: ## Remove the virtual environment
	rm -rf $(VENV)

.PHONY: help
help: ## Show this help
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'
