#!/usr/bin/env python3
"""Local rollout throughput: our continuous batching with prefix reuse (agent/models/local.py) beside
a padded static batch through `model.generate` (what a user writes, and what this backend did before),
measured on the same agent-shaped workload in one run.

    python bench/local_decode.py [--conversations 8] [--turns 4] [--max-tokens 48]

Workload: C conversations of T turns each, all in flight together, with the agent's real system prompt.
Each turn sends the whole conversation so far and samples (t=0.7, one seed per conversation) a reply
of at most M tokens that ends at its first complete ``` block, as in `harness eval`; then appends a
short observation and goes on. The static baseline runs each turn of all conversations as one padded
`generate` call (every row waits for the longest), with no reuse of earlier turns' keys/values.
Prints tokens generated per second, prompt tokens actually run (prefill) and wall time, and the ratio.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.models.local import LocalModel, _has_block  # noqa: E402

SYSTEM = (Path(__file__).resolve().parent.parent / "agent" / "prompts" / "system_text.md").read_text()
TASKS = ["Write the number of lines in /workspace/data.txt to the file /workspace/count.txt.",
         "Sort the lines of /workspace/names.txt in alphabetical order and write the result to /workspace/sorted.txt.",
         "Rename /workspace/draft.md to /workspace/final.md.",
         "Make /workspace/run.sh executable.",
         "Create /workspace/hello.txt containing exactly the line: hello world",
         "Count the lines of /workspace/app.log that contain ERROR and write the number to /workspace/errors.txt."]
OBSERVATION = "exit code: 0\n(no output)\nReply with your next command, or with submit if the task is done."


def conversations(n: int) -> list[list[dict]]:
    return [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASKS[i % len(TASKS)]}]
            for i in range(n)]


def ours(model: LocalModel, convs: list[list[dict]], turns: int, max_tokens: int) -> tuple[int, int]:
    async def one(i: int, conv: list[dict]) -> int:
        made = 0
        for t in range(turns):
            reply = (await model.complete(conv, temperature=0.7, max_tokens=max_tokens, seed=1000 * i + t))[0]
            made += reply.completion_tokens
            conv += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": OBSERVATION}]
        return made

    async def main():
        return sum(await asyncio.gather(*(one(i, c) for i, c in enumerate(convs))))
    before = model.prefix.reused_tokens
    generated = asyncio.run(main())
    prompts = sum(len(model.encode(c[:2 + 2 * t])) for c in convs for t in range(turns))
    return generated, prompts - (model.prefix.reused_tokens - before)


def static(model: LocalModel, convs: list[list[dict]], turns: int, max_tokens: int) -> tuple[int, int]:
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    tok, generated, prefilled = model.tokenizer, 0, 0
    for t in range(turns):
        prompts = [model.encode(c) for c in convs]
        width = max(map(len, prompts))
        ids = torch.tensor([[model.pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])

        class BlockDone(StoppingCriteria):  # the same rule: a row ends at its first complete block
            def __call__(self, out, scores, **kw):
                return torch.tensor([_has_block(tok.decode(r)) for r in out[:, width:].tolist()])
        torch.manual_seed(t)
        with torch.inference_mode():
            out = model.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=True,
                                       temperature=0.7, top_k=0, top_p=1.0, eos_token_id=model.end_ids,
                                       pad_token_id=model.pad_id, stopping_criteria=StoppingCriteriaList([BlockDone()]))
        prefilled += sum(map(len, prompts))
        for conv, row in zip(convs, out[:, width:].tolist()):
            row = row[: next((i + 1 for i, x in enumerate(row) if x in model.end_ids), len(row))]
            cut = next((i + 1 for i in range(len(row)) if _has_block(tok.decode(row[: i + 1]))), len(row))
            generated += cut
            conv += [{"role": "assistant", "content": tok.decode(row[:cut], skip_special_tokens=True)},
                     {"role": "user", "content": OBSERVATION}]
    return generated, prefilled


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=48)
    args = p.parse_args(argv)
    model = LocalModel(args.model)
    rows = []
    for name, fn in (("static batch (generate)", static), ("ours (continuous + prefix reuse)", ours)):
        model.prefix.clear()
        start = time.perf_counter()
        generated, prefilled = fn(model, conversations(args.conversations), args.turns, args.max_tokens)
        rows.append((name, generated, prefilled, time.perf_counter() - start))
    print(f"{args.conversations} conversations x {args.turns} turns, replies <= {args.max_tokens} tokens, "
          f"model {args.model}")
    print(f"{'decoder':<34} {'generated':>9} {'prefilled':>9} {'wall s':>7} {'gen tok/s':>9}")
    for name, generated, prefilled, wall in rows:
        print(f"{name:<34} {generated:>9} {prefilled:>9} {wall:>7.1f} {generated / wall:>9.1f}")
    (_, g0, _, w0), (_, g1, _, w1) = rows
    print(f"ratio (ours / static), generated tokens per second: {(g1 / w1) / (g0 / w0):.2f}x; "
          f"wall time per turn: {w0 / w1:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
