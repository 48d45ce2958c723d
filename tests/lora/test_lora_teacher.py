"""lora/teacher.py: `harness train` driven by a replayed teacher on real tasks (real sandboxes, real grading),
with the real SmolLM2 tokenizer recording the ids: what reaches dataset.jsonl is checked from the CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from helpers import harness

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ROOT / "tasks" / "builtin" / "families"

HONEST = "```bash\nwc -l < data.txt | tr -d ' ' > count.txt\n```"
# solves create-file-01, but looks at the hidden tests' place first: an exploit flag (results/flags.py)
PEEKS = "```bash\nls /tests; echo 'hello world' > greeting.txt\n```"
SUBMIT = "```bash\nsubmit\n```"


def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    for family in ("count-lines", "create-file"):
        shutil.copytree(FAMILIES / family, root / family)
    return root


@pytest.mark.slow
@pytest.mark.model
def test_train_with_a_replayed_teacher_keeps_only_the_honest_solve(tmp_path):
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps({"count-lines-01": [HONEST, SUBMIT], "create-file-01": [PEEKS, SUBMIT], "*": [SUBMIT]})
    )
    out = tmp_path / "run"
    p = harness(
        "train",
        *("--model", f"replay:{replies}", "--student", "local:smollm2-135m", "--tasks", str(suite(tmp_path))),
        *("--limit", "2", "--rounds", "1", "--samples", "2", "--eval-samples", "1", "--epochs", "1"),
        *("--concurrency", "2", "--out", str(out)),
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    # round 0's train samples: both tasks solved twice each, create-file's with an exploit flag
    ev = json.loads((out / "round_0" / "eval.done.json").read_text())
    samples = [
        json.loads(x) for x in Path(ev["runs"]["train-sample"], "attempts.jsonl").read_text().splitlines()
    ]
    assert sorted((a["task_id"], a["solved"], bool(a["flags"])) for a in samples) == [
        ("count-lines-01", True, False),
        ("count-lines-01", True, False),
        ("create-file-01", True, True),
        ("create-file-01", True, True),
    ]
    assert all(
        s["prompt_ids"] and s["completion_ids"] for a in samples for s in a["steps"]
    )  # the student's ids
    data = json.loads((out / "round_1" / "data.done.json").read_text())
    assert data["tasks"] == ["count-lines-01"] and data["excluded"]["flagged"] == 2
    examples = [json.loads(x) for x in (out / "round_1" / "dataset.jsonl").read_text().splitlines()]
    assert {e["task_id"] for e in examples} == {"count-lines-01"}  # the flagged success never got in
    from transformers import AutoTokenizer

    from lora.teacher import student_tokenizer

    tok: AutoTokenizer = student_tokenizer("local:smollm2-135m")
    for e in examples:
        assert not e["hinted"] and e["appended_targets"] == 2  # one end-of-turn closing each cut reply
        trained = tok.decode([t for t in e["labels"] if t != -100])
        assert trained == HONEST + "<|im_end|>" + SUBMIT + "<|im_end|>"
    assert (out / "round_1" / "adapter" / "adapter_model.safetensors").is_file()  # the student learnt
    table = p.stdout + p.stderr
    assert "impossible solved" in table and "flagged" in table


@pytest.mark.slow
@pytest.mark.model
def test_a_hinted_teacher_attempt_is_rebuilt_without_its_hint(tmp_path):
    """The hint path of the loop with a real sandbox and the student's tokenizer: the solved hinted attempt
    is rebuilt token for token as if the hint had never been shown, and its example is marked hinted."""
    from agent.models import get_model
    from evaluators.run.runner import run_eval
    from lora.backend import _encoder
    from lora.config import config_from
    from lora.curriculum import hint_for, hinted_task
    from lora.data import build_dataset, reply_indices, strip_hint
    from lora.phases import eval_config
    from lora.teacher import Teacher, student_tokenizer
    from results.store import load_attempts
    from tasks.loader import load_suite

    tasks = [
        t for t in load_suite(suite(tmp_path), split="train") if t.id in ("count-lines-01", "count-lines-02")
    ]
    task, sibling = sorted(tasks, key=lambda t: t.id)
    hint = hint_for(task, {}, [sibling])
    assert hint and len(hint) == 8  # a sibling's worked example, then the task's own oracle's
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"count-lines-01": [HONEST, SUBMIT]}))
    cfg = config_from(
        None, model=f"replay:{replies}", student="local:smollm2-135m", tasks="x", out=tmp_path / "t"
    )
    ecfg = eval_config(cfg, 1, 0.7, tmp_path / "hinted", None, seed=0)
    teacher = Teacher(get_model(cfg.model), student_tokenizer("local:smollm2-135m"))
    run_dir = asyncio.run(run_eval(ecfg, [hinted_task(task, hint)], model_obj=teacher, progress=False))
    [a] = load_attempts(Path(run_dir))
    assert a.solved and any(m.get("content") == hint[1]["content"] for m in a.messages)
    encode = _encoder("local:smollm2-135m")
    plain = strip_hint(a, hint, encode)
    assert plain is not None
    assert all(m.get("content") != hint[1]["content"] for m in plain.messages)
    assert plain.steps[0].prompt_ids == encode(plain.messages[: reply_indices(plain)[0]])
    assert [s.completion_ids for s in plain.steps] == [
        s.completion_ids for s in a.steps
    ]  # the replies, unchanged
    [ex] = build_dataset([plain], hinted=[plain.key])
    assert ex.hinted and len(ex.input_ids) < len(a.steps[-1].prompt_ids) + len(a.steps[-1].completion_ids)
