"""Subcommands of the agent package: run, images, sandbox (and serve from agent/serve/cli.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agent.config import add_loop_options
from agent.models import DEFAULT_MODEL, add_model_option

RUN_EXAMPLE = (
    "example:\n"
    '  harness run --model openai/gpt-4o-mini --workspace ./repo "make the failing test pass" '
    '--verify "pytest -q" --apply'
)


def register(sub):
    p = sub.add_parser(
        "run",
        help="run the agent on a folder and print the resulting patch",
        description="Copy a folder into a sandbox, let the agent work on the instruction, run the "
        "--verify commands and print the changes as a diff (exit 0 when verified).",
        epilog=RUN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "--verify", action="append", default=[], help="a command that must succeed at the end (repeatable)"
    )
    add_loop_options(p, "max_steps")
    p.add_argument("--apply", action="store_true", help="write the changes back into the folder")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "images",
        help="sandbox images",
        description="Sandbox image housekeeping.",
        epilog="example:\n  harness images build",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    isub = p.add_subparsers(dest="images_command", required=True)
    b = isub.add_parser(
        "build",
        help="build the base image (no-op when the recipe is unchanged)",
        description="Build the sandbox base image; a no-op when its recipe is unchanged.",
        epilog="example:\n  harness images build",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.set_defaults(func=cmd_images_build)

    p = sub.add_parser(
        "sandbox",
        help="sandbox housekeeping",
        description="Sandbox container housekeeping.",
        epilog="example:\n  harness sandbox prune --orphans",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ssub = p.add_subparsers(dest="sandbox_command", required=True)
    pr = ssub.add_parser(
        "prune",
        help="remove every container with harness labels",
        description="Remove the containers harness made (all, or only those of dead processes).",
        epilog="example:\n  harness sandbox prune --orphans",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pr.add_argument("--orphans", action="store_true", help="only those whose harness process is gone")
    pr.add_argument(
        "--k8s",
        action="store_true",
        help="instead: delete every harness SandboxClaim, SandboxWarmPool and SandboxTemplate (KUBECONFIG)",
    )
    pr.add_argument("--k8s-namespace", help="with --k8s (default: the kubeconfig context's)")
    pr.set_defaults(func=cmd_prune)

    try:
        from agent.serve.cli import register as register_serve
    except ModuleNotFoundError:
        return
    register_serve(sub)


def cmd_run(args) -> int:
    from agent.config import LoopConfig
    from agent.models import parse_model_options
    from agent.workflow import apply_changes, escape_terminal, run_workflow

    result = asyncio.run(
        run_workflow(
            args.model,
            args.workspace,
            args.instruction,
            verify=args.verify,
            cfg=LoopConfig(max_steps=args.max_steps),
            model_options=parse_model_options(args.model, args.model_option),
        )
    )
    sys.stdout.write(escape_terminal(result.diff))  # the agent's bytes never reach the terminal raw
    for cmd, r in result.verification:
        print(f"verify: {cmd!r} -> exit {r.exit_code}", file=sys.stderr)
    print(
        f"agent ended: {result.loop.exit_reason} after {len(result.loop.steps)} steps; "
        f"{len(result.changes.paths)} files changed",
        file=sys.stderr,
    )
    if args.apply:
        refused = apply_changes(args.workspace, result.changes)
        for path, why in refused:
            print(f"not applied: {escape_terminal(path)} ({why})", file=sys.stderr)
        print(
            f"applied to {args.workspace}" + (f" except {len(refused)} refused" if refused else ""),
            file=sys.stderr,
        )
    return 0 if result.verified else 1


def cmd_images_build(args) -> int:
    from agent.sandbox.images import base_tag, ensure_base_image

    image_id = ensure_base_image()
    print(f"{base_tag()} {image_id}")
    return 0


def cmd_prune(args) -> int:
    if args.k8s:
        from agent.sandbox.k8s import K8sApi, prune_k8s

        api = K8sApi.from_environment(args.k8s_namespace)
        prune_k8s(api)
        print(f"deleted the harness sandbox objects in namespace {api.namespace}")
        return 0
    from agent.sandbox import prune

    n = prune(orphans_only=args.orphans)
    print(f"removed {n} containers")
    return 0
