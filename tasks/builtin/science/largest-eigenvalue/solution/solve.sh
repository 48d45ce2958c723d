#!/bin/bash
set -e
python3 - <<'PY'
import numpy as np

M = np.loadtxt("matrix.csv", delimiter=",")
with open("answer.txt", "w") as f:
    f.write(f"{np.linalg.eigvalsh(M).max():.10f}\n")
PY
