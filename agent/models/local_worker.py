"""LocalModel's decoding thread (DecodingWorker, a base class of agent/models/local.py's LocalModel): one
loop decodes every running request together, one token per step; waiting requests join between steps
(their prompts prefilled after their longest cached prefix) and finished ones leave with their Completions
(continuous batching). The steps themselves are agent/models/local_decoding.py's; the requests (_Request)
are queued by LocalModel.submit."""

from __future__ import annotations

import concurrent.futures
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from agent.models.base import Completion
from agent.models.local_decoding import Batch, Row, prefill, sample, step, token_logprobs


class DecodingWorker:
    """The decoding half of LocalModel: its worker thread runs _batch_loop over the queue LocalModel.submit
    fills (self._queue under self._lock, woken by self._wake); LocalModel.__init__ sets every attribute
    used here."""

    def _batch_loop(self):
        """Decodes all running requests together, one token per step. Waiting requests join between
        steps and finished ones leave (continuous batching); each prompt reuses the keys/values of its
        longest prefix already decoded (the conversation so far, or a shared system prompt)."""
        import torch

        batch: Optional[Batch] = None
        while True:
            with self._lock:
                while not self._queue and batch is None:
                    if self._closing or not self._wake.wait(timeout=30):
                        self._worker = None
                        return
                rows = len(batch.rows) if batch else 0
                joining = []
                for req in list(self._queue):  # in arrival order, as many as fit
                    if rows and rows + req.width > self.max_batch:
                        break
                    joining.append(req)
                    rows += req.width
                    self._queue.remove(req)
                running = list({id(r.owner): r.owner for r in batch.rows}.values()) if batch else []
                self._current = running + joining
            for req in joining:
                if req.on_join is not None:
                    req.on_join()  # its queue wait ends here
            try:
                with torch.inference_mode():
                    if joining:
                        started = time.monotonic()
                        before = batch.rows if batch else []
                        batch = Batch.merge(batch, self._join(joining))
                        _share(before + batch.rows[len(before) :], len(before), time.monotonic() - started)
                    batch = self._retire(batch)
                    if batch is not None:
                        started = time.monotonic()
                        self._advance(batch.rows, step(self.model, batch))
                        _share(batch.rows, 0, time.monotonic() - started)
                    else:
                        with self._lock:
                            self._current = []  # nothing is being decoded
            except BaseException as e:  # hand the error to every caller in the batch
                for req in self._current:
                    if not req.future.done():
                        req.future.set_exception(e)
                    if req.events is not None:
                        req.events.put((req, "error", 0, e, None))
                batch = None

    def _join(self, requests: list["_Request"]) -> Batch:
        """Prefill the joining requests' prompts (after their cached prefixes); sample their first tokens."""
        import torch

        rows, cached = [], []
        for req in requests:
            hit = self.prefix.lookup(req.prompt_ids)
            req.cached_tokens = hit[1]
            for k in range(req.width):
                generator = None
                if req.seed is not None:  # each completion its own stream: the same whatever the batch
                    generator = torch.Generator().manual_seed((req.seed * 1_000_003 + k) % 2**63)
                rows.append(Row(req, k, req.prompt_ids, req.temperature, generator))
                cached.append(hit)
                if req.grammar is not None:
                    import llguidance

                    req.matchers[k] = llguidance.LLMatcher(self._lltok, req.grammar, log_level=0)
        batch, logits = prefill(self.model, rows, cached, self.pad_id)
        self._advance(rows, logits)
        return batch

    def _constrain(self, rows: list[Row], logits: Any) -> None:
        """Masks, in place, the tokens that would break a constrained row's JSON schema."""
        import llguidance.torch as llt

        held = [(i, row.owner.matchers[row.k]) for i, row in enumerate(rows) if row.owner.matchers]
        if not held:
            return
        mask = llt.allocate_token_bitmask(len(held), self._lltok.vocab_size)
        for j, (_, matcher) in enumerate(held):
            llt.fill_next_token_bitmask(matcher, mask, j)
        mask = mask.to(logits.device)
        for j, (i, _) in enumerate(held):
            llt.apply_token_bitmask_inplace(logits[i : i + 1], mask[j : j + 1])

    def _advance(self, rows: list[Row], logits: Any) -> None:
        self._constrain(rows, logits)
        tokens = sample(rows, logits)
        want = [i for i, row in enumerate(rows) if row.owner.logprobs is not None]
        if want:  # only the rows that asked: a softmax over the vocabulary per row
            top = max(rows[i].owner.logprobs for i in want)
            for i, entry in zip(want, token_logprobs(logits[want], [tokens[i] for i in want], top)):
                rows[i].logprobs.append((entry[0], entry[1][: rows[i].owner.logprobs]))
        for row, token in zip(rows, tokens):
            row.out.append(token)
            req = row.owner
            if req.first_token_at is None:
                req.first_token_at = time.monotonic()
            if req.matchers and token not in self.end_ids:
                req.matchers[row.k].consume_token(token)  # once the JSON is whole, only an end token fits
            row.done = (
                token in self.end_ids
                or len(row.out) >= req.max_tokens
                or req.stop.is_set()
                or (
                    req.stop_after_block
                    and "`" in self.tokenizer.decode([token])
                    and _has_block(self.tokenizer.decode(row.out))
                )
                or (bool(req.stop_strings) and self._stop_at(req, row.out) is not None)
            )
            if req.events is not None:
                req.events.put(
                    (req, "token", row.k, token, row.logprobs[-1] if req.logprobs is not None else None)
                )

    def _tokens_up_to(self, row: list[int], chars: int) -> list[int]:
        """The shortest start of `row` whose text covers its first `chars` characters."""
        if chars <= 0:
            return []
        for j in range(len(row)):
            if len(self.tokenizer.decode(row[: j + 1], skip_special_tokens=False)) >= chars:
                return row[: j + 1]
        return list(row)

    def _stop_at(self, req: "_Request", out: list[int]) -> Optional[int]:
        """Where the first of the request's stop strings starts in the decoded reply, if one is there."""
        text = self.tokenizer.decode(out, skip_special_tokens=False)
        found = [i for i in (text.find(s) for s in req.stop_strings) if i >= 0]
        return min(found) if found else None

    def _retire(self, batch: Batch) -> Optional[Batch]:
        """Deliver the requests whose rows are all done, keep their keys/values for reuse, and return the
        batch without their rows."""
        keep = []
        for i, row in enumerate(batch.rows):
            req = row.owner
            if not (row.done or req.stop.is_set()):
                keep.append(i)
                continue
            if req.stop.is_set():
                continue  # cancelled: its caller is gone
            seen = row.prompt_ids + row.out[:-1]  # the last token was sampled, never fed
            self.prefix.add(seen, batch.row_kv(i))
            req.results[row.k] = self._completion(row.prompt_ids, row.out, req, row.logprobs)
            if req.events is not None:
                req.events.put((req, "finish", row.k, req.results[row.k], None))
            if len(req.results) == req.width and not req.future.done():
                out = [req.results[k] for k in range(req.width)]
                req.future.set_result(out * req.n if req.width == 1 else out)
        return batch.select(keep) if len(keep) < len(batch.rows) else batch

    def _completion(
        self,
        prompt_ids: list[int],
        row: list[int],
        req: Optional["_Request"] = None,
        logprobs: Optional[list] = None,
    ) -> Completion:
        c = self._finish(prompt_ids, row, req)
        c.cached_tokens = req.cached_tokens if req is not None else 0
        if req is not None and req.logprobs is not None and logprobs is not None:
            text_ids = (
                c.completion_ids[:-1]
                if c.completion_ids and c.completion_ids[-1] in self.end_ids
                else c.completion_ids
            )
            c.token_logprobs = [(t, lp, top) for t, (lp, top) in zip(text_ids or [], logprobs)]
        return c

    def _finish(self, prompt_ids: list[int], row: list[int], req: Optional["_Request"]) -> Completion:
        def made(text: str, ids: list[int], finish: str) -> Completion:
            return Completion(
                content=text,
                prompt_tokens=len(prompt_ids),
                completion_tokens=len(ids),
                cost=0.0,
                finish_reason=finish,
                prompt_ids=list(prompt_ids),
                completion_ids=list(ids),
            )

        end = next((i for i, t in enumerate(row) if t in self.end_ids), None)
        cut = self._stop_at(req, row[:end]) if req is not None and req.stop_strings else None
        if cut is not None:
            # Text before the stop string; the tokens counted are those that put visible text there
            # (the stop string's own tokens are neither returned nor counted).
            text = self.tokenizer.decode(row[:end], skip_special_tokens=False)[:cut]
            return made(text, self._tokens_up_to(row, cut), "stop")
        after_block = self.stop_after_block if req is None else req.stop_after_block
        if after_block:  # cut right after the token that closed the first block
            closed = next(
                (
                    i
                    for i in range(len(row) if end is None else end)
                    if _has_block(self.tokenizer.decode(row[: i + 1]))
                ),
                None,
            )
            if closed is not None:
                ids = row[: closed + 1]
                return made(self.tokenizer.decode(ids, skip_special_tokens=False), ids, "stop")
        if end is None:  # ran out of max_tokens (no padding without an end token)
            ids, text_ids, finish = row, row, "length"
        else:  # keep the end-of-turn token, drop the padding after it
            ids, text_ids, finish = row[: end + 1], row[:end], "stop"
        return made(self.tokenizer.decode(text_ids, skip_special_tokens=False), ids, finish)


def _share(rows: list[Row], waiting: int, seconds: float) -> None:
    """Counts a decoder step shared by several requests' rows as each attempt's waiting, but for its own
    share (its rows' fraction of the step): what the others' rows cost it. The first `waiting` rows only
    waited (running rows while others join: their prefill)."""
    counts: dict[int, list] = {}
    for i, row in enumerate(rows):
        entry = counts.setdefault(id(row.owner), [row.owner, 0, 0])
        entry[1 if i < waiting else 2] += 1
    worked = len(rows) - waiting
    for owner, idle, busy in counts.values():
        if owner.clock is not None and (idle or busy):
            own = busy / worked if worked else 0.0
            owner.clock.add(seconds * (1.0 - own) if busy else seconds)


_BLOCK = re.compile(r"```[^\n`]*\n.*?```", re.DOTALL)


def _has_block(text: str) -> bool:
    return _BLOCK.search(text) is not None


@dataclass
class _Request:
    prompt_ids: list[int]
    n: int
    temperature: float
    max_tokens: int
    seed: Optional[int]
    stop_strings: list[str] = field(default_factory=list)
    logprobs: Optional[int] = None  # None: off; else top alternatives kept per token
    stop_after_block: bool = True
    events: Optional[queue.SimpleQueue] = None  # streaming: see LocalModel.submit
    on_join: Optional[Any] = None  # called when it joins the batch (LocalModel.submit)
    clock: Optional[Any] = None  # the attempt's Waiting (agent.models.base): the others' share of its steps
    grammar: Optional[str] = None  # llguidance grammar of the request's JSON schema
    matchers: dict[int, Any] = field(default_factory=dict)  # row k -> its llguidance matcher
    stop: threading.Event = field(default_factory=threading.Event)
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    results: dict[int, Completion] = field(default_factory=dict)  # completion k, as rows finish
    # for the server's metrics: when it was queued and when its first token was sampled; cached prefix
    submitted_at: float = field(default_factory=time.monotonic)
    first_token_at: Optional[float] = None
    cached_tokens: int = 0

    @property
    def width(self) -> int:
        """Rows it decodes: n samples, or one greedy sequence copied n times."""
        return self.n if self.temperature > 0 else 1
