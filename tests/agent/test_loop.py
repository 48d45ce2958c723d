"""The agent loop with the replay model: exact, known outcomes. Most tests run the loop as the runner
starts it (loop_policy) on an in-memory sandbox (tests/helpers.py FakeSandbox); a few run whole attempts
and evals in real Docker sandboxes, graded, end to end."""

import asyncio
import json
from pathlib import Path
from string import Template

import pytest

from agent.config import LoopConfig, default_reply_tokens
from agent.loop import LoopResult
from agent.models import get_model
from agent.prompt_format import PROMPT_VARIABLES, PROMPTS, PromptError, parse_text_reply, prompt
from agent.sandbox import ExecResult, SandboxDied
from agent.sandbox.backends.docker.pool import DockerPool
from agent.sandbox.contract import sandbox_members
from evaluators.run.attempt import attempt_with_retries, run_attempt
from evaluators.run.config import EvalConfig
from evaluators.run.policies import loop_policy
from evaluators.run.runner import run_eval
from tests.conftest import run
from tests.helpers import SUBMIT, WRITE_CORRECT, WRITE_WRONG, FakePool, FakeSandbox, make_task

CHECK = "```bash\npython3 -c 'from solution import add; print(add(2, 3))'\n```"
CHECK_CMD = "python3 -c 'from solution import add; print(add(2, 3))'"
WRITE_CORRECT_CMD = parse_text_reply(WRITE_CORRECT).command
WRITE_WRONG_CMD = parse_text_reply(WRITE_WRONG).command


def replay(replies, tmp_path, **model_kw):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"add": replies}))
    return get_model(f"replay:{path}", **model_kw)


def on_fake(replies, tmp_path, cfg=None, sb=None, **model_kw) -> tuple[LoopResult, FakeSandbox]:
    """The loop as the runner starts it for the `add` task (its limits merged in), on an in-memory sandbox."""
    sb = sb or FakeSandbox()
    policy = loop_policy(replay(replies, tmp_path, **model_kw), cfg or LoopConfig(), asyncio.Semaphore(1), 0)
    return run(policy(make_task(), sb)), sb


def attempt(replies, image, tmp_path, cfg=None, task=None, **model_kw):
    """One whole attempt in a real sandbox, graded."""
    model = replay(replies, tmp_path, **model_kw)

    async def main():
        async with DockerPool(warm=0) as pool:
            return await run_attempt(
                task or make_task(),
                loop_policy(model, cfg or LoopConfig(), asyncio.Semaphore(1), 0),
                pool,
                image,
                run_id="t",
                model_name="replay",
            )

    return run(main())


def test_parse_text_reply():
    assert parse_text_reply("x\n```bash\nls -la\n```").command == "ls -la"
    assert parse_text_reply("```\necho hi\n```").command == "echo hi"
    assert parse_text_reply("```bash\nsubmit\n```").kind == "submit"
    assert parse_text_reply("no block here").kind == "format_error"
    assert parse_text_reply("```bash\nls\n```\n```bash\npwd\n```").kind == "format_error"
    assert parse_text_reply("```python\nprint(1)\n```").kind == "format_error"


def test_every_prompt_template_uses_exactly_the_variables_the_loop_gives_it():
    templates = sorted(PROMPTS.glob("*.md"))
    assert {t.stem for t in templates} == set(PROMPT_VARIABLES)
    for path in templates:
        template = Template(path.read_text())
        assert template.is_valid(), f"{path}: a $ that is not a variable"
        assert set(template.get_identifiers()) == PROMPT_VARIABLES[path.stem], path


def test_a_misspelt_template_variable_fails_naming_the_file_and_the_variable(tmp_path, monkeypatch):
    import agent.prompt_format

    (tmp_path / "observation.md").write_text("exit code: $exit_code\n$outptu\n")
    (tmp_path / "timeout.md").write_text("did not finish within $timeout seconds and costs $5\n$output")
    monkeypatch.setattr(agent.prompt_format, "PROMPTS", tmp_path)
    with pytest.raises(PromptError, match=r"observation\.md: unknown variable \$outptu, \$output missing"):
        prompt("observation", exit_code=0, output="hello")
    with pytest.raises(PromptError, match=r"timeout\.md: a \$ that is not a variable"):
        prompt("timeout", timeout=1, output="hello")


def test_the_loop_uses_only_the_sandbox_contract():
    """The loop's sandbox is typed with agent/sandbox/contract.py's Sandbox, and every attribute it touches on
    one is a member of it (tests/agent/sandbox/test_sandbox_contract.py checks that every sandbox
    implements them)."""
    import ast

    import agent.loop

    source = Path(agent.loop.__file__).read_text()
    assert "from agent.sandbox.contract import Sandbox" in source
    used = {
        n.attr
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Attribute)
        and (
            (isinstance(n.value, ast.Name) and n.value.id == "sb")
            or (isinstance(n.value, ast.Attribute) and n.value.attr == "sb")
        )
    }
    assert used == {"exec", "workdir", "death_cause"}, used
    assert used <= sandbox_members()


def test_the_clis_loop_options_take_their_help_and_defaults_from_loopconfig():
    import argparse
    from dataclasses import fields

    import harness

    parser = harness.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    helps = {f.name: f.metadata["help"] for f in fields(LoopConfig)}
    loop_options = {
        "eval": {
            "temperature",
            "max_steps",
            "max_reply_tokens",
            "token_budget",
            "cost_limit",
            "protocol",
            "seed",
        },
        "run": {"max_steps"},
        "train": {"max_steps", "max_reply_tokens"},
    }  # train: seed is TrainConfig's
    for command, names in loop_options.items():
        options = {a.dest: a for a in commands[command]._actions}
        for name in names:
            assert options[name].option_strings == ["--" + name.replace("_", "-")]
            assert options[name].help.startswith(helps[name]), (command, options[name].help)
    ev = parser.parse_args(["eval"])
    assert (
        ev.max_steps,
        ev.max_reply_tokens,
        ev.token_budget,
        ev.cost_limit,
        ev.protocol,
        ev.temperature,
        ev.seed,
    ) == (30, None, None, None, "auto", None, None)  # not given: EvalConfig's loop (seeded 0) decides
    assert parser.parse_args(["run", "x", "--workspace", "."]).max_steps == LoopConfig().max_steps == 30
    tr = parser.parse_args(["train"])
    assert (tr.max_steps, tr.max_reply_tokens) == (None, None)  # the preset's, else LoopConfig's
    ev = parser.parse_args(["eval", "--max-steps", "7", "--cost-limit", "0.25", "--protocol", "text"])
    assert (ev.max_steps, ev.cost_limit, ev.protocol) == (7, 0.25, "text")
    assert (default_reply_tokens("local:smollm2-135m"), default_reply_tokens("openai/gpt-4o-mini")) == (
        256,
        1024,
    )


def test_the_clis_and_the_server_import_the_loop_config_without_the_docker_sdk():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['docker'] = None; import harness, agent.serve, agent.loop; "
        "harness.build_parser(); print('ok')"
    )  # import docker -> ImportError, as on a bare GPU machine
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


# ---- on the in-memory sandbox -------------------------------------------------------------------------


def test_solving_steps_write_then_submit(tmp_path):
    res, sb = on_fake([WRITE_CORRECT, SUBMIT], tmp_path)
    assert (res.exit_reason, len(res.steps), sb.commands) == ("submitted", 2, [WRITE_CORRECT_CMD])
    assert res.steps[0].exit_code == 0 and "exit code: 0" in res.steps[0].observation
    assert res.messages[0]["role"] == "system" and res.messages[-1]["role"] == "assistant"


def test_a_tasks_worked_example_comes_after_the_loops_own_and_before_the_task(tmp_path):
    example = (
        {"role": "user", "content": "Implement sub(a, b) in /workspace/solution.py."},
        {"role": "assistant", "content": "```bash\necho sub > solution.py\n```"},
    )
    sb = FakeSandbox()
    policy = loop_policy(replay([SUBMIT], tmp_path), LoopConfig(), asyncio.Semaphore(1), 0)
    res = run(policy(make_task(example=example), sb))
    demo = json.loads((PROMPTS / "demonstration.json").read_text())
    assert res.messages[1 : 1 + len(demo)] == demo
    assert res.messages[1 + len(demo) : 3 + len(demo)] == list(example)
    assert "Implement add" in res.messages[3 + len(demo)]["content"]
    assert res.messages[4 + len(demo) :] == [{"role": "assistant", "content": SUBMIT}]
    plain, _ = on_fake([SUBMIT], tmp_path)
    assert len(plain.messages) == len(res.messages) - 2 and make_task(example=example).content_hash() != (
        make_task().content_hash()
    )


def test_observation_shows_real_output_then_agent_corrects(tmp_path):
    sb = FakeSandbox({CHECK_CMD: ["6\n", "5\n"]})
    res, _ = on_fake([WRITE_WRONG, CHECK, WRITE_CORRECT, CHECK, SUBMIT], tmp_path, sb=sb)
    assert res.steps[1].observation.splitlines()[:2] == ["exit code: 0", "6"]
    assert res.steps[3].observation.splitlines()[:2] == ["exit code: 0", "5"]
    assert res.exit_reason == "submitted"
    assert sb.commands == [
        WRITE_WRONG_CMD,
        CHECK_CMD,
        WRITE_CORRECT_CMD,
        CHECK_CMD,
    ]  # the correction ran last
    # each observation went back to the model before its next reply
    assert [m["content"] for m in res.messages if m["role"] == "user"][-4:] == [
        s.observation for s in res.steps[:4]
    ]


def test_malformed_reply_gets_a_format_hint_and_counts_as_a_step(tmp_path):
    res, sb = on_fake(["I think I should write the code", WRITE_CORRECT, SUBMIT], tmp_path)
    assert res.steps[0].actions[0].kind == "format_error"
    assert "Format error" in res.steps[0].observation
    assert (len(res.steps), res.exit_reason, sb.commands) == (3, "submitted", [WRITE_CORRECT_CMD])


def test_step_limit(tmp_path):
    res, sb = on_fake(
        ["```bash\nls\n```", "```bash\npwd\n```", WRITE_CORRECT, SUBMIT],
        tmp_path,
        cfg=LoopConfig(max_steps=2),
    )
    assert (res.exit_reason, len(res.steps), sb.commands) == (
        "max_steps",
        2,
        ["ls", "pwd"],
    )  # the fix never ran


def test_command_timeout_is_reported_and_loop_goes_on(tmp_path):
    sb = FakeSandbox({"sleep 100": ExecResult(exit_code=0, stdout="", stderr="", duration=100.0)})
    res, _ = on_fake(
        ["```bash\nsleep 100\n```", WRITE_CORRECT, SUBMIT], tmp_path, cfg=LoopConfig(command_timeout=1), sb=sb
    )
    assert res.steps[0].timed_out and "did not finish within 1" in res.steps[0].observation
    assert sb.calls[0]["timeout"] == 1
    assert (res.exit_reason, sb.commands[1:]) == ("submitted", [WRITE_CORRECT_CMD])


def test_same_action_three_times_ends_as_stuck(tmp_path):
    res, sb = on_fake(["```bash\nls\n```"] * 3 + [SUBMIT], tmp_path)
    assert (res.exit_reason, len(res.steps), sb.commands) == ("stuck", 3, ["ls"] * 3)


def test_native_tool_protocol(tmp_path):
    content = "def add(a, b):\n    return a + b\n"
    replies = [
        {
            "content": "",
            "tool_calls": [{"name": "write_file", "arguments": {"path": "solution.py", "content": content}}],
        },
        {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "cat solution.py"}}]},
        {"content": "", "tool_calls": [{"name": "submit", "arguments": {}}]},
    ]
    sb = FakeSandbox({"cat solution.py": content})
    res, _ = on_fake(replies, tmp_path, sb=sb)
    assert res.exit_reason == "submitted" and sb.files["/workspace/solution.py"] == content.encode()
    assert [m["role"] for m in res.messages].count("tool") == 3
    assert "return a + b" in res.steps[1].observation
    assert f"wrote {len(content)} characters to solution.py" in res.steps[0].observation


def test_cost_limit_stops_a_priced_model(tmp_path):
    res, _ = on_fake(
        ["```bash\nls\n```", "```bash\npwd\n```", WRITE_CORRECT, SUBMIT],
        tmp_path,
        cfg=LoopConfig(cost_limit=1e-9),
        price_in=1000.0,
        price_out=1000.0,
    )
    assert res.exit_reason == "cost_budget" and len(res.steps) == 1 and sum(s.cost for s in res.steps) > 0


def test_token_budget_works_without_prices(tmp_path):
    res, _ = on_fake(
        ["```bash\nls\n```", "```bash\npwd\n```", WRITE_CORRECT, SUBMIT],
        tmp_path,
        cfg=LoopConfig(token_budget=1),
    )
    assert res.exit_reason == "token_budget" and len(res.steps) == 1


def test_context_window_elides_old_observations(tmp_path, monkeypatch):
    model = replay(["```bash\nseq 1 3000\n```", WRITE_CORRECT, SUBMIT], tmp_path)
    for_task = type(model).for_task

    def small_context(self, *a, **kw):
        m = for_task(self, *a, **kw)
        m.context_window = 1500  # tokens; the clipped seq output alone is ~ 2000
        return m

    monkeypatch.setattr(type(model), "for_task", small_context)
    sb = FakeSandbox({"seq 1 3000": "\n".join(str(i) for i in range(1, 3001)) + "\n"})
    res = run(loop_policy(model, LoopConfig(max_reply_tokens=100), asyncio.Semaphore(1), 0)(make_task(), sb))
    assert res.exit_reason == "submitted" and sb.commands[-1] == WRITE_CORRECT_CMD
    assert any("elided to fit the context window" in str(m.get("content")) for m in res.messages)


def test_a_sandbox_dead_of_its_memory_limit_ends_the_attempt_other_deaths_raise(tmp_path):
    res, _ = on_fake(
        ["```bash\nls\n```", "```bash\nfill memory\n```", SUBMIT],
        tmp_path,
        sb=FakeSandbox(dies={"fill memory"}, dies_of="oom"),
    )
    assert (res.exit_reason, len(res.steps)) == ("sandbox_died", 2)
    assert res.steps[1].observation == "[the sandbox ran out of memory and stopped]"
    with pytest.raises(SandboxDied):  # killed from outside: an infrastructure error for the runner to retry
        on_fake(["```bash\nfill memory\n```"], tmp_path, sb=FakeSandbox(dies={"fill memory"}, dies_of=None))


def test_model_errors_are_infra_errors_not_model_failures(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"other-task": [SUBMIT]}))  # no script for "add": every call fails
    model, pool = get_model(f"replay:{script}"), FakePool()
    rec = run(
        attempt_with_retries(
            make_task(),
            lambda: loop_policy(model, LoopConfig(), asyncio.Semaphore(1), 0),
            pool,
            "image",
            run_id="t",
            model_name="replay",
        )
    )
    assert rec.status == "error" and rec.reason == "infra_error" and "no scripted replies" in rec.error
    assert len(pool.sandboxes) == 3  # tried, then retried as infrastructure errors are (INFRA_RETRIES)


# ---- end to end in real sandboxes ---------------------------------------------------------------------


@pytest.mark.slow
def test_attempts_in_real_sandboxes_are_graded(image, tmp_path):
    rec = attempt([WRITE_CORRECT, SUBMIT], image, tmp_path)
    assert (rec.solved, rec.reward, rec.exit_reason, rec.n_steps) == (True, 1.0, "submitted", 2)
    assert rec.steps[0].exit_code == 0 and "exit code: 0" in rec.steps[0].observation
    assert rec.messages[0]["role"] == "system" and rec.messages[-1]["role"] == "assistant"
    assert rec.patch_files == 1
    rec = attempt([WRITE_WRONG, CHECK, SUBMIT], image, tmp_path)  # real output of the real file
    assert (rec.solved, rec.exit_reason, rec.reason) == (False, "submitted", "fail")
    assert rec.steps[1].observation.splitlines()[:2] == ["exit code: 0", "6"]
    rec = attempt(
        [  # the tools protocol's write_file through the real sandbox
            {
                "content": "",
                "tool_calls": [
                    {
                        "name": "write_file",
                        "arguments": {"path": "solution.py", "content": "def add(a, b):\n    return a + b\n"},
                    }
                ],
            },
            {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "cat solution.py"}}]},
            {"content": "", "tool_calls": [{"name": "submit", "arguments": {}}]},
        ],
        image,
        tmp_path,
    )
    assert rec.solved and rec.exit_reason == "submitted"
    assert [m["role"] for m in rec.messages].count("tool") == 3
    assert "return a + b" in rec.steps[1].observation


@pytest.mark.slow
def test_run_eval_records_every_attempt_and_resume_runs_nothing_twice(image, tmp_path):
    tasks = [make_task()]
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"add": [WRITE_CORRECT, SUBMIT]}))
    out = tmp_path / "run"
    run(
        run_eval(
            EvalConfig(model=f"replay:{script}", samples=3, out=out, concurrency=3), tasks, progress=False
        )
    )
    lines = (out / "attempts.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    assert len(recs) == 3 and all(r["solved"] for r in recs), [
        (r["status"], r["reason"], r["error"], r["detail"]) for r in recs
    ]
    run(
        run_eval(
            EvalConfig(model=f"replay:{script}", samples=3, resume=out, concurrency=3), tasks, progress=False
        )
    )
    assert len((out / "attempts.jsonl").read_text().splitlines()) == 3


@pytest.mark.slow
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
        run(
            run_eval(
                EvalConfig(
                    model="recorder",
                    samples=3,
                    out=out,
                    concurrency=1,
                    loop=LoopConfig(temperature=0.7, seed=5),
                ),
                [make_task()],
                progress=False,
                model_obj=model,
            )
        )
        return model.seeds

    first = seeds(tmp_path / "a")
    assert len(first) == 6 and None not in first and len(set(first)) == 6  # 3 samples x 2 steps, all distinct
    assert seeds(tmp_path / "b") == first  # the same run again: the same seeds


@pytest.mark.parametrize(
    "name, given, expected",
    [("local:smollm2-135m", None, 256), ("openai/gpt-4o-mini", None, 1024), ("local:x", 77, 77)],
)
def test_the_reply_limit_is_the_models_default_unless_given(name, given, expected):
    """LoopConfig.max_reply_tokens None: the loop asks for default_reply_tokens(model), the one rule."""
    from agent.loop import run_loop
    from agent.models.base import Completion

    class Recorder:
        supports_tools, context_window = False, 100_000

        def __init__(self):
            self.name, self.limits = name, []

        def count_tokens(self, messages):
            return 100

        async def complete(self, messages, tools=None, n=1, temperature=0.0, max_tokens=512, seed=None):
            self.limits.append(max_tokens)
            return [Completion(content=SUBMIT)]

    model = Recorder()
    res = run(run_loop(model, FakeSandbox(), "do it", LoopConfig(max_reply_tokens=given)))
    assert res.exit_reason == "submitted" and model.limits == [expected]
