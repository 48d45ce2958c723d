"""Which attempts to learn from, and the training sequences built from them.

The sequences are made of exactly the token ids the local model saw and produced at rollout time
(Step.prompt_ids / Step.completion_ids); nothing is re-rendered through the chat template, because
templates are not always prefix-preserving and re-tokenising a reply can give other ids than the
ones the model generated.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from results.attempts import action_signature, is_solved
from results.errors import UserError
from results.schema import Attempt, Step
from results.task_audit import record_flags

IGNORE = -100  # label of a position that gets no loss (torch cross_entropy's ignore_index)


# ---------------------------------------------------------------- filter


@dataclass
class FilterStats:
    seen: int = 0
    kept: int = 0
    not_solved: int = 0
    tamper: int = 0
    flagged: int = 0  # solved, but an exploit pattern was seen in its actions (results/flags.py)
    no_token_ids: int = 0
    duplicate: int = 0
    over_cap: int = 0
    flagged: int = 0  # the record carries exploit flags (a non-empty `flags` field)
    broken_task: int = 0  # its task is one the audit marks broken (results.task_audit.audit_tasks)
    hint_not_rebuilt: int = 0  # a hinted attempt whose unhinted token ids could not be rebuilt exactly
    tasks: int = 0  # distinct tasks among the kept attempts
    hinted: int = 0  # kept attempts that were sampled with a hint (trained without it)


def has_token_ids(a: Attempt) -> bool:
    return bool(a.steps) and all(s.prompt_ids is not None and s.completion_ids is not None for s in a.steps)


def filter_attempts(
    attempts: Iterable[Attempt],
    per_task_cap: int | None = 2,
    exclude_tasks: Iterable[str] = (),
    hinted: Iterable[str] = (),
    exclude_flagged: bool = True,
) -> tuple[list[Attempt], FilterStats]:
    """Keep solved attempts with token ids, drop duplicate action sequences, keep at most
    `per_task_cap` per task (None or 0: no cap), preferring fewest steps, then fewest generated tokens.
    Never kept: a tamper verdict, a task in `exclude_tasks` (the audit's broken ones) and, by default
    (`exclude_flagged`), attempts with exploit flags (reading hidden tests, mining git history, writing
    reward files, ...) and passes of impossible tasks: a cheat that passed is not worth imitating.
    `hinted`: keys of attempts sampled with a hint (already rebuilt without it, strip_hint), counted apart."""
    stats = FilterStats()
    by_task: dict[str, list[Attempt]] = defaultdict(list)
    exclude, hinted = set(exclude_tasks), set(hinted)
    for a in attempts:
        stats.seen += 1
        if a.reason == "tamper":
            stats.tamper += 1
        elif exclude_flagged and (record_flags(a) or a.impossible):
            stats.flagged += 1
        elif a.task_id in exclude:
            stats.broken_task += 1
        elif not is_solved(a, strict=True):  # only honest, full solves are worth imitating
            stats.not_solved += 1
        elif not has_token_ids(a):
            stats.no_token_ids += 1
        else:
            by_task[a.task_id].append(a)

    kept: list[Attempt] = []
    for task_id in sorted(by_task):
        # Shortest first; the key breaks ties so the choice does not depend on file order.
        group = sorted(by_task[task_id], key=lambda a: (len(a.steps), _generated(a), a.key))
        seen_sigs: set[str] = set()
        n = 0
        for a in group:
            sig = action_signature(a)
            if sig in seen_sigs:
                stats.duplicate += 1
                continue
            seen_sigs.add(sig)
            if per_task_cap and n >= per_task_cap:
                stats.over_cap += 1
                continue
            kept.append(a)
            n += 1
    stats.kept = len(kept)
    stats.tasks = len({a.task_id for a in kept})
    stats.hinted = sum(a.key in hinted for a in kept)
    return kept, stats


# ---------------------------------------------------------------- hinted attempts


def reply_indices(a: Attempt) -> Optional[list[int]]:
    """Where the model's own replies are in a.messages: the last len(steps) assistant messages (worked
    examples come first); None when there are fewer."""
    replies = [i for i, m in enumerate(a.messages) if m.get("role") == "assistant"]
    return replies[len(replies) - len(a.steps) :] if len(replies) >= len(a.steps) else None


def strip_hint(a: Attempt, hint: Any, encode: Callable[[list[dict]], list[int]]) -> Optional[Attempt]:
    """The hinted attempt `a` as the model would have seen it without the hint, token for token; None
    when that cannot be rebuilt exactly (the attempt is then not trained on).

    The hint is a worked example (a list of messages, lora/curriculum.hint_for) the loop put before the
    task message; a string is the first form, text inside a user message (runs made before).
    How: the model saw H0 = encode(messages before its first reply), the hint among them (a.messages
    ends with the model's len(steps) replies and what followed each).
    U0 = encode(the same messages without the hint). Every step's prompt_ids must start with
    H0 (a prompt whose context was elided might hold the hint elsewhere: refused); its rebuilt prompt
    is U0 + the ids after H0, unchanged, and every completion_ids is the model's own, unchanged. Both
    H0 and U0 end with the assistant header, a special-token boundary, so what follows tokenises the
    same either way; checked, not assumed: the rebuilt last prompt must equal encode(the unhinted
    conversation before the last reply), and H0 must equal the recorded first prompt."""
    if not has_token_ids(a) or not hint:
        return None
    replies = reply_indices(a)
    if replies is None:
        return None

    def plain(messages: list[dict]) -> list[dict]:
        if isinstance(hint, str):
            return [
                dict(m, content=m["content"].replace(hint, "")) if isinstance(m.get("content"), str) else m
                for m in messages
            ]
        n, want = len(hint), [(h["role"], h["content"]) for h in hint]
        for i in range(len(messages) - n + 1):  # the first place: the opening, before any reply
            if [(m.get("role"), m.get("content")) for m in messages[i : i + n]] == want:
                return messages[:i] + messages[i + n :]
        return messages

    shown = a.messages[: replies[0]]
    h0 = a.steps[0].prompt_ids
    if plain(shown) == shown or encode(shown) != h0:
        return None  # the hint is not where we put it, or the prompt was not made this way
    u0 = encode(plain(shown))
    steps = []
    for s in a.steps:
        if s.prompt_ids[: len(h0)] != h0:
            return None
        steps.append(s.model_copy(update={"prompt_ids": u0 + list(s.prompt_ids[len(h0) :])}))
    if encode(plain(a.messages[: replies[-1]])) != steps[-1].prompt_ids:
        return None
    return a.model_copy(update={"steps": steps, "messages": plain(a.messages)})


def _generated(a: Attempt) -> int:
    return sum(len(s.completion_ids or ()) for s in a.steps)


# ---------------------------------------------------------------- dataset


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]  # IGNORE except on the model's own generated tokens
    task_id: str
    attempt: str  # Attempt.key
    steps: list[int] = field(default_factory=list)  # Step.index of each trained completion
    hinted: bool = False  # its attempt was sampled with a hint (lora/curriculum.py), trained without it
    # targets the model did not sample: the end-of-turn token the harness closed a cut reply with (see
    # build_examples); every other target is a token the model generated
    appended_targets: int = 0

    @property
    def n_targets(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE)


def is_error_step(s: Step) -> bool:
    """A turn whose action failed: non-zero exit, timeout, or a reply that could not be parsed."""
    return (s.exit_code not in (None, 0)) or s.timed_out or any(a.kind == "format_error" for a in s.actions)


def _extends(prev: Step, nxt: Step) -> bool:
    """True when step k's prompt + completion is a prefix of step k+1's prompt (the conversation was
    carried forward token for token, not elided or re-tokenised)."""
    head = prev.prompt_ids + prev.completion_ids
    return len(nxt.prompt_ids) >= len(head) and nxt.prompt_ids[: len(head)] == head


def build_examples(
    a: Attempt, mask_errors: bool = False, end_of_turn: Optional[int] = None, hinted: bool = False
) -> list[Example]:
    """Training sequences of one attempt.

    Steps whose conversations extend each other form a chain; a chain becomes one sequence = the last
    step's prompt_ids + completion_ids, with labels on every step's completion_ids (end-of-turn token
    included) and IGNORE elsewhere. Where a link breaks (the conversation was elided to fit the
    context), a new chain starts, so an attempt with no links gives one sequence per step, each
    trained only on its own completion. Sequences left with no target token are dropped.

    end_of_turn: a reply the harness cut short (the local model stops after the first code block, so
    its completion_ids have no end-of-turn token) also gets loss on the end-of-turn token the
    conversation closed it with, so the model learns to stop there: the one that follows it in the
    next prompt, or, after the chain's last reply, one appended. None: only generated tokens.
    That token is the harness's, not a sample of the model's: it is kept in the loss on purpose (the cut
    stands for the model's own decision to end its turn there; trained, the adapter also ends its turn
    there where no harness cuts it) and each example counts it (appended_targets). `hinted` marks
    examples of an attempt sampled with a hint.
    """
    if not has_token_ids(a):
        return []
    chains: list[list[Step]] = [[a.steps[0]]]
    for prev, nxt in zip(a.steps, a.steps[1:]):
        if _extends(prev, nxt):
            chains[-1].append(nxt)
        else:
            chains.append([nxt])

    examples = []
    for chain in chains:
        last = chain[-1]
        input_ids = list(last.prompt_ids) + list(last.completion_ids)
        if end_of_turn is not None and last.completion_ids[-1:] != [end_of_turn]:
            input_ids.append(end_of_turn)
        labels = [IGNORE] * len(input_ids)
        trained, appended = [], 0
        for s in chain:
            if mask_errors and is_error_step(s):
                continue
            start = len(s.prompt_ids)
            end = start + len(s.completion_ids)
            if (
                end_of_turn is not None
                and s.completion_ids[-1:] != [end_of_turn]
                and end < len(input_ids)
                and input_ids[end] == end_of_turn
            ):
                end += 1
                appended += 1
            labels[start:end] = input_ids[start:end]
            trained.append(s.index)
        if trained and any(t != IGNORE for t in labels):
            examples.append(Example(input_ids, labels, a.task_id, a.key, trained, hinted, appended))
    return examples


def build_dataset(
    attempts: Iterable[Attempt],
    mask_errors: bool = False,
    end_of_turn: Optional[int] = None,
    hinted: Iterable[str] = (),
) -> list[Example]:
    """Every attempt's examples; `hinted`: the keys of attempts sampled with a hint (marked)."""
    hinted = set(hinted)
    return [ex for a in attempts for ex in build_examples(a, mask_errors, end_of_turn, a.key in hinted)]


def write_dataset(path: Path, examples: list[Example]) -> None:
    """JSONL, one example a line; written to a temporary file first so a crash leaves no half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for ex in examples:
            f.write(json.dumps(asdict(ex), separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def read_dataset(path: Path) -> list[Example]:
    path = Path(path)
    examples = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        d = json.loads(line)
        if len(d["input_ids"]) != len(d["labels"]):
            raise UserError(f"{path}:{i + 1}: input_ids and labels differ in length; rebuild the dataset")
        examples.append(Example(**d))
    return examples
