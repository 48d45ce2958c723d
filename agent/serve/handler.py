"""The HTTP handler of `harness serve`: routing, the API key, and the two endpoints. Local models get
their prompts submitted as jobs to the continuous-batching decoder and the reply sent whole or streamed
token by token; other backends (replay scripts, API models) answer through Model.complete."""

from __future__ import annotations

import hmac
import json
import logging
import queue
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Optional

from agent.config import (
    API_REPLY_TOKENS,  # Model.complete needs a number; local models default to the context left
)
from agent.models import ContextLengthError, Model, ModelError
from agent.serve.choices import (
    Choice,
    ChoiceText,
    chat_logprobs,
    choose_tool,
    envelope,
    final_choice,
    finish_choice,
    text_logprobs,
    usage,
)
from agent.serve.requests import ChatRequest, GenRequest, HTTPError, bad_request, parse_chat, parse_text
from agent.serve.tools import (
    ResponseFormat,
    ToolSpec,
    check_response_format,
    native_tools,
    render_messages,
    reply_prefix,
    tool_stops,
)
from results.errors import UserError

log = logging.getLogger(__name__)

MAX_BODY = 32 * 1024 * 1024


@dataclass
class Job:
    """One prompt submitted to a local model: its choices are indexes base .. base + n - 1."""

    base: int
    n: int
    prompt_ids: list[int]
    prefix: str
    handle: Any  # the local model's request (future, events, stop)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients pool connections
    server_version = "harness-serve"
    models: dict[str, Model] = {}
    api_key: Optional[str] = None
    stop_after_block: bool = False  # see start_server
    run: Callable[[Any], Any]

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
        else:
            self._chat_other(model, req)

    def _text(self, body: Any) -> None:
        req = parse_text(body)
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

    def _submit(
        self,
        model: Any,
        req: GenRequest,
        ids: list[int],
        prefix: str,
        base: int,
        stop: list[str],
        events: Optional[queue.SimpleQueue],
    ) -> Job:
        handle = model.submit(
            ids,
            n=req.n,
            temperature=req.temperature,
            max_tokens=req.max_tokens,
            seed=req.seed,
            stop=stop,
            logprobs=req.logprobs,
            events=events,
            stop_after_block=self.stop_after_block and isinstance(req, ChatRequest),
        )
        return Job(base, req.n, ids, prefix, handle)

    def _respond(
        self, model: Any, req: GenRequest, jobs: list[Job], chat: bool, events: Optional[queue.SimpleQueue]
    ) -> None:
        tools = req.tools if isinstance(req, ChatRequest) else None
        fmt = req.fmt if isinstance(req, ChatRequest) else None
        try:
            if req.stream:
                self._stream_local(model, req, jobs, events, chat, tools, fmt)
                return
            choices: dict[int, Choice] = {}
            for job in jobs:
                results = job.handle.future.result()
                for k, c in enumerate(results):
                    choices[job.base + k] = finish_choice(c, job.prefix, tools, fmt)
        finally:
            for job in jobs:
                job.handle.stop.set()  # a no-op once finished; frees the rows of a client that left
        prompt = sum(len(job.prompt_ids) for job in jobs)
        completion = sum(len(c.token_ids or []) for c in choices.values())
        response = envelope(req, chat)
        response["choices"] = [final_choice(model, req, i, c, chat) for i, c in sorted(choices.items())]
        response["usage"] = usage(prompt, completion)
        if req.return_token_ids and chat:
            response["prompt_token_ids"] = jobs[0].prompt_ids
        self._send(200, response)

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

    def _stream_local(
        self,
        model: Any,
        req: GenRequest,
        jobs: list[Job],
        events: queue.SimpleQueue,
        chat: bool,
        tools: Optional[ToolSpec],
        fmt: Optional[ResponseFormat],
    ) -> None:
        """Send each choice's text as its tokens are decoded (chat.completion.chunk or text_completion
        events), its tool calls and finish reason when it ends, then the usage chunk if asked."""
        tok = model.tokenizer
        head = envelope(req, chat, chunk=True)
        if req.include_usage:
            head["usage"] = None
        calls = tools is not None and tools.choice != "none"
        # A greedy request decodes one row and copies it n times: row k feeds choices base + k, or all n.
        texts: dict[tuple[int, int], ChoiceText] = {}
        targets: dict[tuple[int, int], list[int]] = {}
        owner = {id(job.handle): j for j, job in enumerate(jobs)}
        for j, job in enumerate(jobs):
            width = job.handle.width
            for k in range(width):
                texts[j, k] = ChoiceText(tok, model.end_ids, job.prefix, req.stop, calls)
                targets[j, k] = [job.base + k] if width == job.n else [job.base + i for i in range(job.n)]
        left = set(texts)
        completion_tokens = 0

        def chunk(
            index: int,
            text: str,
            entries: list,
            finish: Optional[str] = None,
            extra: Optional[dict[str, Any]] = None,
        ) -> dict[str, Any]:
            logprobs = None
            if req.logprobs is not None and entries:
                logprobs = chat_logprobs(tok, entries) if chat else text_logprobs(tok, entries, 0)
            if chat:
                delta: dict[str, Any] = {"content": text} if text else {}
                delta.update(extra or {})
                choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            else:
                choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
                choice.update(extra or {})
            return dict(head, choices=[choice])

        self._start_stream()
        try:
            if chat:
                for index in sorted(i for t in targets.values() for i in t):
                    self._event(chunk(index, "", [], extra={"role": "assistant", "content": ""}))
            while left:
                try:
                    handle, kind, k, payload, entry = events.get(timeout=5.0)
                except queue.Empty:  # nothing decoded for a while: make sure the decoder is alive
                    failed = [
                        job.handle.future.exception()
                        for job in jobs
                        if job.handle.future.done() and job.handle.future.exception() is not None
                    ]
                    if failed:
                        raise failed[0] from None
                    continue
                if kind == "error":
                    raise payload
                key = (owner[id(handle)], k)
                state = texts[key]
                if kind == "token":
                    delta, entries = state.push(payload, entry)
                    if delta or entries:
                        for index in targets[key]:
                            self._event(chunk(index, delta, entries))
                    continue
                left.discard(key)  # "finish": what is left of the text, the tool calls, the finish reason
                job = jobs[key[0]]
                final = finish_choice(payload, job.prefix, tools, fmt)
                completion_tokens += len(final.token_ids or []) * len(targets[key])
                whole, emitted = final.text or "", state.text()[: state.sent]
                rest = whole[len(emitted) :] if whole.startswith(emitted) else ""
                entries = (final.logprobs or [])[state.sent_entries :]
                extra: dict[str, Any] = {}
                if req.return_token_ids:
                    extra["token_ids"] = final.token_ids
                    if not chat:
                        extra["prompt_token_ids"] = final.prompt_ids
                for index in targets[key]:
                    if rest or entries:
                        self._event(chunk(index, rest, entries))
                    for n, call in enumerate(final.tool_calls if chat else []):
                        self._event(
                            chunk(
                                index,
                                "",
                                [],
                                extra={
                                    "tool_calls": [
                                        {
                                            "index": n,
                                            "id": call["id"],
                                            "type": "function",
                                            "function": {"name": call["function"]["name"], "arguments": ""},
                                        }
                                    ]
                                },
                            )
                        )
                        self._event(
                            chunk(
                                index,
                                "",
                                [],
                                extra={
                                    "tool_calls": [
                                        {"index": n, "function": {"arguments": call["function"]["arguments"]}}
                                    ]
                                },
                            )
                        )
                    if chat and final.refusal:
                        self._event(chunk(index, "", [], extra={"refusal": final.refusal}))
                    self._event(chunk(index, "", [], final.finish_reason, extra))
            if req.include_usage:
                self._event(
                    dict(
                        head, choices=[], usage=usage(sum(len(j.prompt_ids) for j in jobs), completion_tokens)
                    )
                )
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client left: stop decoding its rows
            for job in jobs:
                job.handle.stop.set()
        except Exception as e:
            log.exception("streaming failed")
            self._event(
                {
                    "error": {
                        "message": f"{type(e).__name__}: {e}",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                }
            )

    # -- other backends (replay scripts, API models): the finished reply
    def _chat_other(self, model: Model, req: ChatRequest) -> None:
        tools = (
            req.tools.tools
            if req.tools is not None and req.tools.choice != "none" and model.supports_tools
            else None
        )
        completions = self.run(
            model.complete(
                req.messages, tools, req.n, req.temperature, req.max_tokens or API_REPLY_TOKENS, req.seed
            )
        )
        choices = []
        for c in completions:
            cut = [i for i in (c.content.find(s) for s in req.stop) if i >= 0]
            text = c.content[: min(cut)] if cut else c.content
            calls = [
                {
                    "id": t.id,
                    "type": "function",
                    "function": {"name": t.name, "arguments": json.dumps(t.arguments)},
                }
                for t in c.tool_calls
            ]
            refusal = None
            if req.fmt is not None and not calls:
                problem = check_response_format(req.fmt, text)
                refusal = f"response_format {req.fmt.kind}: {problem}" if problem else None
            choices.append(
                Choice(
                    None if calls and not text else text,
                    "tool_calls" if calls else "stop" if cut else c.finish_reason,
                    calls,
                    refusal,
                )
            )
        prompt = completions[0].prompt_tokens if completions else 0
        out = sum(c.completion_tokens for c in completions)
        if not req.stream:
            response = envelope(req, True)
            response["choices"] = [final_choice(model, req, i, c, True) for i, c in enumerate(choices)]
            response["usage"] = usage(prompt, out)
            self._send(200, response)
            return
        head = envelope(req, True, chunk=True)
        if req.include_usage:
            head["usage"] = None
        self._start_stream()
        for i, c in enumerate(choices):
            delta: dict[str, Any] = {"role": "assistant", "content": c.text or ""}
            if c.tool_calls:
                delta["tool_calls"] = [dict(t, index=n) for n, t in enumerate(c.tool_calls)]
            if c.refusal:
                delta["refusal"] = c.refusal
            self._event(
                dict(head, choices=[{"index": i, "delta": delta, "finish_reason": None, "logprobs": None}])
            )
            self._event(
                dict(
                    head,
                    choices=[{"index": i, "delta": {}, "finish_reason": c.finish_reason, "logprobs": None}],
                )
            )
        if req.include_usage:
            self._event(dict(head, choices=[], usage=usage(prompt, out)))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
