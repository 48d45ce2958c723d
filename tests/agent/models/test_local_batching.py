"""Continuous batching and prefix reuse in the local backend (agent/models/local_decoding.py): every
request gets what it would get decoded alone, whenever it joins and whatever it shares a batch with."""

import asyncio
import shutil

import pytest
import torch

from agent.models import local, local_loading, local_worker
from agent.models.local_decoding import PrefixCache

pytestmark = pytest.mark.model  # loads SmolLM2 (its tokenizer and cache folder) and decodes on the CPU


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A randomly initialised 2-layer Llama with SmolLM2's tokenizer (no weights to download)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    smol = local_loading.cache_dir_for("smollm2-135m")
    if not (smol / "tokenizer.json").is_file():
        local_loading.load_hf("smollm2-135m")  # fills the cache folder, tokenizer included
    folder = tmp_path_factory.mktemp("tiny")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (smol / name).is_file():
            shutil.copy(smol / name, folder / name)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=0.2,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture
def tiny(tiny_folder):
    return local.LocalModel(str(tiny_folder), stop_after_block=False)


def alone(model, messages, max_tokens):
    """Reference: greedy decoding of one unpadded sequence, the whole prefix recomputed every token."""
    ids = model.encode(messages)
    out = []
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = model.model(input_ids=torch.tensor([ids + out])).logits[0, -1]
            out.append(int(logits.argmax()))
            if out[-1] in model.end_ids:
                break
    return out


def conv(text):
    return [{"role": "system", "content": "You are a terse shell agent."}, {"role": "user", "content": text}]


PROMPTS = [
    "List the files.",
    "Count the lines of data.txt and write the number to count.txt please.",
    "Hi",
    "Sort names.txt into sorted.txt, keeping duplicates, and do not change names.txt.",
]


def test_concurrent_greedy_requests_match_decoding_alone(tiny):
    async def together():
        return await asyncio.gather(*(tiny.complete(conv(p), max_tokens=12) for p in PROMPTS))

    got = [out[0].completion_ids for out in asyncio.run(together())]
    assert got == [alone(tiny, conv(p), 12) for p in PROMPTS]


def test_requests_joining_a_running_batch_match_decoding_alone(tiny):
    async def staggered():
        async def later(i, p):
            await asyncio.sleep(0.05 * i)  # joins while the others are mid-decode
            return await tiny.complete(conv(p), max_tokens=24)

        return await asyncio.gather(*(later(i, p) for i, p in enumerate(PROMPTS)))

    got = [out[0].completion_ids for out in asyncio.run(staggered())]
    assert got == [alone(tiny, conv(p), 24) for p in PROMPTS]


def test_a_conversations_next_turn_reuses_its_prefix_and_matches_decoding_alone(tiny):
    first = asyncio.run(tiny.complete(conv(PROMPTS[1]), max_tokens=10))[0]
    follow = conv(PROMPTS[1]) + [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "exit code: 0\n(no output)"},
    ]
    reused_before = tiny.prefix.reused_tokens
    second = asyncio.run(tiny.complete(follow, max_tokens=10))[0]
    reused = tiny.prefix.reused_tokens - reused_before
    assert reused >= len(tiny.encode(conv(PROMPTS[1])))  # at least the first turn's prompt was not run again
    assert second.completion_ids == alone(tiny, follow, 10)
    assert second.prompt_ids == tiny.encode(follow)  # what is recorded is the full prompt, as before


def test_seeded_samples_do_not_depend_on_the_batch(tiny):
    msg = conv(PROMPTS[0])
    solo = asyncio.run(tiny.complete(msg, n=3, temperature=1.0, max_tokens=10, seed=7))

    async def crowded():
        others = [
            tiny.complete(conv(p), n=2, temperature=1.0, max_tokens=10, seed=i) for i, p in enumerate(PROMPTS)
        ]
        mine = tiny.complete(msg, n=3, temperature=1.0, max_tokens=10, seed=7)
        return (await asyncio.gather(mine, *others))[0]

    assert [c.completion_ids for c in asyncio.run(crowded())] == [c.completion_ids for c in solo]
    assert len({tuple(c.completion_ids) for c in solo}) > 1  # three different samples, not one copied


def test_a_cancelled_request_leaves_the_others_intact(tiny):
    async def main():
        victim = asyncio.ensure_future(tiny.complete(conv(PROMPTS[1]), max_tokens=200))
        others = asyncio.gather(*(tiny.complete(conv(p), max_tokens=12) for p in (PROMPTS[0], PROMPTS[2])))
        await asyncio.sleep(0.1)
        victim.cancel()
        return await others

    got = [out[0].completion_ids for out in asyncio.run(main())]
    assert got == [alone(tiny, conv(p), 12) for p in (PROMPTS[0], PROMPTS[2])]


# ---------------------------------------------------------------- the prefix cache itself


def kv(n, value=0.0):
    return [(torch.full((2, n, 4), value), torch.full((2, n, 4), value))]


def test_prefix_cache_finds_the_longest_shared_prefix_and_leaves_one_token_to_run():
    cache = PrefixCache(1 << 20)
    cache.add([1, 2, 3, 4], kv(4, 1.0))
    cache.add([1, 2, 9], kv(3, 2.0))
    got, n = cache.lookup([1, 2, 3, 4, 5, 6])
    assert n == 4 and got[0][0].shape == (2, 4, 4) and float(got[0][0][0, 0, 0]) == 1.0
    assert cache.lookup([1, 2, 9])[1] == 2  # the last token must still run: it gives the next logits
    assert cache.lookup([7, 8])[1] == 0


def test_prefix_cache_replaces_covered_entries_and_evicts_the_least_recent():
    one = PrefixCache._size(kv(1))
    cache = PrefixCache(10 * one)
    cache.add([1, 2], kv(2))
    cache.add([1, 2, 3, 4], kv(4))  # extends [1, 2]: that entry is dropped
    assert list(cache.entries) == [(1, 2, 3, 4)] and cache.bytes == 4 * one
    cache.add([5, 6, 7, 8], kv(4))
    cache.lookup([1, 2, 3, 4, 0])  # touch: [1, 2, 3, 4] is now the most recent
    cache.add([9, 9, 9], kv(3))  # 11 tokens > budget of 10: the least recent ([5..8]) goes
    assert set(cache.entries) == {(1, 2, 3, 4), (9, 9, 9)} and cache.bytes == 7 * one


def test_a_closed_model_is_freed_with_its_caches(tiny_folder):
    """train evaluates several models in one process: each one's weights and cached keys/values must go."""
    import gc
    import weakref

    model = local.LocalModel(str(tiny_folder), stop_after_block=False)
    asyncio.run(model.complete(conv("Hi"), max_tokens=3))
    assert model.prefix.entries
    ref = weakref.ref(model)
    model.close()
    assert not model.prefix.entries
    del model
    gc.collect()
    assert ref() is None


def test_rows_of_very_different_lengths_decode_in_separate_groups_and_match_decoding_alone(tiny, monkeypatch):
    """Issue 28: one padded cache made every row carry the longest one's keys/values. With a second
    forward pass made cheap, a long conversation and short ones land in separate groups; each row still
    gets exactly what it gets alone, and a step reads fewer cells than one padded cache would."""
    from agent.models import local_decoding

    monkeypatch.setattr(local_decoding, "_overhead", lambda model, cache: 1)
    long = conv(" ".join(["Count the lines of data.txt and write the number to count.txt."] * 12))
    seen = []
    real_step = local_worker.step

    def watch(model, batch):
        seen.append((len(batch.groups), batch.cells(), len(batch.rows) * batch.width))
        return real_step(model, batch)

    monkeypatch.setattr(local_worker, "step", watch)

    async def together():
        return await asyncio.gather(
            *(tiny.complete(m, max_tokens=12) for m in [long] + [conv(p) for p in PROMPTS])
        )

    got = [out[0].completion_ids for out in asyncio.run(together())]
    assert got == [alone(tiny, m, 12) for m in [long] + [conv(p) for p in PROMPTS]]
    assert max(groups for groups, _, _ in seen) >= 2
    assert any(cells < padded for _, cells, padded in seen)


def test_a_decode_step_writes_the_cache_in_place():
    """_GrowLayer keeps room to spare: consecutive one-token updates reuse one buffer (no copy of the
    whole cache per token, as torch.cat would make), and the keys read back are exactly what was written."""
    from agent.models.local_decoding import _GrowLayer

    layer = _GrowLayer()
    first = torch.randn(2, 3, 40, 8)
    layer.update(first, first.clone())
    buffer = layer.buffers[0].data_ptr()
    steps = [torch.randn(2, 3, 1, 8) for _ in range(10)]
    for s in steps:
        keys, values = layer.update(s, s.clone())
    assert layer.buffers[0].data_ptr() == buffer
    assert torch.equal(keys, torch.cat([first, *steps], dim=2)) and torch.equal(values, keys)
