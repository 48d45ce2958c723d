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
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Optional

from agent.models import ContextLengthError, Model, ModelError
from agent.models.base import GrammarError
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
    metrics: Any = None  # GET /metrics's registry (results/prometheus.ServeMetrics; None without the package)
    run: Callable[[Any], Any]
    _status = 0  # the response's HTTP status: the access log, the request's span and metrics
    _span: Any = telemetry.NO_SPAN
    access_log: Callable[[str], Any] = staticmethod(lambda line: log.info("%s", line))

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        self._status = int(code) if str(code).isdigit() else 0  # the line itself: _log_access, at the end

    def _log_access(self, method: str, started: float) -> None:
        """One line per request, as uvicorn and vLLM write them: client, method, path, status, seconds,
        and for generations the model and its tokens."""
        line = (
            f'{self.client_address[0]}:{self.client_address[1]} "{method} {self.path}" '
            f"{getattr(self, '_status', 0)} {time.monotonic() - started:.3f}s"
        )
        usage = getattr(self, "_usage", None)
        if usage is not None:
            line += f" model={usage[0]} prompt_tokens={usage[1]} completion_tokens={usage[2]}"
        self.access_log(line)

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

    def _model_object(self, name: str) -> dict[str, Any]:
        """OpenAI's Model object (with vLLM's max_model_len)."""
        return {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "harness",
            "max_model_len": self.models[name].context_window,
        }

    def do_GET(self) -> None:
        started, self._usage = time.monotonic(), None
        try:
            self._get()
        finally:
            self._log_access("GET", started)

    def _get(self) -> None:
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
            self._send(200, {"object": "list", "data": [self._model_object(n) for n in self.models]})
        elif path.startswith(("/v1/models/", "/models/")):  # an id may hold slashes (openai/gpt-4o-mini)
            name = urllib.parse.unquote(path.split("/models/", 1)[1])
            try:
                self._model(name)
            except HTTPError as e:
                self._error(e)
                return
            self._send(200, self._model_object(name))
        else:
            self._error(HTTPError(404, f"no such path: {self.path}", "not_found"))

    def do_POST(self) -> None:
        """_post in the request's span (`POST /v1/...`, kind SERVER), counted in the metrics, logged."""
        path, started, self._status, self._usage = (
            self.path.split("?")[0].rstrip("/"),
            time.monotonic(),
            0,
            None,
        )
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
                self._log_access("POST", started)

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
            "/tokenize": self._tokenize,  # vLLM's paths (no /v1), and under /v1 for clients with a base URL
            "/v1/tokenize": self._tokenize,
            "/detokenize": self._detokenize,
            "/v1/detokenize": self._detokenize,
        }
        if path not in endpoints:
            self._error(
                HTTPError(
                    404,
                    f"no such path: {self.path} (this server has /v1/chat/completions, /v1/completions, "
                    "/tokenize and /detokenize)",
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
            # response_format constrains the decoding (as vLLM does) unless tool calls may come instead
            constrained = req.fmt is not None and (req.tools is None or req.tools.choice == "none")
            schema = (req.fmt.schema or {"type": "object"}) if constrained and req.fmt else None
            prefix = reply_prefix(req.tools, None if constrained else req.fmt)
            ids = list(tok(text + prefix, add_special_tokens=False)["input_ids"])
            events = queue.SimpleQueue() if req.stream else None
            stops = req.stop + tool_stops(req.tools)
            try:
                jobs = [self._submit(model, req, ids, prefix, 0, stops, events, schema)]
            except GrammarError as e:
                raise bad_request(f"response_format json_schema: {e}", "response_format") from None
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

    def _tokenizer_of(self, body: Any) -> tuple[str, Any]:
        """(served name, tokenizer) for /tokenize and /detokenize; `model` is optional there, as in vLLM."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        name = body.get("model") or next(iter(self.models))
        if not isinstance(name, str):
            raise bad_request("'model' must be a string", "model")
        tok = getattr(self._model(name), "tokenizer", None)
        if tok is None:
            raise bad_request(f"model {name!r} has no tokenizer here (local models only)", "model")
        return name, tok

    def _tokenize(self, body: Any) -> None:
        """vLLM's /tokenize: {prompt} or {messages} (rendered as a chat request is) -> {count, max_model_len,
        tokens, token_strs}."""
        name, tok = self._tokenizer_of(body)
        if "messages" in body:
            req = parse_chat(dict(body, model=name))
            if body.get("add_generation_prompt", True) and body.get("continue_final_message"):
                raise bad_request(
                    "cannot set both 'continue_final_message' and 'add_generation_prompt' to true",
                    "continue_final_message",
                )
            messages, tools = render_messages(req.messages, req.tools, req.fmt, native_tools(tok))
            text = tok.apply_chat_template(
                messages,
                tools=tools,
                tokenize=False,
                add_generation_prompt=bool(body.get("add_generation_prompt", True)),
                continue_final_message=bool(body.get("continue_final_message", False)),
            )
            special = bool(body.get("add_special_tokens", False))
        else:
            text = body.get("prompt")
            if not isinstance(text, str):
                raise bad_request("'prompt' (a string) or 'messages' is required", "prompt")
            special = bool(body.get("add_special_tokens", True))
        ids = list(tok(text, add_special_tokens=special)["input_ids"])
        out: dict[str, Any] = {
            "count": len(ids),
            "max_model_len": self.models[name].context_window,
            "tokens": ids,
            "token_strs": tok.convert_ids_to_tokens(ids) if body.get("return_token_strs") else None,
        }
        self._send(200, out)

    def _detokenize(self, body: Any) -> None:
        """vLLM's /detokenize: {tokens} -> {prompt}."""
        _, tok = self._tokenizer_of(body)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise bad_request("'tokens' must be a list of token ids", "tokens")
        if ids and (max(ids) >= len(tok) or min(ids) < 0):
            raise bad_request(f"'tokens' has ids outside the vocabulary (0..{len(tok) - 1})", "tokens")
        self._send(200, {"prompt": tok.decode(ids)})

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
