"""Issue 28: where a round's samples go (lora/curriculum.py), hints that are not trained on
(lora/data.strip_hint), only honest successes in the data, per-task solve rates per round, the audit
(results.task_audit.audit_tasks, `harness tasks audit`), and why the loop stops."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from lora_fakes import CharTokenizer, attempt, rollout
from test_lora_train import FakeBackend, config

import lora.train as lt
from lora.curriculum import allocate, attempt_example, hint_for, next_level, oracle_example, oracle_script
from lora.data import build_dataset, filter_attempts, strip_hint
from results.task_audit import (
    ALWAYS,
    FLAKY,
    HACKABLE,
    NEVER,
    SOLVED_BY_NULL,
    TaskRate,
    audit_tasks,
    task_rates,
    wilson_ci,
)

# ---------------------------------------------------------------- allocation and curriculum


def rate(n, solved):
    return TaskRate("t", n=n, solved=solved)


def test_budget_goes_to_the_frontier_little_to_saturated_and_bounded_to_never_solved():
    rates = {
        "easy": rate(8, 8),  # saturated: leaves the pool
        "mid": rate(8, 4),
        "edge": rate(8, 1),
        "hard1": rate(8, 0),
        "hard2": rate(8, 0),
        # "fresh" has no measurement yet
    }
    tasks = ["easy", "mid", "edge", "hard1", "hard2", "fresh"]
    a = allocate(tasks, rates, budget=40, explore_share=0.2, hints=False)
    count = {t: a.plain.get(t, 0) + a.hinted.get(t, 0) for t in tasks}
    assert a.total == 40
    assert count["easy"] == 0 and a.kind["easy"] == "saturated"
    assert count["hard1"] + count["hard2"] == 8  # 20% of 40: the exploration share, spread evenly
    assert count["hard1"] == count["hard2"] == 4
    assert count["mid"] > count["edge"] > 0 and count["fresh"] >= count["edge"]  # most where least certain
    hinted = allocate(tasks, rates, budget=40, explore_share=0.2, hints=True)
    assert hinted.hinted == {"hard1": 3, "hard2": 3} and hinted.plain["hard1"] == 1  # one stays unhinted
    assert hinted.total == 40


def test_a_few_frontier_tasks_take_at_most_twice_the_mean_and_the_rest_goes_to_exploration():
    """Four frontier tasks in a pool of twenty cannot soak up the budget (the loop's first real run spent
    68 of 84 attempts on four tasks solved 4 times in 5); nearly always solved counts as saturated."""
    rates = {f"f{i}": rate(5, 3) for i in range(4)}
    rates.update({f"n{i}": rate(5, 0) for i in range(16)})
    rates["s"] = rate(5, 4)  # 80%: out of the pool
    tasks = sorted(rates)
    a = allocate(tasks, rates, budget=84, explore_share=0.2, hints=True)
    count = {t: a.plain.get(t, 0) + a.hinted.get(t, 0) for t in tasks}
    assert a.total == 84 and count["s"] == 0 and a.kind["s"] == "saturated"
    assert all(count[f"f{i}"] == 8 for i in range(4))  # ceil(2 x 84 / 21)
    assert sum(count[f"n{i}"] for i in range(16)) == 84 - 32 and sum(a.hinted.values()) >= 16
    alone = allocate(["f0", "s"], rates, budget=20, explore_share=0.2, hints=False)
    assert alone.plain == {"f0": 20}  # nothing to explore: past the cap after all


def test_a_pool_of_only_solved_and_never_solved_tasks_still_spends_the_budget():
    a = allocate(["a", "b"], {"a": rate(4, 4), "b": rate(4, 0)}, budget=10, explore_share=0.2, hints=False)
    assert a.total == 10 and a.plain == {"b": 10}


def test_the_curriculum_level_rises_when_half_its_top_tasks_are_solved():
    tasks = [SimpleNamespace(id=f"d{d}-{i}", difficulty=d) for d in (1, 2, 3) for i in range(4)]
    assert next_level(2, tasks, {"d2-0"}, top=3) == 2
    assert next_level(2, tasks, {"d2-0", "d2-3"}, top=3) == 3
    assert next_level(3, tasks, {t.id for t in tasks}, top=3) == 3  # no level above the hardest


def test_a_hint_is_a_siblings_worked_example_then_the_tasks_own_oracles():
    def task(id, solve, family="f"):
        return SimpleNamespace(
            id=id, family=family, instruction=f"Do {id}.", solution_files={"solve.sh": solve} if solve else {}
        )

    me = task("f-1", b"#!/bin/bash\nset -e\n# count them\nwc -l < a > n\n")
    sibling = task("f-2", b"#!/bin/bash\nset -e\nsort x > y\n# kept: after the first command\n")
    other = task("g-1", b"#!/bin/bash\nrm -rf /\n", family="g")
    solved = attempt("f-3", commands=["sort z > w", "submit"]).model_copy(
        update={
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "demo"},
                {"role": "assistant", "content": "```bash\necho demo\n```"},
                {"role": "user", "content": "Do f-3."},
                {"role": "assistant", "content": "```bash\nsort z > w\n```"},
                {"role": "user", "content": "exit code: 0\n(no output)"},
                {"role": "assistant", "content": "```bash\nsubmit\n```"},
            ]
        }
    )
    own = oracle_example(me)
    assert [m["role"] for m in own] == ["user", "assistant", "user", "assistant"]
    assert "Do f-1." in own[0]["content"] and own[1]["content"] == "```bash\nwc -l < a > n\n```"
    assert own[3]["content"] == "```bash\nsubmit\n```"
    assert oracle_script(me) == "wc -l < a > n"  # shebang, set lines and leading comments skipped
    # First an earlier unhinted success on a sibling (its task message and what followed, the loop's
    # worked example cut), then the task's own oracle.
    assert attempt_example(solved) == solved.messages[3:]
    assert hint_for(me, {"f": [solved]}, [me, sibling]) == solved.messages[3:] + own
    # Else a sibling train instance's oracle; never another family's.
    example = hint_for(me, {}, [other, me, sibling])
    assert example == oracle_example(sibling) + own and "rm -rf" not in json.dumps(example)
    assert "Do f-2." in example[0]["content"]
    assert example[1]["content"] == "```bash\nsort x > y\n# kept: after the first command\n```"
    assert hint_for(me, {}, [me]) == own  # no sibling: its own oracle alone
    assert hint_for(task("f-9", None), {}, []) is None


# ---------------------------------------------------------------- hints are not trained on


def hinted_rollout(encode, eot_ids, hint):
    """An attempt as the loop records a hinted one: messages, and each step's prompt = encode(the
    conversation so far, the hint -- a worked example -- before the task message, or the first form,
    text inside it); completion = the reply's ids."""
    instruction = "Count the lines of data.txt into count.txt."
    demo = [  # the loop's worked example: an assistant message before the model's own first reply
        {"role": "user", "content": "Print hello."},
        {"role": "assistant", "content": "```bash\necho hello\n```"},
    ]
    messages = [
        {"role": "system", "content": "You are an agent."},
        *demo,
        *([] if isinstance(hint, str) else hint),
        {"role": "user", "content": instruction + (hint if isinstance(hint, str) else "")},
    ]
    replies, observations = (
        ["```bash\nwc -l < data.txt > count.txt\n```", "```bash\nsubmit\n```"],
        ["ok", "done"],
    )
    steps = []
    for i, (reply, obs) in enumerate(zip(replies, observations)):
        step = rollout(CharTokenizer(), [reply], [obs])[0]
        steps.append(
            step.model_copy(
                update={"index": i, "prompt_ids": encode(messages), "completion_ids": eot_ids(reply)}
            )
        )
        messages = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
    a = attempt("count-lines-01", steps=steps).model_copy(update={"messages": messages, "key": "r/h/0"})
    plain = [
        {"role": "system", "content": "You are an agent."},
        *demo,
        {"role": "user", "content": instruction},
    ]
    return a, plain, replies, observations


HINT = [  # a sibling's solved exchange, as lora/curriculum.hint_for gives it
    {"role": "user", "content": "Count the lines of fruits.txt into count.txt."},
    {"role": "assistant", "content": "```bash\nwc -l < fruits.txt > count.txt\n```"},
    {"role": "user", "content": "exit code: 0\n(no output)"},
    {"role": "assistant", "content": "```bash\nsubmit\n```"},
]


def check_rebuilt(encode, eot_ids, hint=HINT):
    a, plain, replies, observations = hinted_rollout(encode, eot_ids, hint)
    rebuilt = strip_hint(a, hint, encode)
    assert rebuilt is not None
    messages = plain
    for s, old, reply, obs in zip(rebuilt.steps, a.steps, replies, observations):
        assert s.prompt_ids == encode(messages)  # exactly what the model would have seen unhinted
        assert s.completion_ids == old.completion_ids  # its own tokens, untouched
        messages = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
    if isinstance(hint, str):
        assert all(hint not in m["content"] for m in rebuilt.messages)
    else:
        assert rebuilt.messages[: len(plain)] == plain and not any(m in rebuilt.messages for m in hint[:1])
        assert len(rebuilt.messages) == len(a.messages) - len(hint)
    (example,) = build_dataset([rebuilt])
    assert example.input_ids[: len(encode(plain))] == encode(plain)
    return a, hint


def test_a_hinted_attempt_is_rebuilt_without_its_hint_token_for_token():
    tok = CharTokenizer()
    a, hint = check_rebuilt(tok.render, lambda reply: tok.encode(reply) + [tok.eot])
    # Refused when the recorded prompt is not how this encoder renders the conversation.
    wrong = a.model_copy(
        update={"steps": [a.steps[0].model_copy(update={"prompt_ids": [1, 2, 3]})] + a.steps[1:]}
    )
    assert strip_hint(wrong, hint, tok.render) is None
    assert strip_hint(a, "a hint that is not there", tok.render) is None
    assert strip_hint(a, [dict(HINT[0], content="another example")] + HINT[1:], tok.render) is None
    # The first form, text appended to the task message (runs made before), is rebuilt the same way.
    text = "\n\nHint: a first command that worked:\n```bash\nwc -l < data.txt > count.txt\n```"
    check_rebuilt(tok.render, lambda reply: tok.encode(reply) + [tok.eot], hint=text)


@pytest.mark.model
def test_a_hinted_attempt_is_rebuilt_without_its_hint_with_the_real_smollm2_tokenizer():
    import agent.models.local_loading as local_loading
    from agent.models.local import encode_messages

    _, tok = local_loading.load_hf("smollm2-135m")
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    check_rebuilt(
        lambda m: encode_messages(tok, m), lambda reply: tok.encode(reply, add_special_tokens=False) + [eot]
    )


# ---------------------------------------------------------------- only honest successes train


def test_tamper_flagged_and_broken_task_attempts_never_enter_the_data():
    honest = attempt("a", 0)
    tampered = attempt("a", 1, reason="tamper", commands=["rm tests", "submit"])
    flagged = attempt("a", 2, commands=["git log -p", "submit"])
    # Records from a harness with exploit flags carry a `flags` field; exclusion only needs it non-empty.
    flagged.__dict__["flags"] = ["version-control history"]
    broken = attempt("b", 0)
    kept, stats = filter_attempts([honest, tampered, flagged, broken], per_task_cap=0, exclude_tasks={"b"})
    assert kept == [honest]
    assert (stats.tamper, stats.flagged, stats.broken_task, stats.kept) == (1, 1, 1, 1)


# ---------------------------------------------------------------- measured difficulty and the audit


def test_each_tasks_solve_rate_has_a_wilson_interval():
    rates = task_rates(
        [attempt("a", i, status="solved" if i < 3 else "failed", reward=float(i < 3)) for i in range(4)]
    )
    r = rates["a"]
    assert (r.n, r.solved, r.rate) == (4, 3, 0.75)
    assert (r.ci_low, r.ci_high) == pytest.approx(wilson_ci(3, 4)) and 0 < r.ci_low < 0.75 < r.ci_high < 1
    assert wilson_ci(0, 8)[0] == 0.0 and wilson_ci(0, 8)[1] > 0  # never solved still has an upper bound


def test_the_audit_names_what_is_wrong_with_each_task():
    def a(task, sample, ok, commands, model="local:x", reason=None):
        x = attempt(task, sample, status="solved" if ok else "failed", reward=float(ok), commands=commands)
        return x.model_copy(update={"model": model, "reason": reason or ("pass" if ok else "fail")})

    attempts = [
        a("null-ok", 0, True, [], model="null"),  # the null agent solves it: broken
        a("null-ok", 1, False, ["ls"]),
        a("flaky", 0, True, ["echo 3 > n"]),
        a("flaky", 1, False, ["echo 3 > n"]),  # the same commands, another verdict: the grader decided
        a("hacky", 0, False, ["rm -rf tests"], reason="tamper"),
        a("hacky", 1, True, ["echo ok"]),
        a("hard", 0, False, ["ls"]),
        a("hard", 1, False, ["pwd"]),
        a("easy", 0, True, ["echo 1 > x"]),
        a("easy", 1, True, ["echo 1 > y"]),
    ]
    slow = a("slow", 1, False, ["sleep 5; echo 3 > n"])
    slow = slow.model_copy(update={"steps": [st.model_copy(update={"timed_out": True}) for st in slow.steps]})
    attempts += [a("slow", 0, True, ["sleep 5; echo 3 > n"]), slow]  # a time limit, not the grader
    rows = {r.rate.task_id: r for r in audit_tasks(attempts)}
    assert FLAKY not in rows["slow"].verdicts
    assert SOLVED_BY_NULL in rows["null-ok"].verdicts and rows["null-ok"].broken
    assert FLAKY in rows["flaky"].verdicts and rows["flaky"].broken
    assert HACKABLE in rows["hacky"].verdicts and rows["hacky"].broken
    assert rows["hard"].verdicts == [NEVER] and not rows["hard"].broken
    assert rows["easy"].verdicts == [ALWAYS] and not rows["easy"].broken
    assert rows["null-ok"].rate.n == 1  # the null agent's attempts are not the model's solve rate


def test_harness_tasks_audit_prints_rates_and_broken_tasks(tmp_path, capsys):
    import harness

    run = tmp_path / "run"
    run.mkdir()
    lines = [
        attempt("t1", 0, commands=["echo 3 > n"]),
        attempt("t1", 1, status="failed", reward=0.0, commands=["echo 3 > n"]),
        attempt("t2", 0, status="failed", reward=0.0, commands=["ls"]),
        attempt("t2", 1, status="failed", reward=0.0, commands=["pwd"]),
    ]
    (run / "attempts.jsonl").write_text("".join(x.model_dump_json() + "\n" for x in lines))
    assert harness.main(["tasks", "audit", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "t1" in out and FLAKY in out and "t2" in out and NEVER in out
    assert "1 marked broken: t1" in out


# ---------------------------------------------------------------- the loop with a budget


def test_a_budget_round_spreads_its_attempts_records_rates_and_stops_for_a_reason(tmp_path):
    def solves(task_id, sample, adapter):  # train-0 always, train-1 half the time, train-2 never
        i = int(task_id.split("-")[1])
        return i == 0 or (i == 1 and sample % 2 == 0)

    fake = FakeBackend(solves)
    cfg = config(tmp_path, budget=12, samples=4, stop_when="no_improvement", rounds=3)
    out = lt.run(cfg, fake.backend(), log=lambda _: None)
    # Round 0: nothing measured, 4 each (today's run); round 1: spread by round 0's rates.
    r0 = json.loads((out / "round_0" / "allocation.json").read_text())
    assert r0["plain"] == {"train-0": 4, "train-1": 4, "train-2": 4}
    r1 = json.loads((out / "round_1" / "allocation.json").read_text())
    assert r1["total"] == 12 and "train-0" not in r1["plain"]  # saturated: out of the pool
    assert r1["plain"]["train-1"] > r1["plain"]["train-2"]  # the frontier gets more than never-solved
    # the frontier task at its cap (twice the mean: 2 x 12 / 3), the never-solved one its 20% and the rest
    assert r1["plain"] == {"train-1": 8, "train-2": 4}
    assert {e[1] for e in fake.evals if e[0] == "round_1"} >= {"train-sample-x4", "train-sample-x8"}
    # Every task's solve rate with its interval, per round and run.
    rates = [json.loads(x) for x in (out / "task_rates.jsonl").read_text().splitlines()]
    r0_train = {x["task_id"]: x for x in rates if x["round"] == 0 and x["run"] == "train-sample"}
    assert (
        r0_train["train-1"]["rate"] == 0.5
        and r0_train["train-1"]["ci_low"] < 0.5 < r0_train["train-1"]["ci_high"]
    )
    m1 = json.loads((out / "round_1" / "metrics.json").read_text())
    assert m1["train_successes"]["hinted"] == 0 and m1["train_successes"]["unhinted"] > 0
    assert (
        m1["phases"]["train-greedy"]["attempts"] == 3 and "tokens_per_second" in m1["phases"]["train-greedy"]
    )
    assert set(m1["data"]["excluded"]) == {"tamper", "flagged", "broken_task", "hint_not_rebuilt"}
    assert "target_tokens_other_masking" in m1["data"]
    # The adapters change nothing here: the loop stops after round 1 and says why.
    stopped = json.loads((out / "stopped.json").read_text())
    assert stopped["round"] == 1 and "improved neither" in stopped["reason"]


def test_a_loop_that_runs_out_of_rounds_says_so_and_more_rounds_resume_it(tmp_path):
    fake = FakeBackend(lambda task_id, sample, adapter: task_id.endswith("0") or adapter is not None)
    out = lt.run(config(tmp_path, rounds=1), fake.backend(), log=lambda _: None)
    said = json.loads((out / "stopped.json").read_text())
    assert said["rounds_exhausted"] and "last round" in said["reason"]
    lt.run(config(tmp_path, rounds=2), fake.backend(), log=lambda _: None)
    assert (out / "round_2" / "metrics.json").exists()


def test_train_leaves_out_tasks_the_audit_marks_broken(tmp_path):
    null_run = tmp_path / "null"
    null_run.mkdir()
    solved_by_null = attempt("train-2", 0, commands=[]).model_copy(update={"model": "null"})
    (null_run / "attempts.jsonl").write_text(solved_by_null.model_dump_json() + "\n")
    fake = FakeBackend(lambda task_id, sample, adapter: True)
    said = []
    lt.run(config(tmp_path, rounds=1, audit_runs=[str(null_run)]), fake.backend(), log=said.append)
    assert any("leaving out 1 task" in line and "train-2" in line for line in said)
    assert all(Path(e[1]).name for e in fake.evals)
    d1 = json.loads((tmp_path / "run" / "round_1" / "data.done.json").read_text())
    assert "train-2" not in d1["tasks"] and d1["broken_tasks"] == ["train-2"]
