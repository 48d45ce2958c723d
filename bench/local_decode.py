#!/usr/bin/env python3
"""Local rollout throughput: our decoder (agent/models/local.py: continuous batching, reuse of cached
keys/values) beside the static batching this backend used before (every waiting request in one padded
`model.generate`, the next batch only when the whole batch is done), on the same agent-shaped
workload, in one run.

    python bench/local_decode.py [--conversations 16] [--turns 4] [--max-tokens 64] [--tool-time 0.3]
    python bench/local_decode.py --smoke   # 2 conversations x 1 turn, 4 tokens (tests/bench/)
    python bench/local_decode.py --long [--attempts 96] [--window 60]   # speed over a long run
    python bench/local_decode.py --long --smoke                         # the same, tiny

--long: many sampled attempts in the shape of `harness train`'s sample phase (6 tasks x 16 attempts,
16 in flight, each up to 4 turns, observations of 0-150 lines as when an agent prints a data file), for
the decoder as it was (one padded cache for the whole batch, concatenated every step) and ours (rows in
groups of similar length, cache written in place), one after the other in this process. Per window:
generated tokens/s, CPU seconds per 100 tokens, rows decoded, key/value cells a step reads, groups,
resident memory; then early (first third of the run) against late (last third), side by side.

Workload: C agent conversations with the loop's real system prompt and worked-example exchange,
started a little apart (as attempts are, behind container creation), each T turns: a reply sampled at
t=0.7 (its own seed; at most M tokens; it ends at its first complete ``` block, as in `harness eval`),
then a simulated command of random duration up to --tool-time seconds, then a short observation.
Requests therefore arrive at different times, as they do in `harness eval` and `harness train`.
Prints generated tokens per second, prompt tokens actually run (prefill) and wall time, and ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.models import local_decoding, local_worker
from agent.models.local import LocalModel
from agent.models.local_worker import _has_block

PROMPTS = Path(__file__).resolve().parent.parent / "agent" / "prompts"
TASKS = [
    "Write the number of lines in /workspace/data.txt to the file /workspace/count.txt.",
    "Sort the lines of /workspace/names.txt in alphabetical order and write the result to "
    "/workspace/sorted.txt.",
    "Rename the file /workspace/draft.md to /workspace/final.md. Do not change its content.",
    "Make the script /workspace/run.sh executable.",
    "Create a file named `hello.txt` in /workspace that contains exactly this text:\n\nhello world\n",
    "Count the lines in /workspace/app.log that contain the word ERROR. Write that number to "
    "/workspace/errors.txt.",
]
OBSERVATION = "exit code: 0\n(no output)\nReply with your next command, or with submit if the task is done."


class StaticBatching(LocalModel):
    """The previous decoder, kept here as the baseline: each batch is every request waiting when the
    last batch ended, decoded by one padded `generate` until its longest row is done."""

    prefilled = 0

    def _batch_loop(self):
        while True:
            with self._lock:
                while not self._queue:
                    if self._closing or not self._wake.wait(timeout=30):
                        self._worker = None
                        return
                batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
                self._current = batch
            try:
                results = self._generate(batch)
            except BaseException as e:
                for req in batch:
                    req.future.set_exception(e)
                continue
            for req, out in zip(batch, results):
                req.future.set_result(out)

    def _generate(self, batch: list[Any]) -> list[list[Any]]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        width = max(len(r.prompt_ids) for r in batch)
        self.prefilled += sum(len(r.prompt_ids) for r in batch)
        ids = torch.tensor([[self.pad_id] * (width - len(r.prompt_ids)) + r.prompt_ids for r in batch])
        mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in batch])
        tok = self.tokenizer

        class RowDone(StoppingCriteria):
            def __call__(self, out, scores, **kw):
                return torch.tensor([_has_block(tok.decode(r)) for r in out[:, width:].tolist()])

        torch.manual_seed(batch[0].seed or 0)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                top_k=0,
                top_p=1.0,
                temperature=batch[0].temperature,
                max_new_tokens=max(r.max_tokens for r in batch),
                eos_token_id=self.end_ids,
                pad_token_id=self.pad_id,
                stopping_criteria=StoppingCriteriaList([RowDone()]),
            )
        return [
            [self._completion(r.prompt_ids, row[: r.max_tokens])]
            for r, row in zip(batch, out[:, width:].tolist())
        ]


def conversation(i: int) -> list[dict]:
    demo = json.loads((PROMPTS / "demonstration.json").read_text())
    return (
        [{"role": "system", "content": (PROMPTS / "system_text.md").read_text()}]
        + demo
        + [{"role": "user", "content": TASKS[i % len(TASKS)]}]
    )


def workload(
    model: LocalModel, n: int, turns: int, max_tokens: int, tool_time: float, stagger: float
) -> tuple[int, int]:
    """(tokens generated, prompt tokens sent) over all conversations."""

    async def one(i: int) -> tuple[int, int]:
        rng = random.Random(i)
        conv, made, sent = conversation(i), 0, 0
        await asyncio.sleep(i * stagger)
        for t in range(turns):
            reply = (await model.complete(conv, temperature=0.7, max_tokens=max_tokens, seed=1000 * i + t))[0]
            made, sent = made + reply.completion_tokens, sent + reply.prompt_tokens
            await asyncio.sleep(rng.uniform(0, tool_time))  # the command runs in its sandbox
            conv = conv + [
                {"role": "assistant", "content": reply.content},
                {"role": "user", "content": OBSERVATION},
            ]
        return made, sent

    async def main():
        done = await asyncio.gather(*(one(i) for i in range(n)))
        return sum(d[0] for d in done), sum(d[1] for d in done)

    return asyncio.run(main())


def measure(model: LocalModel, args: argparse.Namespace) -> tuple[int, int, float]:
    reused_before = model.prefix.reused_tokens
    start = time.perf_counter()
    generated, sent = workload(
        model, args.conversations, args.turns, args.max_tokens, args.tool_time, args.stagger
    )
    wall = time.perf_counter() - start
    # the baseline runs every prompt token; ours skips the cached prefixes
    prefilled = (
        model.prefilled
        if isinstance(model, StaticBatching)
        else sent - (model.prefix.reused_tokens - reused_before)
    )
    return generated, prefilled, wall


# ---------------------------------------------------------------- --long: speed over a long run


class OnePaddedCache:
    """The decoder before issue 28, rebuilt by switching off its fixes: one group for the whole batch
    (a row costs as much as the longest), rows left with the padding their prefill put between their
    tokens, and the cache concatenated every step."""

    def __enter__(self):
        from transformers.cache_utils import DynamicLayer

        self.saved = (
            local_decoding._overhead,
            local_decoding.Group.compact,
            local_decoding._GrowLayer.update,
        )
        local_decoding._overhead = lambda model, cache: 1 << 60  # a second pass never pays: one group
        local_decoding.Group.compact = lambda self: self
        local_decoding._GrowLayer.update = DynamicLayer.update
        return self

    def __exit__(self, *exc):
        local_decoding._overhead, local_decoding.Group.compact, local_decoding._GrowLayer.update = self.saved


class Meter:
    """Counts what each decode step does (wraps the decoder's step function)."""

    def __init__(self) -> None:
        self.steps = self.rows = self.cells = self.groups = self.tokens = 0

    def __enter__(self):
        self.saved = local_worker.step

        def step(model, batch):
            self.steps += 1
            self.rows += len(batch.rows)
            self.cells += batch.cells()
            self.groups += len(batch.groups)
            return self.saved(model, batch)

        local_worker.step = step
        return self

    def __exit__(self, *exc):
        local_worker.step = self.saved

    def snapshot(self) -> dict:
        return {
            "t": time.perf_counter(),
            "cpu": time.process_time(),
            "rss": _rss_gb(),
            **{k: getattr(self, k) for k in ("steps", "rows", "cells", "groups", "tokens")},
        }


def _rss_gb() -> float:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**30
    except OSError:
        return float("nan")


def window(a: dict, b: dict) -> dict:
    steps = max(1, b["steps"] - a["steps"])
    tokens = b["tokens"] - a["tokens"]
    return {
        "tok/s": tokens / max(1e-9, b["t"] - a["t"]),
        "cpu/100tok": 100 * (b["cpu"] - a["cpu"]) / tokens if tokens else float("nan"),
        "rows": (b["rows"] - a["rows"]) / steps,
        "cells": (b["cells"] - a["cells"]) / steps,
        "groups": (b["groups"] - a["groups"]) / steps,
        "rss GB": b["rss"],
    }


def long_run(model: LocalModel, args: argparse.Namespace, label: str) -> list[dict]:
    """Snapshots every --window seconds (and at the end) over one long sampled workload."""
    meter = Meter()

    async def one(i: int, gate: asyncio.Semaphore) -> None:
        async with gate:
            rng = random.Random(i)
            conv = conversation(i // args.samples)
            for t in range(args.turns):
                reply = (
                    await model.complete(conv, temperature=0.7, max_tokens=args.max_tokens, seed=i * 100 + t)
                )[0]
                meter.tokens += reply.completion_tokens
                await asyncio.sleep(rng.uniform(0, args.tool_time))
                lines = rng.choice(args.print_lines)  # most commands print little; some print a file
                shown = "\n".join(f"{rng.choice(TASKS)[:40]} {k}" for k in range(lines)) or "(no output)"
                conv = conv + [
                    {"role": "assistant", "content": reply.content},
                    {"role": "user", "content": f"exit code: 0\n{shown}\nReply with your next command."},
                ]

    async def watch(snaps: list[dict]) -> None:
        while True:
            await asyncio.sleep(args.window)
            snaps.append(meter.snapshot())
            w = window(snaps[-2], snaps[-1])
            print(
                f"  {label:<18} {snaps[-1]['t'] - snaps[0]['t']:>6.0f}s "
                + " ".join(f"{k} {v:.1f}" for k, v in w.items()),
                flush=True,
            )

    async def main() -> list[dict]:
        gate = asyncio.Semaphore(args.conversations)
        snaps = [meter.snapshot()]
        watcher = asyncio.create_task(watch(snaps))
        await asyncio.gather(*(one(i, gate) for i in range(args.attempts)))
        watcher.cancel()
        snaps.append(meter.snapshot())
        return snaps

    with meter:
        return asyncio.run(main())


def thirds(snaps: list[dict]) -> tuple[dict, dict]:
    """(early, late): the measures over the first and the last third of the run's snapshots."""
    n = len(snaps) - 1
    cut = max(1, n // 3)
    return window(snaps[0], snaps[cut]), window(snaps[max(0, n - cut)], snaps[n])


def main_long(args: argparse.Namespace) -> int:
    print(
        f"{args.attempts} attempts ({args.attempts // args.samples} prompts x {args.samples}), "
        f"{args.conversations} in flight, {args.turns} turns, replies <= {args.max_tokens} tokens at t=0.7, "
        f"model {args.model}; a line every {args.window:g} s"
    )
    results = {}
    decoders = (("one padded cache", OnePaddedCache), ("ours", contextlib.nullcontext))
    for label, switch in [d for d in decoders if args.only is None or d[0].startswith(args.only)]:
        with switch():
            model = LocalModel(args.model)
            snaps = long_run(model, args, label)
            model.close()
        results[label] = (snaps, thirds(snaps))
    first = next(iter(results.values()))[0]
    keys = list(window(first[0], first[-1]))
    print(f"{'decoder':<18} {'part':<6} " + " ".join(f"{k:>10}" for k in keys) + f" {'wall s':>7}")
    for label, (snaps, (early, late)) in results.items():
        for part, w in (("early", early), ("late", late)):
            print(f"{label:<18} {part:<6} " + " ".join(f"{w[k]:>10.1f}" for k in keys), end="")
            print(f" {snaps[-1]['t'] - snaps[0]['t']:>7.0f}" if part == "late" else "")
    for label, (_, (early, late)) in results.items():
        print(f"{label}: late / early tokens per second {late['tok/s'] / max(1e-9, early['tok/s']):.2f}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--conversations", type=int, default=16)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--tool-time", type=float, default=0.3, help="longest simulated command, seconds")
    p.add_argument("--stagger", type=float, default=0.2, help="seconds between conversation starts")
    p.add_argument("--smoke", action="store_true", help="a tiny workload: checks the benchmark works")
    p.add_argument("--long", action="store_true", help="speed over a long sampled run (see the docstring)")
    p.add_argument("--attempts", type=int, default=96, help="--long: attempts in all")
    p.add_argument("--samples", type=int, default=16, help="--long: attempts per prompt")
    p.add_argument("--window", type=float, default=60.0, help="--long: seconds per printed window")
    p.add_argument(
        "--only", choices=("one", "ours"), help="--long: one decoder only (one padded cache / ours)"
    )
    p.add_argument(
        "--print-lines",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=(0, 0, 3, 20, 150),
        help="--long: lines a command prints, one picked at random per turn (default 0,0,3,20,150)",
    )
    args = p.parse_args(argv)
    if args.long:
        if args.smoke:
            args.attempts, args.samples, args.conversations, args.turns = 4, 2, 2, 2
            args.max_tokens, args.tool_time, args.window, args.print_lines = 4, 0.0, 600.0, (0, 3)
        return main_long(args)
    if args.smoke:
        args.conversations, args.turns, args.max_tokens, args.tool_time, args.stagger = 2, 1, 4, 0.0, 0.0
    rows = []
    for name, cls in (("static batches (before)", StaticBatching), ("ours: continuous + reuse", LocalModel)):
        model = cls(args.model)
        rows.append((name, *measure(model, args)))
        model.close()
    print(
        f"{args.conversations} conversations x {args.turns} turns, replies <= {args.max_tokens} tokens, "
        f"commands <= {args.tool_time} s, starts {args.stagger} s apart, model {args.model}"
    )
    print(f"{'decoder':<26} {'generated':>9} {'prefilled':>9} {'wall s':>7} {'gen tok/s':>9}")
    for name, generated, prefilled, wall in rows:
        print(f"{name:<26} {generated:>9} {prefilled:>9} {wall:>7.1f} {generated / wall:>9.1f}")
    (_, g0, p0, w0), (_, g1, p1, w1) = rows
    print(
        f"ratio (ours / before): generated tokens per second {(g1 / w1) / (g0 / w0):.2f}x, "
        f"wall time {w0 / w1:.2f}x faster, prefill tokens {p1 / p0:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
