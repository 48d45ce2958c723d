"""Subcommands of the agent package: run, images, sandbox (and serve from agent/serve/cli.py)."""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path

from agent.config import DEFAULT_MAX_COPY_MB, add_backend_options, add_loop_options, given_fields
from agent.models import DEFAULT_MODEL, add_model_option
from results.commandline import add_command
from results.errors import UserError

RUN_EXAMPLE = (
    'harness run --model openai/gpt-4o-mini --workspace ./repo "make the failing test pass" '
    '--verify "pytest -q" --apply'
)


def register(sub):
    _register_run(sub)
    _register_images(sub)
    _register_sandbox(sub)
    try:
        from agent.serve.cli import register as register_serve
    except ModuleNotFoundError:
        return
    register_serve(sub)


def _register_run(sub) -> None:
    p = add_command(
        sub,
        "run",
        help="run the agent on a folder and print the resulting patch",
        description="Copy a folder into a sandbox, let the agent work on the instruction, run the "
        "--verify commands and print the changes as a diff (exit 0 when verified).",
        examples=[RUN_EXAMPLE],
    )
    p.add_argument("instruction", help="what the agent should do, in plain words")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model string (default {DEFAULT_MODEL})")
    add_model_option(p)
    p.add_argument(
        "--workspace",
        type=Path,
        required=True,
        help="the folder to work on (copied; untouched without --apply)",
    )
    p.add_argument(
        "--verify",
        action="append",
        default=[],
        help="a command that must succeed at the end (repeatable); it runs on what --apply would write, "
        "with your originals of protected paths",
    )
    add_loop_options(p, "max_steps")
    p.add_argument(
        "--apply",
        action="store_true",
        help="write the changes back into the folder when --verify passed: all of them or none; protected "
        "paths, files that run by themselves, configuration, compiled files, links and version-control "
        "files are held back and listed",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="with --apply and no --verify: apply the changes unverified (each change is checked as ever)",
    )
    _add_file_options(p)
    p.set_defaults(func=cmd_run)


def _add_file_options(p) -> None:
    """run's options on which files go into the sandbox and which changes may come back."""
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="copy these files into the sandbox although .gitignore, --exclude or the secret patterns "
        "leave them out (repeatable)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave these files out of the sandbox (repeatable; a path, a folder or a name pattern)",
    )
    p.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="GLOB",
        help="more files that are secrets, kept out like .env*, *.pem, id_*, cloud credentials (repeatable)",
    )
    p.add_argument(
        "--protect",
        action="append",
        default=None,
        metavar="GLOB",
        help="paths whose changes are shown but never applied, and whose originals --verify uses "
        "(repeatable; default: the test files --verify names, or all test files when it names none; "
        "CI configuration and test-runner configuration are always protected)",
    )
    p.add_argument(
        "--allow-hooks",
        action="store_true",
        help="with --apply: also write what the allowlist holds back: files that run by themselves (git "
        "hooks, .envrc, editor tasks, ...), dotfiles and configuration, compiled files, new files a "
        "configuration file names (never version control)",
    )
    p.add_argument(
        "--max-copy-mb",
        type=int,
        default=DEFAULT_MAX_COPY_MB,
        help=f"the most the files copied into the sandbox may total (default {DEFAULT_MAX_COPY_MB})",
    )


def _register_images(sub) -> None:
    p = add_command(
        sub,
        "images",
        help="sandbox images",
        description="Sandbox image housekeeping.",
        examples=["harness images build"],
    )
    isub = p.add_subparsers(dest="images_command", required=True)
    b = add_command(
        isub,
        "build",
        help="build the base image (no-op when the recipe is unchanged)",
        description="Build the sandbox base image; a no-op when its recipe is unchanged.",
        examples=["harness images build"],
    )
    b.set_defaults(func=cmd_images_build)


def _register_sandbox(sub) -> None:
    p = add_command(
        sub,
        "sandbox",
        help="sandbox housekeeping",
        description="Sandbox container housekeeping.",
        examples=["harness sandbox prune --orphans"],
    )
    ssub = p.add_subparsers(dest="sandbox_command", required=True)
    pr = add_command(
        ssub,
        "prune",
        help="remove what harness runs left behind (containers, networks, claims)",
        description="Remove the sandboxes harness made (all, or only those of dead processes), through each "
        "backend's own prune: by default every backend whose sandboxes live on this machine.",
        examples=[
            "harness sandbox prune --orphans",
            "harness sandbox prune --sandbox k8s --k8s-namespace evals",
        ],
    )
    pr.add_argument("--orphans", action="store_true", help="only those whose harness process is gone")
    pr.add_argument(
        "--sandbox",
        action="append",
        metavar="BACKEND",
        help="prune this backend's (repeatable; default: every backend with the local capability)",
    )
    add_backend_options(pr)
    pr.set_defaults(func=cmd_prune)


def cmd_run(args) -> int:
    from agent.config import LoopConfig
    from agent.models import parse_model_options
    from agent.workflow import apply_changes, escape_terminal, run_workflow, select_files

    say = functools.partial(print, file=sys.stderr)
    if args.apply and not args.verify and not args.no_verify:
        raise UserError(
            "--apply writes only a verified patch: add --verify CMD (e.g. --verify 'python -m pytest -q'), "
            "or --no-verify to apply the changes unverified"
        )
    if args.no_verify and args.verify:
        raise UserError("--no-verify and --verify contradict each other: keep one")
    sel = select_files(
        args.workspace,
        include=args.include,
        exclude=args.exclude,
        secret=args.secret,
        max_bytes=args.max_copy_mb << 20,
    )
    for line in sel.summary():
        say(line)
    result = asyncio.run(
        run_workflow(
            args.model,
            args.workspace,
            args.instruction,
            verify=args.verify,
            cfg=LoopConfig(max_steps=args.max_steps),
            model_options=parse_model_options(args.model, args.model_option),
            include=args.include,
            exclude=args.exclude,
            secret=args.secret,
            protect=args.protect,
            allow_hooks=args.allow_hooks,
            selection=sel,
            on_step=functools.partial(_show_step, say=say, terminal=sys.stderr.isatty()),
        )
    )
    sys.stdout.write(escape_terminal(result.diff))  # the agent's bytes never reach the terminal raw
    if result.verification and result.plan.refused:
        say("the patch is refused (see below): --verify ran on your files without the agent's changes")
    for cmd, r in result.verification:
        say(f"verify: {escape_terminal(cmd)} -> exit {r.exit_code}" + (" (timed out)" if r.timed_out else ""))
        for line in _bounded(r.stdout.rstrip("\n") + "\n" + r.stderr):
            say("  | " + escape_terminal(line))
        if r.exit_code == 127:
            say("  (exit 127: a program the command names is not in the sandbox image; name one it has)")
    say(
        f"agent ended: {result.loop.exit_reason} after {len(result.loop.steps)} steps; "
        f"{len(result.changes.paths)} files changed"
    )
    for path in result.protected_changes:
        say(f"PROTECTED: the agent changed {escape_terminal(path)}; shown above, never applied")
    verified = result.verified
    # Only a verified patch is applied: a failed --verify leaves the folder as it was.
    applying = args.apply and verified
    plan = apply_changes(args.workspace, result, allow_hooks=args.allow_hooks) if applying else result.plan
    for path, why in plan:
        say(f"not applied: {escape_terminal(path)} ({escape_terminal(why)})")
    if args.apply and plan.refused:
        say(f"nothing applied to {args.workspace}: {len(plan.refused)} changes refused (listed above)")
    elif args.apply and not verified:
        say(f"nothing applied to {args.workspace}: --verify failed")
    elif args.apply:
        say(
            f"applied {len(plan.applied)} changes to {args.workspace}"
            + (f"; {len(plan.held_back)} held back (listed above)" if plan.held_back else "")
        )
    return 0 if verified and not (args.apply and plan.refused) else 1


def _show_step(step, say, terminal: bool) -> None:
    """One step of `harness run` as it ends: each action (the command, or the file written) and its exit
    code; in a terminal also the first lines of what the agent saw (in a pipe or a log, one line a step)."""
    from agent.workflow import escape_terminal

    for a in step.actions:
        what = {"bash": f"$ {a.command}", "write": f"write {a.path}"}.get(a.kind, a.kind)
        first = escape_terminal((what or "").splitlines()[0] if what else "")[:200]
        code = "timed out" if step.timed_out else f"exit {step.exit_code}"
        if a.kind not in ("bash", "write"):
            code = ""
        say(f"step {step.index + 1}: {first}" + (f"  -> {code}" if code else ""))
    if terminal and step.observation.strip():
        for line in _bounded(step.observation, head=4, tail=2, width=160):
            say("  | " + escape_terminal(line))


def _bounded(text: str, head: int = 40, tail: int = 40, width: int = 300) -> list[str]:
    """A command's output for the terminal: its first and last lines, each cut to width."""
    lines = [x[:width] + ("..." if len(x) > width else "") for x in text.rstrip("\n").splitlines()]
    if len(lines) > head + tail:
        lines = lines[:head] + [f"... {len(lines) - head - tail} lines left out ..."] + lines[-tail:]
    return lines


def cmd_images_build(args) -> int:
    from agent.sandbox.backends.docker.images import base_tag, ensure_base_image

    image_id = ensure_base_image()
    print(f"{base_tag()} {image_id}")
    return 0


def cmd_prune(args) -> int:
    from agent.sandbox.registry import names, sandbox_backend

    chosen = args.sandbox or [n for n in names() if sandbox_backend(n).has("local")]
    for name in chosen:
        backend = sandbox_backend(name)
        options = given_fields(args, backend.options, prefix=backend.flag_prefix)
        print(f"{backend.name}: {backend.prune(options, orphans_only=args.orphans)}")
    return 0
