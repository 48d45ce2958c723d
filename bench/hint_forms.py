#!/usr/bin/env python3
"""Which form of hint a small model follows (issue 28): for a train instance of each family, the first
reply of SmolLM2-135M to the loop's opening (system prompt, worked example, task), unhinted and with
each of the forms of hint tried for `harness train --hints`, side by side in one run:

- text:    the task's own oracle command appended to the instruction ("Hint: a first command that
           worked ..."), the first form;
- sibling: one worked example, a sibling train instance's solved exchange (its task, its oracle, the
           observation, submit), after the loop's worked example, before the task;
- hint:    lora/curriculum.hint_for, today's form: the sibling's exchange, then the task's own
           oracle's.

    python bench/hint_forms.py [--families count-lines,grep-count,sort-lines,word-count] [--samples 6]
    python bench/hint_forms.py --families all
    python bench/hint_forms.py --smoke      # one family, one sampled reply (tests/bench/)

Per family and form: how many of the replies (1 greedy + --samples at t=0.7) run the task's own oracle
command (quotes and spaces ignored), and the first few commands. A proxy for the solve rate, without
sandboxes: another correct command (wc -l < f > count.txt) is not counted.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.loop import clean
from agent.prompt_format import opening_messages
from lora.curriculum import hint_for, oracle_example, oracle_script
from tasks.family import load_family

FAMILIES = Path(__file__).resolve().parent.parent / "tasks" / "builtin" / "families"
TEXT_HINT = "\n\nHint: a first command that worked on a task like this one:\n```bash\n{command}\n```"


def first_command(reply: str) -> str:
    m = re.search(r"```(?:bash)?\n(.*?)(?:\n```|$)", reply, re.S)
    return (m.group(1) if m else reply).strip()


def same(a: str, b: str) -> bool:
    def norm(x: str) -> str:
        return re.sub(r"\s+", " ", x.replace('"', "").replace("'", "")).strip()

    return norm(a) == norm(b)


def replies(model, tok, messages: list[dict], samples: int, tokens: int) -> list[str]:
    import torch

    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt").input_ids
    mask = torch.ones_like(ids)
    out = []
    with torch.no_grad():
        g = model.generate(ids, attention_mask=mask, max_new_tokens=tokens, do_sample=False)
        out.append(tok.decode(g[0, ids.shape[1] :], skip_special_tokens=True))
        if samples:
            torch.manual_seed(0)
            g = model.generate(
                ids.repeat(samples, 1),
                attention_mask=mask.repeat(samples, 1),
                max_new_tokens=tokens,
                do_sample=True,
                temperature=0.7,
            )
            out += [tok.decode(x[ids.shape[1] :], skip_special_tokens=True) for x in g]
    return [first_command(r) for r in out]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="count-lines,grep-count,sort-lines,word-count")
    p.add_argument("--samples", type=int, default=6, help="sampled replies at t=0.7 besides the greedy one")
    p.add_argument("--tokens", type=int, default=48, help="reply tokens")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    from agent.models.local_loading import load_hf

    names = sorted(d.name for d in FAMILIES.iterdir()) if args.families == "all" else args.families.split(",")
    if args.smoke:
        names, args.samples, args.tokens = names[:1], 1, 24
    model, tok = load_hf()
    totals = {"none": 0, "text": 0, "sibling": 0, "hint": 0}
    n = 0
    print(f"{'family':<22} {'form':<8} {'oracle':>7}  first commands")
    for name in names:
        train = [t for t in load_family(FAMILIES / name) if t.split == "train"]
        task, own = train[0], oracle_script(train[0]) or ""
        forms = {
            "none": opening_messages(task.instruction, False),
            "text": opening_messages(task.instruction + TEXT_HINT.format(command=own.splitlines()[0]), False),
            "sibling": opening_messages(task.instruction, False, example=oracle_example(train[1])),
            "hint": opening_messages(task.instruction, False, example=hint_for(task, {}, train) or ()),
        }
        for form, messages in forms.items():
            got = replies(model, tok, clean(messages), args.samples, args.tokens)
            hits = sum(same(c, own) for c in got)
            totals[form] += hits
            print(f"{name:<22} {form:<8} {hits:>3}/{len(got):<3}  {got[:3]}")
        n += 1 + args.samples
    print(
        "replies that run the task's own oracle, all families: "
        + ", ".join(f"{k} {v}/{n}" for k, v in totals.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
