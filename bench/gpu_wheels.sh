#!/usr/bin/env bash
# The wheels bench/gpu_check.py needs on the lent GPU machine (nvidia-h200), downloaded here where PyPI
# answers. That image has torch but transformers 5.17 (the decoder uses the cache= arguments of 5.24) and
# no pydantic (results/schema.py). Versions are this venv's, i.e. the project's pins. Writes .whl/
# (git-ignored; about 15 MB). Then, in one device call that carries .whl:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#       .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \
#   PYTHONUNBUFFERED=1 python3 bench/gpu_check.py --out $OUT/gpu.json 2>&1 | tee $OUT/gpu.log
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
pins=$("$PY" -c 'from importlib.metadata import version as v
names = ["transformers", "peft", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
         "typing-extensions", "tenacity", "regex"]
print(" ".join(f"{n}=={v(n)}" for n in names))')
rm -rf .whl && mkdir .whl
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl $pins
ls .whl && du -sh .whl
