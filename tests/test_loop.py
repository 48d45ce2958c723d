"""The agent loop with the replay model: exact, known outcomes on a real task in real sandboxes."""
import json


from agent.loop import LoopConfig, parse_text_reply
from agent.models import get_model
from evaluators.runner import loop_policy, run_attempt, run_eval
from agent.sandbox import SandboxPool
from tests.conftest import run
from tests.helpers import SUBMIT, WRITE_CORRECT, WRITE_WRONG, make_task


def attempt(replies, image, tmp_path, cfg=LoopConfig(), task=None, **model_kw):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"add": replies}))
    model = get_model(f"replay:{path}", **model_kw)
    import asyncio

    async def main():
        async with SandboxPool(warm=0) as pool:
            return await run_attempt(task or make_task(), loop_policy(model, cfg, asyncio.Semaphore(1), 0), pool,
                                     image, run_id="t", model_name="replay")
    return run(main())


def test_parse_text_reply():
    assert parse_text_reply("x\n```bash\nls -la\n```").command == "ls -la"
    assert parse_text_reply("```\necho hi\n```").command == "echo hi"
    assert parse_text_reply("```bash\nsubmit\n```").kind == "submit"
    assert parse_text_reply("no block here").kind == "format_error"
    assert parse_text_reply("```bash\nls\n```\n```bash\npwd\n```").kind == "format_error"
    assert parse_text_reply("```python\nprint(1)\n```").kind == "format_error"


def test_solving_attempt(image, tmp_path):
    rec = attempt([WRITE_CORRECT, SUBMIT], image, tmp_path)
    assert (rec.solved, rec.reward, rec.exit_reason, rec.n_steps) == (True, 1.0, "submitted", 2)
    assert rec.steps[0].exit_code == 0 and "exit code: 0" in rec.steps[0].observation
    assert rec.messages[0]["role"] == "system" and rec.messages[-1]["role"] == "assistant"
    assert rec.patch_files == 1


def test_failing_attempt(image, tmp_path):
    rec = attempt([WRITE_WRONG, SUBMIT], image, tmp_path)
    assert (rec.solved, rec.exit_reason, rec.reason) == (False, "submitted", "fail")


def test_observation_shows_real_output_then_agent_corrects(image, tmp_path):
    check = "```bash\npython3 -c 'from solution import add; print(add(2, 3))'\n```"
    rec = attempt([WRITE_WRONG, check, WRITE_CORRECT, check, SUBMIT], image, tmp_path)
    assert rec.steps[1].observation.splitlines()[:2] == ["exit code: 0", "6"]
    assert rec.steps[3].observation.splitlines()[:2] == ["exit code: 0", "5"]
    assert rec.solved


def test_malformed_reply_gets_a_format_hint_and_counts_as_a_step(image, tmp_path):
    rec = attempt(["I think I should write the code", WRITE_CORRECT, SUBMIT], image, tmp_path)
    assert rec.steps[0].actions[0].kind == "format_error"
    assert "Format error" in rec.steps[0].observation
    assert rec.n_steps == 3 and rec.solved


def test_step_limit(image, tmp_path):
    rec = attempt(["```bash\nls\n```", "```bash\npwd\n```", WRITE_CORRECT, SUBMIT], image, tmp_path,
                  cfg=LoopConfig(max_steps=2))
    assert rec.exit_reason == "max_steps" and rec.n_steps == 2 and not rec.solved


def test_command_timeout_is_reported_and_loop_goes_on(image, tmp_path):
    rec = attempt(["```bash\nsleep 100\n```", WRITE_CORRECT, SUBMIT], image, tmp_path,
                  cfg=LoopConfig(command_timeout=1))
    assert rec.steps[0].timed_out and "did not finish within 1" in rec.steps[0].observation
    assert rec.solved


def test_same_action_three_times_ends_as_stuck(image, tmp_path):
    rec = attempt(["```bash\nls\n```"] * 3 + [SUBMIT], image, tmp_path)
    assert rec.exit_reason == "stuck" and rec.n_steps == 3


def test_native_tool_protocol(image, tmp_path):
    replies = [
        {"content": "", "tool_calls": [{"name": "write_file", "arguments": {
            "path": "solution.py", "content": "def add(a, b):\n    return a + b\n"}}]},
        {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "cat solution.py"}}]},
        {"content": "", "tool_calls": [{"name": "submit", "arguments": {}}]},
    ]
    rec = attempt(replies, image, tmp_path)
    assert rec.solved and rec.exit_reason == "submitted"
    assert [m["role"] for m in rec.messages].count("tool") == 3
    assert "return a + b" in rec.steps[1].observation


def test_cost_limit_stops_a_priced_model(image, tmp_path):
    rec = attempt(["```bash\nls\n```", "```bash\npwd\n```", WRITE_CORRECT, SUBMIT], image, tmp_path,
                  cfg=LoopConfig(cost_limit=1e-9), price_in=1000.0, price_out=1000.0)
    assert rec.exit_reason == "cost_budget" and rec.n_steps == 1 and rec.cost > 0


def test_token_budget_works_without_prices(image, tmp_path):
    rec = attempt(["```bash\nls\n```", "```bash\npwd\n```", WRITE_CORRECT, SUBMIT], image, tmp_path,
                  cfg=LoopConfig(token_budget=1))
    assert rec.exit_reason == "token_budget" and rec.n_steps == 1


def test_context_window_elides_old_observations(image, tmp_path, monkeypatch):
    flood = "```bash\nseq 1 3000\n```"
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"add": [flood, WRITE_CORRECT, SUBMIT]}))
    model = get_model(f"replay:{path}")
    for_task = type(model).for_task

    def small_context(self, *a, **kw):
        m = for_task(self, *a, **kw)
        m.context_window = 1500  # tokens; the clipped seq output alone is ~ 2000
        return m
    monkeypatch.setattr(type(model), "for_task", small_context)
    import asyncio

    async def main():
        async with SandboxPool(warm=0) as pool:
            return await run_attempt(make_task(), loop_policy(model, LoopConfig(max_reply_tokens=100),
                                                              asyncio.Semaphore(1), 0),
                                     pool, image, run_id="t", model_name="replay")
    rec = run(main())
    assert rec.solved
    assert any("elided to fit the context window" in str(m.get("content")) for m in rec.messages)


def test_run_eval_records_every_attempt_and_resume_runs_nothing_twice(image, tmp_path):
    tasks = [make_task()]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"add": [WRITE_CORRECT, SUBMIT]}))
    out = tmp_path / "run"
    run(run_eval(f"replay:{script}", tasks, samples=3, out_dir=out, concurrency=3, progress=False))
    lines = (out / "attempts.jsonl").read_text().splitlines()
    recs = [json.loads(l) for l in lines]
    assert len(recs) == 3 and all(r["solved"] for r in recs), [(r["status"], r["reason"], r["error"], r["detail"]) for r in recs]
    run(run_eval(f"replay:{script}", tasks, samples=3, out_dir=out, concurrency=3, resume=True, progress=False))
    assert len((out / "attempts.jsonl").read_text().splitlines()) == 3


def test_model_errors_are_infra_errors_not_model_failures(image, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"other-task": [SUBMIT]}))  # no script for "add": every call fails
    out = tmp_path / "run"
    run(run_eval(f"replay:{script}", [make_task()], out_dir=out, progress=False))
    rec = json.loads((out / "attempts.jsonl").read_text())
    assert rec["status"] == "error" and rec["reason"] == "infra_error" and "no scripted replies" in rec["error"]


def test_each_sample_and_step_gets_its_own_seed_and_a_rerun_the_same(image, tmp_path):
    """A seeded sampler (the local model, OpenAI's seed) returns the same reply for the same seed and
    prompt: one seed for every attempt would make a task's K samples copies of one."""
    from agent.models.base import Completion

    class Recorder:
        name, supports_tools, context_window = "recorder", False, 100_000

        def __init__(self):
            self.seeds = []

        def count_tokens(self, messages):
            return 100

        async def complete(self, messages, tools=None, n=1, temperature=0.0, max_tokens=512, seed=None):
            self.seeds.append(seed)  # attempts run one at a time: each writes, then submits
            return [Completion(content=WRITE_CORRECT if len(self.seeds) % 2 else SUBMIT)]

    def seeds(out):
        model = Recorder()
        run(run_eval("recorder", [make_task()], samples=3, temperature=0.7, seed=5, out_dir=out, concurrency=1,
                     progress=False, model_obj=model))
        return model.seeds
    first = seeds(tmp_path / "a")
    assert len(first) == 6 and None not in first and len(set(first)) == 6  # 3 samples x 2 steps, all distinct
    assert seeds(tmp_path / "b") == first  # the same run again: the same seeds
