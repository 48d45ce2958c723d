"""The local model's decoding rule for the text protocol: a reply ends with its first complete block."""

import asyncio
import json
from pathlib import Path

import pytest

import agent
from agent.models.local_worker import _has_block


def test_block_detection():
    assert _has_block("Run it:\n```bash\nls -la\n```")
    assert not _has_block("Run it:\n```bash\nls -la\n")
    assert not _has_block("```bash")


@pytest.mark.model
def test_reply_stops_after_the_first_block_and_ids_match_text():
    from agent.models import get_model

    model = get_model("local:smollm2-135m")
    # The loop's own worked example first: the model then answers in a ```bash block (as in an eval).
    demo = json.loads((Path(agent.__file__).parent / "prompts" / "demonstration.json").read_text())
    messages = [
        {"role": "system", "content": "Reply with one bash command in a ```bash block."},
        *demo,
        {"role": "user", "content": "List the files in the current folder, then say what you saw."},
    ]
    replies = asyncio.run(model.complete(messages, n=4, temperature=0.8, max_tokens=200, seed=1))
    with_block = [c for c in replies if _has_block(c.content)]
    assert with_block, [c.content for c in replies]  # the case under test happened (seeded: every run alike)
    for c in replies:
        ids = c.completion_ids[:-1] if c.completion_ids[-1] in model.end_ids else c.completion_ids
        assert model.tokenizer.decode(ids) == c.content
    for c in with_block:
        assert c.finish_reason == "stop" and c.content.rstrip().endswith("```")
        assert not _has_block(model.tokenizer.decode(c.completion_ids[:-1]))  # cut at the first close


@pytest.mark.model
def test_concurrent_requests_share_a_batch_and_match_sequential_greedy():
    from agent.models import get_model

    model = get_model("local:smollm2-135m")
    convs = [
        [{"role": "user", "content": q}] for q in ("Say hello.", "Name a color.", "Count to three please.")
    ]
    alone = [asyncio.run(model.complete(c, max_tokens=16))[0].content for c in convs]

    async def together():
        return await asyncio.gather(*(model.complete(c, max_tokens=16) for c in convs))

    batched = [out[0].content for out in asyncio.run(together())]
    assert batched == alone
