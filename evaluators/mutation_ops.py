"""The mutation operators of `harness tasks validate --mutants` (evaluators/mutants.py runs their mutants):
every mutant of a task's changed Python and shell files (mutants_of), one per site an operator finds, each
already decided when it is equivalent (the same AST or bytecode; shell text unchanged) or invalid (does
not compile; `bash -n` fails). The operators are listed in evaluators/mutants.py's docstring."""

from __future__ import annotations

import ast
import copy
import re
import subprocess
import types
from dataclasses import dataclass

from tasks.impossible import _splice


@dataclass
class Mutant:
    path: str  # the changed file, relative to the working folder
    operator: str
    line: int
    what: str  # e.g. "a < b -> a <= b"
    source: str
    outcome: str = ""  # killed | survived | equivalent | invalid | timeout
    detail: str = ""


# ------------------------------------------------------------------------------------------ Python operators
_COMPARE = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_ARITH = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
}
_DELETABLE = (
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Expr,
    ast.Return,
    ast.Raise,
    ast.Assert,
    ast.If,
    ast.For,
    ast.While,
    ast.With,
    ast.Try,
    ast.Continue,
    ast.Break,
    ast.Delete,
)


def _untouchable(tree: ast.AST) -> set[int]:
    """Nodes no operator changes: docstrings, annotations (no behaviour) and f-string parts (their positions
    are not reliable before Python 3.12)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        roots = []
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                roots.append(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += [node.returns] + [a.annotation for a in ast.walk(node.args) if isinstance(a, ast.arg)]
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        if isinstance(node, ast.JoinedStr):
            roots.append(node)
        out |= {id(n) for r in roots if r is not None for n in ast.walk(r)}
    return out


def _numeric_contexts(tree: ast.AST) -> set[int]:
    """Numbers where an off-by-one is a boundary: compared, an index or slice bound, a range() argument."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        elif isinstance(node, ast.Subscript):
            parts = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            parts = list(node.args)
        else:
            continue
        for p in parts:
            out |= {id(n) for n in ast.walk(p) if isinstance(n, (ast.Constant, ast.UnaryOp))}
    return out


def _python_sites(tree: ast.AST) -> list[tuple[str, ast.AST, str]]:
    """(operator, node, replacement text) for every mutation site, in file order."""
    skip, boundary = _untouchable(tree), _numeric_contexts(tree)
    sites = []
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "lineno"):
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    new = copy.deepcopy(node)
                    new.ops[i] = _COMPARE[type(op)]()
                    sites.append(("comparison", node, f"({ast.unparse(new)})"))
        elif isinstance(node, ast.BoolOp):
            new = copy.deepcopy(node)
            new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            sites.append(("logic", node, f"({ast.unparse(new)})"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            sites.append(("logic", node, f"({ast.unparse(node.operand)})"))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITH:
            new = copy.deepcopy(node)
            new.op = _ARITH[type(node.op)]()
            text = ast.unparse(new)
            sites.append(("arithmetic", node, text if isinstance(node, ast.AugAssign) else f"({text})"))
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (bytes, type(None), type(...))):
            v = node.value
            if isinstance(v, bool):
                sites.append(("constant", node, repr(not v)))
            elif isinstance(v, (int, float)):
                if id(node) in boundary:
                    sites += [("boundary", node, f"({v + 1!r})"), ("boundary", node, f"({v - 1!r})")]
                else:
                    sites.append(("constant", node, f"({v + 1!r})"))
            elif isinstance(v, str):
                sites.append(("constant", node, repr("" if v else "mutant")))
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                sites.append(("return", node.value, "None"))
        if isinstance(node, _DELETABLE) and not (isinstance(node, ast.Expr) and id(node) in skip):
            sites.append(("delete", node, "pass"))
    return sorted(sites, key=lambda s: (s[1].lineno, s[1].col_offset, s[0]))


def _code_key(code: types.CodeType) -> tuple:
    """What a code object does, without its line numbers: equal keys, equal behaviour."""
    consts = tuple(
        _code_key(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c)) for c in code.co_consts
    )
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)


def python_mutants(path: str, src: str) -> list[Mutant]:
    """Every mutant of a Python file, with its outcome decided already when it is equivalent or invalid."""
    try:
        tree = ast.parse(src)
        original = (ast.dump(tree), _code_key(compile(src, path, "exec")))
    except (SyntaxError, ValueError):
        return []
    out = []
    for operator, node, text in _python_sites(tree):
        before = ast.get_source_segment(src, node) or ""
        before = before.splitlines()[0] + (" ..." if "\n" in before else "")
        mutant = Mutant(path, operator, node.lineno, f"{before} -> {text}"[:120], _splice(src, node, text))
        try:
            tree2 = ast.parse(mutant.source)
            if (
                ast.dump(tree2) == original[0]
                or _code_key(compile(mutant.source, path, "exec")) == original[1]
            ):
                mutant.outcome = "equivalent"
        except (SyntaxError, ValueError) as e:
            mutant.outcome, mutant.detail = "invalid", f"{type(e).__name__}: {e}"[:120]
        out.append(mutant)
    return out


# ------------------------------------------------------------------------------------------- shell operators
_SH_COMPARE = {"-eq": "-ne", "-ne": "-eq", "-lt": "-le", "-le": "-lt", "-gt": "-ge", "-ge": "-gt"}
_SH_TEST = re.compile(r"\s(-eq|-ne|-lt|-le|-gt|-ge|==|!=)\s")
_SH_ARITH = re.compile(r"\$?\(\(([^()]*)\)\)")
_SH_ARITH_OP = {"+": "-", "-": "+", "*": "/", "/": "*", "%": "/"}
_SH_NUMBER = re.compile(r"(?<![\w$./:-])\d+(?![\w./>:<-])")
_SH_EXIT = re.compile(r"\b(exit|return)\s+([01])\b")
_SH_STRUCTURE = re.compile(
    r"^(if|elif|else|fi|then|for|while|until|do|done|case|esac|function|\}|\{|;;)\b|[{\\]$|^[^=(]*\)$|then$|do$|^\w+\s*\(\)"
)
_SH_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)")


def shell_mutants(path: str, src: str) -> list[Mutant]:
    """Token mutants of a shell file, line by line; comments and here-document bodies are left alone."""
    lines = src.splitlines(keepends=True)
    sites: list[tuple[str, int, str, str]] = []  # (operator, line index, new line, what)
    heredoc, continued = "", False
    for i, line in enumerate(lines):
        body = line.rstrip("\n")
        code = body.strip()
        if heredoc:
            heredoc = "" if code == heredoc else heredoc
            continue
        if not code or code.startswith("#"):
            continue
        doc = _SH_HEREDOC.search(body)
        heredoc = doc.group(1) if doc else ""

        def put(operator: str, start: int, end: int, new: str) -> None:
            sites.append(
                (
                    operator,
                    i,
                    body[:start] + new + body[end:] + line[len(body) :],
                    f"{body[start:end]} -> {new}",
                )
            )

        for m in _SH_TEST.finditer(body):
            op = m.group(1)
            put("comparison", m.start(1), m.end(1), _SH_COMPARE.get(op) or ("!=" if op == "==" else "=="))
        for m in _SH_ARITH.finditer(body):
            for j, ch in enumerate(m.group(1)):
                if ch in _SH_ARITH_OP:
                    at = m.start(1) + j
                    put("arithmetic", at, at + 1, _SH_ARITH_OP[ch])
        compared = bool(_SH_TEST.search(body) or _SH_ARITH.search(body))
        for m in _SH_NUMBER.finditer(body):
            n = int(m.group())
            if compared:
                put("boundary", m.start(), m.end(), str(n + 1))
                put("boundary", m.start(), m.end(), str(max(n - 1, 0)))
            else:
                put("constant", m.start(), m.end(), str(n + 1))
        for m in _SH_EXIT.finditer(body):
            put("return", m.start(2), m.end(2), "1" if m.group(2) == "0" else "0")
        if not continued and not doc and not _SH_STRUCTURE.search(code):
            indent = body[: len(body) - len(body.lstrip())]
            sites.append(("delete", i, indent + ":" + line[len(body) :], f"{code[:60]} -> :"))
        continued = body.endswith("\\")
    out = []
    for operator, i, new, what in sites:
        mutant = Mutant(path, operator, i + 1, what[:120], "".join(lines[:i] + [new] + lines[i + 1 :]))
        if mutant.source == src:
            mutant.outcome = "equivalent"
        else:
            r = subprocess.run(["bash", "-n"], input=mutant.source, capture_output=True, text=True)
            if r.returncode:
                mutant.outcome, mutant.detail = "invalid", r.stderr.strip()[:120]
        out.append(mutant)
    return out


def language(path: str, data: bytes) -> str:
    """ "python", "shell" or "" for a changed file."""
    first = data[:80].split(b"\n")[0]
    if path.endswith(".py") or (first.startswith(b"#!") and b"python" in first):
        return "python"
    if path.endswith(".sh") or (first.startswith(b"#!") and re.search(rb"\b(ba|da|z)?sh\b", first)):
        return "shell"
    return ""


def mutants_of(files: dict[str, bytes]) -> list[Mutant]:
    """Every mutant of the changed files, in path and file order; one of each text."""
    out, seen = [], set()
    for path in sorted(files):
        lang = language(path, files[path])
        try:
            src = files[path].decode("utf-8")
        except UnicodeDecodeError:
            continue
        made = python_mutants(path, src) if lang == "python" else shell_mutants(path, src) if lang else []
        for m in made:
            if (path, m.source) not in seen:
                seen.add((path, m.source))
                out.append(m)
    return out
