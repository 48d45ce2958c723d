"""What every package's CLI shares: a subcommand whose --help ends with its examples, printed as written.

In the lowest package so that each package's cli.py (the entry layer) can use it.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence


def add_command(
    subparsers: Any, name: str, *, help: str, description: str, examples: Sequence[str] = (), **kw: Any
) -> argparse.ArgumentParser:
    """subparsers.add_parser(name, ...) with the examples (command lines) after the options in --help,
    one per line and not re-wrapped, as `harness CMD --help` shows them everywhere."""
    if examples:
        kw["epilog"] = ("example:\n" if len(examples) == 1 else "examples:\n") + "\n".join(
            f"  {line}" for line in examples
        )
        kw["formatter_class"] = argparse.RawDescriptionHelpFormatter
    return subparsers.add_parser(name, help=help, description=description, **kw)
