"""lora/data.py: which attempts are kept, and the exact token masks of the training sequences."""

from __future__ import annotations

import json

import pytest
from lora_fakes import CharTokenizer, attempt, rollout

from lora.data import IGNORE, build_dataset, build_examples, filter_attempts, read_dataset, write_dataset
from results.store import load_attempts


def trained_spans(labels: list[int]) -> list[list[int]]:
    """Maximal runs of positions that get loss."""
    spans, cur = [], []
    for t in labels:
        if t == IGNORE:
            if cur:
                spans.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        spans.append(cur)
    return spans


# ---------------------------------------------------------------- filter


def test_filter_keeps_only_honest_solved_attempts_with_token_ids():
    no_ids = attempt("t5")
    no_ids.steps[0].prompt_ids = None
    attempts = [
        attempt("t1"),
        attempt("t2", status="failed", reward=0.0, reason="fail"),
        attempt("t3", status="solved", reward=1.0, reason="tamper"),
        attempt("t4", status="solved", reward=0.5),  # partial credit is not a solve
        no_ids,
        attempt("t6", status="error", reward=0.0, reason="sandbox_died"),
    ]
    kept, stats = filter_attempts(attempts)
    assert [a.task_id for a in kept] == ["t1"]
    assert (stats.seen, stats.kept, stats.tamper, stats.no_token_ids, stats.not_solved) == (6, 1, 1, 1, 3)


def test_filter_caps_per_task_preferring_fewest_steps_and_drops_duplicates():
    long_ = attempt("t1", 0, commands=["ls", "cat a", "sed -i x a", "submit"])
    short = attempt("t1", 1, commands=["sed -i x a", "submit"])
    dup_of_short = attempt("t1", 2, commands=["sed -i x a", "submit"])
    mid = attempt("t1", 3, commands=["cat a", "sed -i x a", "submit"])
    other = attempt("t2", 0, commands=["echo hi", "submit"])
    kept, stats = filter_attempts([long_, short, dup_of_short, mid, other], per_task_cap=2)
    assert [a.key for a in kept] == [short.key, mid.key, other.key]
    assert stats.duplicate == 1 and stats.over_cap == 1 and stats.tasks == 2

    uncapped, _ = filter_attempts([long_, short, dup_of_short, mid, other], per_task_cap=0)
    assert len(uncapped) == 4  # only the duplicate goes


def test_load_attempts_skips_a_torn_last_line(tmp_path):
    a, b = attempt("t1", 0), attempt("t2", 0)
    (tmp_path / "attempts.jsonl").write_text(a.model_dump_json() + "\n" + b.model_dump_json()[:50])
    assert [x.key for x in load_attempts(tmp_path)] == [a.key]


# ---------------------------------------------------------------- dataset masks

REPLIES = ["ls -la", "cat main.py", "sed -i 's/a/b/' main.py", "submit"]
OBS = ["main.py\ntest.py", "print(a)", "", "done"]


def test_trained_spans_are_exactly_the_replies_plus_end_of_turn():
    tok = CharTokenizer()
    a = attempt(steps=rollout(tok, REPLIES, OBS))
    [ex] = build_examples(a)
    last = a.steps[-1]
    assert ex.input_ids == last.prompt_ids + last.completion_ids  # nothing re-rendered
    assert len(ex.labels) == len(ex.input_ids)
    spans = trained_spans(ex.labels)
    assert [tok.decode(s) for s in spans] == [r + "<|im_end|>" for r in REPLIES]
    # labels are the input ids themselves where they are trained
    assert all(lab == i for lab, i in zip(ex.labels, ex.input_ids) if lab != IGNORE)
    assert ex.steps == [0, 1, 2, 3] and ex.task_id == "t1" and ex.attempt == a.key


def test_elided_conversation_gives_one_sequence_per_broken_link():
    tok = CharTokenizer()
    a = attempt(steps=rollout(tok, REPLIES, OBS, elide_from=2))
    examples = build_examples(a)
    # steps 0-1 chain; step 2's prompt was elided (breaks the chain); step 3 extends step 2.
    assert [ex.steps for ex in examples] == [[0, 1], [2, 3]]
    decoded = [[tok.decode(s) for s in trained_spans(ex.labels)] for ex in examples]
    assert decoded == [
        [REPLIES[0] + "<|im_end|>", REPLIES[1] + "<|im_end|>"],
        [REPLIES[2] + "<|im_end|>", REPLIES[3] + "<|im_end|>"],
    ]
    assert "[earlier turns elided]" not in tok.decode(examples[0].input_ids)
    assert "[earlier turns elided]" in tok.decode(examples[1].input_ids)


def test_no_links_means_each_step_alone_with_only_its_own_completion():
    tok = CharTokenizer()
    steps = rollout(tok, REPLIES, OBS)
    for s in steps:  # each prompt rendered afresh with a different system line: no step extends another
        s.prompt_ids = tok.encode(f"<|im_start|>system\nturn {s.index}<|im_end|>\n")
    examples = build_examples(attempt(steps=steps))
    assert [ex.steps for ex in examples] == [[0], [1], [2], [3]]
    for ex, reply in zip(examples, REPLIES):
        assert [tok.decode(s) for s in trained_spans(ex.labels)] == [reply + "<|im_end|>"]


def test_cut_replies_learn_the_end_of_turn_the_conversation_closed_them_with():
    tok = CharTokenizer()
    a = attempt(steps=rollout(tok, REPLIES, OBS, cut=True))  # no end-of-turn was generated
    [plain] = build_examples(a)
    assert [tok.decode(s) for s in trained_spans(plain.labels)] == REPLIES  # only generated tokens
    [ex] = build_examples(a, end_of_turn=tok.eot)
    assert [tok.decode(s) for s in trained_spans(ex.labels)] == [r + "<|im_end|>" for r in REPLIES]
    last = a.steps[-1]
    assert ex.input_ids == last.prompt_ids + last.completion_ids + [tok.eot]
    whole = attempt(steps=rollout(tok, REPLIES, OBS))  # replies that ended themselves: unchanged
    assert build_examples(whole, end_of_turn=tok.eot) == build_examples(whole)


def test_mask_errors_gives_no_loss_to_failed_commands():
    tok = CharTokenizer()
    a = attempt(steps=rollout(tok, REPLIES, OBS, exit_codes=[0, 1, 0, None]))
    [plain] = build_examples(a)
    [masked] = build_examples(a, mask_errors=True)
    assert plain.input_ids == masked.input_ids
    assert [tok.decode(s) for s in trained_spans(masked.labels)] == [
        REPLIES[0] + "<|im_end|>",
        REPLIES[2] + "<|im_end|>",
        REPLIES[3] + "<|im_end|>",
    ]
    assert masked.steps == [0, 2, 3]


def test_dataset_jsonl_round_trip(tmp_path):
    tok = CharTokenizer()
    examples = build_dataset([attempt("t1", steps=rollout(tok, REPLIES, OBS)), attempt("t2")])
    path = tmp_path / "round_1" / "dataset.jsonl"
    write_dataset(path, examples)
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) >= {"input_ids", "labels", "task_id", "attempt"}
    assert read_dataset(path) == examples


@pytest.mark.model
def test_masks_with_the_real_smollm2_tokenizer():
    """Same decode check through SmolLM2's own chat template and tokenizer ."""
    import agent.models.local_loading as local_loading  # our own module: a broken import fails, never skips

    _, tok = local_loading.load_hf("smollm2-135m")
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    steps = []
    for i, (reply, obs) in enumerate(zip(REPLIES, OBS)):
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        steps.append(
            rollout(CharTokenizer(), [reply], [obs])[0].model_copy(
                update={
                    "index": i,
                    "prompt_ids": prompt,
                    "completion_ids": tok.encode(reply, add_special_tokens=False) + [eot],
                }
            )
        )
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
    examples = build_examples(attempt(steps=steps))
    spans = [tok.decode(s) for ex in examples for s in trained_spans(ex.labels)]
    assert spans == [r + "<|im_end|>" for r in REPLIES]


def test_each_example_counts_the_end_of_turn_tokens_the_harness_appended_and_says_if_hinted():
    tok = CharTokenizer()
    cut = attempt("t1", steps=rollout(tok, REPLIES, OBS, cut=True))  # the harness closed every reply
    [ex] = build_examples(cut, end_of_turn=tok.eot)
    assert ex.appended_targets == len(REPLIES)  # one per cut reply, all trained
    assert ex.n_targets == sum(len(tok.encode(r)) for r in REPLIES) + len(REPLIES)
    assert build_examples(cut)[0].appended_targets == 0  # no end-of-turn given: only generated tokens
    whole = attempt("t2", steps=rollout(tok, REPLIES, OBS))  # the model ended its replies itself
    assert build_examples(whole, end_of_turn=tok.eot)[0].appended_targets == 0
    assert not ex.hinted
    examples = build_dataset([cut, whole], end_of_turn=tok.eot, hinted={whole.key})
    assert [(e.task_id, e.hinted) for e in examples] == [("t1", False), ("t2", True)]


def test_dataset_jsonl_records_hinted_and_appended_targets(tmp_path):
    tok = CharTokenizer()
    a = attempt("t1", steps=rollout(tok, REPLIES, OBS, cut=True))
    path = tmp_path / "dataset.jsonl"
    write_dataset(path, build_dataset([a], end_of_turn=tok.eot, hinted=[a.key]))
    line = json.loads(path.read_text().splitlines()[0])
    assert line["hinted"] is True and line["appended_targets"] == len(REPLIES)
    assert read_dataset(path)[0].hinted
