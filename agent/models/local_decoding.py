"""Continuous batching with prefix reuse for the in-process model (agent/models/local.py).

Two costs dominate local rollouts, and each has a fix here:
- Prefill. An agent's next call repeats its whole conversation, and every attempt starts with the same
  system prompt. `PrefixCache` keeps the keys/values of recently decoded sequences; a new prompt only
  runs the tokens after its longest shared prefix with one of them.
- Padding. In a static batch every row waits for the longest one. Here rows join the running batch
  between decode steps and leave it when they finish (`Batch.merge`, `Batch.select`).

Layout: one padded KV cache for the batch, [rows, heads, T, dim] per layer, with a 0/1 mask [rows, T].
A row's real tokens may have padding before and between them (a cached prefix, then its new tokens);
the mask hides the padding and each row carries its own positions, so a row computes exactly what it
would compute alone (up to float rounding). Works with caches whose layers are plain DynamicLayer
(full attention: Llama, Qwen2, SmolLM, Mistral without a sliding window).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values, each [heads, length, dim]


def supports(model: Any) -> bool:
    """Whether the model's cache is made of plain full-attention layers (what Batch can pad and merge)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class PrefixCache:
    """Keys/values of recently decoded token sequences, least recently used evicted past `budget_bytes`."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.entries: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self.bytes = 0
        self.hits = self.reused_tokens = 0

    @staticmethod
    def _size(kv: KV) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)

    def lookup(self, ids: list[int]) -> tuple[Optional[KV], int]:
        """The cached keys/values of the longest prefix of `ids` that some entry shares (at most
        len(ids) - 1 tokens: the last token must run to give the next token's logits), and its length."""
        best, best_n = None, 0
        limit = len(ids) - 1
        for key in self.entries:
            n = _common_prefix(key, ids, limit)
            if n > best_n:
                best, best_n = key, n
        if best is None:
            return None, 0
        self.entries.move_to_end(best)
        self.hits += 1
        self.reused_tokens += best_n
        return [(k[:, :best_n], v[:, :best_n]) for k, v in self.entries[best]], best_n

    def add(self, ids: list[int], kv: KV) -> None:
        key = tuple(ids)
        size = self._size(kv)
        if not key or size > self.budget:
            return
        for old in [k for k in self.entries if len(k) <= len(key) and key[: len(k)] == k]:
            self.bytes -= self._size(self.entries.pop(old))  # a prefix of the new entry: covered by it
        self.entries[key] = kv
        self.bytes += size
        while self.bytes > self.budget:
            _, dropped = self.entries.popitem(last=False)
            self.bytes -= self._size(dropped)

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    if a[:n] == tuple(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == tuple(b[:mid]):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class Row:
    """One sequence being decoded: a request's k-th completion."""

    owner: Any  # the request
    k: int
    prompt_ids: list[int]
    temperature: float
    generator: Optional[torch.Generator]
    out: list[int] = field(default_factory=list)
    done: bool = False
    # (logprob of each sampled token, its top alternatives) when the request asks for logprobs
    logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)


@dataclass
class Batch:
    rows: list[Row]
    config: Any  # the model's config (to make caches)
    cache: Any  # transformers DynamicCache, [rows, heads, T, dim] per layer
    mask: torch.Tensor  # [rows, T] long, 1 where a real token is
    pos: torch.Tensor  # [rows] position of each row's next input token

    def kv(self) -> KV:
        return [(layer.keys, layer.values) for layer in self.cache.layers]

    def row_kv(self, i: int) -> KV:
        """Row i's keys/values without padding, [heads, length, dim] per layer."""
        real = self.mask[i].bool()
        return [(k[i][:, real].clone(), v[i][:, real].clone()) for k, v in self.kv()]

    def select(self, keep: list[int]) -> Optional["Batch"]:
        """The batch with only rows `keep`, and without columns that are padding in every kept row."""
        if not keep:
            return None
        index = torch.tensor(keep, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        used = mask.any(0).nonzero()
        start = int(used[0]) if len(used) else mask.shape[1]
        kv = [
            (k.index_select(0, index)[:, :, start:], v.index_select(0, index)[:, :, start:])
            for k, v in self.kv()
        ]
        return Batch(
            [self.rows[i] for i in keep],
            self.config,
            _cache_from(self.config, kv),
            mask[:, start:],
            self.pos.index_select(0, index),
        )

    @staticmethod
    def merge(a: Optional["Batch"], b: "Batch") -> "Batch":
        """One batch of a's rows then b's, the shorter one padded on the left."""
        if a is None:
            return b
        width = max(a.mask.shape[1], b.mask.shape[1])
        kv = [
            (
                torch.cat([_pad_left(ka, width, 2), _pad_left(kb, width, 2)]),
                torch.cat([_pad_left(va, width, 2), _pad_left(vb, width, 2)]),
            )
            for (ka, va), (kb, vb) in zip(a.kv(), b.kv())
        ]
        mask = torch.cat([_pad_left(a.mask, width, 1), _pad_left(b.mask, width, 1)])
        return Batch(a.rows + b.rows, a.config, _cache_from(a.config, kv), mask, torch.cat([a.pos, b.pos]))


def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _cache_from(config: Any, kv: KV) -> Any:
    """A DynamicCache holding these per-layer tensors."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for layer, (k, v) in zip(cache.layers, kv):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def prefill(
    model: Any, rows: list[Row], cached: list[tuple[Optional[KV], int]], pad_id: int
) -> tuple[Batch, torch.Tensor]:
    """Run the new rows' prompts after their cached prefixes. Returns their batch and the logits of each
    row's last prompt token. Row layout: [pad | cached prefix | pad | new tokens]."""
    device = next(model.parameters()).device
    prefix = [n for _, n in cached]
    new = [r.prompt_ids[n:] for r, n in zip(rows, prefix)]
    c, s = max(prefix), max(len(x) for x in new)
    mask = torch.zeros(len(rows), c + s, dtype=torch.long, device=device)
    ids = torch.full((len(rows), s), pad_id, dtype=torch.long, device=device)
    positions = torch.zeros(len(rows), s, dtype=torch.long, device=device)
    for i, (x, n) in enumerate(zip(new, prefix)):
        mask[i, c - n : c] = 1
        mask[i, c + s - len(x) :] = 1
        ids[i, s - len(x) :] = torch.tensor(x, device=device)
        positions[i, s - len(x) :] = torch.arange(n, n + len(x), device=device)
    kv: KV = []
    if c:  # each row's cached prefix, left-padded to the longest (rows without one: all padding)
        ref = next(row_kv for row_kv, _ in cached if row_kv)
        for layer, (k0, _) in enumerate(ref):
            empty = k0.new_zeros(k0.shape[0], 0, k0.shape[2])
            kv.append(
                tuple(
                    torch.stack([_pad_left(row_kv[layer][j] if n else empty, c, 1) for row_kv, n in cached])
                    for j in (0, 1)
                )
            )
    cache = _cache_from(model.config, kv)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    pos = torch.tensor([n + len(x) for x, n in zip(new, prefix)], device=device)
    return Batch(rows, model.config, out.cache, mask, pos), out.logits[:, -1, :]


def step(model: Any, batch: Batch) -> torch.Tensor:
    """Feed each row's last sampled token; the logits for each row's next token."""
    device = batch.mask.device
    ids = torch.tensor([[r.out[-1]] for r in batch.rows], dtype=torch.long, device=device)
    batch.mask = torch.cat(
        [batch.mask, torch.ones(len(batch.rows), 1, dtype=torch.long, device=device)], dim=1
    )
    out = model(
        input_ids=ids,
        attention_mask=batch.mask,
        position_ids=batch.pos[:, None],
        cache=batch.cache,
        use_cache=True,
        logits_to_keep=1,
    )
    batch.cache = out.cache
    batch.pos = batch.pos + 1
    return out.logits[:, -1, :]


def sample(rows: list[Row], logits: torch.Tensor) -> list[int]:
    """Each row's next token: argmax at temperature 0, else plain temperature sampling (no top-k/top-p:
    the policy the samples really come from) with the row's own generator."""
    picked = logits.argmax(-1).tolist()
    hot = [i for i, row in enumerate(rows) if row.temperature > 0]
    if hot:
        # One device->host copy for all sampling rows, not a copy (and a sync) per row: on a GPU each
        # row is a whole vocabulary of floats. The rows' generators live on the host.
        temps = torch.tensor([rows[i].temperature for i in hot], dtype=torch.float32, device=logits.device)
        probs = torch.softmax(logits[hot].float() / temps[:, None], dim=-1).cpu()
        for j, i in enumerate(hot):
            picked[i] = int(torch.multinomial(probs[j], 1, generator=rows[i].generator))
    return picked


def token_logprobs(
    logits: torch.Tensor, picked: list[int], top: int
) -> list[tuple[float, list[tuple[int, float]]]]:
    """Per row: the log-probability of the picked token under the model's distribution (the logits
    before temperature, as vLLM and OpenAI report them) and the `top` most likely (token, logprob)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(1, torch.tensor(picked, device=logp.device)[:, None])[:, 0].tolist()
    if top <= 0:
        return [(lp, []) for lp in chosen]
    values, ids = logp.topk(top, dim=-1)
    return [(lp, list(zip(i, v))) for lp, i, v in zip(chosen, ids.tolist(), values.tolist())]
