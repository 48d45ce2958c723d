# The two commands of the README. Both set up everything first (idempotent, quiet when done).
PY := .venv/bin/python
# Tests run on 3 pytest-xdist workers: most of a test's time is waiting on Docker and subprocesses, so 3 pay on
# 2 cores. tests/conftest.py groups what must share a worker; `pytest` without -n still runs it all serially.
XDIST := -n 3 --dist loadgroup

.PHONY: demo test setup test-fast lint bench

demo: setup
	$(PY) harness.py demo

test:
	.ci/setup --test
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q $(XDIST) --durations=30 tests

# Format and lint (the rules: pyproject.toml [tool.ruff]); `ruff format .` and `ruff check --fix .` repair most.
lint:
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

setup:
	.ci/setup

# The inner loop: no model loading, no whole-suite validation, nothing over ~30 s (`make test` runs all).
test-fast: setup
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q -x $(XDIST) -m "not slow and not model and not suite" tests

bench: setup
	$(PY) bench/sandbox.py
	$(PY) bench/loop.py
