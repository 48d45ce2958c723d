import json
import sys

from .load import load_rows
from .summary import summarize


def main(argv):
    if len(argv) != 2:
        print("usage: python3 -m salespipe INPUT.csv OUTPUT.json", file=sys.stderr)
        return 2
    src, dst = argv
    with open(dst, "w") as f:
        json.dump(summarize(load_rows(src)), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
