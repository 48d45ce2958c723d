"""`harness serve`: any Model (local SmolLM2, a LoRA-adapted one, a replay script...) behind an
OpenAI-compatible HTTP API, so other tools -- the openai client, litellm, other harnesses -- can call it.

    POST /v1/chat/completions   messages, temperature, max_tokens (or max_completion_tokens), n, stop,
                                seed, tools, stream (streaming sends the whole reply as one chunk)
    GET  /v1/models             the one served model
    GET  /health                200 when up

Stdlib only: a ThreadingHTTPServer whose request threads hand each completion to one event loop
thread (so async clients inside the model keep a single loop).
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

from agent.errors import UserError
from agent.models import ContextLengthError, Model, ModelError, get_model
from agent.models.base import Completion

log = logging.getLogger(__name__)

MAX_N = 64
MAX_BODY = 32 * 1024 * 1024


class HTTPError(Exception):
    def __init__(self, status: int, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def served_name(model: Model) -> str:
    """The id clients use: the spec without its backend prefix; a path's last part."""
    name = model.name.split(":", 1)[1] if model.name.startswith(("local:", "replay:")) else model.name
    return Path(name).name if "/" in name and Path(name).exists() else name


def _int_field(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise HTTPError(400, f"'{key}' must be an integer from {low} to {high}", "invalid_request_error")
    return value


def parse_request(body: Any) -> dict[str, Any]:
    """The Model.complete arguments (and stop/stream) from a chat completions request body."""
    if not isinstance(body, dict):
        raise HTTPError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and m.get("role") for m in messages):
        raise HTTPError(400, "'messages' must be a non-empty list of {role, content} objects")
    temperature = body.get("temperature", 1.0)  # the OpenAI default
    if temperature is None:
        temperature = 1.0
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise HTTPError(400, "'temperature' must be a number from 0 to 2")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise HTTPError(400, "'stop' must be a string or a list of strings")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise HTTPError(400, "'seed' must be an integer")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise HTTPError(400, "'tools' must be a list")
    return dict(messages=messages, tools=tools or None, n=_int_field(body, "n", 1, 1, MAX_N),
                temperature=float(temperature),
                max_tokens=_int_field({"max_tokens": max_tokens}, "max_tokens", 512, 1, 1_000_000),
                seed=seed, stop=[s for s in stop if s], stream=bool(body.get("stream")))


def _apply_stop(c: Completion, stop: list[str]) -> tuple[str, str]:
    """(content, finish_reason) with the content cut before the first stop string."""
    cuts = [i for i in (c.content.find(s) for s in stop) if i >= 0]
    if cuts:
        return c.content[: min(cuts)], "stop"
    return c.content, c.finish_reason


def _message(c: Completion, stop: list[str]) -> tuple[dict[str, Any], str]:
    content, finish = _apply_stop(c, stop)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if c.tool_calls:
        message["tool_calls"] = [{"id": t.id, "type": "function",
                                  "function": {"name": t.name, "arguments": json.dumps(t.arguments)}}
                                 for t in c.tool_calls]
        finish = "tool_calls"
        message["content"] = content or None
    return message, finish


def chat_response(name: str, completions: list[Completion], stop: list[str]) -> dict[str, Any]:
    choices = []
    for i, c in enumerate(completions):
        message, finish = _message(c, stop)
        choices.append({"index": i, "message": message, "logprobs": None, "finish_reason": finish})
    prompt = completions[0].prompt_tokens if completions else 0
    out = sum(c.completion_tokens for c in completions)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": name, "choices": choices,
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}}


def stream_chunks(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The whole reply as chat.completion.chunk events: role+content (+tool calls), then finish_reason, then usage-free end."""
    base = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"], "model": response["model"]}
    chunks = []
    for choice in response["choices"]:
        delta = {"role": "assistant", "content": choice["message"]["content"] or ""}
        if choice["message"].get("tool_calls"):
            delta["tool_calls"] = [dict(t, index=k) for k, t in enumerate(choice["message"]["tool_calls"])]
        chunks.append(dict(base, choices=[{"index": choice["index"], "delta": delta, "finish_reason": None}]))
        chunks.append(dict(base, choices=[{"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}]))
    return chunks


def make_handler(model: Model, name: str, run: Callable[[Any], Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: clients pool connections
        server_version = "harness-serve"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the stdlib's name
            log.info("%s %s", self.address_string(), format % args)

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, code: Optional[str] = None) -> None:
            kind = "invalid_request_error" if status < 500 else "server_error"
            self._send(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})

        def do_GET(self) -> None:  # noqa: N802 -- the stdlib's name
            path = self.path.split("?")[0].rstrip("/")
            if path in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{
                    "id": name, "object": "model", "created": 0, "owned_by": "harness",
                    "max_model_len": model.context_window}]})
            elif path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._error(404, f"no such path: {self.path}", "not_found")

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0].rstrip("/")
            length = int(self.headers.get("Content-Length") or 0)
            body_bytes = self.rfile.read(length) if 0 < length <= MAX_BODY else b""
            if path not in ("/v1/chat/completions", "/chat/completions"):
                self._error(404, f"no such path: {self.path} (this server has /v1/chat/completions)", "not_found")
                return
            try:
                if length > MAX_BODY:
                    raise HTTPError(413, "request body too large")
                try:
                    body = json.loads(body_bytes or b"null")
                except ValueError:
                    raise HTTPError(400, "the request body is not valid JSON") from None
                req = parse_request(body)
                tools = req["tools"] if model.supports_tools else None  # text-protocol models ignore tools
                completions = run(model.complete(req["messages"], tools, req["n"], req["temperature"],
                                                 req["max_tokens"], req["seed"]))
                response = chat_response(name, completions, req["stop"])
            except HTTPError as e:
                self._error(e.status, e.message, e.code)
                return
            except ContextLengthError as e:
                self._error(400, str(e), "context_length_exceeded")
                return
            except (ModelError, UserError) as e:
                self._error(500, str(e), "model_error")
                return
            except Exception as e:  # noqa: BLE001 -- a server must answer, not die
                log.exception("chat completion failed")
                self._error(500, f"internal error: {type(e).__name__}: {e}")
                return
            if req["stream"]:
                self._stream(response)
            else:
                self._send(200, response)

        def _stream(self, response: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")  # the end of the body is the end of the stream
            self.end_headers()
            for chunk in stream_chunks(response):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


@dataclass
class Server:
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: Model
    name: str
    stop: Callable[[], None]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def start_server(model: Model | str, host: str = "127.0.0.1", port: int = 0, *, name: Optional[str] = None,
                 **options: Any) -> Server:
    """Serve a Model (or a spec for get_model, with options) in background threads; port 0 picks a free one.
    Returns Server(base_url, model, name, stop)."""
    if isinstance(model, str):
        model = get_model(model, **options)
    served = name or served_name(model)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="serve-loop", daemon=True)
    loop_thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    try:
        httpd = _HTTPServer((host, port), make_handler(model, served, run))
    except OSError as e:
        loop.call_soon_threadsafe(loop.stop)
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}; pick another --port") from None
    http_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="serve-http",
                                   daemon=True)
    http_thread.start()
    bound_host, bound_port = httpd.server_address[:2]

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        loop.call_soon_threadsafe(loop.stop)
        http_thread.join(timeout=10)
        loop_thread.join(timeout=10)

    return Server(base_url=f"http://{bound_host}:{bound_port}/v1", model=model, name=served, stop=stop)


def serve(spec: str, host: str = "127.0.0.1", port: int = 8000, adapter: Optional[str] = None,
          out: Callable[[str], Any] = print) -> None:
    """Serve until interrupted (the `harness serve` command)."""
    options = {"adapter": adapter} if adapter else {}
    server = start_server(spec, host, port, **options)
    out(f"serving {spec} as {server.name!r} at {server.base_url} (OpenAI-compatible; Ctrl-C stops)")
    out(f"  use it with: --model openai-compat:{server.base_url}/{server.name}")
    try:
        threading.Event().wait()
    finally:
        server.stop()
