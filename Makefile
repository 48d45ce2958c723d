# The two commands of the README. Both set up everything first (idempotent, quiet when done).
PY := .venv/bin/python

.PHONY: demo test setup test-fast lint bench

demo: setup
	$(PY) harness.py demo

test:
	.ci/setup --test
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q --durations=30 tests

# Format and lint (the rules: pyproject.toml [tool.ruff]); `ruff format .` and `ruff check --fix .` repair most.
lint:
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

setup:
	.ci/setup

# The inner loop: no model loading, no whole-suite validation, nothing over ~30 s (`make test` runs all).
test-fast: setup
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q -x -m "not slow and not model and not suite" tests

bench: setup
	$(PY) bench/sandbox.py
	$(PY) bench/loop.py
