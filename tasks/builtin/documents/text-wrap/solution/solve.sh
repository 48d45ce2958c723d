#!/bin/bash
set -e
python3 - <<'PY'
import textwrap

words = open("paragraph.txt").read().split()
text = textwrap.fill(" ".join(words), width=40, break_long_words=False, break_on_hyphens=False)
with open("wrapped.txt", "w") as f:
    f.write(text + "\n")
PY
