"""The registry of sandbox backends (agent/sandbox/registry.py): each backend declares its options (flags
made from them), its capabilities (what the orchestrator asks instead of a name) and its prune; backends not
in this tree are found by an installed package's entry point or a dotted path (results/plugins.py)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields, replace

import pytest

from agent.config import add_backend_options, backend_options
from agent.sandbox.registry import BUILTIN, CAPABILITIES, Backend, names, providing, sandbox_backend
from results.errors import UserError

PLUGIN = """
from dataclasses import dataclass, field
from typing import Optional

from agent.sandbox.registry import Backend


@dataclass(frozen=True)
class Options:
    depth: int = field(default=3, metadata={"help": "how deep"})  # a class, not text: no __future__ here
    note: Optional[str] = field(default=None, metadata={"help": "a note"})


def pool(options):
    return ("pool", options.depth)


def images(tasks, options):
    return {t: "img" for t in tasks}


BACKEND = Backend("mine", make_pool=pool, options=Options, name_images=images)
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package on the Python path with a backend, and an installed distribution whose entry point in the
    group harness.sandboxes names it "mine"."""
    (tmp_path / "mine_backend.py").write_text(PLUGIN)
    dist = tmp_path / "mine_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mine-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[harness.sandboxes]\nmine = mine_backend:BACKEND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("mine_backend", None)


def test_every_builtin_backend_declares_known_capabilities_and_described_options():
    for name in BUILTIN:
        backend = sandbox_backend(name)
        assert backend.name == name and backend.capabilities <= set(CAPABILITIES)
        assert all("help" in f.metadata for f in fields(backend.options)), name
        assert backend.has("own_images") or backend.name_images is not None
    docker = sandbox_backend("docker")
    assert docker.capabilities == set(CAPABILITIES)  # the reference backend has every one
    assert sandbox_backend("k8s").capabilities == frozenset()  # it names its images, needs a cluster
    assert "docker" in providing("harbor") and "k8s" not in providing("own_images")


def test_a_backend_is_refused_with_the_capability_it_lacks_and_who_has_it():
    k8s = sandbox_backend("k8s")
    with pytest.raises(UserError) as e:
        k8s.require("batch_grading", "--batch-grading 4")
    msg = str(e.value)
    assert msg.startswith("--batch-grading 4: it needs a sandbox backend with batch_grading (")
    assert "--sandbox k8s has none: use --sandbox docker" in msg
    sandbox_backend("docker").require("batch_grading", "--batch-grading 4")  # has it: nothing raised
    with pytest.raises(ValueError, match="no sandbox capability"):
        k8s.has("gpu")
    with pytest.raises(ValueError, match="unknown capabilities"):
        Backend("x", make_pool=lambda o: None, capabilities=frozenset({"own_images", "gpu"}))
    with pytest.raises(ValueError, match="must name its images"):
        Backend("x", make_pool=lambda o: None)


def test_options_are_the_backends_dataclass():
    k8s = sandbox_backend("k8s")
    assert k8s.settings({"namespace": "ns"}).namespace == "ns"
    assert k8s.settings(None) == k8s.options()
    with pytest.raises(
        UserError, match="sandbox backend 'k8s' has no option 'nmespace': it has connect, image"
    ):
        k8s.settings({"nmespace": "ns"})


def test_flags_are_made_from_every_backends_options(plugin):
    parser = argparse.ArgumentParser()
    add_backend_options(parser)
    flags = {s for a in parser._actions for s in a.option_strings}
    assert {"--k8s-namespace", "--k8s-image", "--docker-runtime", "--mine-depth"} <= flags
    args = parser.parse_args(["--mine-depth", "5"])
    assert backend_options(args, "mine") == {"depth": 5, "note": None}
    with pytest.raises(UserError, match="--mine-depth is an option of --sandbox mine, not of --sandbox k8s"):
        backend_options(args, "k8s")


def test_a_plugin_is_found_by_entry_point_or_dotted_path(plugin):
    assert "mine" in names() and names()[: len(BUILTIN)] == list(BUILTIN)
    mine = sandbox_backend("mine")  # the installed distribution's entry point
    assert mine.pool({"depth": 7}) == ("pool", 7) and mine.images(["t"]) == {"t": "img"}
    assert sandbox_backend("mine_backend:BACKEND") is mine  # a dotted path, without installing anything
    assert mine.prune() == "nothing to prune"  # it declares none
    with pytest.raises(UserError, match="no module 'nowhere'"):
        sandbox_backend("nowhere:BACKEND")


def test_a_plugin_may_not_pretend_to_be_another(plugin, monkeypatch):
    """An entry point whose name is not its backend's name is refused (a dotted path may name any)."""
    from results import plugins

    monkeypatch.setattr(plugins, "installed", lambda registry: {"other": "mine_backend:BACKEND"})
    with pytest.raises(UserError, match="mine_backend:BACKEND is a backend named 'mine'"):
        sandbox_backend("other")


def test_sandbox_prune_goes_through_each_local_backends_prune(monkeypatch, capsys):
    """`harness sandbox prune` asks every backend with the local capability (or those named) to prune."""
    import harness

    seen = []

    def clean(options, orphans_only):
        seen.append((type(options).__name__, orphans_only))
        return "removed 0 things"

    for name in names():  # every real local backend records instead of pruning
        module = sys.modules[sandbox_backend(name).make_pool.__module__]
        if module.BACKEND.has("local"):
            monkeypatch.setattr(module, "BACKEND", replace(module.BACKEND, clean=clean))
    local = frozenset({"own_images", "local"})
    fake = Backend("fake-local", make_pool=lambda o: None, capabilities=local, clean=clean)
    monkeypatch.setattr(sys.modules[__name__], "FAKE_LOCAL", fake, raising=False)
    monkeypatch.setitem(BUILTIN, "fake-local", f"{__name__}:FAKE_LOCAL")
    args = harness.build_parser().parse_args(["sandbox", "prune", "--orphans"])
    assert args.func(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "docker: removed 0 things" and "fake-local: removed 0 things" in out
    assert ("DockerOptions", True) in seen and ("NoOptions", True) in seen
    assert not any(line.startswith("k8s:") for line in out)  # not local: only when named


def test_unknown_names_say_the_choices():
    with pytest.raises(UserError, match=f"choose one of {', '.join(names())}$"):
        sandbox_backend("no-such-backend")
