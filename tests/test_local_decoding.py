"""The local model's decoding rule for the text protocol: a reply ends with its first complete block."""
import asyncio

import pytest

from agent.models.local import _has_block


def test_block_detection():
    assert _has_block("Run it:\n```bash\nls -la\n```")
    assert not _has_block("Run it:\n```bash\nls -la\n")
    assert not _has_block("```bash")


@pytest.mark.model
def test_reply_stops_after_the_first_block_and_ids_match_text():
    from agent.models import get_model

    model = get_model("local:smollm2-135m")
    messages = [{"role": "system", "content": "Reply with one bash command in a ```bash block."},
                {"role": "user", "content": "List the files in the current folder."}]
    replies = asyncio.run(model.complete(messages, n=2, temperature=0.8, max_tokens=200, seed=1))
    for c in replies:
        ids = c.completion_ids[:-1] if c.completion_ids[-1] in model.end_ids else c.completion_ids
        assert model.tokenizer.decode(ids) == c.content
        if c.finish_reason == "stop" and "```" in c.content:
            assert c.content.rstrip().endswith("```") and _has_block(c.content)
            assert not _has_block(model.tokenizer.decode(c.completion_ids[:-1]))  # cut at the first close
