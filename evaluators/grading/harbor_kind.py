"""The harbor evaluator kind: Harbor's runtime contract and verifier modes for a Harbor-format task, each
capability from its module of evaluators/grading/harbor/ (whose docstring states the contract).

Harbor tasks have no [evaluator]: a tests/test.sh writing /logs/verifier/reward.txt selects this kind
(tasks/harbor.py), and their settings are the task's `harbor` spec."""

from __future__ import annotations

from evaluators.grading.harbor import environment, runtime, steps, verifier
from evaluators.grading.kind import Exportable, InPlace, Kind, NetworkPolicy, OwnImage, OwnSandbox, Steps
from results.errors import UserError
from tasks.impossible import Variants


class HarborKind(Kind, OwnSandbox, InPlace, Steps, OwnImage, NetworkPolicy, Variants, Exportable):
    """The task's own limits, users and working folder, its environment prepared and health-checked, its
    oracle, its steps, the artifacts collected after the agent, and verification in place (snapshot,
    shared) or fresh."""

    name = "harbor"

    # OwnSandbox
    def limits(self, task):
        return runtime.limits(task)

    def containers(self, task):
        return 1 + (task.harbor.verifier_mode == "fresh")  # snapshot and shared verify in the agent's own

    async def prepare(self, task, sb):
        await runtime.prepare(task, sb)

    async def oracle(self, task, sb):
        await runtime.oracle(task, sb)

    async def after_agent(self, task, sb):
        return await runtime.after_agent(task, sb)

    async def capture(self, task, sb):
        return await runtime.capture(sb)  # its processes live on: one of them may end the container meanwhile

    def sandbox_needs(self, task):
        needs = {
            "own_images": "has its own image (a Harbor image)",
            "harbor": "runs under Harbor's runtime contract",
        }
        if task.harbor.verifier_mode != "fresh":  # commit (snapshot) and diff (both) of the agent's container
            needs["diff"] = f"is verified in the agent's container ({task.harbor.verifier_mode})"
        return needs

    # InPlace, then the core's grade (fresh mode)
    async def verify_in_place(self, task, sb, pool, changes):
        return await verifier.verify_agent(task, sb, pool, changes)

    def not_regradable(self, task):
        mode = task.harbor.verifier_mode
        return "" if mode == "fresh" else f"verified in the agent's container ({mode})"

    async def grade(self, task, sub):
        return await verifier.grade_fresh(task, sub.changes, sub.pool, sub.image, sub.kept)

    def span(self, task):
        return {"harness.verifier.mode": task.harbor.verifier_mode}

    # Steps
    def has_steps(self, task):
        return bool(task.harbor.steps)

    async def run_steps(self, task, policy, sb, pool, image):
        return await steps.run_steps(task, policy, sb, pool, image)

    # OwnImage
    def image_key(self, task):
        spec = task.harbor
        return repr((spec.docker_image, spec.verifier_docker_image, spec.verifier_dockerfile))

    def build_image(self, task, log):
        image = environment.task_image(task, log)
        environment.verifier_image(task, log)  # built now, found by grading later
        return image

    def own_image(self, task):
        return "a Harbor image"

    # NetworkPolicy
    def offline(self, task):
        return environment.offline([task])[0]

    def network_line(self, tasks):
        return environment.network_line(tasks)

    # Variants and Exportable: neither applies, for a reason better than the default's
    def variant_tests(self, task):
        return "", []

    def no_variant(self, task):
        return "a Harbor-format task (its verifier is not ours to change)"

    def export(self, task):
        raise UserError(
            f"task {task.id}: a harbor task is already in Harbor's format (copy its folder instead)"
        )


KIND = HarborKind()
