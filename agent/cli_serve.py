"""`harness serve`: register(subparsers) adds the command (wired in by agent/cli.py)."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                              description="Serve a model at http://HOST:PORT/v1 (POST /v1/chat/completions, "
                                          "GET /v1/models) for the openai client, litellm or other harnesses.")
    p.add_argument("--model", default="local:smollm2-135m",
                   help="model spec, as for eval (default: local:smollm2-135m)")
    p.add_argument("--adapter", metavar="DIR", help="a PEFT LoRA adapter folder to apply (local models)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.serve import serve

    serve(args.model, host=args.host, port=args.port, adapter=args.adapter)
    return 0
