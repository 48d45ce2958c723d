import sys

from . import format_report, load_inventory


def main(argv):
    if len(argv) != 1:
        print("usage: python3 -m stockkeeper INVENTORY.csv", file=sys.stderr)
        return 2
    print(format_report(load_inventory(argv[0])), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
