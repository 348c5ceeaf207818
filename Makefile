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

# One line of its own, the rest to a log shown only on failure: a fresh clone's `make run`
# shows its table within the first 15 lines. Bytecode for the package and the tests is
# compiled once: every run, child and rank imports them (where PYTHONDONTWRITEBYTECODE is
# set, as here, Python would compile them each time); so are pytest's assertion-rewritten
# test modules, by collecting them once with bytecode written (each test worker would
# otherwise rewrite every module again, some 2 CPU-s; stale ones are rewritten as before;
# a test that cannot be collected fails neither the set-up nor `make run`).
SETUP_LOG := $(VENV)/setup.log
$(BIN)/offloadprobe: pyproject.toml
	@echo "make: setting up $(VENV) with $(TORCH_SPEC), megatron-core and offloadprobe (once)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@{ $(BIN)/python -m pip install --upgrade pip \
	  && $(BIN)/python -m pip install "$(TORCH_SPEC)" \
	  && $(BIN)/python -m pip install -e ".[megatron,dev]" \
	  && $(BIN)/python -m compileall -q offloadprobe tests benchmarks examples \
	  && { PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -n 0 \
	     -p no:cacheprovider || echo "make: test collection failed (make test shows why)"; }; } \
	  > $(SETUP_LOG) 2>&1 || { tail -n 40 $(SETUP_LOG); \
	  echo "make: setting up $(VENV) failed; the whole log: $(SETUP_LOG)"; exit 1; }
	@touch $@

.PHONY: env
env: $(BIN)/offloadprobe ## Create the virtual environment if it is missing

# The problem and the fix side by side: naive (a fresh pinned copy every offload) breaks
# the host-peak budget, as expected (the row says so and the exit code stays 0), lazy keeps
# to it. About 24 CPU-seconds on a 2-core CPU host. On a GPU registered as well, at 1 GiB
# and 2.5x: lazy's pinned block is rounded up to a power of two (up to 2x); at 8 MiB every
# row grew some 10 MiB beyond its payload on the H200 (registered 2.24x, lazy 3.27x:
# benchmarks/results/h200-2026-12-01-make-run-gpu.log), more than the payload itself.
# Each recipe is one literal command (tools that show it, and the tests, read it as it
# stands).
.PHONY: run
ifneq ($(HAS_GPU),yes)
run: env ## Compare naive (the problem) and lazy (the fix) on an 8 MiB model, 2 cycles
	$(BIN)/offloadprobe compare naive lazy --payload 8MiB --cycles 2 --max-host-peak 1.5x --expect naive=over-budget
else
run: env
	$(BIN)/offloadprobe compare naive lazy registered --payload 1GiB --cycles 2 --max-host-peak 2.5x --expect naive=over-budget
endif

.PHONY: test
test: env ## Run the whole test suite (GPU tests skip without CUDA)
	$(BIN)/python -m pytest

.PHONY: excerpts
excerpts: env ## Regenerate the command output and the figures README.md and docs/ show
	$(BIN)/python tools/excerpts.py
	$(BIN)/python tools/figures.py

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
