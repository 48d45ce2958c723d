#!/usr/bin/env python3
"""harness CLI: argument parsing and dispatch only. Each package registers its own subcommands."""

from __future__ import annotations

import argparse
import sys

from results.errors import UserError

# Each module has register(subparsers), and may have extend(subparsers), called once all have registered, to
# add actions to a lower package's command; a command sets args.func(args) -> exit code.
COMMAND_MODULES = ["evaluators.cli", "agent.cli", "tasks.cli", "results.cli", "lora.cli"]


def build_parser() -> argparse.ArgumentParser:
    import importlib

    from results.commandline import HarnessParser

    # every subcommand's parser is a HarnessParser too (argparse makes them of the parent's class)
    parser = HarnessParser(prog="harness", description="Agent harness: execute, verify, correct, train.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = []
    for name in COMMAND_MODULES:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name == name:  # that package has no CLI yet
                continue
            raise
        modules[-1].register(sub)
    for module in modules:
        if hasattr(module, "extend"):
            module.extend(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # e.g. for the resume command eval prints
    if not getattr(args, "func", None):
        if args.command is None and "evaluators.cli" in sys.modules:
            args = parser.parse_args(["eval"])  # no arguments: the embedded default evaluation
        else:
            parser.print_help()
            return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `harness ... | head`: the reader left; not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
