"""A Harbor task of several steps: each step's files and setup, its agent (or oracle) and its verifier, in
one container, and the task's reward from the steps' (Harbor's multi-step trial)."""

from __future__ import annotations

import dataclasses

from agent.sandbox import Changes, SandboxPool
from agent.sandbox.backends.docker.native import NativeSandbox
from evaluators.grading.harbor.runtime import REWARD_DIR, after_agent, capture, scripts
from evaluators.grading.harbor.verifier import RECORD_OUTPUT_CHARS, grade_fresh, verify_agent
from evaluators.grading.verdict import Verdict
from results.errors import OracleFailed
from results.schema import clip


def step_task(task, step):
    """The task as one of its steps sees it: the step's instruction, tests, solution and limits."""
    spec = task.harbor
    return dataclasses.replace(
        task,
        instruction=step.instruction,
        test_files=dict(step.test_files),
        solution_files=dict(step.solution_files),
        agent=dataclasses.replace(task.agent, timeout_sec=step.agent_timeout_sec or task.agent.timeout_sec),
        verifier_timeout_sec=step.verifier_timeout_sec or task.verifier_timeout_sec,
        harbor=dataclasses.replace(
            spec,
            steps=(),
            verifier_user=step.verifier_user or spec.verifier_user,
            verifier_env=spec.verifier_env + step.verifier_env,
            artifacts=spec.artifacts + step.artifacts,
        ),
    )


async def run_steps(task, policy, sb: NativeSandbox, pool: SandboxPool, image: str):
    """Harbor's multi-step trial: for each step, its workdir files (and setup.sh), the agent (or oracle) on
    its instruction in the same container, then its verifier; /tests and /logs/verifier are emptied before
    the next step's agent. A step below its min_reward (or tampering) ends the run of steps. The reward is
    the mean of the steps that were verified, or the final one's (multi_step_reward_strategy).
    Returns (verdict, the merged loop result or None, the kept files, the last step's changes)."""
    verdicts, results, kept = [], [], {}
    changes = Changes()
    errors = []
    for i, step in enumerate(task.harbor.steps):
        st, last = step_task(task, step), i == len(task.harbor.steps) - 1
        sb.kept_files = {}
        if step.workdir_files:
            wf = dict(step.workdir_files)
            await sb.put_files(wf, executable=scripts(wf))
            if "setup.sh" in wf:
                r = await sb.exec(
                    ["bash", f"{sb.workdir.rstrip('/')}/setup.sh"], timeout=st.agent.timeout_sec
                )
                if r.exit_code != 0:
                    errors.append(f"step {step.name}: setup.sh exited {r.exit_code}: {r.output[-200:]}")
                    break
        await sb.mark_baseline()
        try:
            results.append(await policy(st, sb))
        except OracleFailed as e:
            errors.append(f"step {step.name}: {e}")
        files = dict(await after_agent(st, sb, end=last))
        changes = await capture(sb)
        v = await verify_agent(st, sb, pool, changes)
        if v is None:
            v = await grade_fresh(st, changes, pool, image, files)
        kept.update({f"steps/{step.name}/{k}": d for k, d in {**files, **v.files}.items()})
        verdicts.append((step.name, v))
        if sb.dead or v.reason == "tamper" or (step.min_reward is not None and v.reward < step.min_reward):
            break
        if not last:  # the next step's agent must not see this step's tests or results
            await sb.mkdirs("/tests", fresh=True)
            await sb.mkdirs(REWARD_DIR, mode=0o777, fresh=True)
    steps_text = ", ".join(f"{n}={v.reward:g} ({v.reason})" for n, v in verdicts)
    if not verdicts:
        v = Verdict(0.0, False, "no_report", detail="; ".join(errors) or "no step ran")
    elif any(v.reason == "tamper" for _, v in verdicts):
        name, bad = next((n, v) for n, v in verdicts if v.reason == "tamper")
        v = Verdict(0.0, False, "tamper", detail=f"step {name}: {bad.detail}")
    else:
        final = task.harbor.step_reward == "final"
        reward = verdicts[-1][1].reward if final else sum(v.reward for _, v in verdicts) / len(verdicts)
        which = "the final step's" if final else f"mean of {len(verdicts)} verified steps"
        v = Verdict(reward, reward >= 1.0, "pass" if reward >= 1.0 else "fail")
        v.detail = f"steps {steps_text}; task reward = {which}"
    v.output = clip("\n".join(f"== step {n} ==\n{sv.output}" for n, sv in verdicts), RECORD_OUTPUT_CHARS)
    if errors:
        v.detail = "; ".join(errors)[:300] + "; " + v.detail
    done = [r for r in results if r is not None]
    merged = None
    if done:
        steps = [s.model_copy(update={"index": k}) for k, s in enumerate(x for r in done for x in r.steps)]
        merged = dataclasses.replace(done[-1], steps=steps, messages=[m for r in done for m in r.messages])
    return v, merged, kept, changes
