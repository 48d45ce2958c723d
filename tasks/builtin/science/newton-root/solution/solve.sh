#!/bin/bash
set -e
cat > solution.py <<'PY'
def newton(f, df, x0, tol=1e-12, max_iter=50):
    x = x0
    for _ in range(max_iter):
        fx = f(x)
        if abs(fx) <= tol:
            return x
        slope = df(x)
        if slope == 0:
            raise ZeroDivisionError(f"derivative is 0 at x={x}")
        x = x - fx / slope
    if abs(f(x)) <= tol:
        return x
    raise RuntimeError(f"no convergence after {max_iter} steps")
PY
