"""The local model's replies: a prompt is submitted as a job to the continuous-batching decoder
(agent/models/local.py), and its choices are sent whole or streamed token by token as they are decoded.
LocalReplies is a part of the HTTP Handler (agent/serve/handler.py), whose _send, _start_stream and _event
it writes with."""

from __future__ import annotations

import logging
import queue
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

from agent.serve.choices import (
    Choice,
    ChoiceText,
    chat_logprobs,
    envelope,
    final_choice,
    finish_choice,
    text_logprobs,
    usage,
)
from agent.serve.requests import ChatRequest, GenRequest
from agent.serve.tools import ToolSpec

log = logging.getLogger(__name__)


@dataclass
class Job:
    """One prompt submitted to a local model: its choices are indexes base .. base + n - 1."""

    base: int
    n: int
    prompt_ids: list[int]
    prefix: str
    handle: Any  # the local model's request (future, events, stop)


class LocalReplies:
    """The Handler's replies for models with submit() (agent/models/local.py)."""

    def _submit(
        self,
        model: Any,
        req: GenRequest,
        ids: list[int],
        prefix: str,
        base: int,
        stop: list[str],
        events: Optional[queue.SimpleQueue],
        json_schema: Optional[dict[str, Any]] = None,
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
            json_schema=json_schema,
        )
        return Job(base, req.n, ids, prefix, handle)

    def _respond(
        self, model: Any, req: GenRequest, jobs: list[Job], chat: bool, events: Optional[queue.SimpleQueue]
    ) -> None:
        tools = req.tools if isinstance(req, ChatRequest) else None
        try:
            if req.stream:
                self._stream_local(model, req, jobs, events, chat, tools)
                return
            choices: dict[int, Choice] = {}
            for job in jobs:
                results = job.handle.future.result()
                for k, c in enumerate(results):
                    choices[job.base + k] = finish_choice(c, job.prefix, tools)
        finally:
            for job in jobs:
                job.handle.stop.set()  # a no-op once finished; frees the rows of a client that left
        prompt = sum(len(job.prompt_ids) for job in jobs)
        completion = sum(len(c.token_ids or []) for c in choices.values())
        self._usage = (req.model, prompt, completion)  # for the access log
        response = envelope(req, chat)
        response["choices"] = [final_choice(model, req, i, c, chat) for i, c in sorted(choices.items())]
        response["usage"] = usage(prompt, completion)
        if req.return_token_ids and chat:
            response["prompt_token_ids"] = jobs[0].prompt_ids
        self._send(200, response)

    def _stream_local(
        self,
        model: Any,
        req: GenRequest,
        jobs: list[Job],
        events: queue.SimpleQueue,
        chat: bool,
        tools: Optional[ToolSpec],
    ) -> None:
        """Send each choice's text as its tokens are decoded (chat.completion.chunk or text_completion
        events), its tool calls and finish reason when it ends, then the usage chunk if asked."""
        head = envelope(req, chat, chunk=True)
        if req.include_usage:
            head["usage"] = None
        chunk = partial(_chunk, head, req, model.tokenizer, chat)
        texts, targets = _stream_rows(model, req, jobs, calls=tools is not None and tools.choice != "none")
        owner = {id(job.handle): j for j, job in enumerate(jobs)}
        left = set(texts)
        completion_tokens = 0
        self._start_stream()
        try:
            if chat:
                for index in sorted(i for t in targets.values() for i in t):
                    self._event(chunk(index, "", [], extra={"role": "assistant", "content": ""}))
            while left:
                handle, kind, k, payload, entry = _next_event(events, jobs)
                key = (owner[id(handle)], k)
                if kind == "token":
                    delta, entries = texts[key].push(payload, entry)
                    if delta or entries:
                        for index in targets[key]:
                            self._event(chunk(index, delta, entries))
                    continue
                left.discard(key)  # "finish"
                completion_tokens += self._finish_row(
                    chunk, req, chat, tools, jobs[key[0]], texts[key], payload, targets[key]
                )
            prompt_tokens = sum(len(j.prompt_ids) for j in jobs)
            self._usage = (req.model, prompt_tokens, completion_tokens)  # for the access log
            if req.include_usage:
                self._event(dict(head, choices=[], usage=usage(prompt_tokens, completion_tokens)))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client left: stop decoding its rows
            for job in jobs:
                job.handle.stop.set()
        except Exception as e:
            log.exception("streaming failed")
            error = {
                "message": f"{type(e).__name__}: {e}",
                "type": "server_error",
                "param": None,
                "code": None,
            }
            self._event({"error": error})

    def _finish_row(
        self,
        chunk: Callable[..., dict[str, Any]],
        req: GenRequest,
        chat: bool,
        tools: Optional[ToolSpec],
        job: Job,
        state: ChoiceText,
        payload: Any,
        targets: list[int],
    ) -> int:
        """Send the end of one decoded row to each choice it feeds: what is left of its text, its tool
        calls, its finish reason. Returns the completion tokens it adds to the usage."""
        final = finish_choice(payload, job.prefix, tools)
        whole, emitted = final.text or "", state.text()[: state.sent]
        rest = whole[len(emitted) :] if whole.startswith(emitted) else ""
        entries = (final.logprobs or [])[state.sent_entries :]
        extra: dict[str, Any] = {}
        if req.return_token_ids:
            extra["token_ids"] = final.token_ids
            if not chat:
                extra["prompt_token_ids"] = final.prompt_ids
        for index in targets:
            if rest or entries:
                self._event(chunk(index, rest, entries))
            for delta in _tool_call_deltas(final.tool_calls if chat else []):
                self._event(chunk(index, "", [], extra={"tool_calls": [delta]}))
            self._event(chunk(index, "", [], final.finish_reason, extra))
        return len(final.token_ids or []) * len(targets)


def _stream_rows(
    model: Any, req: GenRequest, jobs: list[Job], calls: bool
) -> tuple[dict[tuple[int, int], ChoiceText], dict[tuple[int, int], list[int]]]:
    """Each decoded row's text so far and the choice indexes it feeds, keyed (job, row). A greedy request
    decodes one row and copies it n times: row k feeds choice base + k, or all n."""
    texts: dict[tuple[int, int], ChoiceText] = {}
    targets: dict[tuple[int, int], list[int]] = {}
    for j, job in enumerate(jobs):
        width = job.handle.width
        for k in range(width):
            texts[j, k] = ChoiceText(model.tokenizer, model.end_ids, job.prefix, req.stop, calls)
            targets[j, k] = [job.base + k] if width == job.n else [job.base + i for i in range(job.n)]
    return texts, targets


def _next_event(events: queue.SimpleQueue, jobs: list[Job]) -> tuple:
    """The decoder's next (handle, kind, row, payload, entry) event; its error if it failed, including
    a decoder that died while nothing arrived."""
    while True:
        try:
            event = events.get(timeout=5.0)
        except queue.Empty:  # nothing decoded for a while: make sure the decoder is alive
            failed = [
                job.handle.future.exception()
                for job in jobs
                if job.handle.future.done() and job.handle.future.exception() is not None
            ]
            if failed:
                raise failed[0] from None
            continue
        if event[1] == "error":
            raise event[3]
        return event


def _chunk(
    head: dict[str, Any],
    req: GenRequest,
    tok: Any,
    chat: bool,
    index: int,
    text: str,
    entries: list,
    finish: Optional[str] = None,
    extra: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """One streamed event for choice index: a chat delta or a completion's text, with its logprobs."""
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


def _tool_call_deltas(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A call's stream deltas as OpenAI sends them: its id and name first, then its arguments."""
    deltas = []
    for n, call in enumerate(calls):
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        deltas.append(
            {"index": n, "id": call["id"], "type": "function", "function": {"name": name, "arguments": ""}}
        )
        deltas.append({"index": n, "function": {"arguments": arguments}})
    return deltas
