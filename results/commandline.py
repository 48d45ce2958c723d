"""What every package's CLI shares: a subcommand whose --help fits 80 columns and ends with its examples,
and the command prefix a printed hint uses so that it runs when pasted into the user's shell.

In the lowest package so that each package's cli.py (the entry layer) can use it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any, Sequence

WIDTH = 80  # every --help page fits a standard terminal


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps the description to the width (argparse's raw formatter would not) and keeps each example on
    lines of its own, folding a long one with shell continuations so that it still pastes as one command."""

    def __init__(self, prog: str, **kw: Any) -> None:
        kw["width"] = min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
        super().__init__(prog, **kw)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for block in text.split("\n"):
            if block.startswith("  "):  # an example line (add_command indents them)
                out.extend(_fold_example(block, width))
            else:
                out.append(textwrap.fill(block, width, initial_indent=indent, subsequent_indent=indent))
        return "\n".join(out)


class HarnessParser(argparse.ArgumentParser):
    """An ArgumentParser whose help is HelpFormatter's unless told otherwise; subparsers inherit the class."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kw)


def _fold_example(line: str, width: int) -> list[str]:
    """A command line longer than the width, split at spaces into `... \\` continuation lines (a trailing
    `# comment` goes on a line of its own above the command)."""
    if len(line) <= width:
        return [line]
    code, sep, comment = line.partition("  # ")
    lines = [f"  # {comment.strip()}"] if sep else []
    words, cur = code.split(" "), ""
    for w in [w for w in words if w]:
        if cur and len(cur) + 1 + len(w) + 2 > width:
            lines.append(cur + " \\")
            cur = "      " + w
        else:
            cur = f"{cur} {w}" if cur else f"  {w}"
    return lines + [cur]


def add_command(
    subparsers: Any, name: str, *, help: str, description: str, examples: Sequence[str] = (), **kw: Any
) -> argparse.ArgumentParser:
    """subparsers.add_parser(name, ...) with the examples (command lines) after the options in --help,
    one per line, as `harness CMD --help` shows them everywhere."""
    if examples:
        kw["epilog"] = ("example:\n" if len(examples) == 1 else "examples:\n") + "\n".join(
            f"  {line}" for line in examples
        )
    kw.setdefault("formatter_class", HelpFormatter)
    return subparsers.add_parser(name, help=help, description=description, **kw)


def actions_of(subparsers: Any, command: str) -> Any:
    """The actions of `harness COMMAND` as its package's cli.py made them, for a package above it to add
    the actions whose code lives there (`harness tasks validate` runs sandboxes: evaluators/cli.py adds it
    from its `extend`, which harness.py calls once every package has registered)."""
    parser = subparsers.choices[command]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def invocation(argv0: str | None = None, executable: str | None = None) -> str:
    """The command that runs this harness again from the user's shell, as it is: `harness` when that name on
    PATH is this very program, else the venv's entry point (`.venv/bin/harness`, relative to the current
    folder when inside it), so a printed hint works when pasted even if the venv is not active (the system
    Python lacks our dependencies)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    script = Path(argv0)
    if script.name == "harness":
        on_path = shutil.which("harness")
        if on_path and _same(on_path, argv0):
            return "harness"
        return _shown(script)
    entry = Path(executable).parent / "harness"  # the venv's console script, beside its python
    if entry.is_file() and os.access(entry, os.X_OK):
        return _shown(entry)
    return f"{_shown(Path(executable))} {_shown(script)}"


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _shown(path: Path) -> str:
    """The path as a user pastes it: relative (./x or dir/x) when under the current folder, else absolute."""
    import shlex

    absolute = Path(os.path.abspath(path))
    try:
        rel = absolute.relative_to(Path.cwd())
        text = str(rel) if "/" in str(rel) else f"./{rel}"
    except ValueError:
        text = str(absolute)
    return shlex.quote(text)
