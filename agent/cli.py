"""Subcommands of the agent package: eval, run, images, sandbox (and serve from cli_serve)."""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agent.errors import UserError

DEFAULT_MODEL = "local:smollm2-135m"
DEFAULT_SUITE = "builtin:easy"


EVAL_EXAMPLE = """examples:
  harness eval                                            # the embedded local model on builtin:easy
  harness eval --model openai/gpt-4o-mini --tasks builtin --samples 5 --concurrency 8 --limit 20
  harness eval --model openai-compat:http://127.0.0.1:8000/v1/tuned -M supports_tools=true -M context_window=8192"""
RUN_EXAMPLE = """example:
  harness run --model openai/gpt-4o-mini --workspace ./repo "make the failing test pass" --verify "pytest -q" --apply"""
MODEL_OPTION_HELP = ("model option, repeatable: supports_tools=true, context_window=N, price_in=USD/1M, price_out=USD/1M, "
                     "base_url=URL, api_key=KEY, timeout=S, adapter=DIR, device=cpu|cuda; for openai-compat and "
                     "litellm models any other key is sent with each request (-M top_p=0.9)")


def _raw(p):
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


def register(sub):
    p = _raw(sub.add_parser("eval", help="evaluate a model on a task suite (no arguments: the embedded default)",
                            description="Run the agent on every selected task (x samples) in sandboxes, grade each "
                                        "attempt with hidden tests, append it to the run folder and print a "
                                        "summary. Exits 1 when every attempt ended in an infrastructure error.",
                            epilog=EVAL_EXAMPLE))
    p.add_argument("--model", help=f"model string (default {DEFAULT_MODEL}); see README 'Model strings'")
    p.add_argument("-M", "--model-option", action="append", default=[], metavar="KEY=VALUE", dest="model_option",
                   help=MODEL_OPTION_HELP)
    p.add_argument("--tasks", default=DEFAULT_SUITE, help=f"suite: folder, builtin, builtin:easy (default {DEFAULT_SUITE})")
    p.add_argument("--domain", help="only tasks of this domain (coding, data, ops, documents, science)")
    p.add_argument("--difficulty", type=int, help="only tasks of this difficulty (1-5)")
    p.add_argument("--split", help="only family instances of this split (train or heldout)")
    p.add_argument("--tag", action="append", dest="tags", help="only tasks with this tag (repeatable: all must match)")
    p.add_argument("--glob", help="only task ids matching this glob")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N selected tasks (in suite order)")
    p.add_argument("--samples", type=int, help="attempts per task (default 1)")
    p.add_argument("--concurrency", type=int, default=4,
                   help="attempts in flight (a local model decodes concurrent requests as one batch; default 4)")
    p.add_argument("--model-concurrency", type=int, help="concurrent model requests (default: --concurrency)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default 0)")
    p.add_argument("--max-steps", type=int, default=30, help="model turns per attempt (default 30)")
    p.add_argument("--max-reply-tokens", type=int, help="per model reply (default 256 for local models, else 1024)")
    p.add_argument("--token-budget", type=int, help="prompt+completion tokens per attempt")
    p.add_argument("--cost-limit", type=float, help="USD per attempt")
    p.add_argument("--protocol", choices=["auto", "tools", "text"], default="auto",
                   help="tools: native tool calls; text: commands in ``` blocks; auto: tools when the model "
                        "supports them (default)")
    p.add_argument("--adapter", help="LoRA adapter folder for a local model (same as -M adapter=DIR)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (with --model NAME; same as -M base_url=URL)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--out", type=Path, help="run folder (default runs/<time>-<model>)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue an interrupted run in DIR")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run the attempts on a Ray cluster: ray://HOST:PORT, HOST:PORT or auto (needs harness[cluster])")
    p.add_argument("--sandbox", choices=["docker", "k8s"], default="docker",
                   help="where sandboxes run: this machine's Docker (default) or Kubernetes via agent-sandbox (KUBECONFIG)")
    p.add_argument("--k8s-image", help="with --sandbox k8s: the base image in a registry the cluster pulls from")
    p.add_argument("--k8s-namespace", help="with --sandbox k8s (default: the kubeconfig context's)")
    p.add_argument("--k8s-runtime-class", help="with --sandbox k8s: e.g. gvisor or kata-qemu")
    p.add_argument("--k8s-connect", choices=["auto", "pod-ip", "exec"], default="auto",
                   help="with --sandbox k8s: reach sandboxes by pod IP, or by one kubectl exec stream each")
    p.set_defaults(func=cmd_eval)

    p = _raw(sub.add_parser("run", help="run the agent on a folder and print the resulting patch",
                            description="Copy a folder into a sandbox, let the agent work on the instruction, run the "
                                        "--verify commands and print the changes as a diff (exit 0 when verified).",
                            epilog=RUN_EXAMPLE))
    p.add_argument("instruction", help="what the agent should do, in plain words")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model string (default {DEFAULT_MODEL})")
    p.add_argument("-M", "--model-option", action="append", default=[], metavar="KEY=VALUE", dest="model_option",
                   help=MODEL_OPTION_HELP)
    p.add_argument("--workspace", type=Path, required=True, help="the folder to work on (copied; untouched without --apply)")
    p.add_argument("--verify", action="append", default=[], help="a command that must succeed at the end (repeatable)")
    p.add_argument("--max-steps", type=int, default=30, help="model turns (default 30)")
    p.add_argument("--apply", action="store_true", help="write the changes back into the folder")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("images", help="sandbox images", description="Sandbox image housekeeping.",
                       epilog="example:\n  harness images build", formatter_class=argparse.RawDescriptionHelpFormatter)
    isub = p.add_subparsers(dest="images_command", required=True)
    b = isub.add_parser("build", help="build the base image (no-op when the recipe is unchanged)",
                        description="Build the sandbox base image; a no-op when its recipe is unchanged.",
                        epilog="example:\n  harness images build", formatter_class=argparse.RawDescriptionHelpFormatter)
    b.set_defaults(func=cmd_images_build)

    p = sub.add_parser("sandbox", help="sandbox housekeeping", description="Sandbox container housekeeping.",
                       epilog="example:\n  harness sandbox prune --orphans",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="sandbox_command", required=True)
    pr = ssub.add_parser("prune", help="remove every container with harness labels",
                         description="Remove the containers harness made (all, or only those of dead processes).",
                         epilog="example:\n  harness sandbox prune --orphans",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("--orphans", action="store_true", help="only those whose harness process is gone")
    pr.add_argument("--k8s", action="store_true",
                    help="instead: delete every harness SandboxClaim, SandboxWarmPool and SandboxTemplate (KUBECONFIG)")
    pr.add_argument("--k8s-namespace", help="with --k8s (default: the kubeconfig context's)")
    pr.set_defaults(func=cmd_prune)

    try:
        from agent.cli_serve import register as register_serve
    except ModuleNotFoundError:
        return
    register_serve(sub)


def cmd_eval(args) -> int:
    from agent.loop import LoopConfig
    from agent.runner import run_eval
    from tasks.loader import load_suite

    resume_dir = args.resume
    if resume_dir is not None:
        from results.store import read_manifest
        manifest = read_manifest(resume_dir)  # the run's own settings win on resume
        cfg = manifest.config
        recorded = {"model": manifest.model, "samples": cfg.get("samples", 1), "temperature": cfg.get("temperature", 0.0)}
        changed = [f"--{k} {getattr(args, k)} (the run has {v})" for k, v in recorded.items()
                   if getattr(args, k) is not None and getattr(args, k) != v]
        if changed:
            raise UserError(f"cannot resume {resume_dir} with other settings: {'; '.join(changed)}; leave them out "
                            "to continue the run as recorded, or start a new run folder")
        args.model, args.samples, args.temperature = recorded.values()
        tasks = [t for t in load_suite(args.tasks if args.tasks != DEFAULT_SUITE else cfg.get("suite", DEFAULT_SUITE))
                 if t.id in set(cfg.get("tasks", []))]
    else:
        args.model = args.model or DEFAULT_MODEL
        args.samples = 1 if args.samples is None else args.samples
        args.temperature = 0.0 if args.temperature is None else args.temperature
        tasks = load_suite(args.tasks, domain=args.domain, difficulty=args.difficulty, tags=args.tags,
                           split=args.split, glob=args.glob)
    if args.samples < 1 or args.concurrency < 1:
        raise UserError("--samples and --concurrency must be at least 1")
    from agent.models import parse_model_options

    if args.limit is not None:
        if args.limit < 1:
            raise UserError("--limit must be at least 1")
        tasks = tasks[: args.limit]
    options = parse_model_options(args.model, getattr(args, "model_option", []))
    if args.adapter:
        options["adapter"] = args.adapter
    if args.base_url:
        options["base_url"] = args.base_url
    reply_tokens = args.max_reply_tokens or (256 if args.model.startswith("local:") else 1024)
    loop = LoopConfig(max_steps=args.max_steps, token_budget=args.token_budget, cost_limit=args.cost_limit,
                      protocol=args.protocol, max_reply_tokens=reply_tokens)
    print(f"harness eval: {args.model} on {len(tasks)} tasks x {args.samples} samples", file=sys.stderr)
    run_dir = asyncio.run(run_eval(
        args.model, tasks, samples=args.samples, temperature=args.temperature, out_dir=resume_dir or args.out,
        concurrency=args.concurrency, resume=resume_dir is not None, seed=args.seed, model_options=options,
        loop=loop, model_concurrency=args.model_concurrency, suite=args.tasks, cluster=args.cluster,
        sandbox=args.sandbox, sandbox_options={"image": args.k8s_image, "namespace": args.k8s_namespace,
                                               "runtime_class": args.k8s_runtime_class, "connect": args.k8s_connect},
        filters={"domain": args.domain, "difficulty": args.difficulty, "split": args.split, "tags": args.tags,
                 "glob": args.glob}))
    from results.report import print_summary
    print_summary(run_dir)
    print(f"run folder: {run_dir}")
    return 1 if all_errored(run_dir) else 0


def all_errored(run_dir: Path) -> bool:
    """Whether the run has attempts and every one is an infrastructure error (nothing was evaluated)."""
    from results.store import open_run

    statuses = open_run(run_dir).read_attempts(["status"])["status"]
    if len(statuses) and (statuses == "error").all():
        print("harness eval: every attempt ended in an infrastructure error; see the run folder's attempts.jsonl "
              "(error field)", file=sys.stderr)
        return True
    return False


def cmd_run(args) -> int:
    from agent.loop import LoopConfig
    from agent.workflow import apply_changes, escape_terminal, run_workflow

    from agent.models import parse_model_options

    result = asyncio.run(run_workflow(args.model, args.workspace, args.instruction, verify=args.verify,
                                      cfg=LoopConfig(max_steps=args.max_steps),
                                      model_options=parse_model_options(args.model, args.model_option)))
    sys.stdout.write(escape_terminal(result.diff))  # the agent's bytes never reach the terminal raw
    for cmd, r in result.verification:
        print(f"verify: {cmd!r} -> exit {r.exit_code}", file=sys.stderr)
    print(f"agent ended: {result.loop.exit_reason} after {len(result.loop.steps)} steps; "
          f"{len(result.changes.paths)} files changed", file=sys.stderr)
    if args.apply:
        refused = apply_changes(args.workspace, result.changes)
        for path, why in refused:
            print(f"not applied: {escape_terminal(path)} ({why})", file=sys.stderr)
        print(f"applied to {args.workspace}" + (f" except {len(refused)} refused" if refused else ""),
              file=sys.stderr)
    return 0 if result.verified else 1


def cmd_images_build(args) -> int:
    from agent.images import base_tag, ensure_base_image
    image_id = ensure_base_image()
    print(f"{base_tag()} {image_id}")
    return 0


def cmd_prune(args) -> int:
    if args.k8s:
        from agent.k8s import K8sApi, prune_k8s
        api = K8sApi.from_environment(args.k8s_namespace)
        prune_k8s(api)
        print(f"deleted the harness sandbox objects in namespace {api.namespace}")
        return 0
    from agent.sandbox import prune
    n = prune(orphans_only=args.orphans)
    print(f"removed {n} containers")
    return 0
