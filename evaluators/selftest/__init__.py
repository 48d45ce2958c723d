"""Adversarial self-test: a scripted agent attacks the installed harness, and we check the outcome.

Each case is a replay script (agent/models/replay.py) whose shell commands perform one attack inside a
real sandbox, through the real loop (evaluators.run.runner.run_eval: sandbox -> loop -> capture -> kill ->
fresh grading container -> verdict -> record). After each case the host is checked too.

Conditions every case must meet (besides its own expectation):
  - the harness survives: run_eval returns, and the attempt after the attack (same run) is solved;
  - a record exists for every attempt, with reward, status and reason;
  - no container of the case's run remains; no sandbox-user process lives outside a live container;
  - the host is unaffected: no new file owned by the sandbox user (or named with the case's nonce) in the
    watched host folders, this process's memory, threads and child processes back to baseline (disk use is
    shown in the table but not judged: other processes share the disk).
Reward cases also need the honest control of the same task to score 1 (run once per task kind), and most run
the same attack on top of an honest solution too, which must score what the documented policy says.

Used by `harness selftest` (no pytest needed) and tests/adversarial (one test per case).
No case ever targets an address outside this machine: network probes only list interfaces and routes,
resolve host names (the sandbox has no DNS), and point pip at a `.invalid` index that cannot resolve.

Where things live:
  fixtures      the tiny tasks attacks run against, and the scripted reply language (bash, write, SUBMIT...)
  case          the Case type, what a case sees (Ctx, Outcome), and the checks cases are built from
  host_cases    host-safety cases (bombs, floods, runaway processes, probes, writes and links outside)
  reward_cases  reward-integrity cases (hacks on the grading, each must score 0)
  grading_attacks  the reward cases that attack the verdict itself (code run while it is graded)
  edge_cases    files the grader cannot recreate, odd numbers in reward files, forks at the pid limit
  cross_cases   batch grading: attempts sharing a grading container cannot reach each other's verdicts
  harbor_cases  a Harbor task per verifier mode: one attack per class of what its verifier loads (each with
                its honest twin), the kv-store-grpc pattern solved, the command server killed but graded
  apply_cases   `harness run --apply` on a scratch git repository: nothing the agent wrote runs or escapes
                (apply_repo: that repository, the run of the CLI on it, the check of what changed)
  store_cases   a real run folder damaged afterwards: kept objects verified, every reader bounded
  catalogue     all cases in order (CATALOGUE, CASES) and select() by name or glob
  probes        host probes around a case (resources, stray processes, new host files, containers)
  runner        Runner (one case at a time, the global conditions), run_selftest and the result table
"""

from evaluators.selftest.case import Case, Ctx, Outcome
from evaluators.selftest.catalogue import CASES, CATALOGUE, select
from evaluators.selftest.fixtures import CORRECT, SUBMIT, add_task, answer_task, bash, write
from evaluators.selftest.runner import Row, Runner, format_table, run_selftest

__all__ = [
    "CASES",
    "CATALOGUE",
    "CORRECT",
    "Case",
    "Ctx",
    "Outcome",
    "Row",
    "Runner",
    "SUBMIT",
    "add_task",
    "answer_task",
    "bash",
    "format_table",
    "run_selftest",
    "select",
    "write",
]
