"""The HTTP handler of `harness serve`: routing, the API key, the two endpoints and the event stream.
Local models get their prompts submitted as jobs to the continuous-batching decoder and the reply sent
whole or streamed token by token (agent/serve/local_replies.py); other backends (replay scripts, API
models) answer through Model.complete (agent/serve/other_replies.py)."""

from __future__ import annotations

import hmac
import json
import logging
import queue
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Optional

from agent.models import ContextLengthError, Model, ModelError
from agent.serve.choices import choose_tool
from agent.serve.local_replies import LocalReplies
from agent.serve.other_replies import OtherReplies
from agent.serve.requests import HTTPError, bad_request, parse_chat, parse_text
from agent.serve.tools import native_tools, render_messages, reply_prefix, tool_stops
from results import telemetry
from results.errors import UserError

log = logging.getLogger(__name__)

MAX_BODY = 32 * 1024 * 1024


class Handler(LocalReplies, OtherReplies, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients pool connections
    server_version = "harness-serve"
    models: dict[str, Model] = {}
    api_key: Optional[str] = None
    stop_after_block: bool = False  # see start_server
    metrics: Any = None  # telemetry.ServeMetrics, for GET /metrics (None: prometheus-client is missing)
    run: Callable[[Any], Any]
    _status = 0  # the response's HTTP status, for the request's span and metrics
    _span: Any = telemetry.NO_SPAN

    def send_response(self, code: int, message: Optional[str] = None) -> None:
        self._status = code
        super().send_response(code, message)

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    # -- plumbing
    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: HTTPError) -> None:
        kind = "invalid_request_error" if e.status < 500 else "server_error"
        self._send(
            e.status, {"error": {"message": e.message, "type": kind, "param": e.param, "code": e.code}}
        )

    def _authorized(self) -> bool:
        if not self.api_key:
            return True
        given = self.headers.get("Authorization") or ""
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        if token and hmac.compare_digest(token.encode(), self.api_key.encode()):
            return True
        self._error(
            HTTPError(
                401,
                "Incorrect API key provided; pass the server's --api-key as the bearer token "
                "(Authorization: Bearer KEY, or api_key= in the openai client)",
                "invalid_api_key",
            )
        )
        return False

    def _model(self, name: str) -> Model:
        model = self.models.get(name)
        if model is None:
            raise HTTPError(
                404,
                f"The model `{name}` does not exist; this server has: {', '.join(self.models)}",
                "model_not_found",
                "model",
            )
        return model

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path == "/health":
            self._send(200, {"status": "ok"})
            return
        if path == "/metrics" and self.metrics is not None:  # unauthenticated, as vLLM's: no content in it
            data, kind = self.metrics.exposition()
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if not self._authorized():
            return
        if path in ("/v1/models", "/models"):
            self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": name,
                            "object": "model",
                            "created": 0,
                            "owned_by": "harness",
                            "max_model_len": model.context_window,
                        }
                        for name, model in self.models.items()
                    ],
                },
            )
        else:
            self._error(HTTPError(404, f"no such path: {self.path}", "not_found"))

    def do_POST(self) -> None:
        """_post inside the request's span (`POST /v1/...`, kind SERVER), counted in the metrics."""
        path, started, self._status = self.path.split("?")[0].rstrip("/"), time.monotonic(), 0
        attrs = {"http.request.method": "POST", "url.path": path}
        with telemetry.span(f"POST {path}", attrs, kind="SERVER") as span:
            self._span = span
            try:
                self._post()
            finally:
                span.set({"http.response.status_code": self._status})
                if self._status >= 400:
                    span.set({"error.type": str(self._status)})
                self._span = telemetry.NO_SPAN
                telemetry.event("request", path=path, status=self._status, seconds=time.monotonic() - started)
                if self.metrics is not None:
                    self.metrics.requests.labels(path, str(self._status)).inc()
                    self.metrics.duration.labels(path).observe(time.monotonic() - started)

    def _observe(self, req: Any, jobs: list) -> None:
        """A local model's finished reply in the span and the metrics: tokens, time to first token, time
        per output token (from the decoder's own timestamps)."""
        done = time.monotonic()
        prompt = sum(len(job.prompt_ids) for job in jobs)
        output = sum(len(c.completion_ids or []) for job in jobs for c in job.handle.results.values())
        self._span.set({"gen_ai.usage.input_tokens": prompt, "gen_ai.usage.output_tokens": output})
        if self.metrics is None:
            return
        self.metrics.tokens.labels("input").inc(prompt)
        self.metrics.tokens.labels("output").inc(output)
        for job in jobs:
            first = job.handle.first_token_at
            if first is None:
                continue
            self.metrics.ttft.labels(req.model).observe(first - job.handle.submitted_at)
            n = (
                max(len(c.completion_ids or []) for c in job.handle.results.values())
                if job.handle.results
                else 0
            )
            if n > 1:
                self.metrics.per_token.labels(req.model).observe((done - first) / (n - 1))

    def _post(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        body_bytes = self.rfile.read(length) if 0 < length <= MAX_BODY else b""
        if length > MAX_BODY:
            self.close_connection = True  # the body was not read
        if not self._authorized():
            return
        endpoints = {
            "/v1/chat/completions": self._chat,
            "/chat/completions": self._chat,
            "/v1/completions": self._text,
            "/completions": self._text,
        }
        if path not in endpoints:
            self._error(
                HTTPError(
                    404,
                    f"no such path: {self.path} (this server has /v1/chat/completions and /v1/completions)",
                    "not_found",
                )
            )
            return
        try:
            if length > MAX_BODY:
                raise HTTPError(413, "request body too large")
            try:
                body = json.loads(body_bytes or b"null")
            except ValueError:
                raise bad_request("the request body is not valid JSON") from None
            endpoints[path](body)
        except HTTPError as e:
            self._error(e)
        except ContextLengthError as e:
            self._error(HTTPError(400, str(e), "context_length_exceeded", "messages"))
        except (ModelError, UserError) as e:
            self._error(HTTPError(500, str(e), "model_error"))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:
            log.exception("request failed")
            self._error(HTTPError(500, f"internal error: {type(e).__name__}: {e}"))

    # -- endpoints
    def _chat(self, body: Any) -> None:
        req = parse_chat(body)
        self._span.set({"gen_ai.operation.name": "chat", "gen_ai.request.model": req.model})
        model = self._model(req.model)
        if hasattr(model, "submit"):
            tok = model.tokenizer
            native = native_tools(tok)
            messages, tools = render_messages(req.messages, req.tools, req.fmt, native)
            text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
            if req.tools is not None and req.tools.choice == "required" and len(req.tools.names) > 1:
                req.tools = choose_tool(model, text, req.tools)  # then the reply starts that call
            prefix = reply_prefix(req.tools, req.fmt)
            ids = list(tok(text + prefix, add_special_tokens=False)["input_ids"])
            events = queue.SimpleQueue() if req.stream else None
            jobs = [self._submit(model, req, ids, prefix, 0, req.stop + tool_stops(req.tools), events)]
            self._respond(model, req, jobs, chat=True, events=events)
            self._observe(req, jobs)
        else:
            self._chat_other(model, req)

    def _text(self, body: Any) -> None:
        req = parse_text(body)
        self._span.set({"gen_ai.operation.name": "text_completion", "gen_ai.request.model": req.model})
        model = self._model(req.model)
        if not hasattr(model, "submit"):
            raise bad_request(f"model {req.model!r} serves chat only (POST /v1/chat/completions)", "model")
        jobs, base = [], 0
        events = queue.SimpleQueue() if req.stream else None
        try:
            for p in req.prompts:
                ids = list(model.tokenizer(p)["input_ids"]) if isinstance(p, str) else list(p)
                if not ids:
                    raise bad_request("a prompt is empty", "prompt")
                if max(ids) >= len(model.tokenizer) or min(ids) < 0:
                    raise bad_request(
                        f"a prompt has token ids outside the vocabulary (0..{len(model.tokenizer) - 1})",
                        "prompt",
                    )
                jobs.append(self._submit(model, req, ids, "", base, req.stop, events))
                base += req.n
        except BaseException:
            for job in jobs:
                job.handle.stop.set()
            raise
        self._respond(model, req, jobs, chat=False, events=events)
        self._observe(req, jobs)

    # -- streaming
    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the end of the body is the end of the stream
        self.end_headers()
        self.close_connection = True

    def _event(self, payload: Any) -> None:
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()
