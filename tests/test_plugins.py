"""Plugins (results/plugins.py): a package installed with pip into a temporary folder, with an evaluator kind
(docs/extending.md's regex kind, as the page prints it), a model backend and a sandbox backend as entry
points, runs a real `harness eval` by their names: the task.toml says kind = "regex", the command line
--model fixed:ANSWER --sandbox demo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.evaluators.grading.test_docs_kind import example_kind, regex_task
from tests.helpers import harness, write_files

PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "harness-demo-plugin"
version = "0.1"

[project.entry-points."harness.kinds"]
regex = "harness_demo_plugin.regex_kind:KIND"

[project.entry-points."harness.models"]
fixed = "harness_demo_plugin.fixed:from_spec"

[project.entry-points."harness.sandboxes"]
demo = "harness_demo_plugin.sandbox:BACKEND"
"""
# A sandbox backend: the Docker engine's hardened containers (the docker backend's pool), fewer capabilities.
SANDBOX = """from agent.sandbox.registry import Backend


def _pool(options):
    from agent.sandbox.backends.docker.pool import DockerPool

    return DockerPool


BACKEND = Backend("demo", make_pool=_pool, capabilities=frozenset({"own_images", "local"}))
"""
# A model that writes main.py printing its target, then submits (the text protocol: one bash block a reply).
FIXED = """from agent.models.base import Completion

WRITE = "```bash\\nprintf 'print({})\\\\n' > main.py\\n```"
SUBMIT = "Done.\\n```bash\\nsubmit\\n```"


class Fixed:
    supports_tools = False
    context_window = 8192

    def __init__(self, name, answer):
        self.name, self.answer, self.turns = name, answer, 0

    def for_task(self, task_id, sample):  # each attempt starts from its first reply
        return Fixed(self.name, self.answer)

    async def complete(self, messages, tools=None, n=1, temperature=0.0, max_tokens=512, seed=None):
        self.turns += 1
        reply = WRITE.format(self.answer) if self.turns == 1 else SUBMIT
        return [Completion(content=reply, prompt_tokens=10, completion_tokens=10)] * n

    def count_tokens(self, messages):
        return sum(len(str(m.get("content") or "")) for m in messages) // 4


def from_spec(target, spec, options):
    return Fixed(spec, int(target))
"""
TOML = """version = "1"
[agent]
max_steps = 3
[environment]
memory_mb = 256
storage_mb = 32
[evaluator]
kind = "regex"
command = "python3 main.py"
pattern = "4[2]"
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The plugin package, installed by pip (offline, no build isolation) into a folder of its own."""
    root = tmp_path_factory.mktemp("plugin")
    write_files(
        root / "src",
        {
            "pyproject.toml": PYPROJECT,
            "harness_demo_plugin/__init__.py": "",
            "harness_demo_plugin/regex_kind.py": example_kind(),
            "harness_demo_plugin/fixed.py": FIXED,
            "harness_demo_plugin/sandbox.py": SANDBOX,
        },
    )
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    r = subprocess.run(
        [*pip, "--target", str(root / "site"), str(root / "src")], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return root / "site"


def test_an_installed_plugin_kind_model_and_sandbox_run_an_eval(image, site, tmp_path):
    regex_task(tmp_path / "tasks" / "answer-42", TOML)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = harness("tasks", "list", str(tmp_path / "tasks"), env=env)
    assert p.returncode == 0 and "answer-42" in p.stdout, p.stderr[-2000:]
    # (the dotted path form of a kind and of a backend: test_docs_kind.py, test_models_select.py)
    for i, (model, solved, reason) in enumerate([("fixed:42", True, "pass"), ("fixed:41", False, "fail")]):
        out = tmp_path / f"run-{i}"
        args = ("--model", model, "--tasks", str(tmp_path / "tasks"), "--sandbox", "demo", "--out", str(out))
        p = harness("eval", *args, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads((out / "manifest.json").read_text())["config"]["sandbox"] == "demo"
        rec = json.loads((out / "attempts.jsonl").read_text())
        detail = rec["detail"]
        assert (rec["task_id"], rec["model"], rec["solved"], rec["reason"]) == (
            "answer-42",
            model,
            solved,
            reason,
        ), detail
