"""Subcommands of the evaluators package: `harness selftest`."""
from __future__ import annotations

import sys


def register(sub):
    p = sub.add_parser("selftest", help="attack the installed harness with a scripted agent and check it holds")
    p.add_argument("--only", metavar="NAME", help="run only these cases (comma-separated names or globs)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.set_defaults(func=cmd_selftest)


def cmd_selftest(args) -> int:
    from evaluators import selftest

    if args.list:
        cases = selftest.select(args.only)
        width = max(len(c.name) for c in cases)
        for c in cases:
            print(f"{c.name.ljust(width)}  {c.group:6}  {c.expected}")
        return 0
    cases = selftest.select(args.only)  # an unknown name fails here, before any container starts
    print(f"harness selftest: {len(cases)} cases (a scripted agent attacks real sandboxes; "
          f"about {2 * len(cases)} s)", file=sys.stderr)
    rows = selftest.run_selftest(args.only, log=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    print(selftest.format_table(rows))
    return 0 if all(r.ok for r in rows) else 1
