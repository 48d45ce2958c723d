"""The in-process model (LocalModel): requests from any thread are queued, and one worker thread decodes
them together, rows joining and leaving the running batch between steps. This module owns the model's
setup and its requests (complete, generate, submit, stats, close); the worker thread is
agent/models/local_worker.py (LocalModel's base class), its steps agent/models/local_decoding.py. Loading
the model, its adapter and its tokenizer is agent/models/local_loading.py.
"""

from __future__ import annotations

import asyncio
import atexit
import queue
import threading
import weakref
from typing import Any, Optional

from agent.models.base import WAITING, Completion, GrammarError
from agent.models.common import apply_prices, message_text
from agent.models.local_decoding import PrefixCache, supports
from agent.models.local_loading import DEFAULT_LOCAL_MODEL, END_OF_TURN, check_adapter, load_adapter, load_hf
from agent.models.local_worker import DecodingWorker, _Request
from agent.models.options import ModelOptions
from agent.models.retry import ContextLengthError
from results.errors import UserError


class LocalModel(DecodingWorker):
    """Generates in-process with transformers. supports_tools is False: the loop uses its text protocol."""

    def __init__(
        self,
        spec: str = DEFAULT_LOCAL_MODEL,
        *,
        adapter: Optional[str] = None,
        seed: Optional[int] = None,
        device: Optional[str] = None,
        name: Optional[str] = None,
        price_in: Optional[float] = None,
        price_out: Optional[float] = None,
        stop_after_block: bool = True,
        prefix_cache_mb: int = 2048,
    ) -> None:
        import torch

        self.name = name or (spec if spec.startswith("local:") else f"local:{spec}")
        self.price_in, self.price_out = price_in, price_out  # cost is 0 unless these are given
        if adapter:
            check_adapter(adapter)  # before the slow part
        self.model, self.tokenizer = load_hf(spec, device=device)
        if adapter:
            self.model = load_adapter(self.model, adapter)
        if not supports(self.model):
            raise UserError(
                f"{self.name}: its architecture ({type(self.model).__name__}) keeps a cache this backend "
                "cannot batch (sliding-window or other non-standard attention); serve it with an "
                "OpenAI-compatible server and use openai-compat:URL instead"
            )
        self.device = next(self.model.parameters()).device
        self.supports_tools = False  # tool-call syntax differs per model; the text protocol works for all
        self.context_window = int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)
        vocab = self.tokenizer.get_vocab()
        ends = {vocab[t] for t in END_OF_TURN if t in vocab}
        if self.tokenizer.eos_token_id is not None:
            ends.add(self.tokenizer.eos_token_id)
        self.end_ids = sorted(ends)
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.end_ids[0]
        )
        self._lock = threading.Lock()  # guards the request queue
        self._wake = threading.Condition(self._lock)
        self._queue: list[_Request] = []
        self._worker: Optional[threading.Thread] = None
        self.max_batch = 16  # rows decoded together
        self.prefix = PrefixCache(prefix_cache_mb << 20)  # keys/values of recent sequences, for reuse
        self._current: list[_Request] = []  # the batch being decoded
        self._closing = False
        # A torch op still running at interpreter exit aborts the process: stop the worker first. A weak
        # reference, so that registering does not keep every model ever made (and its caches) alive.
        atexit.register(_shutdown_at_exit, weakref.ref(self))
        # Decoding rule: a reply ends once it holds one complete ``` block (the text protocol's unit).
        # Small models otherwise go on to imagine the command's output; what is recorded and trained
        # on is exactly what was generated up to that point.
        self.stop_after_block = stop_after_block
        if seed is not None:
            torch.manual_seed(seed)

    def encode(self, messages: list[dict[str, Any]]) -> list[int]:
        """The exact token ids of the rendered conversation, ending with the assistant-turn header."""
        return encode_messages(self.tokenizer, messages)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(self.encode(messages))

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]] = None,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: Optional[int] = None,
    ) -> list[Completion]:
        # Generation runs in the batching thread, so the event loop stays free. A thread cannot be
        # cancelled: a cancelled call (wall-time limit, Ctrl-C) marks its rows to stop instead.
        # Until the request joins the batch it waits for others' rows: the attempt's waiting, not its time.
        clock = WAITING.get()
        token = clock.begin() if clock is not None else 0
        joined = (lambda: clock.end(token)) if clock is not None else None
        try:
            req = self._request(messages, n, temperature, max_tokens, seed, joined, clock)
            try:
                out = await asyncio.wrap_future(req.future)
            except asyncio.CancelledError:
                req.stop.set()
                raise
        finally:
            if joined is not None:
                joined()  # a no-op once joined
        apply_prices(out, self.price_in, self.price_out)
        return out

    def generate(
        self,
        messages: list[dict[str, Any]],
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: Optional[int] = None,
    ) -> list[Completion]:
        """Blocking: n completions of one conversation."""
        return self._request(messages, n, temperature, max_tokens, seed).future.result()

    def _request(self, messages, n, temperature, max_tokens, seed, on_join=None, clock=None) -> "_Request":
        return self.submit(
            self.encode(messages),
            n=n,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            stop_after_block=self.stop_after_block,
            on_join=on_join,
            clock=clock,
        )

    def submit(
        self,
        prompt_ids: list[int],
        *,
        n: int = 1,
        temperature: float = 0.0,
        max_tokens: Optional[int] = None,
        seed: Optional[int] = None,
        stop: tuple[str, ...] | list[str] = (),
        logprobs: Optional[int] = None,
        events: Optional[queue.SimpleQueue] = None,
        stop_after_block: bool = False,
        on_join: Optional[Any] = None,
        json_schema: Optional[dict[str, Any]] = None,
        clock: Optional[Any] = None,
    ) -> "_Request":
        """Queue a generation from exact prompt token ids (what `harness serve` uses). `stop` strings end
        a row inside the decoder; `logprobs` = None (off) or how many top alternatives to keep per token.
        With an `events` queue (streaming; several requests may share one) the decoder puts
        (request, "token", k, id, logprob entry or None) as row k decodes a token, (request, "finish", k,
        Completion, None) when row k ends, and (request, "error", 0, exception, None) if decoding fails.
        max_tokens None: up to the context window. `on_join` is called (in the decoding thread) when the
        request leaves the queue and joins the running batch; a `clock` (agent.models.base.Waiting) gets
        the other requests' share of each step this one shares with them. `json_schema`: every row's reply is
        constrained to JSON that matches it (each step masks the tokens that cannot continue a match, as
        vLLM's structured outputs do; llguidance); a schema it cannot compile raises GrammarError."""
        room = self.context_window - len(prompt_ids)
        if room <= 0:
            raise ContextLengthError(
                f"model {self.name!r}: the prompt is {len(prompt_ids)} tokens, "
                f"the context window {self.context_window}"
            )
        limit = room if max_tokens is None else max(1, min(max_tokens, room))
        grammar = self._grammar(json_schema) if json_schema is not None else None
        req = _Request(
            list(prompt_ids),
            n,
            float(temperature),
            limit,
            seed,
            stop_strings=[s for s in stop if s],
            logprobs=logprobs,
            stop_after_block=stop_after_block,
            events=events,
            on_join=on_join,
            grammar=grammar,
            clock=clock,
        )
        with self._lock:
            self._queue.append(req)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._batch_loop, name="local-model", daemon=True)
                self._worker.start()
            self._wake.notify()
        return req

    def stats(self) -> dict[str, int]:
        """The decoder's state for `harness serve`'s /metrics: requests waiting, rows decoding, the batch's
        capacity, and prefix-cache reuse so far."""
        with self._lock:
            queued, rows = len(self._queue), sum(r.width for r in self._current)
        return {
            "queued": queued,
            "rows": rows,
            "max_batch": self.max_batch,
            "prefix_hits": self.prefix.hits,
            "prefix_reused_tokens": self.prefix.reused_tokens,
        }

    def _grammar(self, schema: dict[str, Any]) -> str:
        """The llguidance grammar of a JSON schema, checked against this tokenizer."""
        import llguidance
        import llguidance.hf

        if getattr(self, "_lltok", None) is None:
            vocab = int(getattr(self.model.config, "vocab_size", 0) or len(self.tokenizer))
            self._lltok = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=vocab, eos_token=self.end_ids)
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False}
            )
            problem = llguidance.LLMatcher.validate_grammar(grammar, self._lltok)
        except (ValueError, TypeError, RuntimeError) as e:
            problem = str(e)
        if problem:
            raise GrammarError(f"the JSON schema cannot be enforced: {str(problem).strip().splitlines()[0]}")
        return grammar

    def close(self) -> None:
        """Stop the decoding thread and drop the cached keys/values; the model takes no more requests."""
        self._shutdown()
        self.prefix.clear()

    def _shutdown(self):
        with self._lock:
            worker, self._closing = self._worker, True
            for req in self._queue + self._current:
                req.stop.set()
            self._wake.notify_all()
        if worker is not None:
            worker.join(timeout=30)


def encode_messages(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt token ids LocalModel sends for these messages (also lora's rebuild of hinted attempts,
    lora/backend.py, from the tokenizer alone)."""
    clean = [{"role": m.get("role") or "user", "content": message_text(m)} for m in messages]
    text = tokenizer.apply_chat_template(clean, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _shutdown_at_exit(ref: "weakref.ref[LocalModel]") -> None:
    model = ref()
    if model is not None:
        model._shutdown()


def from_spec(target: str, spec: str, o: ModelOptions) -> LocalModel:
    """local:NAME|FOLDER|FILE.gguf (registered in agent/models/__init__.py)."""
    return LocalModel(
        target, adapter=o.get("adapter"), seed=o.int("seed"), device=o.get("device"), name=spec, **o.prices()
    )
