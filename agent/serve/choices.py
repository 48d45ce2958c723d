"""Choices of `harness serve`: one row's decoded tokens turned into text safe to stream (ChoiceText), a
finished Completion turned into a Choice (tool calls, response_format check), logprobs and usage in the
reference's shapes, and the response envelope and final choice of either endpoint."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from agent.models.base import Completion
from agent.serve.requests import GenRequest
from agent.serve.tools import CLOSE, OPEN, ToolSpec, parse_tool_calls


@lru_cache(maxsize=1 << 16)
def _token_text(tokenizer: Any, token: int) -> str:
    return tokenizer.decode([token], skip_special_tokens=False)


class ChoiceText:
    """Turns one row's decoded tokens into text that is safe to send now: nothing that might become the
    start of a stop string, no half UTF-8 character, and (with tools) nothing from the first <tool_call>
    on. Logprob entries are released with the text of their token."""

    def __init__(
        self, tokenizer: Any, end_ids: list[int], prefix: str, stops: list[str], tools: bool
    ) -> None:
        self.tok, self.end_ids, self.prefix, self.stops, self.tools = (
            tokenizer,
            set(end_ids),
            prefix,
            stops,
            tools,
        )
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
        delta, self.sent = text[self.sent : safe], safe
        n = self.sent_entries
        while n < len(self.entries) and self.ends[n] <= self.sent:
            n += 1
        released, self.sent_entries = self.entries[self.sent_entries : n], n
        return delta, released

    def text(self) -> str:
        return self.prefix + self.tok.decode(self.ids, skip_special_tokens=False)


@dataclass
class Choice:
    """A finished choice, ready to be written in either endpoint's shape."""

    text: Optional[str]
    finish_reason: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: Optional[list[tuple[int, float, list[tuple[int, float]]]]] = None
    token_ids: Optional[list[int]] = None
    prompt_ids: Optional[list[int]] = None


def finish_choice(c: Completion, prefix: str, tools: Optional[ToolSpec]) -> Choice:
    text: Optional[str] = prefix + c.content
    calls: list[dict[str, Any]] = []
    finish = c.finish_reason
    if tools is not None:
        whole = text
        text, calls = parse_tool_calls(text, tools)
        # A call cut off by max_tokens is "length", as OpenAI says; whole calls followed by more text that
        # was cut are the reply's calls.
        if calls and (finish != "length" or calls_complete(whole, calls)):
            finish = "tool_calls"
    return Choice(text, finish, calls, c.token_logprobs, c.completion_ids, c.prompt_ids)


def calls_complete(text: str, calls: list[dict[str, Any]]) -> bool:
    """Whether every <tool_call> block of the reply is closed and every call's arguments are JSON."""
    if text.count(OPEN) > text.count(CLOSE):
        return False
    try:
        for call in calls:
            json.loads(call["function"]["arguments"])
    except ValueError:
        return False
    return True


def chat_logprobs(
    tokenizer: Any, entries: list[tuple[int, float, list[tuple[int, float]]]]
) -> dict[str, Any]:
    def one(token: int, lp: float) -> dict[str, Any]:
        text = _token_text(tokenizer, token)
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    return {
        "content": [dict(one(t, lp), top_logprobs=[one(a, alp) for a, alp in top]) for t, lp, top in entries],
        "refusal": None,
    }


def text_logprobs(
    tokenizer: Any, entries: list[tuple[int, float, list[tuple[int, float]]]], offset: int
) -> dict[str, Any]:
    tokens = [_token_text(tokenizer, t) for t, _, _ in entries]
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": [lp for _, lp, _ in entries],
        "top_logprobs": [{_token_text(tokenizer, a): alp for a, alp in top} for _, _, top in entries],
        "text_offset": offsets,
    }


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
            logp = torch.log_softmax(logits[start - 1 : -1], -1)
            lp = float(logp.gather(1, torch.tensor(ids[start:], device=logp.device)[:, None]).sum())
            if lp > best_lp:
                best, best_lp = name, lp
    return ToolSpec(
        tools=tools.tools, choice="function", function=best, parallel=tools.parallel, names=tools.names
    )


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def envelope(req: GenRequest, chat: bool, chunk: bool = False) -> dict[str, Any]:
    """The fields every response (or stream chunk) starts with: id, object, created, model."""
    kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": req.model,
        "system_fingerprint": None,
    }


def final_choice(model: Any, req: GenRequest, index: int, c: Choice, chat: bool) -> dict[str, Any]:
    """A finished choice in the endpoint's shape, for a response that is not streamed."""
    tok = getattr(model, "tokenizer", None)
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": c.text, "refusal": None}
        if c.tool_calls:
            message["tool_calls"] = c.tool_calls
        out = {
            "index": index,
            "message": message,
            "finish_reason": c.finish_reason,
            "logprobs": chat_logprobs(tok, c.logprobs or []) if req.logprobs is not None and tok else None,
        }
    else:
        out = {
            "index": index,
            "text": c.text or "",
            "finish_reason": c.finish_reason,
            "logprobs": text_logprobs(tok, c.logprobs or [], 0) if req.logprobs is not None and tok else None,
        }
    if req.return_token_ids:
        out["token_ids"] = c.token_ids
        if not chat:
            out["prompt_token_ids"] = c.prompt_ids
    return out
