# The two commands of the README. Both set up everything first (idempotent, quiet when done).
PY := .venv/bin/python

.PHONY: demo test setup test-fast bench

demo: setup
	$(PY) harness.py eval

test:
	.ci/setup --test
	$(PY) -m pytest -q tests

setup:
	.ci/setup

# The inner loop: no model loading, no whole-suite validation, nothing over ~30 s (`make test` runs all).
test-fast: setup
	$(PY) -m pytest -q -x -m "not slow and not model and not suite" tests

bench: setup
	$(PY) bench/sandbox.py
	$(PY) bench/loop.py
