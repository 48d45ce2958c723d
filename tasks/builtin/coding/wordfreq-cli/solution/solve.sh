#!/bin/bash
set -e
cat > wordfreq.py <<'PY'
import re
import sys
from collections import Counter


def main(argv):
    path, n = argv[0], int(argv[1])
    with open(path) as f:
        words = re.findall(r"[a-z]+", f.read().lower())
    ranked = sorted(Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))
    for word, count in ranked[:n]:
        print(word, count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
