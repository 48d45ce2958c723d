#!/bin/bash
set -e
cat > solution.py <<'PY'
VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
          (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(n: int) -> str:
    if not isinstance(n, int) or not 1 <= n <= 3999:
        raise ValueError(f"out of range: {n!r}")
    out = []
    for value, letters in VALUES:
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def from_roman(s: str) -> int:
    total, i = 0, 0
    for value, letters in VALUES:
        while s.startswith(letters, i):
            total += value
            i += len(letters)
    if not s or i != len(s) or total > 3999 or to_roman(total) != s:
        raise ValueError(f"not a standard Roman numeral: {s!r}")
    return total
PY
