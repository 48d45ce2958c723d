"""Request bodies of `harness serve`, validated: the fields both endpoints share (GenRequest), then
/v1/chat/completions (parse_chat) and /v1/completions (parse_text). A bad field raises HTTPError 400
whose `param` names it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from agent.serve.tools import RequestError, ResponseFormat, ToolSpec, parse_response_format, parse_tools

MAX_N = 64
MAX_TOP_LOGPROBS = 20
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class HTTPError(Exception):
    """An error answer: the HTTP status and the reference's error fields."""

    def __init__(
        self, status: int, message: str, code: Optional[str] = None, param: Optional[str] = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


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


def bad_request(message: str, param: Optional[str] = None) -> HTTPError:
    return HTTPError(400, message, None, param)


def _int(body: dict[str, Any], key: str, low: int, high: int) -> Optional[int]:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad_request(f"'{key}' must be an integer from {low} to {high}", key)
    return value


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise bad_request(f"'{key}' must be a number from {low:g} to {high:g}", key)
    return float(value)


def _common(body: Any, cls: type, **extra: Any) -> Any:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request(
            "you must provide a model parameter ('model': the name of a served model, see GET /v1/models)",
            "model",
        )
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
        raise bad_request("'stop' must be a string or a list of up to 4 strings", "stop")
    _number(body, "top_p", 1.0, 0, 1)  # accepted and checked; sampling here is plain temperature sampling
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    if options and not body.get("stream"):
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")
    max_tokens = _int(body, "max_completion_tokens", 1, 10_000_000)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1, 10_000_000)
    return cls(
        model=model,
        n=_int(body, "n", 1, MAX_N) or 1,
        temperature=_number(body, "temperature", 1.0, 0, 2),
        max_tokens=max_tokens,
        seed=_int(body, "seed", -(2**63), 2**63 - 1),
        stop=[s for s in stop if s],
        stream=bool(body.get("stream")),
        include_usage=bool((options or {}).get("include_usage")),
        return_token_ids=bool(body.get("return_token_ids")),
        **extra,
    )


def parse_chat(body: Any) -> ChatRequest:
    req = _common(body, ChatRequest)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of {role, content} objects", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise bad_request(
                f"messages[{i}]: 'role' must be one of {', '.join(ROLES)}", f"messages[{i}].role"
            )
        content = m.get("content")
        if not (content is None or isinstance(content, (str, list))):
            raise bad_request(
                f"messages[{i}]: 'content' must be a string or a list of content parts",
                f"messages[{i}].content",
            )
        if content is None and not (m["role"] == "assistant" and m.get("tool_calls")):
            raise bad_request(f"messages[{i}]: 'content' is required", f"messages[{i}].content")
        if m.get("tool_calls") is not None and not isinstance(m["tool_calls"], list):
            raise bad_request(f"messages[{i}]: 'tool_calls' must be a list", f"messages[{i}].tool_calls")
    req.messages = messages
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise bad_request("'logprobs' must be true or false", "logprobs")
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    req.logprobs = (top or 0) if logprobs else None
    try:
        req.tools, req.fmt = parse_tools(body), parse_response_format(body)
    except RequestError as e:
        raise bad_request(str(e), e.param) from None
    return req


def parse_text(body: Any) -> TextRequest:
    req = _common(body, TextRequest)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        prompts = [prompt]
    elif (
        isinstance(prompt, list)
        and prompt
        and all(
            isinstance(p, str) or (isinstance(p, list) and p and all(isinstance(t, int) for t in p))
            for p in prompt
        )
    ):
        prompts = prompt
    else:
        raise bad_request(
            "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of them",
            "prompt",
        )
    if body.get("echo"):
        raise bad_request("'echo' is not supported by this server", "echo")
    if body.get("suffix"):
        raise bad_request("'suffix' is not supported by this server", "suffix")
    req.logprobs = _int(body, "logprobs", 0, 5)
    req.prompts = prompts
    return req
