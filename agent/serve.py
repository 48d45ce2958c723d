"""`harness serve`: models behind an OpenAI-compatible HTTP API, for the openai client, litellm and other
harnesses. Held to the OpenAI chat-completions reference:

    POST /v1/chat/completions   messages, model, n, temperature, seed, max_tokens / max_completion_tokens,
                                stop, stream + stream_options.include_usage, logprobs + top_logprobs,
                                tools + tool_choice + parallel_tool_calls, response_format
    POST /v1/completions        prompt (a string, a list of strings, token ids, or lists of token ids),
                                the same sampling fields; logprobs is an integer there, as in the reference
    GET  /v1/models             the served models (the base model and each named adapter)
    GET  /health                200 when up (no API key needed)

Local models (`local:...`) decode in the continuous-batching decoder of agent/models/local.py: concurrent
requests share one batch, streaming sends each token as it is decoded, `stop` strings end generation in
the decoder (their tokens are neither returned nor counted in usage), and logprobs come from the
decoder's logits. Tools are rendered with the model's chat template or the documented fallback
(agent/serve_tools.py) and the model's <tool_call> blocks come back as `tool_calls`. Other backends
(replay scripts, API models) answer through Model.complete; streaming then sends the finished reply.

Extension for RL users: `"return_token_ids": true` in a request (the field vLLM uses) adds
`prompt_token_ids` to the response (per choice on /v1/completions) and `token_ids` (the exact generated
ids, end-of-turn token included when produced) to each choice; in a stream they come with each choice's
last chunk. `response_format` json_object / json_schema: the schema is given to the model, the reply is
made to start with "{", and a reply that does not parse or match is reported in the message's `refusal`
field, naming the failure (the text stays in `content`).

Errors have the reference shape {"error": {"message", "type", "param", "code"}}: 400 for malformed
requests, 401 for a missing or wrong API key (--api-key), 404 for an unknown model or path. Unknown
request fields are ignored, as OpenAI does.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import queue
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

from results.errors import UserError
from agent.models import ContextLengthError, Model, ModelError, get_model
from agent.models.base import Completion
from agent.serve_tools import (OPEN, RequestError, ResponseFormat, ToolSpec, check_response_format,
                               native_tools, parse_response_format, parse_tool_calls, parse_tools, render_messages,
                               reply_prefix, tool_stops)

log = logging.getLogger(__name__)

MAX_N = 64
MAX_BODY = 32 * 1024 * 1024
MAX_TOP_LOGPROBS = 20
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
NON_LOCAL_MAX_TOKENS = 1024  # Model.complete needs a number; local models default to the context left


class HTTPError(Exception):
    def __init__(self, status: int, message: str, code: Optional[str] = None, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def served_name(model: Model) -> str:
    """The id clients use: the spec without its backend prefix; a path's last part."""
    name = model.name.split(":", 1)[1] if model.name.startswith(("local:", "replay:")) else model.name
    return Path(name).name if "/" in name and Path(name).exists() else name


# ---------------------------------------------------------------- request parsing

@dataclass
class GenRequest:
    """The fields both endpoints share, validated."""
    model: str
    n: int = 1
    temperature: float = 1.0
    max_tokens: Optional[int] = None
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    logprobs: Optional[int] = None  # None: off; else top alternatives per token
    return_token_ids: bool = False


@dataclass
class ChatRequest(GenRequest):
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: Optional[ToolSpec] = None
    fmt: Optional[ResponseFormat] = None


@dataclass
class TextRequest(GenRequest):
    prompts: list[Any] = field(default_factory=list)  # each a string or a list of token ids


def _bad(message: str, param: Optional[str] = None) -> HTTPError:
    return HTTPError(400, message, None, param)


def _int(body: dict[str, Any], key: str, low: int, high: int) -> Optional[int]:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(f"'{key}' must be an integer from {low} to {high}", key)
    return value


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _bad(f"'{key}' must be a number from {low:g} to {high:g}", key)
    return float(value)


def _common(body: Any, cls: type, **extra: Any) -> Any:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter ('model': the name of a served model, see GET /v1/models)",
                   "model")
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
        raise _bad("'stop' must be a string or a list of up to 4 strings", "stop")
    _number(body, "top_p", 1.0, 0, 1)  # accepted and checked; sampling here is plain temperature sampling
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    if options and not body.get("stream"):
        raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
    max_tokens = _int(body, "max_completion_tokens", 1, 10_000_000)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1, 10_000_000)
    return cls(model=model, n=_int(body, "n", 1, MAX_N) or 1, temperature=_number(body, "temperature", 1.0, 0, 2),
               max_tokens=max_tokens, seed=_int(body, "seed", -2**63, 2**63 - 1), stop=[s for s in stop if s],
               stream=bool(body.get("stream")), include_usage=bool((options or {}).get("include_usage")),
               return_token_ids=bool(body.get("return_token_ids")), **extra)


def parse_chat(body: Any) -> ChatRequest:
    req = _common(body, ChatRequest)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list of {role, content} objects", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _bad(f"messages[{i}]: 'role' must be one of {', '.join(ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        if not (content is None or isinstance(content, (str, list))):
            raise _bad(f"messages[{i}]: 'content' must be a string or a list of content parts",
                       f"messages[{i}].content")
        if content is None and not (m["role"] == "assistant" and m.get("tool_calls")):
            raise _bad(f"messages[{i}]: 'content' is required", f"messages[{i}].content")
        if m.get("tool_calls") is not None and not isinstance(m["tool_calls"], list):
            raise _bad(f"messages[{i}]: 'tool_calls' must be a list", f"messages[{i}].tool_calls")
    req.messages = messages
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise _bad("'logprobs' must be true or false", "logprobs")
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise _bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    req.logprobs = (top or 0) if logprobs else None
    try:
        req.tools, req.fmt = parse_tools(body), parse_response_format(body)
    except RequestError as e:
        raise _bad(str(e), e.param) from None
    return req


def parse_text(body: Any) -> TextRequest:
    req = _common(body, TextRequest)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(
            isinstance(p, str) or (isinstance(p, list) and p and all(isinstance(t, int) for t in p)) for p in prompt):
        prompts = prompt
    else:
        raise _bad("'prompt' must be a string, a list of strings, a list of token ids or a list of lists of them",
                   "prompt")
    if body.get("echo"):
        raise _bad("'echo' is not supported by this server", "echo")
    if body.get("suffix"):
        raise _bad("'suffix' is not supported by this server", "suffix")
    req.logprobs = _int(body, "logprobs", 0, 5)
    req.prompts = prompts
    return req


# ---------------------------------------------------------------- one choice's output, token by token

@lru_cache(maxsize=1 << 16)
def _token_text(tokenizer: Any, token: int) -> str:
    return tokenizer.decode([token], skip_special_tokens=False)


class ChoiceText:
    """Turns one row's decoded tokens into text that is safe to send now: nothing that might become the
    start of a stop string, no half UTF-8 character, and (with tools) nothing from the first <tool_call>
    on. Logprob entries are released with the text of their token."""

    def __init__(self, tokenizer: Any, end_ids: list[int], prefix: str, stops: list[str], tools: bool) -> None:
        self.tok, self.end_ids, self.prefix, self.stops, self.tools = tokenizer, set(end_ids), prefix, stops, tools
        self.ids: list[int] = []
        self.ends: list[int] = []  # the text length after each token
        self.entries: list[tuple[int, float, list[tuple[int, float]]]] = []  # logprobs, when asked
        self.sent = 0  # characters sent
        self.sent_entries = 0  # logprob entries sent

    def _safe(self, text: str) -> int:
        safe = len(text)
        if text.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for its next byte
            safe = len(text.rstrip("\ufffd"))
        holds = self.stops + ([OPEN] if self.tools else [])
        for s in holds:
            at = text.find(s)
            if at >= 0:
                safe = min(safe, at)
            for n in range(min(len(s) - 1, len(text)), 0, -1):  # the text ends with the start of s
                if text.endswith(s[:n]):
                    safe = min(safe, len(text) - n)
                    break
        if self.tools:  # content before a call is sent stripped of trailing whitespace
            safe = min(safe, len(text[:safe].rstrip()))
        return max(safe, self.sent)

    def push(self, token: int, entry: Optional[tuple[float, list[tuple[int, float]]]]) -> tuple[str, list]:
        """(text now safe to send, logprob entries whose token's text is all sent)."""
        if token in self.end_ids:
            return "", []
        self.ids.append(token)
        if entry is not None:
            self.entries.append((token, entry[0], entry[1]))
        text = self.text()
        self.ends.append(len(text))
        safe = self._safe(text)
        delta, self.sent = text[self.sent:safe], safe
        n = self.sent_entries
        while n < len(self.entries) and self.ends[n] <= self.sent:
            n += 1
        released, self.sent_entries = self.entries[self.sent_entries:n], n
        return delta, released

    def text(self) -> str:
        return self.prefix + self.tok.decode(self.ids, skip_special_tokens=False)


@dataclass
class Choice:
    """A finished choice, ready to be written in either endpoint's shape."""
    text: Optional[str]
    finish_reason: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    refusal: Optional[str] = None
    logprobs: Optional[list[tuple[int, float, list[tuple[int, float]]]]] = None
    token_ids: Optional[list[int]] = None
    prompt_ids: Optional[list[int]] = None


def finish_choice(c: Completion, prefix: str, tools: Optional[ToolSpec], fmt: Optional[ResponseFormat]) -> Choice:
    text: Optional[str] = prefix + c.content
    calls: list[dict[str, Any]] = []
    finish = c.finish_reason
    if tools is not None:
        text, calls = parse_tool_calls(text, tools)
        if calls:
            finish = "tool_calls"
    refusal = None
    if fmt is not None and not calls:
        problem = check_response_format(fmt, text or "")
        if problem:
            refusal = f"response_format {fmt.kind}: {problem}"
    return Choice(text, finish, calls, refusal, c.token_logprobs, c.completion_ids, c.prompt_ids)


def chat_logprobs(tokenizer: Any, entries: list[tuple[int, float, list[tuple[int, float]]]]) -> dict[str, Any]:
    def one(token: int, lp: float) -> dict[str, Any]:
        text = _token_text(tokenizer, token)
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    return {"content": [dict(one(t, lp), top_logprobs=[one(a, alp) for a, alp in top]) for t, lp, top in entries],
            "refusal": None}


def text_logprobs(tokenizer: Any, entries: list[tuple[int, float, list[tuple[int, float]]]], offset: int
                  ) -> dict[str, Any]:
    tokens = [_token_text(tokenizer, t) for t, _, _ in entries]
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": tokens, "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [{_token_text(tokenizer, a): alp for a, alp in top} for _, _, top in entries],
            "text_offset": offsets}


def choose_tool(model: Any, text: str, tools: ToolSpec) -> ToolSpec:
    """tool_choice "required" with several tools: the function the model itself finds most likely to
    call next (the log-probability of each name after `<tool_call> {"name": "`), so that the reply is
    a call to a real function. Returns the spec with that function named."""
    import torch

    tok = model.tokenizer
    head = text + f'{OPEN}\n{{"name": "'
    head_ids = tok(head, add_special_tokens=False)["input_ids"]
    best, best_lp = tools.names[0], float("-inf")
    with torch.inference_mode():
        for name in tools.names:
            ids = tok(head + name + '"', add_special_tokens=False)["input_ids"]
            start = next((i for i, (a, b) in enumerate(zip(head_ids, ids)) if a != b), len(head_ids))
            logits = model.model(torch.tensor([ids], device=model.device)).logits[0].float()
            logp = torch.log_softmax(logits[start - 1:-1], -1)
            lp = float(logp.gather(1, torch.tensor(ids[start:], device=logp.device)[:, None]).sum())
            if lp > best_lp:
                best, best_lp = name, lp
    return ToolSpec(tools=tools.tools, choice="function", function=best, parallel=tools.parallel, names=tools.names)


# ---------------------------------------------------------------- the server

def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the stdlib's name
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
        self._send(e.status, {"error": {"message": e.message, "type": kind, "param": e.param, "code": e.code}})

    def _authorized(self) -> bool:
        if not self.api_key:
            return True
        given = self.headers.get("Authorization") or ""
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        if token and hmac.compare_digest(token.encode(), self.api_key.encode()):
            return True
        self._error(HTTPError(401, "Incorrect API key provided; pass the server's --api-key as the bearer token "
                                   "(Authorization: Bearer KEY, or api_key= in the openai client)", "invalid_api_key"))
        return False

    def _model(self, name: str) -> Model:
        model = self.models.get(name)
        if model is None:
            raise HTTPError(404, f"The model `{name}` does not exist; this server has: {', '.join(self.models)}",
                            "model_not_found", "model")
        return model

    def do_GET(self) -> None:  # noqa: N802 -- the stdlib's name
        path = self.path.split("?")[0].rstrip("/")
        if path == "/health":
            self._send(200, {"status": "ok"})
            return
        if not self._authorized():
            return
        if path in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "harness",
                 "max_model_len": model.context_window} for name, model in self.models.items()]})
        else:
            self._error(HTTPError(404, f"no such path: {self.path}", "not_found"))

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        body_bytes = self.rfile.read(length) if 0 < length <= MAX_BODY else b""
        if length > MAX_BODY:
            self.close_connection = True  # the body was not read
        if not self._authorized():
            return
        endpoints = {"/v1/chat/completions": self._chat, "/chat/completions": self._chat,
                     "/v1/completions": self._text, "/completions": self._text}
        if path not in endpoints:
            self._error(HTTPError(404, f"no such path: {self.path} (this server has /v1/chat/completions and "
                                       "/v1/completions)", "not_found"))
            return
        try:
            if length > MAX_BODY:
                raise HTTPError(413, "request body too large")
            try:
                body = json.loads(body_bytes or b"null")
            except ValueError:
                raise _bad("the request body is not valid JSON") from None
            endpoints[path](body)
        except HTTPError as e:
            self._error(e)
        except ContextLengthError as e:
            self._error(HTTPError(400, str(e), "context_length_exceeded", "messages"))
        except (ModelError, UserError) as e:
            self._error(HTTPError(500, str(e), "model_error"))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 -- a server must answer, not die
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
            raise _bad(f"model {req.model!r} serves chat only (POST /v1/chat/completions)", "model")
        jobs, base = [], 0
        events = queue.SimpleQueue() if req.stream else None
        try:
            for p in req.prompts:
                ids = list(model.tokenizer(p)["input_ids"]) if isinstance(p, str) else list(p)
                if not ids:
                    raise _bad("a prompt is empty", "prompt")
                if max(ids) >= len(model.tokenizer) or min(ids) < 0:
                    raise _bad(f"a prompt has token ids outside the vocabulary (0..{len(model.tokenizer) - 1})",
                               "prompt")
                jobs.append(self._submit(model, req, ids, "", base, req.stop, events))
                base += req.n
        except BaseException:
            for job in jobs:
                job.handle.stop.set()
            raise
        self._respond(model, req, jobs, chat=False, events=events)

    def _submit(self, model: Any, req: GenRequest, ids: list[int], prefix: str, base: int, stop: list[str],
                events: Optional[queue.SimpleQueue]) -> Job:
        handle = model.submit(ids, n=req.n, temperature=req.temperature, max_tokens=req.max_tokens, seed=req.seed,
                              stop=stop, logprobs=req.logprobs, events=events,
                              stop_after_block=self.stop_after_block and isinstance(req, ChatRequest))
        return Job(base, req.n, ids, prefix, handle)

    def _respond(self, model: Any, req: GenRequest, jobs: list[Job], chat: bool,
                 events: Optional[queue.SimpleQueue]) -> None:
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
        response = self._envelope(req, chat)
        response["choices"] = [self._final_choice(model, req, i, c, chat) for i, c in sorted(choices.items())]
        response["usage"] = _usage(prompt, completion)
        if req.return_token_ids and chat:
            response["prompt_token_ids"] = jobs[0].prompt_ids
        self._send(200, response)

    def _envelope(self, req: GenRequest, chat: bool, chunk: bool = False) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
        return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", "object": kind,
                "created": int(time.time()), "model": req.model, "system_fingerprint": None}

    def _final_choice(self, model: Any, req: GenRequest, index: int, c: Choice, chat: bool) -> dict[str, Any]:
        tok = getattr(model, "tokenizer", None)
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": c.text, "refusal": c.refusal}
            if c.tool_calls:
                message["tool_calls"] = c.tool_calls
            out = {"index": index, "message": message, "finish_reason": c.finish_reason,
                   "logprobs": chat_logprobs(tok, c.logprobs or []) if req.logprobs is not None and tok else None}
        else:
            out = {"index": index, "text": c.text or "", "finish_reason": c.finish_reason,
                   "logprobs": text_logprobs(tok, c.logprobs or [], 0) if req.logprobs is not None and tok else None}
        if req.return_token_ids:
            out["token_ids"] = c.token_ids
            if not chat:
                out["prompt_token_ids"] = c.prompt_ids
        return out

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

    def _stream_local(self, model: Any, req: GenRequest, jobs: list[Job], events: queue.SimpleQueue, chat: bool,
                      tools: Optional[ToolSpec], fmt: Optional[ResponseFormat]) -> None:
        """Send each choice's text as its tokens are decoded (chat.completion.chunk or text_completion
        events), its tool calls and finish reason when it ends, then the usage chunk if asked."""
        tok = model.tokenizer
        head = self._envelope(req, chat, chunk=True)
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

        def chunk(index: int, text: str, entries: list, finish: Optional[str] = None,
                  extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
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
                    failed = [job.handle.future.exception() for job in jobs if job.handle.future.done()
                              and job.handle.future.exception() is not None]
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
                whole, emitted = final.text or "", state.text()[:state.sent]
                rest = whole[len(emitted):] if whole.startswith(emitted) else ""
                entries = (final.logprobs or [])[state.sent_entries:]
                extra: dict[str, Any] = {}
                if req.return_token_ids:
                    extra["token_ids"] = final.token_ids
                    if not chat:
                        extra["prompt_token_ids"] = final.prompt_ids
                for index in targets[key]:
                    if rest or entries:
                        self._event(chunk(index, rest, entries))
                    for n, call in enumerate(final.tool_calls if chat else []):
                        self._event(chunk(index, "", [], extra={"tool_calls": [
                            {"index": n, "id": call["id"], "type": "function",
                             "function": {"name": call["function"]["name"], "arguments": ""}}]}))
                        self._event(chunk(index, "", [], extra={"tool_calls": [
                            {"index": n, "function": {"arguments": call["function"]["arguments"]}}]}))
                    if chat and final.refusal:
                        self._event(chunk(index, "", [], extra={"refusal": final.refusal}))
                    self._event(chunk(index, "", [], final.finish_reason, extra))
            if req.include_usage:
                self._event(dict(head, choices=[], usage=_usage(sum(len(j.prompt_ids) for j in jobs),
                                                                completion_tokens)))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client left: stop decoding its rows
            for job in jobs:
                job.handle.stop.set()
        except Exception as e:  # noqa: BLE001 -- the status line is sent: report in the stream, as OpenAI does
            log.exception("streaming failed")
            self._event({"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error", "param": None,
                                   "code": None}})

    # -- other backends (replay scripts, API models): the finished reply
    def _chat_other(self, model: Model, req: ChatRequest) -> None:
        tools = req.tools.tools if req.tools is not None and req.tools.choice != "none" and model.supports_tools \
            else None
        completions = self.run(model.complete(req.messages, tools, req.n, req.temperature,
                                              req.max_tokens or NON_LOCAL_MAX_TOKENS, req.seed))
        choices = []
        for c in completions:
            cut = [i for i in (c.content.find(s) for s in req.stop) if i >= 0]
            text = c.content[: min(cut)] if cut else c.content
            calls = [{"id": t.id, "type": "function", "function": {"name": t.name, "arguments": json.dumps(t.arguments)}}
                     for t in c.tool_calls]
            refusal = None
            if req.fmt is not None and not calls:
                problem = check_response_format(req.fmt, text)
                refusal = f"response_format {req.fmt.kind}: {problem}" if problem else None
            choices.append(Choice(None if calls and not text else text,
                                  "tool_calls" if calls else "stop" if cut else c.finish_reason, calls, refusal))
        prompt = completions[0].prompt_tokens if completions else 0
        out = sum(c.completion_tokens for c in completions)
        if not req.stream:
            response = self._envelope(req, True)
            response["choices"] = [self._final_choice(model, req, i, c, True) for i, c in enumerate(choices)]
            response["usage"] = _usage(prompt, out)
            self._send(200, response)
            return
        head = self._envelope(req, True, chunk=True)
        if req.include_usage:
            head["usage"] = None
        self._start_stream()
        for i, c in enumerate(choices):
            delta: dict[str, Any] = {"role": "assistant", "content": c.text or ""}
            if c.tool_calls:
                delta["tool_calls"] = [dict(t, index=n) for n, t in enumerate(c.tool_calls)]
            if c.refusal:
                delta["refusal"] = c.refusal
            self._event(dict(head, choices=[{"index": i, "delta": delta, "finish_reason": None, "logprobs": None}]))
            self._event(dict(head, choices=[{"index": i, "delta": {}, "finish_reason": c.finish_reason,
                                             "logprobs": None}]))
        if req.include_usage:
            self._event(dict(head, choices=[], usage=_usage(prompt, out)))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@dataclass
class Server:
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: Model  # the base model
    name: str  # its served name
    stop: Callable[[], None]
    models: dict[str, Model] = field(default_factory=dict)  # every served name


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # many clients connect at once


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")


def parse_adapters(values: list[str]) -> tuple[Optional[str], dict[str, str]]:
    """--adapter values: (the one unnamed adapter applied to the base model, {name: folder})."""
    unnamed, named = None, {}
    for value in values:
        name, sep, folder = value.partition("=")
        if sep and _NAME.match(name) and not Path(value).exists():
            if name in named:
                raise UserError(f"--adapter {value}: the name {name!r} is given twice")
            named[name] = folder
        elif unnamed is not None:
            raise UserError(f"--adapter {value}: only one adapter can replace the base model; name the others "
                            "(--adapter NAME=DIR) to serve them beside it")
        else:
            unnamed = value
    return unnamed, named


def start_server(model: Model | str, host: str = "127.0.0.1", port: int = 0, *, name: Optional[str] = None,
                 adapters: Optional[dict[str, str]] = None, api_key: Optional[str] = None,
                 stop_after_block: bool = False, **options: Any) -> Server:
    """Serve a Model (or a spec for get_model, with options) in background threads; port 0 picks a free one.
    `adapters` {name: folder} serves LoRA adapters of a local spec beside the base model, each chosen by
    the request's `model`. `stop_after_block`: a local model's chat replies end after their first complete
    ``` block, as its own complete() does for the agent loop (evaluators/cluster.py serves the loop's model
    so, and its nodes get the replies and token ids one machine would). Returns Server(base_url, model, name,
    stop, models)."""
    made = []
    if isinstance(model, str):
        spec = model
        model = get_model(spec, **options)
        made.append(model)
    elif adapters:
        raise UserError("named adapters need the model as a spec string (e.g. local:smollm2-135m)")
    served = name or served_name(model)
    models: dict[str, Model] = {served: model}
    for adapter_name, folder in (adapters or {}).items():
        if not spec.startswith("local:"):
            raise UserError(f"--adapter {adapter_name}={folder}: adapters apply to local models only")
        if adapter_name in models:
            raise UserError(f"--adapter {adapter_name}={folder}: the name is already served; pick another")
        models[adapter_name] = get_model(spec, **dict(options, adapter=folder))
        made.append(models[adapter_name])
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="serve-loop", daemon=True)
    loop_thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    handler = type("BoundHandler", (Handler,), {"models": models, "api_key": api_key or None,
                                                "stop_after_block": stop_after_block,
                                                "run": staticmethod(run)})
    try:
        httpd = _HTTPServer((host, port), handler)
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
        for m in made:
            close = getattr(m, "close", None)
            if callable(close):
                close()

    return Server(base_url=f"http://{bound_host}:{bound_port}/v1", model=model, name=served, stop=stop,
                  models=models)


def serve(spec: str, host: str = "127.0.0.1", port: int = 8000, adapter: Optional[str] = None,
          adapters: Optional[dict[str, str]] = None, api_key: Optional[str] = None,
          options: Optional[dict[str, Any]] = None, out: Callable[[str], Any] = print) -> None:
    """Serve until interrupted (the `harness serve` command)."""
    options = dict(options or {}, **({"adapter": adapter} if adapter else {}))
    server = start_server(spec, host, port, adapters=adapters, api_key=api_key, **options)
    out(f"serving {spec} as {', '.join(repr(n) for n in server.models)} at {server.base_url} "
        f"(OpenAI-compatible{'; API key required' if api_key else ''}; Ctrl-C stops)")
    out(f"  use it with: --model openai-compat:{server.base_url}/{server.name}")
    try:
        threading.Event().wait()
    finally:
        server.stop()
