"""The replies of the other backends (replay scripts, API models): Model.complete answers, and the
finished reply is sent whole or as one stream of chunks. OtherReplies is a part of the HTTP Handler
(agent/serve/handler.py), whose run, _send, _start_stream and _event it uses."""

from __future__ import annotations

import json
from typing import Any

# Model.complete needs a number; local models default to the context left
from agent.config import API_REPLY_TOKENS
from agent.models import Model
from agent.models.base import Completion
from agent.serve.choices import Choice, envelope, final_choice, usage
from agent.serve.requests import ChatRequest


class OtherReplies:
    """The Handler's replies for models without submit(): the finished reply of Model.complete."""

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
        choices = [_choice(c, req.stop) for c in completions]
        prompt = completions[0].prompt_tokens if completions else 0
        out = sum(c.completion_tokens for c in completions)
        self._usage = (req.model, prompt, out)  # for the access log
        if req.stream:
            self._stream_other(req, choices, prompt, out)
            return
        response = envelope(req, True)
        response["choices"] = [final_choice(model, req, i, c, True) for i, c in enumerate(choices)]
        response["usage"] = usage(prompt, out)
        self._send(200, response)

    def _stream_other(self, req: ChatRequest, choices: list[Choice], prompt: int, out: int) -> None:
        """Send finished choices as a stream: each choice's whole delta, then its finish reason."""
        head = envelope(req, True, chunk=True)
        if req.include_usage:
            head["usage"] = None
        self._start_stream()
        for i, c in enumerate(choices):
            delta: dict[str, Any] = {"role": "assistant", "content": c.text or ""}
            if c.tool_calls:
                delta["tool_calls"] = [dict(t, index=n) for n, t in enumerate(c.tool_calls)]
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


def _choice(c: Completion, stop: list[str]) -> Choice:
    """A completion as a served choice: its text cut at the first stop string, its tool calls in
    OpenAI's form, and the finish reason a client expects from them."""
    cut = [i for i in (c.content.find(s) for s in stop) if i >= 0]
    text = c.content[: min(cut)] if cut else c.content
    calls = [
        {
            "id": t.id,
            "type": "function",
            "function": {"name": t.name, "arguments": json.dumps(t.arguments)},
        }
        for t in c.tool_calls
    ]
    return Choice(
        None if calls and not text else text,
        "tool_calls" if calls and c.finish_reason != "length" else "stop" if cut else c.finish_reason,
        calls,
    )
