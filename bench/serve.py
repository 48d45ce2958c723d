"""`harness serve` against the plain transformers pipeline served the simplest way, on the same model
(the embedded SmolLM2-135M, same weights, same CPU) and the same streaming workload, through the same
openai client:

- ours:      agent/serve/: requests join the continuous-batching decoder; tokens stream as decoded.
- pipeline:  a stdlib HTTP server around `transformers.pipeline("text-generation")`, one generation at a
             time (a pipeline is not thread-safe), streaming with TextIteratorStreamer.

Reports time to first token (p50, p95) at 1 and at N concurrent streaming clients, and total generated
tokens per second at N clients, with the ratios measured side by side in this run. Each server runs in
its own process (as it would in production: the clients' work does not share its interpreter), both
are up for the whole run, and the measurements alternate between them (ours, pipeline, ours,
pipeline, ...) so that a change in the machine's load during the run falls on both.

    python bench/serve.py            # 1 and 16 clients, 32 tokens per reply (a few minutes on 2 cores)
    python bench/serve.py --smoke    # 1 and 2 clients, 3 tokens: checks that it runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPICS = "apple river castle violin tiger planet garden rocket winter copper island pencil".split()
TOPICS += "thunder marble falcon lantern".split()


def prompt(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Write a short story about a {TOPICS[i % len(TOPICS)]}."}]


def pipeline_server(model, tokenizer):
    """The simplest streaming server around a transformers pipeline: one generation at a time."""
    import torch
    from transformers import TextIteratorStreamer, pipeline

    torch.set_grad_enabled(False)
    pipe = pipeline("text-generation", model=model, tokenizer=tokenizer, device=model.device)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            head = {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
            }
            with lock:
                worker = threading.Thread(
                    target=pipe,
                    args=(body["messages"],),
                    kwargs=dict(
                        max_new_tokens=body.get("max_tokens", 32), do_sample=False, streamer=streamer
                    ),
                )
                worker.start()
                n = 0
                for text in streamer:
                    if text:
                        n += 1
                        chunk = dict(
                            head, choices=[{"index": 0, "delta": {"content": text}, "finish_reason": None}]
                        )
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                worker.join()
            end = dict(head, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])
            self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", lambda: (
        server.shutdown(),
        server.server_close(),
    )


def run_clients(base_url: str, model: str, clients: int, rounds: int, max_tokens: int, tokenizer) -> dict:
    """`clients` threads, each streaming `rounds` requests one after another. Returns TTFTs and tokens/s
    (tokens counted by re-tokenizing each streamed reply, the same way for both servers)."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=600)
    ttfts: list[float] = []
    tokens = [0] * clients
    errors: list[str] = []

    def one(i: int) -> None:
        for r in range(rounds):
            t0 = time.perf_counter()
            first, parts = None, []
            try:
                for ch in client.chat.completions.create(
                    model=model,
                    messages=prompt(i + r * clients),
                    max_tokens=max_tokens,
                    temperature=0,
                    stream=True,
                ):
                    text = ch.choices[0].delta.content if ch.choices else None
                    if text:
                        first = first or time.perf_counter() - t0
                        parts.append(text)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                return
            ttfts.append(first if first is not None else time.perf_counter() - t0)
            tokens[i] += len(tokenizer("".join(parts), add_special_tokens=False)["input_ids"])

    start = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise SystemExit(f"bench/serve: {len(errors)} requests failed: {errors[0]}")
    return {"ttft": sorted(ttfts), "tokens": sum(tokens), "wall": wall, "tps": sum(tokens) / wall}


def pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def start(cmd: list[str]):
    """Start a server process; returns (process, base_url) once it prints its address."""
    import subprocess

    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if " at http" in line:
            return proc, line.split(" at ")[1].split()[0]
    raise SystemExit(f"bench/serve: {' '.join(cmd)} exited before serving")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--smoke", action="store_true", help="seconds: 1 and 2 clients, 3 tokens (checks that it runs)"
    )
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients for the second measurement")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per reply")
    ap.add_argument("--solo-requests", type=int, default=2, help="sequential requests per 1-client turn")
    ap.add_argument("--turns", type=int, default=2, help="alternating turns per server and client count")
    ap.add_argument(
        "--pipeline-server", action="store_true", help=argparse.SUPPRESS
    )  # the baseline's process
    args = ap.parse_args(argv)
    if args.pipeline_server:
        from agent.models.local_loading import load_hf

        url, _ = pipeline_server(*load_hf("smollm2-135m"))
        print(f"pipeline server at {url}", flush=True)
        threading.Event().wait()
    if args.smoke:
        args.clients, args.max_tokens, args.solo_requests, args.turns = 2, 3, 1, 1

    from agent.models.local_loading import load_hf

    _, tokenizer = load_hf("smollm2-135m", device="cpu")
    servers = {
        "ours": start([sys.executable, "-u", "harness.py", "serve", "--port", "0"]),
        "pipeline": start([sys.executable, "-u", "bench/serve.py", "--pipeline-server"]),
    }
    n = args.clients
    results = {(name, c): {"ttft": [], "tokens": 0, "wall": 0.0} for name in servers for c in (1, n)}
    try:
        for name, (_, url) in servers.items():
            run_clients(url, "smollm2-135m", 1, 1, 2, tokenizer)  # warm-up (first-call costs)
        for _ in range(args.turns):
            for clients, rounds in ((1, args.solo_requests), (n, 1)):
                for name, (_, url) in servers.items():
                    r = run_clients(url, "smollm2-135m", clients, rounds, args.max_tokens, tokenizer)
                    into = results[name, clients]
                    into["ttft"] += r["ttft"]
                    into["tokens"] += r["tokens"]
                    into["wall"] += r["wall"]
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    for r in results.values():
        r["ttft"].sort()
        r["tps"] = r["tokens"] / r["wall"]

    print(
        f"\nbench/serve: SmolLM2-135M on this machine's CPU, streaming, "
        f"{args.max_tokens} tokens per reply, greedy, "
        f"{args.turns} alternating turn(s)"
    )
    print(
        f"{'server':<10} {'TTFT p50 @1':>12} {'TTFT p95 @1':>12} "
        f"{f'TTFT p50 @{n}':>13} {f'TTFT p95 @{n}':>13} "
        f"{f'tokens/s @{n}':>13}"
    )
    for name in ("ours", "pipeline"):
        one, many = results[name, 1], results[name, n]
        print(
            f"{name:<10} {pct(one['ttft'], 50):>11.2f}s {pct(one['ttft'], 95):>11.2f}s "
            f"{pct(many['ttft'], 50):>12.2f}s "
            f"{pct(many['ttft'], 95):>12.2f}s {many['tps']:>13.1f}"
        )
    ratio = results["ours", n]["tps"] / results["pipeline", n]["tps"]
    print(
        f"\ntokens/s at {n} clients: ours / pipeline = {ratio:.2f}x (target >= 3x); "
        f"TTFT p50 at 1 client: {pct(results['ours', 1]['ttft'], 50):.2f}s (target < 1 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
