"""Continuous batching with prefix reuse for the in-process model (agent/models/local.py).

Three costs dominate local rollouts, and each has a fix here:
- Prefill. An agent's next call repeats its whole conversation, and every attempt starts with the same
  system prompt. `PrefixCache` keeps the keys/values of recently decoded sequences; a new prompt only
  runs the tokens after its longest shared prefix with one of them.
- Padding. In a static batch every row waits for the longest one. Here rows join the running batch
  between decode steps and leave it when they finish (`Batch.merge`, `Batch.select`), and rows of very
  different lengths are decoded in separate groups (`Batch`), so a short row does not carry a long
  one's padding.
- Copying. transformers' DynamicLayer concatenates every step (the whole cache copied per token);
  `_GrowLayer` keeps room to spare and writes the new column in place.

Layout: per group, one padded KV cache, [rows, heads, T, dim] per layer, with a 0/1 mask [rows, T];
each row's real tokens right-aligned, padding before them (a prefill runs [pad | cached prefix | pad |
new tokens] and is then compacted). The mask hides the padding and each row carries its own positions,
so a row computes exactly what it would compute alone (up to float rounding). Works with caches whose
layers are plain DynamicLayer (full attention: Llama, Qwen2, SmolLM, Mistral without a sliding window).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from transformers.cache_utils import DynamicLayer

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
class Group:
    """Rows decoded by one forward pass: one padded KV cache, [rows, heads, T, dim] per layer, where T is
    the longest row's length (each row's real tokens right-aligned, padding before them)."""

    rows: list[Row]
    config: Any  # the model's config (to make caches)
    cache: Any  # transformers DynamicCache of _GrowLayer, [rows, heads, T, dim] per layer
    mask: torch.Tensor  # [rows, T] long, 1 where a real token is
    pos: torch.Tensor  # [rows] position of each row's next input token

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def kv(self) -> KV:
        return [(layer.keys, layer.values) for layer in self.cache.layers]

    def row_kv(self, i: int) -> KV:
        """Row i's keys/values without padding, [heads, length, dim] per layer."""
        real = self.mask[i].bool()
        return [(k[i][:, real].clone(), v[i][:, real].clone()) for k, v in self.kv()]

    def select(self, keep: list[int]) -> Optional["Group"]:
        """The group with only rows `keep`, and without columns that are padding in every kept row."""
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
        return Group(
            [self.rows[i] for i in keep],
            self.config,
            _cache_from(self.config, kv),
            mask[:, start:],
            self.pos.index_select(0, index),
        )

    def compact(self) -> "Group":
        """The same rows with the padding between a row's tokens removed: each row's real tokens
        right-aligned, T = the longest row. (A prefill lays rows out as [pad | cached prefix | pad | new
        tokens]; left so, a row's span is its prefix plus the longest new part of any row that joined
        with it, and every later step would read and copy those empty columns.)"""
        lengths = self.mask.sum(1)
        width = int(lengths.max())
        aligned = (
            torch.arange(self.width, device=self.mask.device)[None, :] >= (self.width - lengths)[:, None]
        )
        if width == self.width and bool((self.mask.bool() == aligned).all()):
            return self  # already right-aligned without gaps
        index = torch.zeros(len(self.rows), width, dtype=torch.long, device=self.mask.device)
        mask = torch.zeros(len(self.rows), width, dtype=torch.long, device=self.mask.device)
        for i in range(len(self.rows)):
            real = self.mask[i].nonzero()[:, 0]
            index[i, width - len(real) :] = real
            mask[i, width - len(real) :] = 1
        kv = []
        for k, v in self.kv():
            at = index[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
            kv.append((k.gather(2, at), v.gather(2, at)))
        return Group(self.rows, self.config, _cache_from(self.config, kv), mask, self.pos)

    @staticmethod
    def merge(a: "Group", b: "Group") -> "Group":
        """One group of a's rows then b's, the shorter one padded on the left."""
        width = max(a.width, b.width)
        kv = [
            (
                torch.cat([_pad_left(ka, width, 2), _pad_left(kb, width, 2)]),
                torch.cat([_pad_left(va, width, 2), _pad_left(vb, width, 2)]),
            )
            for (ka, va), (kb, vb) in zip(a.kv(), b.kv())
        ]
        mask = torch.cat([_pad_left(a.mask, width, 1), _pad_left(b.mask, width, 1)])
        return Group(a.rows + b.rows, a.config, _cache_from(a.config, kv), mask, torch.cat([a.pos, b.pos]))


MAX_GROUPS = 4  # forward passes per decode step, at most


@dataclass
class Batch:
    """All rows being decoded, in groups of similar length: a step runs one forward pass per group.

    Why groups: in one padded cache every row costs as much as the longest. An agent's conversation
    grows with each command's output (up to thousands of tokens), so with one cache a batch of 16
    attempts, one of them long, read and copied 16 long rows' worth of keys/values per token, and
    memory grew with the longest conversation times the batch. A row joins the group where it adds
    the least cost, or a group of its own when the padding it would add (or make the others carry)
    costs more than one more pass over the weights (`overhead`, in token-rows of keys/values)."""

    groups: list[Group]
    overhead: int  # one forward pass's fixed cost (reading the weights) in token-rows of keys/values

    @property
    def rows(self) -> list[Row]:
        return [row for g in self.groups for row in g.rows]

    @property
    def width(self) -> int:
        return max(g.width for g in self.groups)

    def cells(self) -> int:
        """Token-rows of keys/values a step reads (padding included)."""
        return sum(len(g.rows) * g.width for g in self.groups)

    def _at(self, i: int) -> tuple[Group, int]:
        for g in self.groups:
            if i < len(g.rows):
                return g, i
            i -= len(g.rows)
        raise IndexError(i)

    def row_kv(self, i: int) -> KV:
        g, j = self._at(i)
        return g.row_kv(j)

    def select(self, keep: list[int]) -> Optional["Batch"]:
        """The batch with only rows `keep` (indices into `rows`); groups left cheaper together merge."""
        groups, offset, wanted = [], 0, set(keep)
        for g in self.groups:
            mine = [i - offset for i in range(offset, offset + len(g.rows)) if i in wanted]
            offset += len(g.rows)
            if len(mine) == len(g.rows):
                groups.append(g)
            elif mine:
                groups.append(g.select(mine))
        if not groups:
            return None
        return Batch(_regroup(groups, self.overhead), self.overhead)

    @staticmethod
    def merge(a: Optional["Batch"], b: "Batch") -> "Batch":
        """a's rows and b's: each of b's groups joins the group of a where it costs least, or stays apart."""
        if a is None:
            return b
        return Batch(_regroup(a.groups + b.groups, a.overhead), a.overhead)


def _cost(rows: int, width: int, overhead: int) -> int:
    return rows * width + overhead


def _regroup(groups: list[Group], overhead: int) -> list[Group]:
    """Merge the pair of groups that saves the most per step while merging saves anything (or while
    there are more than MAX_GROUPS)."""
    groups = list(groups)
    while len(groups) > 1:
        best, saving = None, None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                a, b = groups[i], groups[j]
                apart = _cost(len(a.rows), a.width, overhead) + _cost(len(b.rows), b.width, overhead)
                together = _cost(len(a.rows) + len(b.rows), max(a.width, b.width), overhead)
                if saving is None or apart - together > saving:
                    best, saving = (i, j), apart - together
        if saving <= 0 and len(groups) <= MAX_GROUPS:
            break
        i, j = best
        merged = Group.merge(groups[i], groups[j])
        groups = [g for k, g in enumerate(groups) if k not in (i, j)]
        groups.insert(i, merged)
    return groups


def _split(group: Group, overhead: int) -> list[Group]:
    """The group cut into groups of rows of similar length, where a second pass costs less than the
    padding it saves: the cheapest partition of the rows sorted by length into runs (each run costs its
    rows times its longest row plus one pass)."""
    lengths = group.mask.sum(1).tolist()
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best, cut = [0] + [None] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            c = best[i] + _cost(j - i, lengths[order[j - 1]], overhead)
            if best[j] is None or c < best[j]:
                best[j], cut[j] = c, i
    runs, j = [], n
    while j > 0:
        runs.append(order[cut[j] : j])
        j = cut[j]
    if len(runs) == 1:
        return [group]
    return [group.select(sorted(run)) for run in reversed(runs)]


class _GrowLayer(DynamicLayer):
    """A full-attention cache layer whose keys/values sit at the start of a buffer with room to spare:
    a decode step writes its new column in place. (DynamicLayer concatenates, copying the whole
    cache every token: for 16 rows of 2,000 tokens of SmolLM2-135M that is 1.5 GB per step.)"""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.buffers: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, q = (self.keys.shape[-2] if self.keys.numel() else 0), key_states.shape[-2]
        if self.buffers is None or n + q > self.buffers[0].shape[-2]:
            room = (
                n + q + max(32, (n + q) // 4)
            )  # grown by a quarter: a copy every ~room/4 steps, not every one
            shape = (*key_states.shape[:2], room, key_states.shape[-1])
            kbuf, vbuf = key_states.new_empty(shape), value_states.new_empty(shape)
            if n:
                kbuf[:, :, :n], vbuf[:, :, :n] = self.keys, self.values
            self.buffers = (kbuf, vbuf)
        kbuf, vbuf = self.buffers
        kbuf[:, :, n : n + q], vbuf[:, :, n : n + q] = key_states, value_states
        self.keys, self.values = kbuf[:, :, : n + q], vbuf[:, :, : n + q]
        return self.keys, self.values


def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _cache_from(config: Any, kv: KV) -> Any:
    """A DynamicCache of _GrowLayer holding these per-layer tensors (no room to spare yet: the first
    update makes it)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    cache.layers = [_GrowLayer() for _ in cache.layers]
    for layer, (k, v) in zip(cache.layers, kv):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def _overhead(model: Any, cache: Any) -> int:
    """The weights' bytes over the bytes of one token-row of keys/values: what one more forward pass
    costs, measured in padding."""
    per_token = sum(
        (k.shape[1] * k.shape[3]) * k.element_size() + (v.shape[1] * v.shape[3]) * v.element_size()
        for k, v in ((layer.keys, layer.values) for layer in cache.layers)
    )
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return max(1, weights // max(1, per_token))


def prefill(
    model: Any, rows: list[Row], cached: list[tuple[Optional[KV], int]], pad_id: int
) -> tuple[Batch, torch.Tensor]:
    """Run the new rows' prompts after their cached prefixes. Returns their batch and the logits of each
    row's last prompt token. Rows are run as [pad | cached prefix | pad | new tokens], then compacted."""
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
    group = Group(rows, model.config, out.cache, mask, pos).compact()
    overhead = _overhead(model, out.cache)
    return Batch(_split(group, overhead), overhead), out.logits[:, -1, :]


def step(model: Any, batch: Batch) -> torch.Tensor:
    """Feed each row's last sampled token; the logits for each row's next token (in `batch.rows` order)."""
    return torch.cat([_step_group(model, g) for g in batch.groups])


def _step_group(model: Any, g: Group) -> torch.Tensor:
    device = g.mask.device
    ids = torch.tensor([[r.out[-1]] for r in g.rows], dtype=torch.long, device=device)
    g.mask = torch.cat([g.mask, torch.ones(len(g.rows), 1, dtype=torch.long, device=device)], dim=1)
    out = model(
        input_ids=ids,
        attention_mask=g.mask,
        position_ids=g.pos[:, None],
        cache=g.cache,
        use_cache=True,
        logits_to_keep=1,
    )
    g.cache = out.cache
    g.pos = g.pos + 1
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
