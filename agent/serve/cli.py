"""`harness serve`: register(subparsers) adds the command (wired in by agent/cli.py)."""

from __future__ import annotations

import argparse
import os

from agent.models import add_model_option
from results import telemetry
from results.commandline import add_command

EXAMPLES = [
    "harness serve --model local:smollm2-135m --adapter tuned=runs/train/round_1/adapter "
    "--api-key secret --port 8000",
    '# then: openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="secret")',
    '#   .chat.completions.create(model="tuned", messages=[...], stream=True)',
]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a model at http://HOST:PORT/v1 (POST /v1/chat/completions and /v1/completions, "
        "GET /v1/models[/ID], POST /tokenize and /detokenize as vLLM's) for the openai client, litellm or "
        "other harnesses; one access-log line per request on stderr. Local models stream token by token "
        "from the continuous-batching decoder; see agent/serve/__init__.py for the fields.",
        examples=EXAMPLES,
    )
    p.add_argument(
        "--model", default="local:smollm2-135m", help="model spec, as for eval (default: local:smollm2-135m)"
    )
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="[NAME=]DIR",
        help="a PEFT LoRA adapter folder (local models). DIR alone: merged into the served model. "
        "NAME=DIR (repeatable): served beside the base model, chosen by the request's model=NAME",
    )
    add_model_option(p, "model option, repeatable, as for eval (e.g. -M device=cpu, -M price_out=0.5)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("HARNESS_API_KEY"),
        help="require this bearer token on every /v1 request (default: $HARNESS_API_KEY; none: open)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    telemetry.add_options(p, metrics_port=False)  # its metrics are at /metrics on --port
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.serve import parse_adapters, serve

    adapter, adapters = parse_adapters(args.adapter)
    from agent.models import parse_model_options

    options = parse_model_options(args.model, args.model_option)
    telemetry.apply_options(args, "harness-serve")
    serve(
        args.model,
        host=args.host,
        port=args.port,
        adapter=adapter,
        adapters=adapters,
        api_key=args.api_key,
        options=options,
    )
    return 0
