# lucid-yolo developer commands. `make help` lists them; `make gate` is what CI runs (.ci/run is
# `make setup` then `make gate`), so the list of checks lives here only.
.DEFAULT_GOAL := help
UV ?= uv
PYTEST_ARGS ?=
BENCH_ARGS ?= --batch 4 --pairs 3

.PHONY: help setup test test-gpu bench bench-rows lint typecheck contracts docs gate

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-10s %s\n", $$1, $$2}'

# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (the dev machine), every interpreter
# the suite starts (CLI runs, tool smokes, DDP ranks) would otherwise compile torch and Lightning
# from source, half of its 10 s of imports (docs/engineering/suite-time.md, session 10). A sync
# option, not a project setting: as a setting every `uv run` recompiled and printed its count.
setup: ## Install the workspace and dev tools from uv.lock, with their bytecode
	$(UV) sync --locked --all-packages --compile-bytecode

test: ## CPU test suite (the README's test command)
	$(UV) run pytest -n auto --dist worksteal -m "not gpu" $(PYTEST_ARGS)

# The CUDA tests share one GPU across GPU_WORKERS processes (pytest-xdist): no test times anything
# and every parity test compares two fits inside its own process, so they may run side by side.
# The same pytest command ran all 125 in 143 s with 6 on one H200 (docs/engineering/
# whole-fit-speed.md, session 11; this target itself has not run there). Each
# worker holds a CUDA context and its fits' memory: GPU_WORKERS=1 on a small GPU. pytest-benchmark,
# where installed, refuses xdist unless it is blocked.
GPU_WORKERS ?= 6

test-gpu: ## CUDA tests, from source, on a GPU machine with torch, lightning, pytest and pytest-xdist
	PYTHONPATH=$$(ls -d packages/*/src | paste -sd:) CUBLAS_WORKSPACE_CONFIG=:4096:8 \
		python3 -m pytest -p no:cacheprovider -p no:benchmark -m gpu \
		-n $(GPU_WORKERS) --dist worksteal $(PYTEST_ARGS)

bench: ## native vs replay fit benchmark, from source, on a GPU machine (BENCH_ARGS to change it)
	PYTHONPATH=$$(ls -d packages/*/src | paste -sd:) python3 tools/bench_fit.py $(BENCH_ARGS)

# Issue 11's goal rows side by side with Ultralytics, carried as wheels in `.whl` (bash
# tools/gpu_wheels.sh on a machine with the index): about 25 minutes on an H100 by the sum of
# session 46's calls (never run as one command), so not on the lent device, whose calls stop
# at 600 s (docs/benchmarks.md lists the steps a call each).
bench-rows: ## issue 11's goal table side by side with Ultralytics on a GPU machine (ROWS, ROUNDS, OUT)
	bash tools/gpu_rows.sh

lint: ## ruff lint + format check
	$(UV) run ruff check .
	$(UV) run ruff format --check .

typecheck: ## mypy --strict over every package and the tools
	$(UV) run mypy

contracts: ## import-linter layering contracts
	$(UV) run lint-imports

docs: ## build the docs site, warnings are errors
	$(UV) run mkdocs build --strict

gate: lint typecheck contracts test docs ## everything CI runs (.ci/run: setup, then this)
