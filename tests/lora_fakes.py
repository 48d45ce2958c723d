"""Test helpers for tests/test_lora_*.py: a tiny chat tokenizer, simulated rollouts, a tiny Llama."""

from __future__ import annotations

from results.schema import Action, Attempt, Step

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>"]
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]


class CharTokenizer:
    """Character-level tokenizer with ChatML-style special tokens (like SmolLM2's template)."""

    def __init__(self) -> None:
        self.vocab = SPECIALS + CHARS
        self.ids = {t: i for i, t in enumerate(self.vocab)}
        self.eot = self.ids["<|im_end|>"]

    def encode(self, text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for sp in SPECIALS:
                if text.startswith(sp, i):
                    out.append(self.ids[sp])
                    i += len(sp)
                    break
            else:
                out.append(self.ids[text[i]])
                i += 1
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text)


def rollout(
    tok: CharTokenizer,
    replies: list[str],
    observations: list[str],
    elide_from: int | None = None,
    exit_codes: list[int | None] | None = None,
    cut: bool = False,
) -> list[Step]:
    """Steps as the local backend records them: prompt = the whole conversation rendered, completion =
    the reply's ids + end-of-turn (without it when `cut`: the backend stopped the reply after a code
    block). From step `elide_from` on, the oldest observation is dropped from the prompt (what context
    elision does), which breaks the prefix chain."""
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    steps = []
    for i, (reply, obs) in enumerate(zip(replies, observations)):
        shown = messages
        if elide_from is not None and i >= elide_from:
            shown = messages[:2] + [{"role": "user", "content": "[earlier turns elided]"}] + messages[4:]
        steps.append(
            Step(
                index=i,
                raw_output=reply,
                actions=[Action(kind="bash", command=reply)],
                observation=obs,
                exit_code=(exit_codes[i] if exit_codes else 0),
                prompt_ids=tok.render(shown),
                completion_ids=tok.encode(reply) + ([] if cut else [tok.eot]),
            )
        )
        messages = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
    return steps


def attempt(
    task_id: str = "t1",
    sample: int = 0,
    steps: list[Step] | None = None,
    status: str = "solved",
    reward: float = 1.0,
    reason: str = "pass",
    commands: list[str] | None = None,
) -> Attempt:
    if steps is None:
        tok = CharTokenizer()
        cmds = commands or ["ls", "submit"]
        steps = rollout(tok, cmds, ["ok"] * len(cmds))
    return Attempt(
        key=f"run/{task_id}/{sample}",
        run_id="run",
        task_id=task_id,
        sample=sample,
        model="local:x",
        steps=steps,
        status=status,
        reward=reward,
        solved=status == "solved",
        reason=reason,
        n_steps=len(steps),
    )


def tiny_llama(vocab_size: int = 128, seed: int = 0):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    return AutoModelForCausalLM.from_config(cfg)
