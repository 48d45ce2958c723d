#!/bin/bash
# Composite Simpson's rule with 2000 intervals: error ~1e-14, far below the tolerance.
set -e
python3 - <<'PY'
import math

n, a, b = 2000, 0.0, 2.0
h = (b - a) / n
f = lambda x: math.exp(-x * x)
s = f(a) + f(b) + sum((4 if i % 2 else 2) * f(a + i * h) for i in range(1, n))
with open("answer.txt", "w") as out:
    out.write(f"{s * h / 3:.12f}\n")
PY
